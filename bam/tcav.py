"""TCAV in TF2 (Kim et al. 2018, as BAM uses it: docs/bam.md, "TCAV").

For one bottleneck h of a model and a target class k:

* activations: h(x) per image, flattened, in batches;
* a concept activation vector (CAV) per (concept set, random set): a linear SVM (scikit-learn's
  `SGDClassifier`, hinge loss, L2, alpha 0.1) on concept (label 0) vs random (label 1)
  activations, both cut to the smaller set, trained on a seeded stratified 67% split (the other
  33% gives the reported accuracy); the CAV is -coef, pointing to the concept;
* the TCAV score: the fraction of target images whose directional derivative
  grad_h log softmax_k . v is > 0 (exactly 0 does not count);
* the statistics: concept scores s_r against random sets r = 0..R-1 and random-counterpart
  scores t_r against the same sets; mean, std and the two-sided t-test p-value (equal
  variances) between {t_r} and {s_r}.

Gradients of every target image are taken once per bottleneck and all CAVs of a bottleneck are
applied to them as one matrix product. Bottleneck names: Keras layer names, `"logit"` (the
logits themselves), the aliases `block_layer1..4` (the end of each ResNet stage; for small_cnn
the last convolution of each of its three blocks) and `last_block` (the last of those).
"""
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import scipy.stats
import tensorflow as tf

from models.foundation.errors import UserError
from models.foundation.tracing import quiet_retracing

LOGIT = "logit"
LAST_BLOCK = "last_block"
RESNET_STAGES = {"block_layer1": "conv2_block3_out", "block_layer2": "conv3_block4_out",
                 "block_layer3": "conv4_block6_out", "block_layer4": "conv5_block3_out"}
SMALL_CNN_STAGES = {"block_layer1": "block1_conv2", "block_layer2": "block2_conv2",
                    "block_layer3": "block3_conv2"}


def _is_tf1(model) -> bool:
    """A TF1 SavedModel read by tensor names (`models.formats.tf1_models`): its bottlenecks are
    named tensors, not Keras layers."""
    return hasattr(model, "bottleneck_log_softmax_gradient")


def default_bottlenecks(model: Any) -> list:
    """The BAM bottlenecks a model has: its block_layer aliases, then "logit"."""
    if _is_tf1(model):
        return list(model.info["bottlenecks"]) + [LOGIT]
    names = {layer.name for layer in model.layers}
    aliases = [alias for table in (RESNET_STAGES, SMALL_CNN_STAGES)
               for alias, layer in table.items() if layer in names]
    return aliases + [LOGIT]


def layer_name(model: Any, bottleneck: str) -> str:
    """The Keras layer of a bottleneck name or alias (`last_block`: the model's last stage)."""
    if bottleneck == LAST_BLOCK:
        stages = default_bottlenecks(model)[:-1]
        if not stages:
            raise UserError(f"model {model.name!r} has no block_layer stages; name a layer")
        bottleneck = stages[-1]
    names = {layer.name for layer in model.layers}
    for table in (RESNET_STAGES, SMALL_CNN_STAGES):
        if table.get(bottleneck) in names:
            return table[bottleneck]
    if bottleneck in names:
        return bottleneck
    raise UserError(f"model {model.name!r} has no bottleneck {bottleneck!r}; use "
                    f"{', '.join(default_bottlenecks(model))} or a layer name")


class TcavModel:
    """Bottleneck activations and log-softmax gradients of a Keras model, in batches."""

    def __init__(self, model: Any, batch_size: int = 64):
        if not (hasattr(model, "layers") and hasattr(model, "inputs")) and not _is_tf1(model):
            raise UserError("TCAV needs a Keras model (rebuild an export with models.rebuild) "
                            "or a TF1 SavedModel with named bottlenecks")
        self.model = model
        self.batch_size = int(batch_size)
        self._splits: dict = {}

    def _split(self, bottleneck):
        """(lower: images -> h, upper: h -> logits) traced functions of a bottleneck."""
        if bottleneck not in self._splits and _is_tf1(self.model):
            self._splits[bottleneck] = self._tf1_split(bottleneck)
        if bottleneck not in self._splits:
            import keras

            if bottleneck == LOGIT:
                lower, upper = self.model, tf.identity
            else:
                layer = self.model.get_layer(layer_name(self.model, bottleneck))
                lower = keras.Model(self.model.inputs, layer.output)
                upper = keras.Model(layer.output, self.model.outputs[0])

            @tf.function(reduce_retracing=True)
            def activations(images):
                return lower(images, training=False)

            @tf.function(reduce_retracing=True)
            def gradients(images, target):
                h = lower(images, training=False)
                with tf.GradientTape() as tape:
                    tape.watch(h)
                    logits = upper(h) if bottleneck == LOGIT else upper(h, training=False)
                    score = tf.reduce_sum(tf.nn.log_softmax(logits)[:, target])
                return tape.gradient(score, h)

            self._splits[bottleneck] = (quiet_retracing(activations), quiet_retracing(gradients))
        return self._splits[bottleneck]

    def _tf1_split(self, bottleneck):
        """(activations, gradients) of a TF1 model: named tensors, gradients built in its graph
        (the logits' own log-softmax gradient for "logit")."""
        model = self.model
        if bottleneck == LAST_BLOCK:
            bottleneck = default_bottlenecks(model)[-2]
        if bottleneck != LOGIT:
            return (lambda images: model.bottleneck(bottleneck, images),
                    lambda images, target: model.bottleneck_log_softmax_gradient(
                        bottleneck, images, target))

        def gradients(images, target):
            logits = model(images)
            with tf.GradientTape() as tape:
                tape.watch(logits)
                score = tf.reduce_sum(tf.nn.log_softmax(logits)[:, target])
            return tape.gradient(score, logits)

        return model, gradients

    def _batched(self, function, images, *args):
        images = np.asarray(images, np.float32)
        if len(images) == 0:
            raise UserError("a TCAV image set is empty")
        parts = [function(tf.constant(images[start:start + self.batch_size]), *args).numpy()
                 for start in range(0, len(images), self.batch_size)]  # batches of images
        return np.concatenate(parts).reshape(len(images), -1)

    def activations(self, images: np.ndarray, bottleneck: str) -> np.ndarray:
        """float32 [N, D]: flattened bottleneck activations."""
        return self._batched(self._split(bottleneck)[0], images)

    def gradients(self, images: np.ndarray, bottleneck: str, target: int) -> np.ndarray:
        """float32 [N, D]: grad_h log softmax(logits)[target] per image."""
        return self._batched(self._split(bottleneck)[1], images, tf.constant(int(target)))


