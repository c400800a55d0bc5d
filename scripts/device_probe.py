"""What an accelerator machine offers this project, read without TensorFlow (docs/saliency.md,
"On an accelerator"): the check to run first on a borrowed GPU machine, before
`scripts/device_check.sh`, which needs TensorFlow there.

    python scripts/device_probe.py --output_dir=device_probe

It reports (1) the environment: Python, whether TensorFlow imports and sees a GPU, the GPU and
driver from `nvidia-smi`, and the major versions of the CUDA libraries TensorFlow loads
(libcudart, libcublas, libcudnn: TensorFlow 2.21's GPU build needs CUDA 12 and cuDNN 9) found in
the library path and in Python's `nvidia` packages; and (2) with PyTorch, where it is installed,
the rates of the card's two networks' PyTorch twins (EfficientNet-Lite0 from timm, ResNet-50 from
torchvision; random weights, which do not change a pass's cost) at 224 px: forward passes and
input gradients a second, per batch size, in float32 and in bfloat16 autocast, on the GPU when
there is one (else the CPU, at the sizes given). From the fastest float32 rates it gives the
seconds the real network's card's passes would need there (`--card_forwards`,
`--card_gradients`: the counts `scripts/profile_card.py` reports; docs/report_card.md). It writes
`device_probe.json` and `device_probe.md` into --output_dir.
"""
import dataclasses
import glob
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import time
from typing import Any

from models.foundation import provenance, results
from models.foundation.cli import option, run_binary
from models.foundation.files import ensure_directory, write_json

# the libraries TensorFlow's GPU build opens, and the major version TensorFlow 2.21 needs
NEEDED = {"libcudart": "12", "libcublas": "12", "libcudnn": "9"}


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    output_dir: str = option("device_probe", "Where device_probe.json and .md go.")
    image_size: int = option(224, "Image side of the twins' inputs, pixels.")
    batch_sizes: str = option("32,128", "Comma-separated batch sizes to time.")
    seconds: float = option(1.0, "Timed seconds per rate, after two warm-up calls.")
    models: str = option("efficientnet_lite0,resnet50", "Comma-separated twins to time.")
    card_forwards: int = option(107568, "Forward passes of the real card (profile_card.py).")
    card_gradients: int = option(6496, "Input gradients of the real card (profile_card.py).")


def _command(arguments: list) -> str:
    """The command's stdout ("" when it is missing or fails)."""
    if shutil.which(arguments[0]) is None:
        return ""
    done = subprocess.run(arguments, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def library_majors() -> dict:
    """{library: sorted major versions found} for the CUDA libraries TensorFlow loads, from
    `ldconfig -p`, /usr/local/cuda*/ and the `nvidia` packages in Python's site-packages."""
    names = _command(["ldconfig", "-p"]).split()
    for folder in [*glob.glob("/usr/local/cuda*/lib*"),
                   *(os.path.join(p, "nvidia") for p in site.getsitepackages())]:
        names += glob.glob(os.path.join(folder, "**", "lib*.so.*"), recursive=True)
    return majors_of(names)


def majors_of(names: list) -> dict:
    """{library: sorted major versions} of the `NEEDED` libraries among file names or paths
    (`libcublas.so.12.9.1` -> libcublas 12; `libcublasLt.so.12` is another library)."""
    found: dict = {library: set() for library in NEEDED}
    for name in names:
        match = re.match(r"(lib[a-z]+)\.so\.(\d+)", os.path.basename(name))
        if match and match.group(1) in found:
            found[match.group(1)].add(match.group(2))
    return {library: sorted(majors, key=int) for library, majors in found.items()}


def tensorflow_state() -> str:
    """TensorFlow's version and the GPUs it sees, in a child process (its start-up stays out of
    this one's), or why it does not import."""
    code = ("import tensorflow as tf; print(tf.__version__, "
            "len(tf.config.list_physical_devices('GPU')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return f"does not import: {lines[-1] if lines else 'exit ' + str(done.returncode)}"
    version, gpus = done.stdout.split()[-2:]
    return f"{version}, {gpus} GPU(s) visible"


def environment() -> dict:
    """The machine as TensorFlow would meet it."""
    gpu = _command(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                    "--format=csv,noheader"])
    return {"python": platform.python_version(), "tensorflow": tensorflow_state(),
            "gpu": gpu or "no nvidia-smi GPU", "cuda_libraries": library_majors(),
            "tensorflow_needs": NEEDED, "cpu": f"{provenance.cpu_model()}, {os.cpu_count()} CPUs"}


def twin(name: str):
    """The PyTorch twin of one of the card's networks, random weights, in eval mode."""
    if name == "efficientnet_lite0":
        import timm

        return timm.create_model("efficientnet_lite0", pretrained=False)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None)
    raise ValueError(f"no twin named {name}")


