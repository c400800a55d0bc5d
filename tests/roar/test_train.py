"""ROAR / KAR retraining on the synthetic world: the known-answer experiment (oracle, random and
KAR controls), the masked pipeline's determinism and coverage, saliency records as input, and
the training binary."""
import dataclasses
import glob
import json
import os
import re
import sys

import numpy as np
import pytest

from models.training import recipes
from roar import masked_data, masking, road, train
from saliency_gen import generate
from saliency_gen.data import records
from saliency_gen.data.world import synthetic
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags

SIZE, T, V = 32, 30, 10  # 3,000 train and 1,000 test images of 32 x 32
RECIPE = recipes.with_overrides(recipes.SYNTHETIC_RECIPE, epochs=5.0)
# The known-answer runs train the cheap plain CNN (stride-2 convolutions, about 14x fewer
# multiply-adds than small_cnn at 32 px), whose controls give the same answers. On 3,000 training
# images (about 11 s a run) it reaches 0.37-0.39 clean top-1 in 5 epochs on worlds of seed 1 and 2
# (chance: 0.1; about 0.5 on 5,000 images, 20 s a run); the controls keep their margins: oracle90
# 0.10, random50 0.79-0.84 of clean, KAR's oracle above its random by 0.5.
MODEL = "plain_cnn"
RANDOM = masked_data.Records(control="random", size=SIZE)  # image records, random maps


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("roar") / "world")
    synthetic.build_world(root, seed=1, image_size=SIZE, train_per_pair=T, val_per_pair=V)
    return {split: sorted(glob.glob(os.path.join(root, "records", f"{split}-*")))
            for split in ("train", "validation")}


def _run(world, tmp_path, name, control, ratio, keep=False):
    return train.run_masked(world["train"], world["validation"],
                            masked_data.MaskConfig(ratio=ratio, keep_information=keep),
                            masked_data.Records(control=control, size=SIZE),
                            recipes.RunOptions(model_name=MODEL, recipe=RECIPE),
                            output_dir=str(tmp_path / name))


