"""TCAV of BAM's models: `python -m bam.run_tcav --model=obj` (docs/bam.md, "TCAV").

    python -m bam.run_tcav --model=obj,scene          # synthetic world; scores and their contrast
    python -m bam.run_tcav --model=scene3 --data_dir=data --model_dir=models --output=scene3.json

Target `dog_bedroom` (its class resolved through `tcav/obj_categories.txt` or
`tcav/scene_categories.txt`), concept `dog_scene`, random sets `random500_0..R-1`, random
counterpart `random_counter_part`, at most `--max_examples` images per set, the model's own
preprocessing (`--tcav_raw_inputs` feeds 0-255 RGB as the original did). Prints a table per model
(`bam.tcav_experiment`) and writes JSON `{"<bottleneck>": {"score", "std", "p_value", ...}}` (one
model) or `{"<model>": {...}, "tcav_mcs": {"<bottleneck>": obj - scene}}` (several), with an
`"origin"`: the flags that change the scores, the models' ids and the data folder. When both obj
and scene are given, the TCAV model contrast (obj score - scene score per bottleneck) is computed
here. Without `--data_dir` / `--model_dir` it uses the built-in synthetic world and its models.
"""
import dataclasses
import os
from typing import TYPE_CHECKING, Optional

import models
from models.foundation import provenance
from models.foundation.cli import option, origin_flags, run_binary
from models.foundation.errors import require_both_or_neither
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import synthetic_setup, tcav_experiment
else:
    synthetic_setup = lazy_module("bam.synthetic_setup")
    tcav_experiment = lazy_module("bam.tcav_experiment")


@dataclasses.dataclass(frozen=True)
class Config:
    """bam.run_tcav's options (one flag each)."""

    model: tuple = option(("obj",), 'Models under --model_dir: obj, scene, scene1..scene10.')
    data_dir: Optional[str] = option(None, 'BAM data root with tcav/ (default: synthetic world).')
    model_dir: Optional[str] = option(None, 'Exported models (default: the synthetic models).',
                                      origin="models")
    output: Optional[str] = option(None, 'JSON file (default tcav_<models>.json).', origin=False)
    bottlenecks: tuple = option((), 'Bottlenecks (default: block_layer1.. and logit).')
    num_random_exp: int = option(2, 'Random sets random500_0..N-1.')
    max_examples: int = option(100, 'Images per set.')
    alpha: float = option(0.1, 'CAV regularisation.')
    seed: int = option(0, 'Seed of the CAV splits and SGD.')
    batch_size: int = option(64, 'Images per batch.', origin=False)
    tcav_raw_inputs: bool = option(False, "Feed raw 0-255 RGB (the original's bug).")



def run(config: Config) -> dict:
    """TCAV of every model of `config`, printed and written as JSON; returns the report."""
    f = config
    require_both_or_neither(("data_dir", f.data_dir), ("model_dir", f.model_dir))
    if f.data_dir is None or f.model_dir is None:  # (both or neither: checked above)
        data_dir, model_dir = synthetic_setup.prepare()
    else:
        data_dir, model_dir = f.data_dir, f.model_dir
    report = {}
    for name in f.model:
        report[name] = tcav_experiment.model_tcav(data_dir, model_dir, name, f.bottlenecks or None,
                                  f.num_random_exp, f.max_examples, f.seed, f.alpha,
                                  f.batch_size, f.tcav_raw_inputs)
        print(tcav_experiment.table(name, report[name]))
    if "obj" in report and "scene" in report:
        report["tcav_mcs"] = tcav_experiment.contrast(report["obj"], report["scene"])
        print("TCAV model contrast (obj - scene): " + ", ".join(
            f"{name} {value:+.3f}" for name, value in report["tcav_mcs"].items()))
    output = f.output or f"tcav_{'_'.join(f.model)}.json"
    origin = provenance.origin(
        origin_flags(f), data_dir=os.path.abspath(data_dir),
        models={name: models.read_info(os.path.join(model_dir, name))["model_id"]
                for name in f.model})
    written = report[f.model[0]] if len(report) == 1 else report
    write_json(output, dict(written, origin=origin), indent=1)
    print(f"wrote {output}")
    return report


if __name__ == "__main__":
    run_binary(Config, run)
