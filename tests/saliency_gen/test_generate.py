"""The saliency-record generator: outputs, resume, sharding, clear errors."""
import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import models
import saliency_gen
from models.formats.preprocessing import input_space, load_bam_pixels
from models.foundation import files
from saliency_gen import generate
from saliency_gen.data import pipelines, records
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags


@pytest.fixture(scope="module")
def exported(tiny_world, tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = models.build("small_cnn", 10, (64, 64, 3), width=4)
    path = str(tmp_path_factory.mktemp("model") / "obj")
    models.export(model, path)
    return path, model


def test_generator_writes_one_shard_per_input_and_resumes(tiny_world, exported, tmp_path,
                                                         resolutions):
    root, _ = tiny_world
    model_path, model = exported
    pattern = os.path.join(root, "records", "validation-*")
    out = str(tmp_path / "maps")
    result = generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                               saliency_method="roar:SH,bam:GC", output_dir=out,
                                               batch_size=7, chunk_size=16), progress_bar=False)
    assert result["images"] == 2 * 300 and result["skipped"] == 0
    # Each method name is resolved once per run (before, again for every shard and method).
    assert resolutions == ["roar:SH", "bam:GC"]
    shard = "validation-00000-of-00001.tfrecord"
    for folder, key in (("SH", "gradient_image"), ("bam_GC", "bam_GC")):
        path = os.path.join(out, folder, shard)
        assert records.check_file(path, "saliency", key=key) == 300
    path = os.path.join(out, "SH", shard)
    dtype, shape, legacy = records.peek_saliency_format(path, "gradient_image")
    assert (dtype, shape, legacy) == ("rank8", (64, 64, 3), False)
    parsed = list(records.keyed_records([path]).map(lambda k, r: records.parse_saliency_record(
        r, "gradient_image", dtype, shape, default_key=k)).take(3))
    names = [p["example_key"].numpy().decode() for p in parsed]
    assert names == sorted(names) and names[0].endswith(".jpg")
    # The stored map is the engine's map of the same input, ranked exactly.
    pixels = np.stack([load_bam_pixels(os.path.join(root, "obj", "val", n)) for n in names])
    images = input_space("caffe_rgb").from_uint8(pixels)
    expected = saliency_gen.attribute(model, images, "roar:SH")
    for n, p in enumerate(parsed):
        stored = p["saliency"].numpy()
        assert p["prediction_class"].numpy() == np.argmax(model(images[n:n + 1]))
        top = np.argsort(-np.abs(expected[n]).ravel(), kind="stable")[:1228]
        assert set(np.argsort(-np.abs(stored).ravel(), kind="stable")[:1228]) == set(top)
        assert p["label"].numpy() == records.parse_image_record(
            next(iter(tf.data.TFRecordDataset(pattern.replace("*", "00000-of-00001.tfrecord"))
                      .skip(n)))).get("label").numpy()
    again = generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                              saliency_method="roar:SH,bam:GC", output_dir=out),
                              progress_bar=False)
    assert again["images"] == 0 and again["skipped"] == 1
    # Another origin is refused with one line, whatever the shards look like.
    with pytest.raises(models.UserError, match=r"saliency folder .*SH was made with seed=0, not "
                                               r"7; pass --overwrite"):
        generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                          saliency_method="roar:SH", output_dir=out, seed=7),
                          progress_bar=False)
    # An unfinished shard (only a killed run's temporary file) is redone; the leftover goes.
    os.remove(os.path.join(out, "SH", shard))
    leftover = tmp_path / "maps" / "SH" / f".{shard}.tmp-otherhost-999-0a1b2c3d"
    leftover.write_bytes(b"partial")
    redo = generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                             saliency_method="roar:SH,bam:GC", output_dir=out),
                             progress_bar=False)
    assert redo["images"] == 300 and os.path.exists(os.path.join(out, "SH", shard))
    assert not leftover.exists()
    assert sorted(os.listdir(os.path.join(out, "SH"))) == [".ledger", "manifest.json", shard]
    with open(os.path.join(out, "SH", "manifest.json"), encoding="utf-8") as handle:
        assert_origin_covers_the_flags(generate.Config, json.load(handle))


