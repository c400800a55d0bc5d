"""scripts/bench_measures.py's --measures mode: which measures it times, and the ceiling of each
taken from the passes its first call asked for (models.foundation.workload)."""
import numpy as np
import pytest

from faithfulness.measures import faithfulness_removal
from models.foundation.errors import UserError
from scripts import bench_measures


def test_measures_by_name_family_and_all_once_each_without_those_it_cannot_bound():
    assert bench_measures.chosen_measures("complexity, sparseness,mege") == [
        "sparseness", "complexity", "effective_complexity"]
    every = bench_measures.chosen_measures("all")
    assert len(every) == len(set(every)) and not set(bench_measures.LEFT_OUT) & set(every)
    assert {"mprt", "road", "pointing_game", "average_stability"} <= set(every)
    with pytest.raises(UserError, match="no measure or family named 'nope'"):
        bench_measures.chosen_measures("sparseness,nope")
    with pytest.raises(UserError, match="--size=64: efficientnet_lite0 takes 224 px images"):
        bench_measures.benchmark_network(bench_measures.Config(network="efficientnet_lite0"))


def test_quantus_gets_the_network_as_its_layer_graph():
    """The PyTorch twin on Quantus's side is built from plain data (`torch_twin.graph_of`):
    each layer's kind, settings and inputs, and the weights in Keras's order."""
    import json

    from faithfulness import torch_twin

    model = bench_measures.network(16, 0)
    nodes, weights = torch_twin.graph_of(model)
    assert [node["kind"] for node in nodes] == ["Conv2D"] * 3 + ["GlobalAveragePooling2D",
                                                                  "Dense"]
    assert nodes[0]["config"] == {"kernel_size": [3, 3], "strides": [2, 2], "padding": "valid",
                                  "activation": "relu", "use_bias": True,
                                  "dilation_rate": [1, 1], "groups": 1,
                                  "data_format": "channels_last"}
    assert [node["inputs"] for node in nodes[1:]] == [[node["name"]] for node in nodes[:-1]]
    assert [w.shape for w in weights] == [w.shape for w in model.get_weights()]
    assert json.loads(json.dumps(nodes)) == nodes  # plain data, for the .npz payload


def test_the_ceiling_counts_the_passes_the_measure_asked_for():
    """completeness scores each image and its baseline: 2 forward passes an image, no
    gradient; sparseness reads the maps alone: no ceiling."""
    config = bench_measures.Config(images=3, size=16, measures="completeness")
    model = bench_measures.network(config.size, config.seed)
    arrays = bench_measures.inputs(model, config)
    found = bench_measures.timings(model, arrays, "completeness", {}, None, config, counted=True)
    assert (found["passes_per_image"], found["gradients_per_image"]) == (2, 0)
    assert found["ceiling_s"] > 0 and not found["solver"]
    alone = bench_measures.timings(model, arrays, "sparseness", {}, None, config, counted=True)
    assert alone["passes_per_image"] is None and alone["ceiling_s"] is None
    again = bench_measures.timings(model, arrays, "sparseness", {}, None, config, counted=True)
    assert again["values_sha256"] == alone["values_sha256"] != found["values_sha256"]


def test_the_values_digest_reads_dtype_shape_bytes_and_keys_not_their_order():
    digest = bench_measures.values_digest
    values = np.array([0.25, -0.0, 3.0])
    assert digest({"a": values, "b": [1.0]}) == digest({"b": [1.0], "a": values.copy()})
    assert len({digest(values), digest(values.astype(np.float32)), digest(values[None]),
                digest(np.nextafter(values, np.inf)), digest(np.abs(values)),
                digest({"a": values}), digest([values])}) == 7


def test_the_ceiling_splits_its_passes_evenly_over_the_fewest_batches():
    assert [bench_measures.even_batch(count, 64) for count in (16, 64, 65, 784, 3072)] == [
        16, 64, 33, 61, 64]


def test_mprt_s_ceiling_runs_its_gradients_in_batches_of_one_model(monkeypatch):
    """MPRT explains each re-initialised model apart: its ceiling's gradients come in batches of
    one model's share (the network's 4 weighted layers: 4 models), not in one batch."""
    config = bench_measures.Config(images=3, size=16, measures="mprt")
    model = bench_measures.network(config.size, config.seed)
    arrays = bench_measures.inputs(model, config)
    found = bench_measures.timings(model, arrays, "mprt", {}, None, config, counted=True)
    assert (found["gradients_per_image"], found["models"]) == (4, 4)
    seen = []
    monkeypatch.setattr(bench_measures.bench_faithfulness, "ceiling_run",
                        lambda model, passes, batch, size, gradient=False: seen.append(
                            (passes, batch, gradient)))
    bench_measures.ceiling_runs(model, 0, 64, 16, gradients=64, models=4)
    bench_measures.ceiling_runs(model, 0, 64, 16, gradients=320, models=4)
    bench_measures.ceiling_runs(model, 0, 64, 16, gradients=64)
    assert seen == [(64, 16, True), (320, 40, True), (64, 64, True)]


def test_irof_on_photos_removes_a_photo_s_superpixels_where_noise_has_two():
    """SLIC finds a handful of superpixels in noise (so irof's call is mostly its segmentation)
    and some 100 in a photo at 64 px: --images_from=imagenet times irof's real work. The photos
    come in file order, again from the first after the twentieth, scaled to [-1, 1]."""
    photos = bench_measures.photo_batch(21, 64)
    assert photos.shape == (21, 64, 64, 3) and np.array_equal(photos[20], photos[0])
    assert -1.0 <= photos.min() < -0.5 and 0.5 < photos.max() <= 1.0
    noise = np.random.default_rng(0).normal(size=(2, 64, 64, 3))
    counts = [segments.max(axis=(1, 2)) + 1 for segments in (
        faithfulness_removal.superpixels(noise), faithfulness_removal.superpixels(photos[:2]))]
    assert counts[0].max() < 10 < 80 < counts[1].min()


def test_each_measure_names_its_quantus_class():
    """The Quantus column times each measure's own class: its words capitalised, but the
    acronyms (MPRT, AUC, IROF, ROAD)."""
    from scripts import quantus_timing

    assert [quantus_timing.quantus_class(name) for name in (
        "top_k_intersection", "relative_representation_stability", "sensitivity_n", "mprt",
        "smooth_mprt", "efficient_mprt", "auc", "local_lipschitz_estimate", "random_logit")] == [
        "TopKIntersection", "RelativeRepresentationStability", "SensitivityN", "MPRT",
        "SmoothMPRT", "EfficientMPRT", "AUC", "LocalLipschitzEstimate", "RandomLogit"]
    timed = set(bench_measures.chosen_measures("all")) - set(bench_measures.NOT_IN_QUANTUS)
    assert {"non_sensitivity", "mprt", "pointing_game"} <= timed
    assert not {"mu_fidelity", "average_stability", "irof", "road"} & timed


def test_the_difference_from_quantus_is_taken_where_the_shapes_agree():
    largest = bench_measures.largest_difference
    assert largest([[1.0, np.nan], [2.0, 3.0]], [[1.5, np.nan], [2.0, 2.0]]) == 1.0
    assert np.isnan(largest([1.0, np.nan], [1.0, 2.0]))  # NaN on one side only
    assert largest([1.0, 2.0], [1.5]) is None and largest([1.0], None) is None
    assert largest([1.0, 2.0], {"layer": [1.0]}) is None
