"""ROAD as a Beam pipeline: per-image scores of every order and fraction in work units of another
size than roar.road's batches (shards of 13, 12 and 11 records in units of 10), and rows equal
to roar.road's within 1e-6, with intervals."""
import json
import os
import sys

import pytest

from roar import beam_road, road
from saliency_gen import generate
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags


def test_beam_road_rows_equal_the_single_process_binary(small_shards, tmp_path):
    pattern, model_path = small_shards
    saliency = str(tmp_path / "maps")
    generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method="roar:SH", output_dir=saliency),
                      progress_bar=False)
    # (one worker, in this process: two worker processes are tested with Beam's generation and
    # deletion scoring)
    flags = {"ckpt_path": model_path, "data_dir": os.path.join(saliency, "SH"),
             "saliency_method": "SH", "ratios": ("0.3", "0.7")}
    expected = road.run(road.Config(**flags, batch_size=16, output=str(tmp_path / "single")))
    done = binaries.run(
        [sys.executable, "-m", "roar.beam_road", *(f"--{k}={v}" for k, v in flags.items()
                                                   if k != "ratios"),
         "--ratios=0.3,0.7", "--batch_size=5", "--unit_records=10",
         "--beam_workers=1",
         f"--output={tmp_path / 'beam'}"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "beam.json").read_text())
    assert_origin_covers_the_flags(beam_road.Config, written["origin"])
    found = written["rows"]
    assert [(r["order"], r["p"]) for r in found] == [(r["order"], r["p"]) for r in expected]
    assert len(found) == 4
    for mine, theirs in zip(found, expected):
        assert mine["n"] == theirs["n"] == 36
        assert mine["fraction_removed"] == theirs["fraction_removed"]
        for value in ("accuracy", "true_class_probability"):
            assert mine[value] == pytest.approx(theirs[value], abs=1e-6)
            assert mine[value + "_low"] <= mine[value] <= mine[value + "_high"]
        assert mine["true_class_probability_low"] < mine["true_class_probability_high"]
    assert (tmp_path / "beam.png").exists() and not (tmp_path / "beam.json.combined.json").exists()


def test_road_without_flags_runs_on_the_synthetic_world(small_shards, tmp_path, monkeypatch):
    """Like roar.train, roar.road with no flags reads the synthetic world's clean model and the
    method's cached maps (here the setup is stubbed with the small shards)."""
    pattern, model_path = small_shards
    asked = []

    def prepare(seed, method):
        asked.append(method)
        return {"records": os.path.dirname(pattern), "saliency": "maps-of-" + str(method)}

    monkeypatch.setattr(road.synthetic_setup, "prepare", prepare)
    monkeypatch.setattr(road.synthetic_setup, "clean_model", lambda seed: model_path)
    default = road.on_synthetic_world(road.Config())
    assert (default.saliency_method, default.data_dir, default.ckpt_path) == (
        "gradient_image", "maps-of-gradient_image", model_path)
    control = road.on_synthetic_world(road.Config(saliency_method="random", ckpt_path="mine"))
    assert (control.data_dir, control.ckpt_path) == (os.path.dirname(pattern), "mine")
    assert asked == ["gradient_image", None]
    rows = road.run(road.Config(saliency_method="random", ratios=("0.5",), orders=("morf",),
                                output=str(tmp_path / "road")))
    assert [row["n"] for row in rows] == [36]
    given = road.Config(data_dir="elsewhere", ckpt_path="model", saliency_method="SH")
    assert road.on_synthetic_world(given) is given
    with pytest.raises(road.UserError, match="--ckpt_path is required with --data_dir"):
        road.check_flags(road.Config(data_dir="elsewhere", saliency_method="SH"))