@pytest.fixture(scope="module")
def known_answers(world, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    runs = {"clean": ("none", 0.0, False), "oracle90": ("oracle", 0.9, False),
            "random50": ("random", 0.5, False), "kar_oracle30": ("oracle", 0.7, True),
            "kar_random30": ("random", 0.7, True)}
    return {name: _run(world, tmp, name, *args) for name, args in runs.items()}, tmp


def test_known_answers_of_the_controls(known_answers):
    results, _ = known_answers
    top1 = {name: result["top1"] for name, result in results.items()}
    assert all(result["n_eval"] == 100 * V for result in results.values())
    assert top1["clean"] > 0.3, top1
    # The oracle removes the whole object (90% of the image): back to chance (0.1).
    assert abs(top1["oracle90"] - 0.1) <= 0.15, top1
    # Half the pixels at random: retraining keeps most of the accuracy.
    assert top1["random50"] > 0.7 * top1["clean"], top1
    # Keeping the oracle's top 30% (the object) beats keeping a random 30% by far.
    assert top1["kar_oracle30"] > top1["kar_random30"] + 0.25, top1


def test_metrics_json_and_export(known_answers):
    results, tmp = known_answers
    with open(tmp / "random50" / "metrics.json") as handle:
        stored = json.load(handle)
    assert stored["top1"] == results["random50"]["top1"] and stored["n_eval"] == 1000
    assert 0 <= stored["top1"] <= stored["top5"] <= 1
    assert os.path.isdir(tmp / "random50" / "model") and os.path.isdir(tmp / "random50" / "logs")
    assert not os.path.exists(tmp / "random50" / "backup")


def test_pipeline_is_deterministic_and_evaluation_covers_every_image_in_order(world):
    config = masked_data.MaskConfig(ratio=0.3)

    def first_batch(seed):
        ds = masked_data.masked_dataset(world["train"], RANDOM, config, training=True,
                                        batch_size=16, seed=seed, with_keys=True)
        keys, images, _ = next(iter(ds))
        return keys.numpy(), images.numpy()

    keys, images = first_batch(0)
    again_keys, again_images = first_batch(0)
    np.testing.assert_array_equal(images, again_images)
    assert list(keys) == list(again_keys) and list(keys) != list(first_batch(1)[0])
    ds = masked_data.masked_dataset(world["validation"], RANDOM, config, training=False,
                                    batch_size=300, with_keys=True)
    keys = np.concatenate([k.numpy() for k, _, _ in ds])
    assert len(keys) == 1000 and len(set(keys)) == 1000  # the last batch (100) is kept
    expected = [k for _, k in records.keyed_records(world["validation"]).map(
        lambda key, serialized: (0, records.parse_image_record(serialized)["filename"]))
        .as_numpy_iterator()]
    assert list(keys) == expected


def test_random_masks_are_fixed_per_image_across_reads(world):
    config = masked_data.MaskConfig(ratio=0.5)
    ds = masked_data.masked_dataset(world["validation"], RANDOM, config, training=False,
                                    batch_size=50)
    first, second = next(iter(ds))[0].numpy(), next(iter(ds))[0].numpy()
    np.testing.assert_array_equal(first == 0, second == 0)
    assert (first == 0).reshape(50, -1).sum(1).tolist() == [int(0.5 * SIZE * SIZE * 3)] * 50


def test_saliency_records_drive_the_masks(world, known_answers, tmp_path):
    _, tmp = known_answers
    generate.generate(generate.Config(input_pattern=world["validation"][0],
                                      model_path=str(tmp / "clean" / "model"),
                                      saliency_method="roar:SH", output_dir=str(tmp_path),
                                      dtype="float16"), progress_bar=False)
    shards = records.list_files(str(tmp_path / "SH" / "*"))  # not its manifest.json
    config = masked_data.MaskConfig(ratio=0.3)
    ds = masked_data.masked_dataset(shards, masked_data.Records("saliency",
                                                                map_key="gradient_image"),
                                    config, training=False, batch_size=64)
    images = next(iter(ds))[0].numpy()
    dtype, shape, _ = records.peek_saliency_format(shards[0], "gradient_image")
    maps = np.stack([records.parse_saliency_record(serialized, "gradient_image", dtype,
                                                   shape)["saliency"].numpy()
                     for _, serialized in records.keyed_records(shards).take(64)])
    expected = masking.feature_mask(maps, masking.MaskConfig(ratio=0.3)).numpy()
    np.testing.assert_array_equal(images == 0, expected)


def test_binary_trains_a_random_baseline(world, tmp_path):
    records_dir = os.path.dirname(world["train"][0])
    command = [sys.executable, "-m", "roar.train", "--ratio=0.5",
               "--transformation=random_baseline", f"--data_dir={records_dir}",
               "--dataset_name=synthetic", "--epochs=1", f"--output_dir={tmp_path}",
               "--num_train_images=600"]  # the binary on its default model, not the training
    result = binaries.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    found = glob.glob(str(tmp_path / "random_baseline" / "0.50" / "random" / "remove" / "*" /
                          "seed_0" / "metrics.json"))
    assert len(found) == 1
    with open(found[0]) as handle:
        metrics = json.load(handle)
    assert metrics["n_eval"] == 1000 and metrics["flags"]["ratio"] == 0.5
    assert metrics["resumptions"] == 0 and metrics["origin"]["settings"]["ratio"] == 0.5
    assert_origin_covers_the_flags(train.Config, metrics["origin"])


def test_road_curve_without_retraining(world, known_answers):
    results, tmp = known_answers
    import models
    from roar import road

    model = models.load(str(tmp / "clean" / "model"))
    config = masked_data.MaskConfig(ranking="pixel", squared=False, tie_break="jitter",
                                    fill="noisy_linear")
    read = road.RoadRecords(world["validation"], masked_data.Records(control="oracle", size=SIZE),
                       config, [0.0, 0.9])
    rows = road.evaluate_curve(model, read, batch_size=250)
    by = {(row["order"], row["p"]): row for row in rows}
    assert all(row["n"] == 1000 for row in rows) and len(rows) == 4
    assert by["morf", 0.0]["accuracy"] == pytest.approx(results["clean"]["top1"], abs=1e-6)
    assert by["lerf", 0.9]["fraction_removed"] == 0.1 and by["morf", 0.9]["fraction_removed"] == 0.9
    assert by["lerf", 0.0]["fraction_removed"] == 1.0
    # Removing the object (MoRF with the oracle) hurts far more than removing as much background.
    assert by["morf", 0.9]["accuracy"] < by["lerf", 0.9]["accuracy"] - 0.2
    assert 0 < by["morf", 0.9]["true_class_probability"] < 1


def test_road_binary_and_card_benchmark_agree_on_the_same_images_and_maps(world, known_answers):
    """One metric, one computation (docs/architecture.md, "One metric protocol"), two ways in: the
    binary's images and maps read from records (`roar.road.image_outcomes`, the per-image values
    its curve averages) and the card's images in memory give the same MoRF / LeRF on the same
    200 test images, with each object's mask as the map. ROAD's imputation noise is keyed per
    image in both, by different keys (the records' example keys, the card's image ids)."""
    _, tmp = known_answers
    import models
    from roar import card as road_card
    from saliency_gen.data import pipelines

    model = models.load(str(tmp / "clean" / "model"))
    count, shard = 200, world["validation"][0]
    config = masked_data.MaskConfig(ranking="pixel", squared=False, tie_break="jitter",
                                    fill="noisy_linear")
    read = road.RoadRecords([shard], masked_data.Records(control="oracle", size=SIZE), config,
                       [0.1, 0.9])
    values: dict = {}
    for _, found in road.image_outcomes(model, read, span=(0, count)):
        for (order, _), (_, probabilities) in found.items():
            values.setdefault(order, []).append(probabilities)
    binary = {name: float(np.mean(np.concatenate(values[order])))
              for order, name in (("morf", "MoRF"), ("lerf", "LeRF"))}
    images, labels, ids, masks = pipelines.load_images(shard, model, count, shuffle=False,
                                                       with_masks=True)
    benchmark = road_card.benchmark(model, images, labels, ids, data={}, ratios=(0.1, 0.9),
                                    maps_of=lambda method: masks[..., None].astype(np.float32))
    card = {name: float(np.mean(values)) for name, values in benchmark.score("mask").items()}
    assert len(images) == count and set(card) == {"MoRF", "LeRF"}
    assert card == pytest.approx(binary, abs=1e-3), (card, binary)
    assert card["MoRF"] < card["LeRF"] - 0.1  # the object's pixels matter


def test_report_summarises_runs_with_mean_and_sd(tmp_path):
    from roar import report, summaries, sweep

    for seed, top1 in ((0, 0.5), (1, 0.7)):
        folder = tmp_path / f"run{seed}"
        folder.mkdir()
        (folder / "metrics.json").write_text(json.dumps({
            "top1": top1, "top5": 0.9, "n_eval": 10, "seed": seed,
            "flags": {"transformation": "modified_image", "saliency_method": "gradient_image",
                      "keep_information": False, "ratio": 0.5}}))
    rows = report.collect(str(tmp_path))
    summary = summaries.summarise(rows, ["method", "mode", "fraction_removed"], "top1")
    assert summary == [{"method": "gradient_image", "mode": "ROAR", "fraction_removed": 0.5,
                        "mean": pytest.approx(0.6), "std": pytest.approx(0.1414, abs=1e-4),
                        "n": 2,  # t(0.975, 1 d.f.) = 12.706: half-width 12.706 * 0.1414 / √2
                        "ci_low": pytest.approx(0.6 - 1.2706, abs=1e-4),
                        "ci_high": pytest.approx(0.6 + 1.2706, abs=1e-4)}]
    stem = str(tmp_path / "out" / "report")
    summaries.write_outputs(stem, rows, summary, ["method", "mode", "mean ± sd", "95% interval",
                                                  "n"],
                            "fraction_removed", ["method", "mode"], "top-1", "test")
    assert "0.6000 ± 0.1414 | [-0.6706, 1.8706]" in open(stem + ".md").read()
    assert open(stem + ".png", "rb").read(4) == b"\x89PNG"
    runs = sweep.planned_runs(["random", "SH"], ["0.1", "0.9"], ["0", "1"], ["roar", "kar"])
    assert len(runs) == 16 and runs[0] == ("random", 0.1, 0, False)
    arguments, transformation = sweep.run_arguments("random", 0.1, 0, False, "out")
    assert transformation == "random_baseline" and "--keep_information=False" in arguments


def test_a_resumed_sweep_checks_its_finished_runs_first_and_rates_only_its_trainings(
        monkeypatch, capsys):
    """A sweep of 3 runs, 2 finished before: they are checked first, quietly; the bar starts at
    2/3 and its rate is the one training's (1 run in 9 s; before: 3 runs in 10 s)."""
    from models.foundation import cluster, progress
    from roar import sweep

    now, calls = [0.0], []

    def run_command(command, capture):
        calls.append((command[0], capture))
        now[0] += 0.5 if capture else 9.0  # a check takes seconds, a training far longer
        return 0, ""

    monkeypatch.setattr(cluster, "run_command", run_command)
    monkeypatch.setattr(progress, "bar", lambda total, desc, unit, initial=0: (
        progress.LineProgress(total, desc, unit, clock=lambda: now[0], initial=initial)))
    sweep._run_here([("a", ["a"], True), ("b", ["b"], False), ("c", ["c"], True)])
    assert calls == [("a", True), ("c", True), ("b", False)]
    lines = [line.split(" ", 2)[2] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["ROAR sweep: 2/3 run (67%), elapsed 0:00:00",
                     "ROAR sweep: 3/3 run (100%), 0.111 run/s, elapsed 0:00:09"]


def test_per_read_random_masks_change_every_epoch_and_fixed_ones_do_not(world):
    config = masked_data.MaskConfig(ratio=0.5)
    patterns = {}
    for mode in ("fixed", "per_read"):
        ds = masked_data.masked_dataset(world["validation"], dataclasses.replace(
            RANDOM, random_mask=mode), config, training=True, batch_size=1000, with_keys=True)
        if mode == "fixed":
            ds = ds.repeat()
        epochs = []
        for keys, images, _ in ds.take(2):
            order = np.argsort(keys.numpy())
            epochs.append((keys.numpy()[order], images.numpy()[order] == 0))
        patterns[mode] = epochs
    for (keys0, zeros0), (keys1, _) in patterns.values():
        np.testing.assert_array_equal(keys0, keys1)  # each epoch holds every image once
        assert zeros0.reshape(1000, -1).sum(1).min() == int(0.5 * SIZE * SIZE * 3)
    assert np.array_equal(patterns["fixed"][0][1], patterns["fixed"][1][1])
    assert not np.array_equal(patterns["per_read"][0][1], patterns["per_read"][1][1])


def test_a_tensorflow_datasets_split_becomes_masked_records(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    from roar import tfds_source

    with tfds.testing.mock_data(num_examples=12):  # no download: generated examples
        files = tfds_source.tfds_to_records("cifar10", "test", str(tmp_path), "validation")
        again = tfds_source.tfds_to_records("cifar10", "test", str(tmp_path), "validation")
        assert tfds_source.tfds_num_classes("cifar10") == 10
    assert files == again and len(files) == 1
    ds = masked_data.masked_dataset(files, masked_data.Records(control="random"),
                                    masked_data.MaskConfig(ratio=0.5), training=False,
                                    batch_size=12, with_keys=True)
    keys, images, labels = next(iter(ds))
    assert images.shape == (12, 32, 32, 3) and keys.numpy()[0].startswith(b"cifar10-test")
    assert (images.numpy() == 0).reshape(12, -1).sum(1).tolist() == [1536] * 12
    assert labels.numpy().min() >= 0 and labels.numpy().max() < 10



def test_road_summary_averages_each_order_over_the_fractions():
    from roar import metric_definitions

    rows = [{"method": "m", "order": order, "p": p, "true_class_probability": value}
            for order, p, value in (("morf", 0.1, 0.8), ("morf", 0.5, 0.4), ("lerf", 0.1, 0.3),
                                    ("lerf", 0.5, 0.6))]
    rows.append({"method": "x", "order": "morf", "p": 0.1, "true_class_probability": 0.2})
    summary = metric_definitions.road_summary(rows)
    assert summary == {"m": {"MoRF": pytest.approx(0.6), "LeRF": pytest.approx(0.45)},
                       "x": {"MoRF": pytest.approx(0.2)}}
    # the card shows the same metrics: its ROAD benchmark's columns are these names
    assert [spec.name for spec in metric_definitions.ROAD] == ["MoRF", "LeRF"]


def test_road_binary_writes_table_json_csv_and_plot(world, known_answers, tmp_path):
    _, tmp = known_answers
    records_dir = os.path.dirname(world["validation"][0])
    output = tmp_path / "road"
    result = binaries.run(
        [sys.executable, "-m", "roar.road", f"--ckpt_path={tmp / 'clean' / 'model'}",
         f"--data_dir={records_dir}", "--saliency_method=oracle", "--ratios=0.5",
         "--nr_images=200", f"--output={output}"], capture_output=True, text=True, cwd=REPO,
        check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "morf p=0.50 removed 0.50" in result.stdout and "lerf p=0.50" in result.stdout
    # its work stated up front, its progress as log lines (before: no --nr_images, and minutes
    # with no output at all when it went to a file)
    assert "ROAD: 200 test images x 1 fractions x 2 order(s) = 400 imputed images" in \
        result.stdout
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ROAD: 400/400 img \(100%\)",
                     result.stderr, re.M) and "\r" not in result.stderr
    written = json.loads((tmp_path / "road.json").read_text())
    rows = written["rows"]
    assert [row["order"] for row in rows] == ["morf", "lerf"] and rows[0]["n"] == 200
    # one fraction: each metric is that fraction's probability
    assert written["summary"] == {"oracle": {"MoRF": rows[0]["true_class_probability"],
                                             "LeRF": rows[1]["true_class_probability"]}}
    assert "MoRF ↓: true-class probability" in result.stdout
    assert_origin_covers_the_flags(road.Config, written["origin"])
    assert (tmp_path / "road.png").read_bytes()[:4] == b"\x89PNG"
    assert "| oracle | morf | 0.5 | 0.5 |" in (tmp_path / "road.md").read_text()
