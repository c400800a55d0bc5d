"""Known answers for the faithfulness metrics (docs/faithfulness.md, "Known answers"): closed-form
models whose curves
and correlations are known exactly, tie semantics, reference quirks and invariances."""
import os
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import faithfulness
from faithfulness import ranking, resample, stats, substrates
from faithfulness.measures import localisation_family
from models.foundation import ordering
from models.foundation.errors import UserError
from tests import REPO


def two_class(fraction):
    """A callable model: class 1 = fraction(x) [N], class 0 = the rest."""
    def model(x):
        value = fraction(x)
        return tf.stack([1.0 - value, value], axis=1)
    return model


def ones_fraction(x):
    return tf.reduce_mean(tf.cast(tf.equal(x, 1.0), tf.float32), axis=[1, 2, 3])


def cell_model(weights, grid):
    """Logit model z = sum_c w_c * mean(x over cell c) on a grid x grid partition, one class."""
    weights = tf.constant(np.asarray(weights, np.float32).reshape(1, grid, grid))

    def model(x):
        side = x.shape[1] // grid
        means = tf.nn.avg_pool2d(tf.reduce_mean(x, axis=-1, keepdims=True), side, side, "VALID")
        return tf.reduce_sum(means[..., 0] * weights, axis=[1, 2])[:, None]
    return model


# -- 1. linear decay ------------------------------------------------------------------------------

@pytest.mark.parametrize("map_side", [7, 14, 56])
def test_deletion_of_a_fraction_model_has_auc_one_half(map_side):
    x = np.ones((1, 56, 56, 3), np.float32)
    constant_map = np.zeros((1, map_side, map_side))
    result = faithfulness.Deletion()(two_class(ones_fraction), x, constant_map, [1])
    assert result["dauc"] == pytest.approx(0.5, abs=1e-6)


def test_insertion_of_a_fraction_model_has_auc_one_half():
    x = np.random.RandomState(0).rand(2, 56, 56, 3).astype(np.float32)
    original = tf.constant(x)

    def equal_fraction(images):
        return tf.reduce_mean(tf.cast(tf.equal(images, original[:tf.shape(images)[0]]),
                                      tf.float32), axis=[1, 2, 3])

    maps = np.random.RandomState(1).rand(2, 7, 7)
    result = faithfulness.Insertion(batch_size=1).compute_scores(
        lambda images: two_class(equal_fraction)(images), x[:1], maps[:1], [1])
    np.testing.assert_allclose(result.auc, [0.5], atol=1e-6)
    np.testing.assert_allclose(result.curves[0], np.arange(50) / 49, atol=1e-6)


# -- 2. constant model ----------------------------------------------------------------------------

def test_constant_model_gives_its_value_and_nan_correlations(caplog):
    x = np.random.RandomState(0).rand(3, 16, 16, 3).astype(np.float32)
    maps = np.random.RandomState(1).rand(3, 4, 4)

    def constant(images):
        return tf.fill([tf.shape(images)[0], 2], 0.25)

    deletion = faithfulness.Deletion()(constant, x, maps, [0, 1, 0])
    # The reference's NaN mean, never silent: the warning counts the images and names the way out.
    assert "3 of 3 images have a non-finite dc" in caplog.text and "nan_policy='omit'" in \
        caplog.text
    insertion = faithfulness.Insertion()(constant, x, maps, [0, 1, 0])
    assert deletion["dauc"] == pytest.approx(0.25) and insertion["iauc"] == pytest.approx(0.25)
    assert np.isnan(deletion["dc"]) and np.isnan(insertion["ic"])
    omitted = faithfulness.Deletion(nan_policy="omit")(constant, x, maps, [0, 1, 0])
    assert np.isnan(omitted["dc"]) and omitted["dauc"] == pytest.approx(0.25)


# -- 3. additive ladder ---------------------------------------------------------------------------

@pytest.mark.parametrize("grid,side", [(2, 8), (4, 16), (14, 28)])
def test_additive_ladder(grid, side):
    n = grid * grid
    contributions = np.random.RandomState(grid).permutation(np.arange(1, n + 1)).astype(float)
    model = cell_model(contributions, grid)
    x = np.ones((1, side, side, 3), np.float32)
    saliency = contributions.reshape(1, grid, grid)
    deletion = faithfulness.Deletion(bound_max_step=False)(model, x, saliency, [0])
    insertion = faithfulness.Insertion("black", bound_max_step=False)(model, x, saliency, [0])
    assert deletion["dauc"] == pytest.approx((n + 1) * (2 * n + 1) / 12, rel=1e-6)
    assert insertion["iauc"] == pytest.approx((n + 1) * (4 * n - 1) / 12, rel=1e-6)
    assert deletion["dc"] == pytest.approx(1.0, abs=1e-9)
    assert insertion["ic"] == pytest.approx(1.0, abs=1e-9)


