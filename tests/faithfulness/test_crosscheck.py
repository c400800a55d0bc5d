"""Cross-check against the reference package `saliency_maps_metrics` 0.0.26 (PyTorch, CPU): the
same small network in both frameworks with identical weights, tie-free maps, reference mode; all
seven metrics agree within 1e-4. Skipped cleanly when torch or the package is not installed
(`pip install torch==2.13.0 saliency_maps_metrics==0.0.26`)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("saliency_maps_metrics")

import faithfulness  # noqa: E402
from faithfulness import substrates, torch_twin  # noqa: E402

if not hasattr(np, "trapz"):  # the reference calls np.trapz, removed in numpy 2.4
    np.trapz = np.trapezoid

from saliency_maps_metrics import multi_step_metrics, single_step_metrics  # noqa: E402
from saliency_maps_metrics.data_replace import blur_data  # noqa: E402


def twin_models(size=32, classes=5, seed=0):
    """(Keras model, torch model) computing the same softmax network with the same weights."""
    import keras

    keras.utils.set_random_seed(seed)
    ours = keras.Sequential([
        keras.Input((size, size, 3)),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.AveragePooling2D(2),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes),
        keras.layers.Softmax()])
    theirs = torch_twin.twin(ours)  # the same network from the Keras graph
    return ours, theirs


@pytest.fixture(scope="module")
def setup():
    ours, theirs = twin_models()
    rng = np.random.RandomState(0)
    data = (rng.randn(4, 32, 32, 3) * 2).astype(np.float32)
    maps = rng.rand(4, 8, 8).astype(np.float32)  # tie-free
    classes = np.array([0, 1, 2, 3])
    torch_data = torch.tensor(data.transpose(0, 3, 1, 2))
    np.testing.assert_allclose(ours(data).numpy(), theirs(torch_data).detach().numpy(),
                               atol=1e-6)
    return ours, theirs, data, maps, classes, torch_data


CASES = {
    "deletion": (lambda: multi_step_metrics.Deletion(), lambda: faithfulness.Deletion(
        batch_size=1)),
    "insertion": (lambda: multi_step_metrics.Insertion(), lambda: faithfulness.Insertion(
        batch_size=1)),
    "deletion_non_cumulative": (lambda: multi_step_metrics.Deletion(cumulative=False),
                                lambda: faithfulness.Deletion(cumulative=False, batch_size=1)),
    "insertion_black_bounded": (
        lambda: multi_step_metrics.Insertion("black", max_step_nb=16),
        lambda: faithfulness.Insertion("black", max_step_nb=16, batch_size=1)),
    "iic_ad": (lambda: single_step_metrics.IIC_AD(), lambda: faithfulness.IIC_AD(
        mode="reference", batch_size=1)),
    "iic_ad_blur": (lambda: single_step_metrics.IIC_AD("blur"), lambda: faithfulness.IIC_AD(
        "blur", mode="reference", batch_size=1)),
    "add": (lambda: single_step_metrics.ADD(), lambda: faithfulness.ADD(
        mode="reference", batch_size=1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("one_at_a_time", [True, False])
def test_metrics_agree_with_the_reference(setup, case, one_at_a_time):
    ours, theirs, data, maps, classes, torch_data = setup
    reference, mine = (make() for make in CASES[case])
    calls = [slice(i, i + 1) for i in range(len(data))] if one_at_a_time else [slice(None)]
    for part in calls:
        expected = reference(theirs, torch_data[part], torch.tensor(maps[part][:, None]),
                             torch.tensor(classes[part]))
        got = mine(ours, data[part], maps[part], classes[part])
        assert sorted(expected) == sorted(got)
        for key in expected:
            assert abs(float(expected[key]) - got[key]) < 1e-4, (key, expected[key], got[key])


def test_non_divisible_schedule_crashes_the_reference_and_is_a_rule_here(setup):
    ours, theirs, data, maps, classes, torch_data = setup
    with pytest.raises(RuntimeError):  # 64 cells, p = 64 // 20 = 3
        multi_step_metrics.Deletion(max_step_nb=20)(theirs, torch_data[:1],
                                                    torch.tensor(maps[:1, None]), [0])
    with pytest.raises(faithfulness.UserError, match="not a multiple"):
        faithfulness.Deletion(max_step_nb=20, remainder="error")(ours, data[:1], maps[:1], [0])
    partial = faithfulness.Deletion(max_step_nb=20).compute_scores(ours, data[:1], maps[:1], [0])
    assert partial.curves.shape == (1, 23)  # ceil(64 / 3) = 22 steps, the last of one cell


def test_box_blur_and_bicubic_equal_the_reference(setup):
    _, _, data, _, _, torch_data = setup
    theirs = blur_data(torch_data).numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(substrates.box_blur(data).numpy(), theirs, atol=1e-5)
    from faithfulness import resample

    small = np.random.RandomState(2).rand(2, 7, 7).astype(np.float32)
    expected = torch.nn.functional.interpolate(torch.tensor(small[:, None]), size=(224, 224),
                                               mode="bicubic", align_corners=False)[:, 0]
    np.testing.assert_allclose(resample.upsample_maps(small, 224, 224).numpy(),
                               expected.numpy(), atol=1e-6)
