"""Faithfulness scoring as a Beam pipeline over saliency records: per-image scores (deletion in
two worker processes, single deletion in this process: the worker processes' start-up is paid
once), combined into means equal to faithfulness.evaluate's (1e-6) with intervals."""
import json
import sys

import numpy as np
import pytest

import models
from faithfulness import beam_scoring, evaluate
from saliency_gen import generate
from saliency_gen.data.pipelines import load_images
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags


@pytest.mark.parametrize("protocol,workers", [("single_deletion", 1), ("deletion", 2)])
def test_beam_scores_equal_the_single_process_binary(small_shards, tmp_path, protocol, workers):
    pattern, model_path = small_shards
    method = "idsds:IxG"
    saliency = str(tmp_path / "maps")
    generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method=method, output_dir=saliency, explain="label",
                                      dtype="float32"), progress_bar=False)
    output = str(tmp_path / "beam.json")
    done = binaries.run(
        [sys.executable, "-m", "faithfulness.beam_scoring",
         f"--input_pattern={saliency}/{generate.method_directory(method)}/validation-*",
         f"--model_path={model_path}", f"--saliency_method={method}",
         f"--evaluation_protocol={protocol}", "--batch_size=8", "--unit_records=1",
         f"--beam_workers={workers}",
         f"--output={output}"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(output, encoding="utf-8") as handle:
        report = json.load(handle)
    assert_origin_covers_the_flags(beam_scoring.Config, report["origin"])
    loaded = models.load(model_path)
    images, labels, ids = load_images(pattern, loaded, -1, 0)
    options = evaluate.Options(batch_size=8)
    expected = evaluate.evaluate(loaded, images, labels, ids, [method], protocol, options)[method]
    assert set(report["results"]) == set(expected)
    for metric, summary in expected.items():
        found = report["results"][metric]
        assert found["n"] == 36
        assert found["mean"] == pytest.approx(summary["mean"], abs=1e-6)
        assert found["low"] <= found["mean"] <= found["high"] and found["low"] < found["high"]
        assert np.allclose(sorted(v for v in found["per_image"].values()),
                           sorted(summary["per_image"]), atol=1e-6)
