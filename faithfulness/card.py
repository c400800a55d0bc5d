"""The faithfulness protocols as report-card benchmarks (docs/report_card.md, "Benchmarks"):
Deletion / Insertion (DAUC, DC, IAUC, IC), IIC / AD, ADD, IDSDS single and (by flag) incremental
deletion, and the peers' measures under Quantus's names (`faithfulness.measures`), each
scoring one method on the same images with `faithfulness.evaluate.per_image`, the computation
the binary and Beam call too."""
import dataclasses
import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from faithfulness import evaluate, measures
from models.report.card_engine import CHEAP_IMAGES, ORACLE, Benchmark

PROTOCOLS = {  # card name -> protocol (its metrics: faithfulness.protocols.METRICS)
    "Deletion": "deletion", "Insertion": "insertion", "IIC/AD": "iic_ad", "ADD": "add",
    "IDSDS": "single_deletion", "IDSDS incremental": "incremental_deletion",
    **{name: name for name in measures.__all__},  # the peers' measures, by Quantus's names
}
# --benchmarks may name a family for all of its measures
FAMILIES = measures.FAMILIES
MASKED = measures.MASKED  # the measures that need object masks
# incremental deletion, the other peers' measures: by flag. Of the peers' families, the card
# runs by default the measure the literature uses most where it costs no more than the maps
# (docs/report_card.md, "Benchmarks"): sparseness (complexity) and the pointing game
# (localisation, where the records carry object masks).
DEFAULT = ("Deletion", "Insertion", "IIC/AD", "ADD", "IDSDS", "sparseness", "pointing_game")
# the card's settings of a peer measure where Quantus's default costs too much for a card
# (docs/report_card.md, "Benchmarks"): at most some 100 model passes or 10 explanations per
# image and method (`card_settings` sizes the steps and patches to the images)
CARD_SETTINGS: dict[str, dict[str, Any]] = {
    name: {"nr_samples": 10} for name in measures.FAMILIES["robustness"]
    if name not in ("consistency", "continuity")}
CARD_SETTINGS.update({
    "average_stability": {"nb_samples": 10}, "mu_fidelity": {"nb_samples": 20},
    "monotonicity_correlation": {"nr_samples": 2},
    "road": {"percentages": (10, 30, 50, 70, 90)},
    "smooth_mprt": {"nr_samples": 5},
    "continuity": {"nr_steps": 10},
})
STEPPED = ("pixel_flipping", "faithfulness_estimate", "monotonicity", "non_sensitivity",
           "sensitivity_n", "monotonicity_correlation")  # steps of H W / 16 values
PATCHED = ("selectivity", "region_perturbation")  # patches of side / 8: 64 patches


