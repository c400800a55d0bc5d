"""ROAR / KAR / ROAD masks and ROAD's noisy linear imputation: counts, ties, units, fills,
keyed random maps, and the batched solver against known answers and a direct sparse solve."""
import numpy as np
import pytest
import tensorflow as tf

from models.foundation.errors import UserError
from roar import masking
from saliency_gen.data import imputation, records

ROAR_ELEMENT_COUNTS = {0.1: 15052, 0.3: 45158, 0.5: 75264, 0.7: 105369, 0.9: 135475}
ROAR_PIXEL_COUNTS = {0.1: 5017, 0.3: 15052, 0.5: 25088, 0.7: 35123, 0.9: 45158}


def _maps(seed=0, shape=(2, 224, 224, 3)):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _mask(maps, ratio, unit="element", **settings):
    """`masking.feature_mask` of `maps` with the config of `ratio`, `unit` and `settings`."""
    return masking.feature_mask(maps, masking.MaskConfig(ratio=ratio, ranking=unit, **settings))


def test_counts_are_the_originals_at_224():
    maps = _maps()
    for ratio, count in ROAR_ELEMENT_COUNTS.items():
        replaced = _mask(maps, ratio)
        assert replaced.shape == maps.shape
        assert tf.reduce_sum(tf.cast(replaced, tf.int32), axis=[1, 2, 3]).numpy().tolist() == \
            [count, count]
        kept = _mask(maps, round(1 - ratio, 2), keep_information=True)
        assert int(tf.reduce_sum(tf.cast(tf.logical_not(kept[0]), tf.int32))) == count
    for ratio, count in ROAR_PIXEL_COUNTS.items():
        replaced = _mask(maps, ratio, unit="pixel")
        assert replaced.shape == maps.shape[:3]
        assert int(tf.reduce_sum(tf.cast(replaced[1], tf.int32))) == count
    with pytest.raises(UserError, match="multiple of 0.01"):  # checked when the config is built
        masking.MaskConfig(ratio=0.555)


def test_roar_selects_the_largest_squared_elements_and_kar_keeps_them():
    saliency = np.array([0.1, -5.0, 3.0, 0.2, -0.3, 4.0, 0.0, 1.0, 0.5, -2.0], np.float32)
    maps = saliency.reshape(1, 1, 10, 1)
    replaced = _mask(maps, 0.3).numpy().ravel()
    assert np.flatnonzero(replaced).tolist() == [1, 2, 5]  # |e| = 5, 4, 3
    signed = _mask(maps, 0.3, squared=False).numpy().ravel()
    assert np.flatnonzero(signed).tolist() == [2, 5, 7]  # e = 4, 3, 1
    kar = _mask(maps, 0.7, keep_information=True).numpy().ravel()
    assert np.flatnonzero(~kar).tolist() == [1, 2, 5]


def test_ties_take_the_lower_flat_index_and_jitter_is_shared_by_all_images():
    maps = np.ones((2, 4, 5, 3), np.float32)
    replaced = _mask(maps, 0.1).numpy()  # int(0.1 * 60) = 6
    assert np.flatnonzero(replaced[0]).tolist() == list(range(6))
    jittered = _mask(maps, 0.5, unit="pixel", tie_break="jitter", seed=3).numpy()
    np.testing.assert_array_equal(jittered[0], jittered[1])  # one field for every image
    assert jittered[0].sum() == 10 and np.flatnonzero(jittered[0]).tolist() != list(range(10))
    again = _mask(maps, 0.5, unit="pixel", tie_break="jitter", seed=3).numpy()
    np.testing.assert_array_equal(jittered, again)


def test_element_unit_treats_channels_independently_and_pixel_unit_does_not():
    maps = np.zeros((1, 2, 2, 3), np.float32)
    maps[0, 0, 0, 0] = 9.0  # one strong channel
    maps[0, 1, 1] = 2.0  # a pixel strong in all channels
    element = _mask(maps, 0.25).numpy()[0]  # int(0.25 * 12) = 3 elements
    assert element[0, 0].tolist() == [True, False, False]
    assert element[1, 1].tolist() == [True, True, False]
    pixel = _mask(maps, 0.25, unit="pixel").numpy()[0]  # 1 pixel: 12 > 81? no
    assert pixel.tolist() == [[True, False], [False, False]]  # 81 > 3 * 4


def test_rank8_maps_select_exactly_the_float_sets():
    maps = _maps(1, (3, 32, 32, 3))
    maps[0, :4] = 0.25  # ties
    codes = np.stack([records.rank8_decode(records.rank8_encode(m)) for m in maps])
    for ratio in (0.1, 0.3, 0.5, 0.7, 0.9, 0.37):
        for keep in (False, True):
            np.testing.assert_array_equal(
                _mask(codes, ratio, keep_information=keep).numpy(),
                _mask(maps, ratio, keep_information=keep).numpy())


