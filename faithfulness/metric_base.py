"""What the `saliency_maps_metrics`-compatible façades share: their common options and a scorer
kept per model (docs/faithfulness.md, "Using the metrics")."""
from typing import Any, Optional

from faithfulness import scorer as scoring
from faithfulness import stats
from models.foundation.errors import UserError


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