def card_settings(name: str, height: int, width: int) -> dict:
    """The card's settings of the measure `name` on images of `height` x `width` pixels:
    `CARD_SETTINGS`, with steps of H W / 16 values (48 steps of an RGB image), infidelity's
    patches a quarter of the side (16 patches) and 64 patches for the patch measures (the
    defaults where those are the defaults: 64-px images keep Quantus's patch of 8). Steps and
    infidelity's patches must divide the image: at sizes where a sixteenth or a quarter does
    not, the largest divisor below it (299 px: steps of 3,887 values, patches of 23 px)."""
    found = dict(CARD_SETTINGS.get(name, {}))
    if name in STEPPED:
        found["features_in_step"] = largest_divisor(height * width, height * width // 16)
    side = min(height, width)
    if name == "infidelity":
        found["perturb_patch_sizes"] = (largest_divisor(math.gcd(height, width), side // 4),)
    if name in PATCHED and side // 8 not in (0, 8):
        found["patch_size"] = side // 8
    return found


def largest_divisor(number: int, bound: int) -> int:
    """The largest divisor of `number` not above `bound` (1 at least)."""
    divisors = (divisor for low in range(1, math.isqrt(number) + 1) if number % low == 0
                for divisor in (low, number // low))
    return max((divisor for divisor in divisors if divisor <= bound), default=1)


def benchmarks(loaded: Any, images: np.ndarray, labels: np.ndarray, ids: np.ndarray, *,
               data: dict, names: Sequence[str] = DEFAULT,
               options: Optional[evaluate.Options] = None, group_size: int = 256,
               maps_of: Optional[Callable] = None, methods: Optional[dict] = None,
               masks: Optional[np.ndarray] = None) -> list:
    """One `Benchmark` per protocol of `names`, scoring `images` ([N, H, W, C] in the model's
    input space, explaining `labels`) with `loaded`. `data` fingerprints the images (their
    origin in the cells); `maps_of(method)`, when given, supplies the method's maps of all
    `images` (computed once and shared by the benchmarks of one card); `methods` ({name:
    `saliency_gen.attribution.names.Resolved`}, the run's resolved methods) explain where maps are
    not shared (IDSDS re-explains the perturbed images); `masks` [N, H, W], the images' object
    masks, which the localisation measures need (without them their cells are blank)."""
    options = options or evaluate.Options()
    found = []
    for name in names:
        protocol = PROTOCOLS[name]
        own = card_settings(name, *images.shape[1:3])
        chosen = evaluate.Config(**dataclasses.asdict(options), **own) if own else options
        measure = evaluate.measure_for(loaded, protocol, chosen)
        localising = protocol in measures.MASKED

        def score(method, protocol=protocol, measure=measure, chosen=chosen):
            shared: Optional[np.ndarray] = None
            if method == ORACLE and masks is not None:  # (`supports`: localisation, masks)
                shared = oracle_maps(masks, images.shape[3])
            elif maps_of is not None and protocol != "incremental_deletion":
                shared = maps_of(method)
            return evaluate.per_image(loaded, images, labels, ids,
                                      (methods or {}).get(method, method), protocol, chosen,
                                      measure, shared, group_size, masks=masks)

        found.append(Benchmark(
            name=name, metrics=measure.metrics, score=score,
            supports=_supports(localising, masks is not None),
            settings={"protocol": protocol, "model_id": loaded.model_id,
                      "n_images": len(images), **data, **dataclasses.asdict(options),
                      # (only where given: cells made before the peers' measures stay valid)
                      **({"measure_settings": own} if own else {}),
                      **measures.code_settings(protocol)},
            cost=_cost(protocol, options, own) * len(images) / CHEAP_IMAGES))
    return found


def oracle_maps(masks: np.ndarray, channels: int) -> np.ndarray:
    """float32 [N, H, W, channels]: the oracle's maps for the localisation measures, each
    image's object mask itself on every channel, as the methods' maps are (top_k_intersection
    counts k of the channel-first features: a one-channel map would be ranked over fewer)."""
    found = (np.asarray(masks) > 0.5).astype(np.float32)[..., None]
    return np.repeat(found, channels, axis=3)


def _supports(localising: bool, has_masks: bool) -> Callable[[str], bool]:
    """Which methods a measure's cells exist for: a localisation measure every method and the
    oracle where the images have masks, none without; the others every method but the oracle
    (the mask explains nothing they perturb or re-explain)."""
    if localising:
        return lambda method: has_masks
    return lambda method: method != ORACLE


def _cost(protocol: str, options: evaluate.Options, own: dict) -> float:
    """A cell's prior cost on `CHEAP_IMAGES` images, in units of a cheap cell
    (`models.report.card_engine.Benchmark`), until measured cells replace it."""
    if protocol in ("deletion", "insertion"):
        return float(options.max_step_nb)
    if protocol == "incremental_deletion":
        return float(options.id_steps)
    if protocol == "single_deletion":
        return float(options.grid_rows_and_cols ** 2)
    if "nr_samples" in own or "nb_samples" in own:  # explaining again per noisy sample
        return 4.0 * own.get("nr_samples", own.get("nb_samples", 1))
    return 2.0
