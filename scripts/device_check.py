"""The device check (docs/saliency.md, "On an accelerator"), run by `scripts/device_check.sh`:
the engine and faithfulness benchmarks, the main job and the real network's card without its
trust section, each timed, with the GPU's utilisation sampled beside them, in one table.

    bash scripts/device_check.sh                      # full sizes with a GPU, small without
    bash scripts/device_check.sh --size=small --output_dir=device_check

With `--size=full` (the default where `nvidia-smi` lists a GPU; meant to finish in under 8
minutes on one): `scripts/bench_saliency.py` and `scripts/bench_faithfulness.py` on
EfficientNet-Lite0 (ImageNet weights) and ResNet-50 (random weights) at 224 px, README command
1's main job, and `scripts/profile_card.py --pretrained=efficientnet_lite0 --nometa_evaluation`.
With `--size=small` (the default elsewhere) the same four phases at sizes a 2-core CPU does in
about a minute: the cheap plain CNN at 32 px, one image for the main job's MCS, and the
synthetic card on two images, one protocol and two methods. Every phase writes its own log and
JSON into --output_dir; the table (`device_check.md`, `device_check.json`) gives per phase the
wall time, the rates and their ratio to the ceiling each benchmark measures, the card's
efficiency (profile_card.py), and the GPU's mean and peak utilisation while it ran (from
`nvidia-smi`, sampled every second; "no nvidia-smi" without one). It needs TensorFlow with
its GPU libraries on the machine: `scripts/device_probe.py`, which needs none, says first whether
they are there.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Optional

from models.foundation import provenance, results
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.files import ensure_directory, write_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")
# phase -> size -> the command's arguments after `python` ({out}: the output folder)
PHASES = {
    "engine": {
        "full": [f"{SCRIPTS}/bench_saliency.py", "--models=efficientnet_lite0@224,resnet50@224",
                 "--num_images=256", "--heavy_images=64", "--pair_images=0", "--repeats=2",
                 "--batch_sizes=32,64,128", "--output_json={out}/engine.json"],
        # (batch 64, the engine's default chunk: one chunk size to trace, not two)
        "small": [f"{SCRIPTS}/bench_saliency.py", "--models=plain_cnn@32", "--num_images=64",
                  "--heavy_images=2", "--pair_images=0", "--repeats=1", "--batch_sizes=64",
                  "--output_json={out}/engine.json"]},
    "faithfulness": {
        "full": [f"{SCRIPTS}/bench_faithfulness.py", "--models=efficientnet_lite0,resnet50",
                 "--real_images=16", "--batch_size=64", "--repeats=2",
                 "--output_json={out}/faithfulness.json"],
        "small": [f"{SCRIPTS}/bench_faithfulness.py", "--models=8-16-32", "--images=1",
                  "--size=32", "--repeats=1", "--output_json={out}/faithfulness.json"]},
    "main job": {
        "full": ["-m", "bam.metrics", "--metrics=MCS,IDR,IIR", "--num_imgs=10", "--seed=0",
                 "--output={out}/bam_metrics.json"],
        "small": ["-m", "bam.metrics", "--metrics=MCS", "--num_imgs=1", "--seed=0",
                  "--methods=GC,VG", "--output={out}/bam_metrics.json"]},
    "real card": {
        "full": [f"{SCRIPTS}/profile_card.py", "--pretrained=efficientnet_lite0",
                 "--nometa_evaluation", "--output={out}/card_profile"],
        "small": [f"{SCRIPTS}/profile_card.py", "--nr_images=2", "--nometa_evaluation",
                  "--nosanity", "--methods=bam:GC,random", "--benchmarks=Deletion",
                  "--repeats=1", "--timing_seconds=0.2", "--output={out}/card_profile"]},
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    size: str = option("auto", "full (a GPU's sizes), small (a CPU's), or auto: full where "
                       "nvidia-smi lists a GPU.", ("auto", "full", "small"))
    output_dir: str = option("device_check", "Where the logs, the JSON files and the table go.")


def has_gpu() -> bool:
    """Does `nvidia-smi -L` list a GPU?"""
    if shutil.which("nvidia-smi") is None:
        return False
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return listed.returncode == 0 and "GPU" in listed.stdout


class Utilisation:
    """Samples the GPU's utilisation (percent) every second while a phase runs."""

    def __init__(self):
        self.samples: list = []
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def __enter__(self):
        if shutil.which("nvidia-smi") is not None:
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self):
        while not self.stop.wait(1.0):
            read = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                   "--format=csv,noheader,nounits"], capture_output=True,
                                  text=True, check=False)
            values = [float(v) for v in read.stdout.split() if v.replace(".", "").isdigit()]
            if values:
                self.samples.append(max(values))

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(5)

    def summary(self) -> str:
        if self.thread is None:
            return "no nvidia-smi"
        if not self.samples:
            return "no sample"
        return f"mean {sum(self.samples) / len(self.samples):.0f}%, peak {max(self.samples):.0f}%"