def test_ladder_of_four_cells_known_values():
    model = cell_model([4, 3, 2, 1], 2)
    x = np.ones((1, 8, 8, 3), np.float32)
    saliency = np.array([[[4.0, 3.0], [2.0, 1.0]]])
    assert faithfulness.Deletion()(model, x, saliency, [0])["dauc"] == pytest.approx(3.75)
    assert faithfulness.Insertion("black")(model, x, saliency, [0])["iauc"] == pytest.approx(6.25)
    non_cumulative = faithfulness.Deletion(cumulative=False).compute_scores(model, x, saliency,
                                                                            [0])
    # each step deletes one cell alone: y_t = 10 - c_t
    np.testing.assert_allclose(non_cumulative.curves[0], [10, 6, 7, 8, 9], rtol=1e-6)
    assert non_cumulative.calibration[0] == pytest.approx(1.0)


# -- 4. Spearman ----------------------------------------------------------------------------------

def test_spearman_average_ranks():
    assert stats.spearman([1, 2, 2, 4], [1, 2, 3, 4])[0] == pytest.approx(0.9486832980505139,
                                                                          abs=1e-12)
    assert np.isnan(stats.spearman([3, 3, 3, 3], [1, 2, 3, 4])[0])
    assert stats.pearson([[1, 2, 3]], [[2, 4, 7]])[0] == pytest.approx(
        np.corrcoef([1, 2, 3], [2, 4, 7])[0, 1], abs=1e-15)


def test_ranks_are_scipys_to_the_byte():
    """The ranks of a vectorised sort are scipy's average ranks exactly: ties, -0.0 beside 0.0,
    constant rows, one column, infinities, a row with a NaN (which scipy ranks), and rows
    shared out among threads (7 rows over the cores, from `PARALLEL_VALUES` values)."""
    from scipy.stats import rankdata

    rng = np.random.default_rng(5)
    assert 7 * 9000 >= stats.PARALLEL_VALUES
    for values in (rng.normal(size=(4, 3000)), np.round(rng.normal(size=(6, 400)), 1),
                   np.round(rng.normal(size=(7, 9000)), 2),
                   rng.integers(0, 3, size=(5, 41)).astype(float), np.zeros((2, 9)),
                   np.array([[0.0, -0.0, 1.0, -0.0, -1.0]]), np.ones((3, 1)),
                   np.array([[np.inf, 1.0, -np.inf, np.inf], [3.0, 3.0, 3.0, 2.0]]),
                   np.array([[1.0, np.nan, 0.5], [2.0, 2.0, 1.0]]),
                   # values float32 cannot tell apart, falling in index order: runs that the
                   # radix order of the float32 roundings leaves unsorted (also across rows)
                   1.0 - 1e-12 * np.arange(24.0).reshape(3, 8),
                   np.array([[1e300, np.inf, 3e38, 5.0, 4e38, -1e-50, -0.0, 1e-50, -1e-46]]),
                   np.tile([3.0, 2.0, 1.0 + 1e-13, 1.0, 2.0 - 1e-13, 2.0], (9000, 1))):
        expected = rankdata(values, axis=1)
        for radix_width in (ordering.RADIX_WIDTH, 1):  # comparison sort, radix passes
            with mock.patch.object(ordering, "RADIX_WIDTH", radix_width):
                found = stats.ranks(values)
            assert found.dtype == expected.dtype and found.shape == expected.shape
            assert found.tobytes() == expected.tobytes()


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=40),
                  elements=st.one_of(st.floats(allow_nan=False, width=64),
                                     st.sampled_from([1.0, 1.0 + 2.0 ** -40, 1.0 - 2.0 ** -40,
                                                      0.0, -0.0, 5e-324, -5e-324]))))
def test_ranks_of_any_finite_or_infinite_rows_are_scipys(values):
    from scipy.stats import rankdata

    with mock.patch.object(ordering, "RADIX_WIDTH", 1):  # rows this narrow take the radix passes
        assert stats.ranks(values).tobytes() == rankdata(values, axis=1).tobytes()


def test_rows_sorted_on_the_cores_are_numpy_s():
    rng = np.random.default_rng(6)
    for values in (np.round(rng.normal(size=(7, 9000)), 2), rng.normal(size=(3, 5))):
        assert stats.sorted_rows(values).tobytes() == np.sort(values, axis=1).tobytes()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=30),
                  elements=st.sampled_from([2.0, 1.0, 0.5, 0.0, -0.0, -1.0, 1.0 + 2.0 ** -40])),
       st.data())
