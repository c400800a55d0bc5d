"""A researcher's method from a module outside the package ("gradient times a fixed Gaussian
blob", tests/data/user_methods) through every binary by subprocess: the generator, ROAD, the
faithfulness evaluation and a short ROAR training on the generated records, each giving the
values the same computation gives through the Python API. (bam.metrics is covered in
tests/bam/test_metrics.py, on its trained world.)"""
import json
import os
import sys

import keras
import numpy as np
import pytest

import models
import saliency_gen
from faithfulness import evaluate as faithfulness_evaluate
from models.formats.preprocessing import input_space
from models.training import recipes
from roar import masked_data, road, train
from saliency_gen import generate
from saliency_gen.data import pipelines, records
from tests import REPO, binaries

USER_METHODS = os.path.join(REPO, "tests", "data", "user_methods")
METHOD = "blob_attribution:gradient_times_blob"
FOLDER = generate.method_directory(METHOD)  # also its record key


def _binary(module, *arguments):
    environment = dict(os.environ, PYTHONPATH=USER_METHODS)
    done = binaries.run([sys.executable, "-m", module, *arguments], cwd=REPO, text=True,
                        capture_output=True, env=environment, timeout=900)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def generated(tiny_world, tmp_path_factory):
    """A random small_cnn in ImageNet's input space and the user method's float32 maps of
    every tiny-world record, written by the generator binary."""
    root, _ = tiny_world
    keras.utils.set_random_seed(4)
    model = models.build("small_cnn", 10, (64, 64, 3), width=4)
    folder = tmp_path_factory.mktemp("user_method")
    model_path = str(folder / "model")
    models.export(model, model_path, preprocessing="imagenet")
    maps = str(folder / "maps")
    _binary("saliency_gen.generate", f"--input_pattern={root}/records/*.tfrecord",
            f"--model_path={model_path}", f"--saliency_method={METHOD}", f"--output_dir={maps}",
            "--dtype=float32", "--chunk_size=16")
    return {"records": os.path.join(root, "records"), "model": model_path,
            "maps": os.path.join(maps, FOLDER), "folder": folder}


def test_generator_writes_the_python_api_maps(generated, monkeypatch):
    monkeypatch.syspath_prepend(USER_METHODS)
    shard = os.path.join(generated["maps"], "validation-00000-of-00001.tfrecord")
    assert records.check_file(shard, "saliency", key=FOLDER) == 300
    stored = list(records.keyed_records([shard]).map(lambda k, r: records.parse_saliency_record(
        r, FOLDER, "float32", (64, 64, 3), default_key=k)).take(6))
    loaded = models.load(generated["model"])
    inputs = pipelines.explanation_inputs(
        [os.path.join(generated["records"], "validation-00000-of-00001.tfrecord")],
        loaded.input_shape, input_space("imagenet"), "auto").take(6)
    keys, images = zip(*[(key.numpy(), image.numpy()) for key, _, _, image, _, _ in inputs])
    images = np.stack(images)
    expected = saliency_gen.attribute(loaded, images, METHOD, ids=pipelines.key_ids(keys),
                                      batch_size=5)
    ours = np.stack([example["saliency"].numpy() for example in stored])
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
    assert np.abs(ours).max() > 0


def test_road_binary_gives_the_python_api_curve(generated):
    output = generated["folder"] / "road"
    _binary("roar.road", f"--ckpt_path={generated['model']}", f"--data_dir={generated['maps']}",
            f"--saliency_method={METHOD}", "--ratios=0.3,0.7", "--orders=morf,lerf",
            "--fill=mean", f"--output={output}")
    rows = json.loads(open(f"{output}.json").read())["rows"]
    config = masked_data.MaskConfig(ranking="pixel", squared=False, tie_break="jitter", fill="mean")
    files = masked_data.list_shards(os.path.join(generated["maps"], "validation-*"), "eval")
    read = road.RoadRecords(files, masked_data.Records(
        "saliency", map_key=masked_data.record_key_of(METHOD), size=64), config, [0.3, 0.7])
    expected = road.evaluate_curve(models.load(generated["model"]), read, method_name=METHOD)
    assert [(r["order"], r["p"]) for r in rows] == [(r["order"], r["p"]) for r in expected]
    for row, want in zip(rows, expected):
        assert row["n"] == want["n"] == 300 and row["method"] == METHOD
        assert row["accuracy"] == pytest.approx(want["accuracy"], abs=1e-12)
        assert row["true_class_probability"] == pytest.approx(want["true_class_probability"],
                                                              rel=1e-5)


def test_faithfulness_binary_gives_the_python_api_scores(generated, monkeypatch):
    output = generated["folder"] / "sds.json"
    pattern = os.path.join(generated["records"], "validation-*")
    _binary("faithfulness.evaluate", f"--model_path={generated['model']}",
            f"--input_pattern={pattern}", f"--explainer={METHOD}", "--nr_images=12",
            "--batch_size=8", f"--output={output}")
    report = json.loads(output.read_text())
    monkeypatch.syspath_prepend(USER_METHODS)
    loaded = models.load(generated["model"])
    images, labels, ids = pipelines.load_images(pattern, loaded, 12, 0)
    expected = faithfulness_evaluate.evaluate(loaded, images, labels, ids, [METHOD],
                                              "single_deletion",
                                              faithfulness_evaluate.Options(batch_size=8))
    ours = report["results"][METHOD]["sds"]
    assert report["n_images"] == 12
    np.testing.assert_allclose(np.array(ours["per_image"], float),
                               np.array(expected[METHOD]["sds"]["per_image"], float), atol=1e-9)


def test_roar_training_on_the_generated_records_matches_the_python_api(generated):
    arguments = dict(ratio=0.5, data_dir=generated["maps"], saliency_method=METHOD,
                     dataset_name="synthetic", epochs=1.0, batch_size=32)
    output = generated["folder"] / "roar"
    _binary("roar.train", *[f"--{key}={value}" for key, value in arguments.items()],
            f"--output_dir={output}")
    [path] = [os.path.join(folder, "metrics.json") for folder, _, files in os.walk(output)
              if "metrics.json" in files]
    by_binary = json.loads(open(path).read())
    in_python = train.run(train.Config(**arguments, output_dir=str(output / "api")))
    assert by_binary["n_train"] == 200 and by_binary["n_eval"] == 300
    assert by_binary["flags"]["saliency_method"] == METHOD
    assert by_binary["model_id"] == in_python["model_id"]  # the same weights, bit for bit
    assert by_binary["top1"] == in_python["top1"] and by_binary["top5"] == in_python["top5"]
    assert by_binary["recipe"] == json.loads(json.dumps(
        recipes.with_overrides(recipes.SYNTHETIC_RECIPE, epochs=1.0, batch_size=32).__dict__))
