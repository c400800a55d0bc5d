"""BAM's released models are TF1 SavedModels read by tensor names: a fixture with exactly their
names (batch fixed at 1) explains a batch of 8 in one call with the logits and input gradients
of a TF1 session run image by image, and bam.metrics (MCS, IDR) runs on a set of them (the
synthetic world's trained models written as TF1 graphs)."""
import json
import os

import numpy as np
import tensorflow as tf

import models
import saliency_gen
from tests.fabricated import fabricate_bam_tf1_model


def _session_reference(path, images, target):
    """Logits and d logit[target] / d input, image by image, in a TF1 session."""
    graph = tf.Graph()
    logits, gradients = [], []
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        inputs = graph.get_tensor_by_name("input_tensor:0")
        output = graph.get_tensor_by_name("resnet_model/final_dense:0")
        gradient = tf.compat.v1.gradients(output[:, target], inputs)[0]
        for image in images:
            value, grad = session.run([output, gradient], {inputs: image[None]})
            logits.append(value)
            gradients.append(grad)
    return np.concatenate(logits), np.concatenate(gradients)


def test_a_tf1_model_explains_a_batch_like_a_session_image_by_image(tmp_path):
    path = fabricate_bam_tf1_model(str(tmp_path / "obj"))
    loaded = models.load(path)
    assert loaded.input_shape == (224, 224, 3) and loaded.num_classes == 10
    assert loaded.preprocessing == "caffe_rgb" and loaded.feature_layer == "block_layer4"
    images = np.random.default_rng(0).normal(0, 40, (8, 224, 224, 3)).astype(np.float32)
    expected_logits, expected_gradients = _session_reference(path, images, 3)
    with tf.GradientTape() as tape:
        x = tf.constant(images)
        tape.watch(x)
        logits = loaded(x)
        score = tf.reduce_sum(logits[:, 3])
    gradients = tape.gradient(score, x).numpy()
    assert np.abs(expected_gradients).max() > 1e-6
    np.testing.assert_allclose(logits.numpy(), expected_logits, atol=1e-5)
    np.testing.assert_allclose(gradients, expected_gradients, atol=1e-5)
    maps = saliency_gen.attribute(loaded, images[:3], "gradient", targets=[3, 3, 3])
    np.testing.assert_allclose(maps, expected_gradients[:3], atol=1e-5)
    features, _, feature_gradients = loaded.cam(images[:2], [1, 2])
    assert features.shape == (2, 7, 7, 8) and feature_gradients.shape == (2, 7, 7, 8)
    assert models.read_info(path)["model_id"] == loaded.model_id


def test_bam_metrics_runs_on_tf1_models(trained_world, tmp_path):
    from bam import metrics

    data_dir, trained, _ = trained_world
    model_dir = tmp_path / "released"
    for name in ("obj", "scene", "scene_only"):  # the trained models, as TF1 graphs
        keras_model = models.rebuild(os.path.join(trained, name))
        fabricate_bam_tf1_model(str(model_dir / name), keras_model=keras_model)
        tf1 = models.load(str(model_dir / name))
        images = np.random.default_rng(0).normal(0, 40, (4, 64, 64, 3)).astype(np.float32)
        np.testing.assert_allclose(tf1(images).numpy(), keras_model(images).numpy(),
                                   rtol=1e-4, atol=1e-4)
    output = tmp_path / "bam.json"
    metrics.run(metrics.Config(data_dir=data_dir, model_dir=str(model_dir),
                               metrics=("MCS", "IDR"), num_imgs=4, methods=("GC", "VG"),
                               output=str(output)))
    report = json.loads(output.read_text())
    ids = report["origin"]["inputs"]["models"]
    assert set(ids) == {"obj", "scene", "scene_only"}
    assert all(value.startswith("tf1-") for value in ids.values())
    assert {"MCS", "IDR"} <= set(report)


def test_tcav_reads_tf1_bottlenecks(tmp_path):
    from bam import tcav

    loaded = models.load(fabricate_bam_tf1_model(str(tmp_path / "obj")))
    images = np.random.default_rng(1).normal(0, 40, (3, 224, 224, 3)).astype(np.float32)
    model = tcav.TcavModel(loaded, batch_size=2)
    assert tcav.default_bottlenecks(loaded) == ["block_layer1", "block_layer2", "block_layer3",
                                                "block_layer4", "logit"]
    features, _, _ = loaded.cam(images, [0, 0, 0])
    np.testing.assert_allclose(model.activations(images, "block_layer4"),
                               features.numpy().reshape(3, -1), rtol=1e-5, atol=1e-5)
    # At the logits, d log softmax[t] / d logits = onehot(t) - softmax: the TF1 path agrees.
    logits = loaded(images).numpy()
    softmax = np.exp(logits - logits.max(1, keepdims=True))
    softmax /= softmax.sum(1, keepdims=True)
    expected = np.eye(10)[[4, 4, 4]] - softmax
    np.testing.assert_allclose(model.gradients(images, "logit", 4), expected, atol=1e-6)
    gradients = model.gradients(images, "block_layer2", 4)
    assert gradients.shape == (3, 28 * 28 * 6) and np.abs(gradients).max() > 0
