"""The model passes the project runs, counted where they are asked for (docs/report_card.md,
"Where the card's time goes"): the engine's gradient passes (images x model evaluations per
image of each method), and the forward passes of predictions, the faithfulness scorer and ROAD's
imputed images. A profile (`scripts/profile_card.py`) reads the counts around a phase and
compares the time the passes need at the model's measured rate with the phase's wall time.
Counting is a Python addition per call, never per image."""
import threading

_COUNTS = {"forward": 0, "gradient": 0}
_LOCK = threading.Lock()


def count(kind: str, passes: int) -> None:
    """Adds `passes` image passes of `kind` ("forward" or "gradient")."""
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