def test_the_top_features_are_the_stable_order_s_first(values, data):
    """localisation's top features (a threshold and the ties in index order, no index sort) are
    the first places of the stable order of decreasing value, for one count and for a count a
    row (ties, -0.0 beside 0.0, counts of 0 and of every feature)."""
    rows, features = values.shape
    counts = np.array(data.draw(st.lists(st.integers(0, features), min_size=rows,
                                         max_size=rows)))
    for wanted in (counts, np.full(rows, counts[0])):
        order = ordering.stable_order(values, descending=True)
        expected = np.arange(features)[None] < wanted[:, None]
        expected = np.take_along_axis(expected, np.argsort(order, axis=1), axis=1)
        assert np.array_equal(localisation_family._top_features(values, wanted), expected)


# -- 5. IDSDS additive cell model -----------------------------------------------------------------

def test_single_deletion_of_an_additive_cell_model():
    grid, side = 4, 32
    rng = np.random.RandomState(0)
    weights = rng.randn(grid * grid)
    model = cell_model(weights, grid)
    x = rng.rand(5, side, side, 3).astype(np.float32)
    cell_means = x.mean(axis=-1).reshape(5, grid, side // grid, grid, side // grid).mean((2, 4))
    exact = weights.reshape(1, grid, grid) * cell_means  # the drop when a cell is zeroed
    spread = np.repeat(np.repeat(exact, side // grid, 1), side // grid, 2) / (side // grid) ** 2
    labels = np.zeros(5, int)
    result = faithfulness.single_deletion(model, x, labels, spread, batch_size=7)
    np.testing.assert_allclose(result["rho"], 1.0, atol=1e-12)
    np.testing.assert_allclose(result["drops"], exact.reshape(5, -1), rtol=1e-4, atol=1e-6)
    assert result["sds"] == pytest.approx(1.0) and result["n_excluded"] == 0
    negated = faithfulness.single_deletion(model, x, labels, -spread)
    assert negated["sds"] == pytest.approx(-1.0)
    spread[2] = 0.5  # a constant attribution: excluded and counted
    partial = faithfulness.single_deletion(model, x, labels, spread[..., None].repeat(3, -1))
    assert partial["n_excluded"] == 1 and np.isnan(partial["rho"][2])
    assert partial["sds"] == pytest.approx(1.0)


def test_single_deletion_takes_a_dataset_of_batches():
    model = cell_model(np.arange(16.0), 4)
    x = np.random.RandomState(0).rand(10, 16, 16, 3).astype(np.float32)
    attributions = np.random.RandomState(1).rand(10, 16, 16)
    labels = np.zeros(10, int)
    whole = faithfulness.single_deletion(model, x, labels, attributions, baseline="random")
    batches = tf.data.Dataset.from_tensor_slices((x, labels, attributions)).batch(4)
    batched = faithfulness.single_deletion(model, batches, baseline="random")
    assert batched["n_images"] == 10
    np.testing.assert_allclose(batched["rho"], whole["rho"], atol=1e-9)
    np.testing.assert_allclose(batched["drops"], whole["drops"], rtol=1e-5, atol=1e-6)


def test_single_deletion_ignores_pixels_beyond_the_grid_and_needs_square_cells():
    grid = 3
    model = cell_model(np.arange(9.0), grid)
    x = np.random.RandomState(0).rand(2, 31, 31, 3).astype(np.float32)  # cells of 10, 1 px spare
    attributions = np.random.RandomState(1).rand(2, 31, 31)
    result = faithfulness.single_deletion(model, x, [0, 0], attributions, grid=grid)
    assert result["drops"].shape == (2, 9)
    changed = attributions.copy()
    changed[:, 30, :] = 1e6  # the spare row is in no cell
    again = faithfulness.single_deletion(model, x, [0, 0], changed, grid=grid)
    np.testing.assert_array_equal(result["rho"], again["rho"])
    with pytest.raises(UserError, match="square cells"):
        faithfulness.single_deletion(model, np.zeros((1, 32, 48, 3), np.float32), [0],
                                     np.zeros((1, 32, 48)), grid=4)


def test_single_deletion_random_baseline_is_keyed_per_cell_and_image():
    model = cell_model(np.arange(16.0), 4)
    x = np.random.RandomState(0).rand(4, 16, 16, 3).astype(np.float32)
    attributions = np.random.RandomState(1).rand(4, 16, 16)
    whole = faithfulness.single_deletion(model, x, np.zeros(4, int), attributions,
                                         baseline="random", seed=3, batch_size=5)
    part = faithfulness.single_deletion(model, x[2:], np.zeros(2, int), attributions[2:],
                                        baseline="random", seed=3, ids=[2, 3], batch_size=1)
    np.testing.assert_allclose(whole["drops"][2:], part["drops"], rtol=1e-5, atol=1e-6)
    other = faithfulness.single_deletion(model, x, np.zeros(4, int), attributions,
                                         baseline="random", seed=4)
    assert not np.allclose(other["drops"], whole["drops"])


# -- 6. IIC / AD / ADD ----------------------------------------------------------------------------

def mean_model(direction):
    """One-class model: the input mean (direction 1) or 2 - the input mean (direction -1)."""
    def model(x):
        mean = tf.reduce_mean(x, axis=[1, 2, 3])
        return (mean if direction > 0 else 2.0 - mean)[:, None]
    return model


def test_iic_ad_add_reference_cases():
    x = np.ones((4, 32, 32, 3), np.float32)
    maps = np.random.RandomState(0).rand(4, 7, 7)
    rising = faithfulness.IIC_AD()(mean_model(-1), x, maps, np.zeros(4, int))
    assert rising == {"iic": 1.0, "ad": 0.0}
    falling = faithfulness.IIC_AD()(mean_model(1), x, maps, np.zeros(4, int))
    assert falling["iic"] == 0.0 and falling["ad"] > 0

    def step(x):  # b * d when any entry differs from 1, b otherwise
        touched = tf.reduce_any(tf.not_equal(x, 1.0), axis=[1, 2, 3])
        return tf.where(touched, 0.8 * 0.3, 0.8)[:, None]

    assert faithfulness.IIC_AD()(step, x, maps, np.zeros(4, int))["ad"] == pytest.approx(0.7)
    assert faithfulness.ADD()(step, x, maps, np.zeros(4, int))["add"] == pytest.approx(0.7)
    constant = faithfulness.ADD()(lambda x: tf.fill([tf.shape(x)[0], 1], 0.4), x, maps, [0] * 4)
    assert constant["add"] == 0.0


def test_ad_of_the_mean_model_is_one_minus_the_mask_mean():
    x = np.ones((1, 14, 14, 3), np.float32)
    maps = np.random.RandomState(0).rand(1, 14, 14)  # same size: the mask is the normalised map
    normalised = (maps - maps.min()) / (maps.max() - maps.min())
    clean, masked = faithfulness.IIC_AD().compute_scores(mean_model(1), x, maps, [0])
    assert masked[0] == pytest.approx(normalised.mean(), rel=1e-5)
    _, removed = faithfulness.ADD().compute_scores(mean_model(1), x, maps, [0])
    assert removed[0] == pytest.approx(1 - normalised.mean(), rel=1e-5)


# -- 7. normalisation scope -----------------------------------------------------------------------

def test_reference_mode_normalises_over_the_whole_call():
    x = np.random.RandomState(0).rand(2, 16, 16, 3).astype(np.float32) + 0.5
    maps = np.random.RandomState(1).rand(2, 4, 4)
    maps[1] *= 10
    model = mean_model(1)
    for mode, differs in (("reference", True), ("paper", False)):
        metric = faithfulness.IIC_AD(mode=mode)
        together = metric.compute_scores(model, x, maps, [0, 0])[1][0]
        alone = metric.compute_scores(model, x[:1], maps[:1], [0])[1][0]
        assert (abs(together - alone) > 1e-3) == differs, mode
    single = [faithfulness.IIC_AD(mode=mode)(model, x[:1], maps[:1], [0]) for mode in
              ("reference", "paper")]
    assert single[0] == single[1]


# -- 8. non-divisible schedule --------------------------------------------------------------------

def test_non_divisible_map_gets_a_short_last_step():
    thresholds = ranking.gomez_thresholds(32 * 32)
    assert len(thresholds) - 1 == 205 and thresholds[-1] - thresholds[-2] == 4
    assert set(np.diff(thresholds[:-1])) == {5}
    x = np.ones((1, 32, 32, 3), np.float32)
    result = faithfulness.Deletion().compute_scores(two_class(ones_fraction), x,
                                                    np.random.rand(1, 32, 32), [1])
    assert result.curves.shape == (1, 206) and result.step_saliency.shape == (1, 205)
    assert result.curves[0, -1] == 0.0
    with pytest.raises(UserError, match="32x32 map has n = 1024 cells.*p = 5"):
        faithfulness.Deletion(remainder="error")(two_class(ones_fraction), x,
                                                 np.random.rand(1, 32, 32), [1])
    assert len(ranking.gomez_thresholds(15 * 15)) - 1 == 225
    assert len(ranking.gomez_thresholds(56 * 56)) - 1 == 196


# -- 9. invariances and batching ------------------------------------------------------------------

def small_model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((16, 16, 3)),
                             keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])


def test_invariances_and_batch_size_independence():
    model = small_model()
    rng = np.random.RandomState(0)
    x = rng.randn(5, 16, 16, 3).astype(np.float32)
    maps = rng.rand(5, 8, 8)
    classes = np.array([0, 1, 2, 0, 1])
    for metric_class in (faithfulness.Deletion, faithfulness.Insertion):
        base = metric_class(output_activation="softmax").compute_scores(model, x, maps, classes)
        monotone = metric_class(output_activation="softmax").compute_scores(
            model, x, np.exp(3 * maps), classes)
        np.testing.assert_array_equal(base.auc, monotone.auc)
        affine = metric_class(output_activation="softmax").compute_scores(
            model, x, 2 * maps + 3, classes)
        np.testing.assert_allclose(affine.calibration, base.calibration, atol=1e-9)
        assert not np.allclose(monotone.calibration, base.calibration, atol=1e-3)
        for batch_size in (1, 7, 64):
            other = metric_class(batch_size=batch_size, output_activation="softmax")
            np.testing.assert_allclose(other.compute_scores(model, x, maps, classes).curves,
                                       base.curves, atol=1e-5)
    pixels = rng.rand(5, 16, 16)
    sds = faithfulness.single_deletion(model, x, classes, pixels)
    scaled = faithfulness.single_deletion(model, x, classes, 3 * pixels, batch_size=1)
    np.testing.assert_allclose(sds["rho"], scaled["rho"], atol=1e-9)


def test_class_defaults_to_the_argmax_on_the_original_image():
    model = small_model()
    x = np.random.RandomState(0).randn(3, 16, 16, 3).astype(np.float32)
    maps = np.random.RandomState(1).rand(3, 4, 4)
    argmax = np.argmax(model(x).numpy(), axis=1)
    result = faithfulness.Insertion().compute_scores(model, x, maps)
    np.testing.assert_array_equal(result.classes, argmax)
    start = faithfulness.Insertion(class_source="start").compute_scores(model, x, maps)
    blurred = substrates.box_blur(tf.constant(x))
    np.testing.assert_array_equal(start.classes, np.argmax(model(blurred).numpy(), axis=1))


# -- 10. upsampling and substrates ----------------------------------------------------------------

def test_bicubic_matches_stored_torch_outputs():
    stored = np.load(os.path.join(REPO, "tests", "data", "torch_bicubic.npz"))
    for key in ("7_224", "14_224", "3_50"):
        size_in, size_out = map(int, key.split("_"))
        np.testing.assert_allclose(resample.torch_bicubic_matrix(size_in, size_out),
                                   stored[key], atol=1e-6)


def test_nearest_indices_and_grid_cells():
    np.testing.assert_array_equal(resample.torch_nearest_indices(2, 8), [0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(resample.torch_nearest_indices(3, 7), [0, 0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(resample.grid_cell_indices(7, 2), [0, 0, 0, 1, 1, 1, 2])


def test_substrate_kernels():
    box = substrates.box_kernel_1d(224)
    assert len(box) == 45 and len(substrates.box_kernel_1d(56)) == 11  # max(11, 9), odd
    assert len(substrates.box_kernel_1d(50)) == 11  # 10 -> 11
    import scipy.ndimage

    impulse = np.zeros((11, 11))
    impulse[5, 5] = 1
    np.testing.assert_allclose(np.outer(substrates.rise_kernel_1d(), substrates.rise_kernel_1d()),
                               scipy.ndimage.gaussian_filter(impulse, 5), atol=1e-15)
    idsds = substrates.idsds_kernel_1d(51, 41)
    assert idsds.sum() == pytest.approx(1.0)
    assert idsds[0] / idsds[25] == pytest.approx(np.exp(-(25 / 82) ** 2))
    ones = tf.ones([1, 20, 20, 2])
    blurred = substrates.box_blur(ones).numpy()  # 9 x 9 box, zero padding darkens the border
    assert blurred[0, 10, 10, 0] == pytest.approx(1.0) and blurred[0, 0, 0, 1] == pytest.approx(
        25 / 81)


def test_noise_draws_are_per_key_and_the_same_eager_or_traced():
    """A row's draw depends on its key alone (not on the other rows), and an eager call (one
    traced loop) draws what the same call inside a traced function draws."""
    keys = substrates.noise_keys(7, np.arange(5))
    for draw in (substrates.uniform_noise, substrates.normal_noise):
        eager = draw(keys, [3, 2]).numpy()
        alone = draw(keys[3:4], [3, 2]).numpy()
        traced = tf.function(lambda k, draw=draw: draw(k, [3, 2]))(keys).numpy()
        np.testing.assert_array_equal(eager[3:4], alone)
        np.testing.assert_array_equal(eager, traced)
        assert eager.shape == (5, 3, 2) and len(np.unique(eager)) == eager.size
    uniform = substrates.uniform_noise(substrates.noise_keys(0, np.arange(400)), [50]).numpy()
    assert -1 <= uniform.min() < -0.99 and 0.99 < uniform.max() <= 1
    assert abs(uniform.mean()) < 0.01 and abs(uniform.std() - 1 / np.sqrt(3)) < 0.01


# -- RISE and incremental deletion ----------------------------------------------------------------

def test_rise_deletion_of_a_fraction_model():
    x = np.ones((2, 20, 20, 3), np.float32)
    maps = np.random.RandomState(0).rand(2, 20, 20)
    result = faithfulness.RiseDeletion(step=30).compute_scores(two_class(ones_fraction), x,
                                                               maps, [1, 1])
    steps = int(np.ceil(400 / 30))
    expected = 1 - np.minimum(np.arange(steps + 1) * 30, 400) / 400
    np.testing.assert_allclose(result.curves[0], expected, atol=1e-6)
    inserted = faithfulness.RiseInsertion(step=30, substrate="zeros")
    curve = 1 - expected
    assert inserted(two_class(ones_fraction), x, maps, [1, 1])["auc"] == pytest.approx(
        (curve.sum() - (curve[0] + curve[-1]) / 2) / steps, abs=1e-6)
    with pytest.raises(UserError, match="full-resolution"):
        faithfulness.RiseDeletion()(two_class(ones_fraction), x, maps[:, :10, :10], [1, 1])


def test_incremental_deletion_orders_and_update():
    grid, side = 4, 16
    weights = np.linspace(-2, 2, 16)
    logit = cell_model(weights, grid)

    def model(x):
        z = logit(x)
        return tf.concat([z, tf.zeros_like(z)], axis=1)  # two classes: softmax = sigmoid(z)

    x = np.ones((2, side, side, 3), np.float32)
    contribution = np.repeat(np.repeat(weights.reshape(1, 4, 4), 4, 1), 4, 2).repeat(2, 0)
    ascending = faithfulness.incremental_deletion(model, x, [0, 0], contribution, steps=8)
    descending = faithfulness.incremental_deletion(model, x, [0, 0], contribution, steps=8,
                                                   order="descending")
    assert ascending["curves"].shape == (2, 8)
    z0 = weights.sum()  # all cells present
    assert ascending["curves"][0, 0] == pytest.approx(1 / (1 + np.exp(-z0)), rel=1e-6)
    assert ascending["score"] > descending["score"]
    # step k deletes the 2k least attributed cells (32 pixels per step)
    remaining = weights.sum() - np.concatenate([[0], np.cumsum(np.sort(weights))])[0:16:2]
    np.testing.assert_allclose(ascending["curves"][1], 1 / (1 + np.exp(-remaining)),
                               rtol=1e-5)
    calls = []

    def explain(images, labels):
        calls.append(images.copy())
        return contribution

    updated = faithfulness.incremental_deletion(model, x, [0, 0], steps=8, explain_fn=explain,
                                                update_attribution=True)
    assert len(calls) == 8
    np.testing.assert_allclose(updated["curves"], ascending["curves"], rtol=1e-6)
    assert ranking.idsds_thresholds(224 * 224, 32)[1] == 1568


def test_random_cell_deletion_deletes_one_cell_half_the_time():
    images = tf.ones([400, 16, 16, 3])
    out = faithfulness.random_cell_deletion(images, seed=1).numpy()
    changed = (out == 0).all(axis=-1).reshape(400, -1).sum(axis=1)
    assert set(changed) == {0, 16}
    assert 0.4 < (changed > 0).mean() < 0.6
    again = faithfulness.random_cell_deletion(images[100:], seed=1, ids=tf.range(100, 400)).numpy()
    np.testing.assert_array_equal(again, out[100:])
    assert not np.array_equal(faithfulness.random_cell_deletion(images, seed=2).numpy(), out)


# -- errors ---------------------------------------------------------------------------------------

def test_bad_inputs_give_one_clear_error():
    x = np.ones((2, 16, 16, 3), np.float32)
    model = two_class(ones_fraction)
    with pytest.raises(UserError, match="2 images"):
        faithfulness.Deletion()(model, x, np.ones((3, 4, 4)), [1, 1])
    bad = np.ones((2, 4, 4))
    bad[1, 0, 0] = np.nan
    with pytest.raises(UserError, match=r"explanations\[1\] contains NaN"):
        faithfulness.Deletion()(model, x, bad, [1, 1])
    with pytest.raises(UserError, match="outside"):
        faithfulness.Deletion()(model, x, np.ones((2, 4, 4)), [1, 2])
    with pytest.raises(UserError, match="expected NHWC"):
        faithfulness.ADD()(model, x[0], np.ones((2, 4, 4)), [1, 1])
    with pytest.raises(UserError, match="output has shape"):
        faithfulness.Deletion()(lambda images: tf.reduce_mean(images, [1, 2, 3]), x,
                                np.ones((2, 4, 4)), [0, 0])


def test_the_randomisation_check_equals_a_fresh_model_per_stage(tmp_path):
    """The check keeps one randomised model and sets its weights per stage; visiting the stages
    for a second method must give what a freshly rebuilt, freshly randomised model gives."""
    import models
    import saliency_gen
    from faithfulness import randomisation

    path = str(tmp_path / "cnn")
    models.export(models.build("small_cnn", 3, (16, 16, 3)), path)
    images = np.random.default_rng(0).uniform(size=(3, 16, 16, 3)).astype(np.float32)
    labels, ids = [0, 1, 2], np.arange(3)
    check = randomisation.benchmark(path, images, labels, ids, data={}, batch_size=8)
    first, second = check.score("gradient"), check.score("grad_x_input")  # stages revisited
    trained = models.load(path)
    for method, scores in (("gradient", first), ("grad_x_input", second)):
        original = randomisation.flat_abs(
            saliency_gen.attribute(trained, images, method, labels, ids=ids,
                                   preprocessing=trained.preprocessing))
        for k in randomisation.stages(len(randomisation.weighted_layers(models.rebuild(path)))):
            fresh = models.rebuild(path)
            randomisation.randomise_top(fresh, k)
            expected = stats.spearman(original, randomisation.flat_abs(
                saliency_gen.attribute(fresh, images, method, labels, ids=ids,
                                       preprocessing=trained.preprocessing)))
            assert scores[f"top {k}"] == pytest.approx(expected, abs=1e-6), (method, k)
    # The last stage's maps taken from a model randomised at once (the card's meta-evaluation
    # model, computed once for both), the other stages' by a loaded model of the caller's
    # holding the cascaded copy's weights: the same scores, to the bit.
    full = models.rebuild(path)
    randomisation.randomise_top(full, len(randomisation.weighted_layers(full)))
    shared = randomisation.benchmark(
        path, images, labels, ids, data={}, batch_size=8, holder=trained,
        randomised_maps_of=lambda method: saliency_gen.attribute(
            full, images, method, labels, ids=ids, preprocessing=trained.preprocessing))
    again = shared.score("gradient")
    assert again.keys() == first.keys()
    for stage, values in first.items():
        np.testing.assert_array_equal(again[stage], values)
    assert [key for key in vars(trained)["_kept_builds"]
            if key[0] == "weights of" and isinstance(key[1], keras.Model)]  # it held the copy


def test_scorers_of_one_model_share_their_traces(tmp_path):
    """Every scorer of a model keeps its traced functions with the model's adapter: a second
    call that makes a scorer of its own (as each of the card's benchmarks and perturbed sets
    does) runs on the first one's trace, with the same values; so does a call of fewer images
    in chunks of the same size (the card's meta-evaluation after its benchmarks)."""
    import models
    from models.formats.adapter import adapt

    path = str(tmp_path / "cnn")
    models.export(models.build("small_cnn", 3, (16, 16, 3)), path)
    loaded = models.load(path)
    images = np.random.default_rng(0).uniform(size=(3, 16, 16, 3)).astype(np.float32)
    maps = np.random.default_rng(1).normal(size=(3, 16, 16, 3)).astype(np.float32)
    first = faithfulness.single_deletion(loaded, images, [0, 1, 2], maps, batch_size=4)
    second = faithfulness.single_deletion(loaded, images, [0, 1, 2], maps, batch_size=4)
    np.testing.assert_array_equal(first["rho"], second["rho"])

    def traced():
        return {key: function.function for key, function
                in vars(adapt(loaded))["_kept_builds"].items() if key[0] == "scorer"}

    kept = traced()
    fewer = faithfulness.single_deletion(loaded, images[:2], [0, 1], maps[:2], batch_size=4)
    np.testing.assert_array_equal(fewer["rho"], first["rho"][:2])
    assert traced() == kept and all(function.experimental_get_tracing_count() == 1
                                    for function in kept.values())


def test_a_cascade_inside_another_on_one_model_gives_each_its_own_weights_back():
    """The cascade sets the trained weights aside in variables kept with the model; a second
    cascade started while the first is at a step sets that step's weights aside on its own, so
    each ends where it began: the first its step, then the trained weights."""
    import models
    from faithfulness import randomisation

    model = models.build("small_cnn", 3, (16, 16, 3))
    trained = [w.copy() for w in model.get_weights()]
    outer = randomisation.cascade(model, "top_down", seed=3)
    assert next(outer) == 0
    at_step = [w.copy() for w in model.get_weights()]
    assert any(not np.array_equal(a, b) for a, b in zip(at_step, trained))
    inner = list(randomisation.cascade(model, "independent", seed=5))
    assert inner == list(range(len(randomisation.weighted_layers(model))))
    for found, expected in zip(model.get_weights(), at_step):
        np.testing.assert_array_equal(found, expected)
    list(outer)  # the remaining steps, then the trained weights back
    for found, expected in zip(model.get_weights(), trained):
        np.testing.assert_array_equal(found, expected)


def test_fresh_values_are_kept_for_the_last_seed_only_and_are_the_initialisers():
    """A layer's fresh values are drawn once per seed and kept with the model, one seed's at a
    time (a sweep over seeds keeps no more): after seeds 1, 2 and 1 again the layer holds what
    a new model re-initialised with seed 1 holds, and the model keeps one layer's values."""
    import models
    from faithfulness import randomisation

    model = models.build("small_cnn", 3, (16, 16, 3))
    for seed in (1, 2, 1):
        randomisation.randomise_layers(model, [0], seed)
    fresh = models.build("small_cnn", 3, (16, 16, 3))
    randomisation.randomise_layers(fresh, [0], 1)
    layer, expected = (randomisation.weighted_layers(m)[0] for m in (model, fresh))
    for found, wanted in zip(layer.get_weights(), expected.get_weights()):
        np.testing.assert_array_equal(found, wanted)
    kept = vars(model)["_kept_builds"][("re-initialisation",)]
    assert kept.seed == 1 and sorted(kept.values) == [(0, "bias"), (0, "kernel")]


def test_the_randomisation_check_of_a_model_free_map_randomises_nothing(tmp_path, monkeypatch):
    """An edge map does not read the model: every stage correlates its maps with themselves
    (Spearman 1, the same bytes each stage), computed without re-initialising a layer; a
    constant map has no ranks to correlate (NaN), as before."""
    import models
    from faithfulness import randomisation

    path = str(tmp_path / "cnn")
    models.export(models.build("small_cnn", 3, (16, 16, 3)), path)
    images = np.random.default_rng(1).uniform(size=(3, 16, 16, 3)).astype(np.float32)
    check = randomisation.benchmark(path, images, [0, 1, 2], np.arange(3), data={}, batch_size=8)

    def refused(*args, **kwargs):
        raise AssertionError("a model-free map's check re-initialised a layer")
    monkeypatch.setattr(randomisation, "randomise_layers", refused)
    edges, flat = check.score("sobel"), check.score("constant")
    assert list(edges) == [m.name for m in check.metrics] == list(flat)
    for stage in edges:
        np.testing.assert_allclose(edges[stage], 1.0, atol=1e-12)
        assert np.isnan(flat[stage]).all()
    assert not randomisation.model_free("gradient", (16, 16, 3))
    assert randomisation.model_free("random", (16, 16, 3))


def test_weight_noise_is_multiplicative_of_its_sd_and_seeded():
    """The meta-evaluation's minor model perturbation: every trainable weight times 1 + N(0,
    sd), the same seed the same weights, another seed others; the non-trainable statistics
    stay."""
    import keras

    import models
    from faithfulness import randomisation

    def noisy(seed):
        keras.utils.set_random_seed(0)
        model = models.build("small_resnet", 3, (16, 16, 3))
        before = [w.numpy() for w in model.weights]
        randomisation.perturb_weights(model, 0.01, seed)
        return model, before

    model, before = noisy(0)
    trainable = {id(w) for w in model.trainable_weights}
    ratios = []
    for variable, old in zip(model.weights, before):
        if id(variable) not in trainable:
            np.testing.assert_array_equal(variable.numpy(), old)
            continue
        moved = np.abs(old) > 1e-3
        ratios.append(variable.numpy()[moved] / old[moved])
    ratios = np.concatenate(ratios)
    assert len(ratios) > 1000 and abs(ratios.mean() - 1) < 1e-3
    assert ratios.std() == pytest.approx(0.01, rel=0.05)
    again, _ = noisy(0)
    other, _ = noisy(1)
    assert all(np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(model.weights, again.weights))
    assert not np.array_equal(model.weights[0].numpy(), other.weights[0].numpy())