def run_phase(name: str, arguments: list, output_dir: str) -> dict:
    """Runs one phase as a process, its output in <output_dir>/<name>.log; {seconds, gpu}."""
    log = os.path.join(output_dir, name.replace(" ", "_") + ".log")
    command = [sys.executable, *(a.replace("{out}", output_dir) for a in arguments)]
    print(f"{time.strftime('%H:%M:%S')} {name}: {' '.join(command[1:])}", flush=True)
    with open(log, "w", encoding="utf-8") as handle, Utilisation() as gpu:
        started = time.perf_counter()
        done = subprocess.run(command, cwd=output_dir, stdout=handle, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"), check=False)
        seconds = time.perf_counter() - started
    if done.returncode:
        with open(log, encoding="utf-8") as handle:
            tail = handle.read()[-2000:]
        raise UserError(f"the {name} phase failed (exit {done.returncode}; {log}):\n{tail}")
    return {"seconds": seconds, "gpu": gpu.summary()}


def _read(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def measured_rows(output_dir: str) -> dict:
    """{phase: [what was measured, rate, ratio to its ceiling]} from the phases' JSON files."""
    found: dict = {name: [] for name in PHASES}
    for model in _read(os.path.join(output_dir, "engine.json"))["results"]:
        found["engine"] += [[f"{entry['model']}: {entry['method']}",
                             f"{entry['engine_images_per_s']:.1f} img/s",
                             f"{entry['ratio_to_ceiling']:.2f}"] for entry in model["rows"]]
    found["faithfulness"] = [[f"{entry['model']}: {entry['metric']}",
                              f"{entry['images_per_s']:.1f} img/s",
                              f"{entry['ratio_to_ceiling']:.2f}"]
                             for entry in _read(os.path.join(output_dir,
                                                             "faithfulness.json"))["rows"]]
    card = _read(os.path.join(output_dir, "card_profile.json"))
    found["real card"] = [[f"{len(card['cells'])} cells, {card['passes']['forward']} forwards, "
                           f"{card['passes']['gradient']} gradients",
                           f"{card['needed']:.1f} s of passes",
                           f"efficiency {card['efficiency']:.2f}"]]
    return found


def table_rows(phases: dict, output_dir: str) -> list:
    """[phase, wall s, what was measured, rate, ratio to its ceiling, GPU] rows: each phase's
    own row, then what it measured."""
    measured = measured_rows(output_dir)
    rows = []
    for name, phase in phases.items():
        rows.append([name, f"{phase['seconds']:.1f}", "the whole phase", "", "", phase["gpu"]])
        rows += [[name, "", *entry, ""] for entry in measured[name]]
    return rows


def run(config: Config) -> dict:
    size = config.size if config.size != "auto" else ("full" if has_gpu() else "small")
    output_dir = os.path.abspath(ensure_directory(config.output_dir))
    print(f"device check ({size} sizes) into {output_dir}: {provenance.machine()}", flush=True)
    phases = {name: run_phase(name, sizes[size], output_dir) for name, sizes in PHASES.items()}
    rows = table_rows(phases, output_dir)
    header = ["phase", "wall s", "measured", "rate", "ratio to ceiling", "GPU utilisation"]
    text = results.text_table(header, rows)
    print(text)
    report = {"date": time.strftime("%Y-%m-%d"), "size": size, "machine": provenance.machine(),
              "software": provenance.software(), "phases": phases, "rows": rows}
    write_json(os.path.join(output_dir, "device_check.json"), report, indent=1)
    results.write_text(os.path.join(output_dir, "device_check.md"),
                       f"Device check, {report['date']}, {size} sizes: {report['machine']}\n\n"
                       + results.markdown_table(header, rows) + "\n")
    print(f"wrote {output_dir}/device_check.md and .json")
    return report


if __name__ == "__main__":
    run_binary(Config, run)
