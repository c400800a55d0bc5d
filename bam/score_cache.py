"""Region scores of BAM's built-in methods on the synthetic world, kept in its cache so that a
re-run of the main job computes only what it has not computed before (docs/bam.md, "Outputs").

One JSON file per (model, validation set, sampled images, noise seed) under
`<world cache>/bam_scores/`, named by a digest of that origin (the model's content-derived id,
the sampled images' names and bytes and their masks and boxes, the indices, the noise seed,
the package version and `FORMAT`): the model's predictions and, per method, the region scores g
and the count of constant maps, in their own dtype (a re-run gives the same bytes). Only BAM's
eight methods are kept (a user's method may change between runs); results do not depend on the
batch size, so it is not part of the origin. Files are written atomically; an unreadable one is
recomputed.
"""
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from bam import metric_definitions
from models.foundation import provenance
from models.foundation.files import write_json

if TYPE_CHECKING:
    from bam.val_set_scores import ValSet

FORMAT = 1  # bump when a change to the methods or the region score changes the numbers


def _path(folder: str, model_id: str, val_set, indices, noise_seed: int) -> str:
    origin = {"format": FORMAT, "model": model_id, "set": val_set.name,
              # what the scores read: the sampled images' names and bytes, masks and boxes
              "listing": provenance.listing_digest([val_set.paths[i] for i in indices]),
              "regions": _regions_digest(val_set, indices),
              "indices": [int(i) for i in indices], "noise_seed": int(noise_seed),
              "version": provenance.package_version()}
    digest = hashlib.sha256(json.dumps(origin, sort_keys=True).encode()).hexdigest()[:24]
    return os.path.join(folder, f"{val_set.name}-{digest}.json")


def _regions_digest(val_set: "ValSet", indices: Sequence[int]) -> str:
    """A short digest of the sampled images' object masks and boxes."""
    digest = hashlib.sha256()
    for index in indices:
        mask = np.ascontiguousarray(val_set.masks[index])
        digest.update(f"{mask.dtype}{mask.shape}{list(val_set.boxes[index])}".encode())
        digest.update(mask.tobytes())
    return digest.hexdigest()[:16]


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def score_pair(folder: str, model: Any, val_set: "ValSet", indices: Sequence[int],
               methods: Sequence[str], noise_seed: int, compute: Callable) -> tuple:
    """`compute(model, val_set, indices, methods)` (`val_set_scores.score_pair`'s result:
    predictions, {method: g}, {method: constant count}), with BAM's methods read from and
    added to the cache in `folder`."""
    path = _path(folder, model.model_id, val_set, indices, noise_seed)
    stored = _read(path)
    kept = stored.get("methods", {})
    missing = [m for m in methods if m not in kept]
    if missing or "predictions" not in stored:
        predictions, scores, constants = compute(model, val_set, indices, missing)
        new = {m: {"g": [float(v) for v in scores[m]], "dtype": str(np.asarray(scores[m]).dtype),
                   "constant": int(constants[m])}
               for m in missing if m in metric_definitions.METHODS}
        if new:
            write_json(path, {"predictions": [int(p) for p in predictions],
                              "methods": dict(kept, **new)})
        kept = dict(kept, **new)
        fresh = {m: (scores[m], constants[m]) for m in missing}
    else:
        predictions, fresh = stored["predictions"], {}
    scores = {m: fresh[m][0] if m in fresh else np.asarray(kept[m]["g"], kept[m]["dtype"])
              for m in methods}
    constants = {m: fresh[m][1] if m in fresh else kept[m]["constant"] for m in methods}
    return np.asarray(predictions), scores, constants