def test_mean_fill_becomes_zero_after_normalisation_and_keeps_the_rest():
    images = np.random.default_rng(2).uniform(size=(2, 8, 8, 3)).astype(np.float32)
    replaced = _mask(_maps(3, (2, 8, 8, 3)), 0.5)
    filled = masking.replace(images, replaced, masking.MaskConfig(fill="mean")).numpy()
    mask = replaced.numpy()
    np.testing.assert_array_equal(filled[~mask], images[~mask])
    normalised = (filled - np.array(imputation.IMAGENET_MEAN, np.float32)) / np.float32(0.229)
    assert np.all(normalised[..., 0][mask[..., 0]] == 0)
    pixel = _mask(_maps(3, (2, 8, 8, 3)), 0.5, unit="pixel")
    zero = masking.replace(images, pixel, masking.MaskConfig(fill="zero")).numpy()
    assert np.all(zero[pixel.numpy()] == 0) and zero[~pixel.numpy()].min() > 0
    with pytest.raises(UserError, match="needs --ranking=pixel"):
        masking.MaskConfig(fill="noisy_linear")


def test_random_maps_are_keyed_by_example_not_by_batch():
    keys = tf.constant(["a.jpg", "b.jpg", "c.jpg"])
    batch = masking.random_scores(keys, (4, 4, 3), seed=1).numpy()
    alone = masking.random_scores(keys[1:2], (4, 4, 3), seed=1).numpy()
    np.testing.assert_array_equal(batch[1], alone[0])
    assert not np.array_equal(batch[0], batch[1])
    assert not np.array_equal(batch, masking.random_scores(keys, (4, 4, 3), seed=2).numpy())
    epoch = masking.random_scores(keys, (4, 4, 3), seed=1, epoch=5).numpy()
    assert not np.array_equal(batch, epoch)
    oracle = masking.oracle_scores(np.eye(4, dtype=bool)[None])
    assert oracle.shape == (1, 4, 4, 3) and float(tf.reduce_sum(oracle)) == 12


# ----------------------------------------------------------------------------------------------
# Noisy linear imputation.


@pytest.mark.parametrize("removed, expected", [
    ([(1, 1)], [68 / 3]), ([(0, 0)], [7.2]), ([(1, 1), (0, 0)], [1380 / 59, 512 / 59])])
def test_imputation_known_answers(removed, expected):
    image = (np.arange(9.0) ** 2).reshape(1, 3, 3, 1)
    mask = np.zeros((1, 3, 3), bool)
    for row, col in removed:
        mask[0, row, col] = True
    result = imputation.noisy_linear_impute(image, mask, tol=1e-12).numpy()
    np.testing.assert_allclose([result[0, r, c, 0] for r, c in removed], expected, rtol=1e-12)
    untouched = ~mask[0]
    np.testing.assert_array_equal(result[0, untouched], image[0, untouched])


def _holes(rng, size):
    masks = [rng.uniform(size=(size, size)) < p for p in (0.1, 0.5, 0.9, 0.99)]
    block = np.zeros((size, size), bool)
    block[10:40, 12:30] = True
    border = np.zeros((size, size), bool)
    border[:, :5] = True
    border[-3:] = True
    return np.stack(masks + [block, border])


def test_imputation_matches_a_direct_sparse_solve():
    rng = np.random.default_rng(0)
    size = 48
    holes = _holes(rng, size)
    noise = rng.uniform(size=(len(holes), size, size, 3))
    ramp = np.linspace(0, 1, size)
    natural = np.stack([np.outer(ramp, ramp), np.sin(6 * np.outer(ramp, 1 - ramp)),
                        np.outer(1 - ramp, ramp)], -1)
    images = np.concatenate([noise, np.broadcast_to(natural, noise.shape)])
    holes = np.concatenate([holes, holes])
    reference = np.stack([imputation.sparse_direct_impute(x, m) for x, m in zip(images, holes)])
    single = imputation.noisy_linear_impute(images.astype(np.float32), holes, tol=1e-6).numpy()
    assert np.abs(single - reference).max() <= 1e-4
    double, info = imputation.noisy_linear_impute(images, holes, tol=1e-12, return_info=True)
    assert np.abs(double.numpy() - reference).max() <= 1e-8
    assert info["no_kept_pixel"] == 0 and info["residual"] <= 1e-12
    kept = ~holes
    np.testing.assert_array_equal(single[kept], images.astype(np.float32)[kept])


def test_imputation_keeps_constants_and_ramps():
    size = 20
    holes = np.zeros((2, size, size), bool)
    holes[:, 5:12, 6:15] = True
    constant = np.full((1, size, size, 3), 0.3)
    ramp = np.broadcast_to(np.add.outer(np.arange(size), 2 * np.arange(size))[None, ..., None]
                           / 60.0, (1, size, size, 3))
    result = imputation.noisy_linear_impute(np.concatenate([constant, ramp]), holes,
                                            tol=1e-13).numpy()
    np.testing.assert_allclose(result[0], constant[0], atol=1e-12)
    np.testing.assert_allclose(result[1], ramp[0], atol=1e-10)


