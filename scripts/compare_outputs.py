"""Byte-identity check of a change (docs/architecture.md, "Behaviour unchanged"): runs the main
binaries on the synthetic world from a base revision and from the working tree, with one shared
cache, and compares their outputs: files byte for byte (a small report card's table and every
cell it cached among them), JSON reports value for value with the wall-clock keys (seconds) set
aside, and the printed BAM table line for line.

    python scripts/compare_outputs.py --base=cc79fb5
"""
import dataclasses
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from models.foundation import progress
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError

# (name, command after `python -m`, its output files relative to its folder)
RUNS = (
    ("bam", ["bam.metrics", "--metrics=MCS,IDR,IIR", "--num_imgs=10", "--seed=0"],
     ("bam_metrics.json", "bam_metrics.csv")),
    ("road", ["roar.road", "--output=road", "--ratios=0.1,0.5", "--nr_images=64"],
     ("road.json", "road.csv", "road.md")),
    ("single_deletion", ["faithfulness.evaluate", "--output=sd.json", "--nr_images=16"],
     ("sd.json",)),
    ("deletion", ["faithfulness.evaluate", "--evaluation_protocol=deletion",
                  "--output=del.json", "--nr_images=16"], ("del.json",)),
    ("roar", ["roar.train", "--ratio=0.3", "--epochs=1", "--num_train_images=256",
              "--output_dir=runs"],
     ("runs/modified_image/0.30/gradient_image/remove/element-mean/seed_0/metrics.json",)),
    ("card", ["scripts.report_card", "--methods=bam:GC,bam:IG,random,oracle", "--nr_images=8",
              "--num_imgs=8", "--max_step_nb=16", "--meta_images=4", "--gallery_images=0",
              "--output_dir=card"], ("card/card.csv",)),
    ("roar_noisy_linear", ["roar.train", "--ratio=0.3", "--epochs=1", "--num_train_images=256",
                           "--fill=noisy_linear", "--ranking=pixel", "--output_dir=runs"],
     ("runs/modified_image/0.30/gradient_image/remove/pixel-noisy_linear/seed_0/"
      "metrics.json",)),
)
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WALL_CLOCK = ("seconds", "train_seconds", "decode_seconds")


@dataclasses.dataclass(frozen=True)
class Config:
    """compare_outputs' options."""

    base: str = option("HEAD", "The git revision to compare the working tree with.")
    scratch: str = option("", "Folder for both trees' outputs and the shared cache (default: "
                          "a new temporary folder).", origin=False)


def _without_wall_clock(value):
    if isinstance(value, dict):
        return {key: _without_wall_clock(item) for key, item in value.items()
                if key not in WALL_CLOCK}
    if isinstance(value, list):
        return [_without_wall_clock(item) for item in value]
    return value


def _same(path_a: str, path_b: str) -> str:
    """"bytes", "values" (JSON equal but for wall-clock keys) or "DIFFERENT"."""
    with open(path_a, "rb") as a, open(path_b, "rb") as b:
        if a.read() == b.read():
            return "bytes"
    if path_a.endswith(".json"):
        with open(path_a, encoding="utf-8") as a, open(path_b, encoding="utf-8") as b:
            if _without_wall_clock(json.load(a)) == _without_wall_clock(json.load(b)):
                return "values"
    return "DIFFERENT"


def _run_all(tree: str, out: str, cache: str, bar: Any) -> None:
    """Every run of `RUNS` with the code of `tree`, each in its own folder under `out` (its
    outputs are written there); `bar` counts the runs."""
    environment = {**os.environ, "XDG_CACHE_HOME": cache, "PYTHONPATH": tree}
    for name, command, _ in RUNS:
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        print(f"{os.path.basename(out)}: python -m {' '.join(command)}", flush=True)
        done = subprocess.run([sys.executable, "-m", *command], cwd=folder, env=environment,
                              capture_output=True, text=True, check=False)
        with open(os.path.join(folder, "stdout.txt"), "w", encoding="utf-8") as handle:
            handle.write(done.stdout)
        if done.returncode:
            raise UserError(f"{name} failed with the code of {tree}: "
                            f"{done.stderr.strip()[-300:]}")
        bar.update(1)


def run(config: Config) -> dict:
    """Runs `RUNS` with the base revision's code and the working tree's, prints one verdict
    per output and returns them; outputs that differ are one error line."""
    scratch = config.scratch or tempfile.mkdtemp(prefix="compare-outputs-")
    base_tree = os.path.join(scratch, "base")
    made = subprocess.run(["git", "-C", REPOSITORY, "worktree", "add", "-f", "--detach",
                           base_tree, config.base], check=False, capture_output=True, text=True)
    if made.returncode:
        raise UserError(f"--base={config.base}: {made.stderr.strip()}")
    try:
        cache = os.path.join(scratch, "cache")
        with progress.bar(2 * len(RUNS), "compare outputs", "run") as bar:
            for tree, label in ((base_tree, "before"), (REPOSITORY, "after")):
                _run_all(tree, os.path.join(scratch, label), cache, bar)
    finally:
        subprocess.run(["git", "-C", REPOSITORY, "worktree", "remove", "--force", base_tree],
                       check=False, capture_output=True)
    verdicts = {f"{name}/{os.path.basename(relative)}": _same(
        *(os.path.join(scratch, label, name, relative) for label in ("before", "after")))
        for name, _, files in RUNS for relative in files}
    cells = [sorted(glob.glob(os.path.join(scratch, label, "card", "card", "cells", "*", "*.json")))
             for label in ("before", "after")]
    if [os.path.relpath(p, os.path.join(scratch, "before")) for p in cells[0]] != [
            os.path.relpath(p, os.path.join(scratch, "after")) for p in cells[1]]:
        verdicts["card/cells"] = "DIFFERENT"
    else:
        kinds = {_same(a, b) for a, b in zip(*cells)}
        verdicts[f"card/{len(cells[0])} cells"] = "DIFFERENT" if "DIFFERENT" in kinds else (
            "values" if "values" in kinds else "bytes")
    tables = []
    for label in ("before", "after"):
        with open(os.path.join(scratch, label, "bam", "stdout.txt"), encoding="utf-8") as handle:
            tables.append(handle.read().splitlines()[-6:-1])  # the table, not its timing line
    verdicts["bam/printed table"] = "bytes" if tables[0] == tables[1] else "DIFFERENT"
    for name, verdict in verdicts.items():
        print(f"{verdict:>9}  {name}")
    if "DIFFERENT" in verdicts.values():
        raise UserError(f"outputs differ from those of {config.base} (in {scratch})")
    print(f"same outputs as {config.base} (bytes, or values but for wall-clock seconds)")
    return verdicts


if __name__ == "__main__":
    run_binary(Config, run)
