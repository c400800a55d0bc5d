"""The mask settings of ROAR, KAR and ROAD, declared once (docs/roar.md, "Masks"): `MaskConfig`
holds them for the mask functions (`roar.masking`), and the binaries take their flags from its
fields (`models.foundation.cli.flag_of`: the same help, choices and rule; ROAD's binaries with
ROAD's defaults, `ROAD`). `mask_config(flags, ...)` turns a binary's flags into the run's one
`MaskConfig`. Light: no TensorFlow, so a binary's flags are checked before it loads.
"""
import dataclasses
from typing import Any

from models.foundation.cli import option
from models.foundation.errors import UserError
from models.foundation.rules import POSITIVE, WHOLE_PERCENTS, Checked, at_least, check_options

UNITS = ("element", "pixel")
TIE_BREAKS = ("index", "jitter")
FILLS = ("mean", "zero", "noisy_linear")


@dataclasses.dataclass(frozen=True)
class MaskConfig(Checked):
    """How features are ranked, selected and replaced (docs/roar.md, "Masks"); its values are
    checked when it is built, by the same rules and words as the binaries' flags (which are
    these fields; `squared` is the flag --squared_value)."""

    ratio: float = option(
        0.0, "Fraction of features replaced (ROAR: the top ones; KAR: all but the top 1 - "
        "ratio).", rule=WHOLE_PERCENTS)
    keep_information: bool = option(False, "KAR: keep the top features, replace the rest.")
    ranking: str = option(
        "element", "Rank channel entries independently (original) or whole pixels (ROAD).",
        UNITS)
    squared: bool = option(True, "Rank by e^2 (original) instead of the signed e.")
    tie_break: str = option(
        "index", "Ties: lower flat index first (original) or ROAD's shared 1e-4 jitter.",
        TIE_BREAKS)
    fill: str = option(
        "mean", "Replacement: ImageNet's mean colour (original), zero, or ROAD's noisy linear "
        "imputation (needs --ranking=pixel).", FILLS)
    road_noise: float = option(0.01, "ROAD imputation noise (absolute, [0, 1] pixels).",
                               rule=at_least(0))
    cg_tol: float = option(1e-5, "ROAD solver: relative residual to stop at.", rule=POSITIVE)
    cg_max_iters: int = option(2000, "ROAD solver: iteration limit.", rule=at_least(1))
    seed: int = option(0, "Seed of the jitter and the noise.")
    # Values already checked by these same rules (a binary's flags, `mask_config`): built
    # without applying them twice in one run. The fields' relation is checked either way.
    checked: dataclasses.InitVar[bool] = False

    def __post_init__(self, checked: bool = False) -> None:
        if not checked:
            super().__post_init__()
        if self.fill == "noisy_linear" and self.ranking != "pixel":
            raise UserError("--fill=noisy_linear (ROAD) needs --ranking=pixel")

    @property
    def percent(self) -> int:
        """The ratio as a whole percent (ROAR's thresholds; a multiple of 0.01, checked)."""
        return round(self.ratio * 100)


# ROAD's own choices (Rong et al. 2022): whole pixels ranked by the signed channel sum, ties
# broken by the shared jitter, noisy linear imputation. roar.road, roar.beam_road and the
# card's ROAD benchmark use them as their defaults.
ROAD: dict[str, Any] = {"ranking": "pixel", "squared": False, "tie_break": "jitter",
                        "fill": "noisy_linear"}
# The flag of each field whose flag has another name.
FLAG_NAMES = {"squared": "squared_value"}


def mask_config(flags: Checked, **given: Any) -> MaskConfig:
    """The run's `MaskConfig` from a binary's checked flags (the fields of `MaskConfig` it has,
    under their flag names; the others at their defaults), with `given` values (a ratio, a
    side). Each rule is applied once per run: the flags' values were checked when the binary's
    config was built, by these fields' own declarations (`cli.flag_of`); only `given` values
    are checked here."""
    values = {field.name: getattr(flags, FLAG_NAMES.get(field.name, field.name))
              for field in dataclasses.fields(MaskConfig)
              if hasattr(flags, FLAG_NAMES.get(field.name, field.name))}
    config = MaskConfig(**{**values, **given}, checked=True)
    check_options(config, given)
    return config