def test_finished_means_sealed_and_overlapping_generators_are_refused(tiny_world, exported,
                                                                      tmp_path, capsys):
    root, _ = tiny_world
    model_path, _ = exported
    source = os.path.join(root, "records", "validation-00000-of-00001.tfrecord")
    out, shard = str(tmp_path / "maps"), os.path.basename(source)
    generate.generate(generate.Config(input_pattern=source, model_path=model_path,
                                      saliency_method="gradient", output_dir=out),
                      progress_bar=False)
    written = os.path.join(out, "gradient", shard)
    sealed = open(written, "rb").read()
    # A shard cut at a record boundary: readers refuse it, the generator redoes it.
    kept = [record for _, record in records.iter_serialized(written)][:250]
    records.write_serialized(written, kept)
    with pytest.raises(models.UserError, match=r"cut short or changed\); 300 records were"):
        records.list_files(os.path.join(out, "gradient", "validation-*"))
    again = generate.generate(generate.Config(input_pattern=source, model_path=model_path,
                                              saliency_method="gradient", output_dir=out),
                              progress_bar=False)
    assert again["images"] == 300 and "redoing" in capsys.readouterr().out
    assert open(written, "rb").read() == sealed
    # An input relabelled in place (same name, same size): its old maps are not reused.
    relabelled = tmp_path / "relabelled" / shard
    relabelled.parent.mkdir()
    first = [tf.train.Example.FromString(record) for _, record in records.iter_serialized(source)]
    labels = first[0].features.feature["image/class/label"].int64_list.value
    labels[0] = (labels[0] + 1) % 10
    records.write_records(str(relabelled), first)
    assert os.path.getsize(relabelled) == os.path.getsize(source)
    with pytest.raises(models.UserError, match="was made from input .* pass --overwrite"):
        generate.generate(generate.Config(input_pattern=str(relabelled), model_path=model_path,
                                          saliency_method="gradient", output_dir=out),
                          progress_bar=False)
    # A second generator over an overlapping shard set stops before any work, and the
    # failed run removes nothing it did not make.
    with files.exclusive(os.path.join(out, shard)):
        with pytest.raises(models.UserError, match="saliency shards of .* is being written by"):
            generate.generate(generate.Config(input_pattern=source, model_path=model_path,
                                              saliency_method="gradient,bam:GC", output_dir=out,
                                              num_shards=1), progress_bar=False)
    assert sorted(os.listdir(os.path.join(out, "gradient"))) == [".ledger", "manifest.json",
                                                                 shard]
    assert not os.path.exists(os.path.join(out, "bam_GC"))


def test_sharding_splits_input_files(tiny_world, exported, tmp_path):
    root, _ = tiny_world
    model_path, _ = exported
    pattern = os.path.join(root, "records", "*.tfrecord")  # train and validation shards
    first = generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                              saliency_method="gradient", output_dir=str(tmp_path),
                                              num_shards=2, shard_index=0), progress_bar=False)
    second = generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                               saliency_method="gradient",
                                               output_dir=str(tmp_path), num_shards=2,
                                               shard_index=1), progress_bar=False)
    assert first["written"] == second["written"] == 1
    assert sorted(os.listdir(tmp_path / "gradient")) == [
        ".ledger", "manifest.json", "train-00000-of-00001.tfrecord",
        "validation-00000-of-00001.tfrecord"]
    with pytest.raises(models.UserError, match=r"--shard_index=2 must be in \[0, --num_shards=2\)"):
        generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                          saliency_method="gradient", output_dir=str(tmp_path),
                                          num_shards=2, shard_index=2))