def test_imputation_without_kept_pixels_falls_back_and_counts():
    images = np.random.default_rng(0).uniform(size=(2, 6, 6, 3)).astype(np.float32)
    holes = np.zeros((2, 6, 6), bool)
    holes[0] = True
    holes[1, 2, 2] = True
    result, info = imputation.noisy_linear_impute(images, holes, return_info=True)
    assert info["no_kept_pixel"] == 1 and np.all(np.isfinite(result.numpy()))
    np.testing.assert_allclose(result.numpy()[0], np.broadcast_to(imputation.IMAGENET_MEAN,
                                                                  (6, 6, 3)), atol=1e-7)


def test_imputation_noise_is_keyed_per_example():
    images = np.full((3, 16, 16, 3), 0.5, np.float32)
    holes = np.zeros((3, 16, 16), bool)
    holes[:, 4:12, 4:12] = True
    keys = [11, 12, 13]
    batch = imputation.noisy_linear_impute(images, holes, noise_std=0.01, seed=1, keys=keys)
    alone = imputation.noisy_linear_impute(images[1:2], holes[1:2], noise_std=0.01, seed=1,
                                           keys=keys[1:2])
    np.testing.assert_array_equal(batch.numpy()[1], alone.numpy()[0])
    imputed = batch.numpy()[:, 4:12, 4:12] - 0.5
    assert 0.008 < imputed.std() < 0.012 and not np.array_equal(imputed[0], imputed[1])
    np.testing.assert_array_equal(batch.numpy()[:, :4], images[:, :4])


def test_noise_drawn_beforehand_is_the_noise_drawn_per_call():
    # ROAD's scorer draws each image's noise once for all its settings (masking.noise_draws)
    rng = np.random.default_rng(2)
    images = tf.constant(rng.uniform(size=(4, 12, 12, 3)).astype(np.float32))
    holes = tf.constant(rng.uniform(size=(4, 12, 12)) < 0.4)
    keys = tf.constant([7, 3, 9, 3], tf.int64)
    config = masking.MaskConfig(ranking="pixel", fill="noisy_linear", road_noise=0.01, seed=5)
    drawn = masking.noise_draws(images, config, keys)
    picked = [2, 0, 3]  # an image's draws gathered into another batch
    itself = masking.replace(tf.gather(images, picked), tf.gather(holes, picked), config,
                             keys=tf.gather(keys, picked))
    given = masking.replace_counted(tf.gather(images, picked), tf.gather(holes, picked), config,
                                    keys=tf.gather(keys, picked),
                                    noise=tf.gather(drawn, picked))[0]
    np.testing.assert_array_equal(given.numpy(), itself.numpy())
    assert not np.array_equal(given.numpy()[0], masking.replace(
        images[2:3], holes[2:3], config, keys=keys[:1]).numpy()[0])  # the key matters
    assert masking.noise_draws(images, masking.MaskConfig(fill="mean"), keys) is None


def test_top_mask_is_the_top_k_set_with_ties():
    rng = np.random.default_rng(5)
    scores = np.round(rng.uniform(size=(6, 300)), 1).astype(np.float32)  # many ties
    for count in (1, 7, 150, 299):
        indices = tf.math.top_k(scores, k=count).indices.numpy()
        expected = np.zeros_like(scores, bool)
        np.put_along_axis(expected, indices, True, axis=1)
        np.testing.assert_array_equal(masking.top_mask(tf.constant(scores), count).numpy(),
                                      expected)


def test_imputation_of_an_image_does_not_depend_on_its_batch_mates():
    rng = np.random.default_rng(1)
    images = rng.uniform(size=(2, 32, 32, 3)).astype(np.float32)
    holes = np.zeros((2, 32, 32), bool)
    holes[0, 10:12, 10:12] = True  # converges in a few iterations
    holes[1, 2:30, 2:30] = True  # needs many
    together = imputation.noisy_linear_impute(images, holes).numpy()
    alone = imputation.noisy_linear_impute(images[:1], holes[:1]).numpy()
    np.testing.assert_array_equal(together[0], alone[0])


def test_saliency_records_whose_image_is_not_the_maps_size_are_one_line(tmp_path):
    """The generator keeps a record's image as it came and explains it resized to the model's
    size: such records (a 64 px image, 16 px maps) are refused by ROAD and ROAR's reader in one
    line naming the record (they had failed inside tf.data with TensorFlow's shape error)."""
    import io

    from PIL import Image

    from roar import masked_data
    from saliency_gen.data.records import RecordError

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(buffer, "PNG")
    maps = {"gradient_image": np.ones((16, 16, 3), np.float32)}
    path = str(tmp_path / "validation-00000-of-00001.tfrecord")
    records.write_records(path, [records.saliency_example(buffer.getvalue(), 1, maps, height=64,
                                                          width=64, example_key="a")])
    read = masked_data.Records("saliency", map_key="gradient_image", size=16)
    with pytest.raises(RecordError, match=r"record 0 stores a 64x64 image, but its maps and "
                                          r"the model are 16x16"):
        masked_data.scored_batches([path], read, 0, batch_size=1)
    # the same record with its image at the maps' size is read
    small = io.BytesIO()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(small, "PNG")
    records.write_records(path, [records.saliency_example(small.getvalue(), 1, maps, height=16,
                                                          width=16, example_key="a")])
    assert len(list(masked_data.scored_batches([path], read, 0, batch_size=1))) == 1
