"""What the Gomez and RISE metrics share: their common options and a scorer kept per model
(docs/faithfulness.md, "Using the metrics")."""
import logging
from typing import Any, Optional

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from faithfulness import scorer as scoring
from faithfulness import stats
from models.foundation.errors import UserError

log = logging.getLogger(__name__)


class Metric:
    """The options every metric shares (batch size, output activation, NaN policy) and one
    `scoring.Scorer` per model, kept between calls so that its traced functions are reused."""

    def __init__(self, batch_size: int, output_activation: Optional[str], nan_policy: str,
                 jit_compile: bool):
        if nan_policy not in stats.NAN_POLICIES:
            raise UserError(f"unknown nan_policy {nan_policy!r}; use one of "
                            f"{', '.join(stats.NAN_POLICIES)}")
        self.batch_size = int(batch_size)
        self.output_activation = output_activation
        self.nan_policy = nan_policy
        self.jit_compile = jit_compile
        self._scorer: Optional[scoring.Scorer] = None

    def scorer(self, model: Any) -> scoring.Scorer:
        """The scorer of `model`, kept between calls so that its traced functions are reused."""
        if self._scorer is None or self._scorer.model is not model:
            self._scorer = scoring.Scorer(model, self.output_activation, self.batch_size,
                                          self.jit_compile)
        return self._scorer

    @staticmethod
    def classes(scorer: scoring.Scorer, images: tf.Tensor, class_to_explain: Optional[ArrayLike],
                what: str = "the images") -> np.ndarray:
        """The class of each image: given, or the argmax of the model on `images`."""
        if class_to_explain is None:
            log.warning("class_to_explain is None: explaining the model's argmax on %s", what)
            return np.argmax(scorer.predict(images), axis=1).astype(np.int32)
        scorer.probe(images)
        return scorer.check_classes(class_to_explain, int(images.shape[0]))