def train_cav(concept: np.ndarray, random: np.ndarray, seed: int = 0,
              alpha: float = 0.1) -> tuple[np.ndarray, float]:
    """(CAV [D] pointing to the concept, held-out accuracy) from two activation sets."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import train_test_split

    count = min(len(concept), len(random))
    if count < 3:
        raise UserError(f"a CAV needs at least 3 images per set; got {count}")
    features = np.concatenate([concept[:count], random[:count]]).astype(np.float64)
    labels = np.concatenate([np.zeros(count, int), np.ones(count, int)])
    train_x, test_x, train_y, test_y = train_test_split(
        features, labels, test_size=0.33, stratify=labels, random_state=seed)
    classifier = SGDClassifier(loss="hinge", penalty="l2", alpha=alpha, max_iter=1000, tol=1e-3,
                               random_state=seed)
    with warnings.catch_warnings():  # the original's iteration cap; its CAVs stop there too
        warnings.simplefilter("ignore", ConvergenceWarning)
        classifier.fit(train_x, train_y)
    return -classifier.coef_[0], float(classifier.score(test_x, test_y))


def tcav_scores(gradients: np.ndarray, cavs: np.ndarray) -> np.ndarray:
    """[R]: fraction of target images with grad . v > 0, for each CAV row of `cavs` [R, D]."""
    return (np.asarray(gradients, np.float64) @ np.asarray(cavs, np.float64).T > 0).mean(axis=0)


@dataclass
class TcavResult:
    """One bottleneck's TCAV: concept and random-counterpart scores per random set."""

    concept_scores: np.ndarray
    random_scores: np.ndarray
    cav_accuracies: np.ndarray
    p_value: float

    @property
    def score(self) -> float:
        return float(self.concept_scores.mean())

    @property
    def std(self) -> float:
        return float(self.concept_scores.std())

    @property
    def significant(self) -> bool:
        return bool(self.p_value <= 0.05)

    def summary(self) -> dict:
        return {"score": self.score, "std": self.std, "p_value": self.p_value,
                "significant": self.significant,
                "random_score": float(self.random_scores.mean()),
                "random_std": float(self.random_scores.std()),
                "concept_scores": self.concept_scores.tolist(),
                "random_scores": self.random_scores.tolist(),
                "cav_accuracies": self.cav_accuracies.tolist()}


def run_tcav(tcav_model: TcavModel, bottleneck: str, target_images: np.ndarray,
             target_class: int, concept_images: np.ndarray, random_sets: Sequence[np.ndarray],
             counterpart_images: np.ndarray, seed: int = 0,
             alpha: float = 0.1) -> TcavResult:
    """TCAV of one concept for one bottleneck against `random_sets` (a list of image arrays)."""
    if len(random_sets) < 2:
        raise UserError("TCAV needs at least 2 random sets for its t-test")
    gradients = tcav_model.gradients(target_images, bottleneck, target_class)
    concept = tcav_model.activations(concept_images, bottleneck)
    counterpart = tcav_model.activations(counterpart_images, bottleneck)
    concept_cavs, counterpart_cavs, accuracies = [], [], []
    for index, images in enumerate(random_sets):  # one CAV pair per random set
        random = tcav_model.activations(images, bottleneck)
        cav, accuracy = train_cav(concept, random, seed + index, alpha)
        concept_cavs.append(cav)
        accuracies.append(accuracy)
        counterpart_cavs.append(train_cav(counterpart, random, seed + index, alpha)[0])
    concept_scores = tcav_scores(gradients, np.stack(concept_cavs))
    random_scores = tcav_scores(gradients, np.stack(counterpart_cavs))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant score sets are expected
        p_value = float(scipy.stats.ttest_ind(random_scores, concept_scores).pvalue)
    return TcavResult(concept_scores, random_scores, np.array(accuracies), p_value)