def rate(step, images: int, seconds: float, synchronise) -> float:
    """Images a second of `step()` over at least `seconds`, after two warm-up calls."""
    for _ in range(2):
        step()
    synchronise()
    calls, started = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        synchronise()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return calls * images / elapsed


def twin_rates(config: Config) -> list:
    """[{model, batch, precision, forward, gradient}] images a second of each twin."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    synchronise = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for name in config.models.split(","):
        model = twin(name).to(device).eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        for batch in (int(b) for b in config.batch_sizes.split(",")):
            images = torch.rand(batch, 3, config.image_size, config.image_size, device=device)
            targets = torch.arange(batch, device=device) % 1000
            for precision, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
                def forward():
                    with torch.no_grad(), torch.autocast(device, dtype=dtype,
                                                         enabled=dtype is not None):
                        model(images)

                def gradient():
                    inputs = images.clone().requires_grad_(True)
                    with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
                        picked = model(inputs).gather(1, targets[:, None]).sum()
                    torch.autograd.grad(picked, inputs)

                rows.append({"model": name, "device": device, "batch": batch,
                             "precision": precision,
                             "forward": rate(forward, batch, config.seconds, synchronise),
                             "gradient": rate(gradient, batch, config.seconds, synchronise)})
                print(f"{name} batch {batch} {precision}: {rows[-1]['forward']:.0f} forwards/s, "
                      f"{rows[-1]['gradient']:.0f} gradients/s", flush=True)
    return rows


def card_seconds(rows: list, config: Config) -> dict:
    """Seconds the real card's passes would need at Lite0's twin's fastest float32 rates."""
    lite = [r for r in rows if r["model"] == "efficientnet_lite0" and r["precision"] == "float32"]
    if not lite:
        return {}
    forward = max(r["forward"] for r in lite)
    gradient = max(r["gradient"] for r in lite)
    return {"forwards": config.card_forwards, "gradients": config.card_gradients,
            "seconds": config.card_forwards / forward + config.card_gradients / gradient}


def run(config: Config) -> dict:
    output_dir = os.path.abspath(ensure_directory(config.output_dir))
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "environment": environment()}
    try:
        import torch  # noqa: F401

        report["twins"] = twin_rates(config)
        report["card_passes"] = card_seconds(report["twins"], config)
    except ImportError as missing:
        report["twins"], report["card_passes"] = [], {}
        print(f"no twin rates: {missing}")
    header = ["model", "device", "batch", "precision", "forwards/s", "gradients/s"]
    rows = [[r["model"], r["device"], r["batch"], r["precision"], f"{r['forward']:.0f}",
             f"{r['gradient']:.0f}"] for r in report["twins"]]
    found = report["environment"]
    facts = [["Python", found["python"]], ["TensorFlow", found["tensorflow"]],
             ["GPU, driver, memory", found["gpu"]], ["CPU", found["cpu"]],
             *([f"{library} majors (TensorFlow needs {NEEDED[library]})",
                ", ".join(majors) or "none"]
               for library, majors in found["cuda_libraries"].items())]
    lines = [f"Device probe, {report['date']}", "", results.markdown_table(["", "found"], facts),
             "", results.markdown_table(header, rows)]
    if report["card_passes"]:
        lines.append(f"\nThe real card's {config.card_forwards} forwards and "
                     f"{config.card_gradients} gradients at these float32 rates: "
                     f"{report['card_passes']['seconds']:.1f} s")
    write_json(os.path.join(output_dir, "device_probe.json"), report, indent=1)
    results.write_text(os.path.join(output_dir, "device_probe.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    run_binary(Config, run)