def test_binary_writes_float16_maps(tiny_world, exported, tmp_path):
    """The binary's success path (its errors are in tests/test_error_catalogue.py)."""
    root, _ = tiny_world
    model_path, _ = exported

    def run(*args):
        return binaries.run([sys.executable, "-m", "saliency_gen.generate", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=300)

    done = run(f"--input_pattern={root}/records/validation-*", f"--model_path={model_path}",
               f"--output_dir={tmp_path / 'ok'}", "--saliency_method=sobel", "--dtype=float16")
    assert done.returncode == 0, done.stderr
    assert "images/s" in done.stdout.splitlines()[-1]


USER_METHOD = '''import tensorflow as tf


def saliency(model, images, targets):
    """The gradient of the target logit{doc}."""
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
    return {sign}tape.gradient(score, images)
'''


def test_an_edited_user_method_is_recomputed_with_a_line_saying_why(tiny_world, exported,
                                                                     tmp_path):
    """Edit the method's module between two runs of the same command: its maps are redone
    (before: reused, the old values); an edit elsewhere in the module counts too, a re-run
    without an edit reuses them."""
    root, _ = tiny_world
    model_path, _ = exported
    source = os.path.join(root, "records", "validation-00000-of-00001.tfrecord")
    module = tmp_path / "edited_method.py"
    out = tmp_path / "maps"
    shard = out / "edited_method_saliency" / os.path.basename(source)

    def run(sign, doc=""):
        module.write_text(USER_METHOD.format(sign=sign, doc=doc))
        done = binaries.run([sys.executable, "-m", "saliency_gen.generate",
                             f"--input_pattern={source}", f"--model_path={model_path}",
                             f"--output_dir={out}", "--saliency_method=edited_method:saliency",
                             "--dtype=float32"], cwd=REPO, timeout=300,
                            env=dict(os.environ, PYTHONPATH=str(tmp_path)))
        assert done.returncode == 0, done.stderr
        maps = [example["saliency"].numpy() for example in records.keyed_records(
            [str(shard)]).map(lambda k, r: records.parse_saliency_record(
                r, "edited_method_saliency", "float32", (64, 64, 3), default_key=k)).take(2)]
        return done.stdout + done.stderr, np.stack(maps)

    first, maps = run("")
    assert "changed" not in first and np.abs(maps).max() > 0
    unchanged, same = run("")  # nothing to do: no empty progress bar (before: "saliency: 0map")
    assert "saliency:" not in unchanged and "wrote 0 maps" in unchanged
    edited, negated = run("-")
    assert ("the code of method edited_method:saliency changed since its shards were made; "
            "redoing them") in edited
    assert "wrote 300 maps" in edited
    np.testing.assert_array_equal(negated, -maps)
    unchanged, same = run("-")
    assert "changed" not in unchanged and "wrote 0 maps" in unchanged
    np.testing.assert_array_equal(same, negated)
    elsewhere, _ = run("-", doc=" (a docstring edited)")
    assert "changed since its shards were made" in elsewhere
    manifest = json.loads((shard.parent / "manifest.json").read_text())
    assert set(manifest["settings"]["method_code"]) == {"edited_method:saliency"}


def test_the_explanation_pipeline_is_not_autotuned(tiny_world):
    """Confined to one core, an autotuned iterator ends only after its tuning thread's current
    period, seconds with the core idle for every shard (docs/records.md, "Reading records");
    the setting holds through the generator's batching."""
    root, _ = tiny_world
    pattern = os.path.join(root, "records", "validation-*")
    data = pipelines.explanation_inputs(records.list_files(pattern), (64, 64, 3),
                                        input_space("caffe_rgb"), "none")
    assert data.batch(7).prefetch(1).options().autotune.enabled is False
    assert tf.data.Dataset.range(3).options().autotune.enabled is not False  # TF's default


def test_a_range_reads_the_whole_shards_values_with_one_trace(tmp_path, monkeypatch):
    """`explanation_range` (a Beam work unit's reader, docs/records.md, "Reading records")
    gives the streamed shard's values, default keys "<shard>:<index>" included, for any range,
    across its pieces and past the shard's end, from one traced reader for every range."""
    import io

    from PIL import Image

    rng = np.random.RandomState(3)
    examples = []
    for _ in range(11):  # no file names: the keys are the records' indices in the shard
        buffer = io.BytesIO()
        Image.fromarray(rng.randint(0, 256, (8, 8, 3), np.uint8)).save(buffer, "PNG")
        examples.append(records.image_example(buffer.getvalue(), int(rng.randint(10))))
    path = str(tmp_path / "validation-00000-of-00001.tfrecord")
    records.write_records(path, examples)
    space, shape = input_space("caffe_rgb"), (8, 8, 3)
    whole = next(iter(pipelines.explanation_inputs([path], shape, space, "none").batch(100)))
    assert whole[0].numpy()[10] == b"validation-00000-of-00001.tfrecord:10"
    monkeypatch.setattr(pipelines, "RANGE_PIECE", 4)  # pieces of 6 records at batches of 3
    pipelines._explanation_reader.cache_clear()
    for start, count in ((0, 11), (1, 8), (9, 5), (11, 3)):
        batches = list(pipelines.explanation_range(path, shape, space, "none", start, count, 3))
        assert [len(batch[0]) for batch in batches][:-1] == [3] * (len(batches) - 1)
        assert sum(len(batch[0]) for batch in batches) == max(0, min(count, 11 - start))
        for got, expected in zip(zip(*batches) if batches else (), whole):
            assert np.array_equal(np.concatenate([part.numpy() for part in got]),
                                  expected.numpy()[start:start + count])
    assert pipelines._explanation_reader(shape, space, "none").experimental_get_tracing_count() \
        == 1
