"""Quantus 0.6's time on the work `scripts/bench_measures.py` hands it (docs/measures.md,
"Speed"): `python -m scripts.quantus_timing --inputs=FILE.npz --output=FILE.json`.

Runs in Quantus's own environment (quantus==0.6.0, numpy<2.4, torch==2.13.0 CPU, absl-py, and
captum for SmoothMPRT; see `scripts/quantus_reference.py`), started in the repository's root by
the benchmark. It builds the benchmark's network in PyTorch from the stored Keras layer graph
and weights (`faithfulness.torch_twin.from_graph`), limits PyTorch to --threads
threads, and times each measure's call on the stored images, maps and masks once (the maps
and masks the benchmark gives its own call of the measure), channel first, after one untimed
forward pass, the network's gradient as the explanation function of the measures that explain
again, and keeps its values where they form an array. A measure Quantus fails to run is noted
and left out.
"""
import dataclasses
import json
import time
from typing import Any

import numpy as np

from faithfulness import torch_twin
from models.foundation import progress
from models.foundation.cli import option, run_binary
from models.foundation.files import write_json
from models.foundation.rules import Checked, at_least

# measure -> Quantus 0.6's class, where the name does not say it by its words capitalised
QUANTUS_NAMES = {"mprt": "MPRT", "smooth_mprt": "SmoothMPRT", "efficient_mprt": "EfficientMPRT",
                 "auc": "AUC", "irof": "IROF", "road": "ROAD"}


def quantus_class(name: str) -> str:
    """The name of Quantus's class of the measure `name` (snake case)."""
    return QUANTUS_NAMES.get(name) or "".join(word.capitalize() for word in name.split("_"))


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    inputs: str = option("", "The benchmark's inputs (.npz, no pickled objects).")
    output: str = option("", "Where the timings go (JSON).")
    threads: int = option(2, "PyTorch's threads.", rule=at_least(1))


def gradient(model: Any, inputs: Any, targets: Any, **kwargs: Any) -> np.ndarray:
    """The gradient of the target's output, NCHW (the benchmark's "gradient" explainer)."""
    import torch

    images = torch.tensor(np.asarray(inputs), dtype=torch.float32, requires_grad=True)
    outputs = model(images)
    outputs[torch.arange(len(images)), torch.as_tensor(np.asarray(targets))].sum().backward()
    return images.grad.numpy()


def _plain(found: Any) -> Any:
    """Quantus's values as nested lists of floats where they form an array of numbers, else
    None (a dict of layers, say)."""
    try:
        array = np.asarray(found, np.float64)
    except (TypeError, ValueError):
        return None
    return array.tolist() if array.size else None


def run(config: Config) -> dict:
    import warnings

    import quantus
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(config.threads)
    with np.load(config.inputs, allow_pickle=False) as stored:
        arrays = {key: stored[key] for key in stored.files}
    settings = json.loads(str(arrays.pop("settings")))
    inputs = json.loads(str(arrays.pop("inputs")))  # {measure: [maps key, masks or not]}
    nodes = json.loads(str(arrays.pop("graph")))  # each layer says how many weights it holds
    weights = [arrays[f"weight_{index}"]
               for index in range(sum(node["weights"] for node in nodes))]
    model = torch_twin.from_graph(nodes, weights)
    x = np.transpose(arrays["x"], (0, 3, 1, 2))
    with torch.no_grad():
        model(torch.tensor(x))
    seconds: dict = {}
    values: dict = {}
    failed: dict = {}
    with progress.bar(len(settings), "Quantus timed", "measure") as bar:
        for name, own in settings.items():
            call = {key: own.pop(key) for key in ("softmax",) if key in own}
            if name == "random_logit":  # (Quantus's default is ImageNet's 1,000)
                own.setdefault("num_classes", int(weights[-1].shape[0]))
            if name == "smooth_mprt":  # it explains through quantus.explain whatever
                # explain_func says (docs/measures.md, "Randomisation"): Captum's gradient, the
                # same work, summed over the channels
                call["explain_func_kwargs"] = {"method": "Saliency"}
            maps_key, masked = inputs[name]
            maps = arrays["summed" if name == "smooth_mprt" else maps_key]
            try:
                metric = getattr(quantus, quantus_class(name))(disable_warnings=True, **own)
                started = time.perf_counter()
                found = metric(model=model, x_batch=x, y_batch=arrays["y"],
                       a_batch=np.transpose(maps, (0, 3, 1, 2)) if maps.ndim == 4
                       else maps[:, None],
                       s_batch=arrays["masks"][:, None] if masked else None,
                       channel_first=True, device="cpu", batch_size=len(x),
                       explain_func=gradient, **call)
                seconds[name] = time.perf_counter() - started
                values[name] = _plain(found)
            except Exception as error:  # noqa: BLE001 (a measure Quantus cannot run here)
                failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                print(f"note: Quantus's {quantus_class(name)} failed: {failed[name]}")
            bar.update(1)
    write_json(config.output, {"seconds": seconds, "values": values, "failed": failed,
                               "quantus": quantus.__version__,
                               "torch": torch.__version__, "threads": config.threads})
    return seconds


if __name__ == "__main__":
    run_binary(Config, run)
