"""The work the project runs, counted where it is asked for (docs/report_card.md, "Where the
card's time goes"): the engine's gradient passes (images x model evaluations per image of each
method), the forward passes of predictions, the faithfulness scorer and ROAD's imputed images,
and the work of ROAD's imputation solver (part of ROAD's definition, no model pass): its set-ups
(images imputed: each solve first builds its multigrid operators) and its iterations (images x
iterations). A profile (`scripts/profile_card.py`) reads the counts around a phase and
compares the time the work needs at its measured rate with the phase's wall time. Counting is
a Python addition per call, never per image."""
import threading

_COUNTS = {"forward": 0, "gradient": 0, "setup": 0, "solve": 0}
_LOCK = threading.Lock()


def count(kind: str, passes: int) -> None:
    """Adds `passes` image passes of `kind` ("forward", "gradient", "setup": solver set-ups,
    or "solve": solver iterations)."""
    with _LOCK:
        _COUNTS[kind] += int(passes)


def snapshot() -> dict:
    """{kind: passes so far}."""
    with _LOCK:
        return dict(_COUNTS)


def since(before: dict) -> dict:
    """{kind: passes since the `snapshot` `before`}."""
    now = snapshot()
    return {kind: now[kind] - before.get(kind, 0) for kind in now}
