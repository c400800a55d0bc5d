"""Measures README command 1 as a newcomer meets it: install, cold run, warm run.

    python scripts/measure_first_run.py                 # install into a fresh venv, then run
    python scripts/measure_first_run.py --install=False # this environment, runs only
    python scripts/measure_first_run.py --install=False --job=roar_train   # README's ROAR line
    python scripts/measure_first_run.py --install=False --job=notebook     # the quickstart

With --install, makes a fresh virtual environment in a temporary folder and times
`pip install -e <repo>` into it (pip's own download cache is used as on any machine). Then runs
the main job exactly as README command 1 prints it (what follows its last `&&`), twice in an
empty temporary project cache (XDG_CACHE_HOME): cold (the world is built, the shipped models and
delta patch are installed, the maps computed) and warm (all reused). Every line the job prints
is stamped with the seconds since its start, which is the profile of where the time goes.
Prints a table of the times and the CPU (docs/synthetic_world.md and the README quote it).
`--job` measures another first run the docs quote the same way: `python -m roar.train
--ratio=0.5` on the synthetic world (README, docs/roar.md) or the quickstart notebook executed
top to bottom (docs/quickstart.ipynb).
"""
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PHASES = ("built the synthetic world", "loaded the shipped", "trained ", "delta patch", "wrote ",
          "ROAR run", "top-1", "executed",
          "wrote bam_metrics")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    install: bool = option(True, 'Time `pip install -e` of the repository into a fresh venv '
                           'and run the job with it (else: this Python).')
    job: str = option("main", "The job: main (README command 1), roar_train (python -m "
                      "roar.train --ratio=0.5) or notebook (docs/quickstart.ipynb).",
                      ("main", "roar_train", "notebook"))


def readme_main_job() -> list:
    """The arguments after `python` of README command 1's main job (what follows its last
    `&&`)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        found = re.search(r"```bash\n(.*?)\n```", handle.read(), re.S)
    if found is None:
        raise UserError("README.md has no ```bash block: its command 1 is missing")
    first = found.group(1)
    arguments = shlex.split(first.split("&&")[-1])
    if arguments[:3] != ["python", "-m", "bam.metrics"]:
        sys.exit(f"error: README command 1 does not end in python -m bam.metrics: {arguments}")
    return arguments[1:]


NOTEBOOK = ("import nbclient, nbformat, sys; notebook = nbformat.read(sys.argv[1], as_version=4); "
            "nbclient.NotebookClient(notebook, timeout=3600, kernel_name='python3').execute(); "
            "print('executed', sys.argv[1])")


def job_arguments(job: str) -> list:
    """The arguments after `python` of the measured job."""
    if job == "roar_train":
        return ["-m", "roar.train", "--ratio=0.5"]
    if job == "notebook":
        return ["-c", NOTEBOOK, os.path.join(REPO, "docs", "quickstart.ipynb")]
    return readme_main_job()


def timed(command: list, env: dict, cwd: str, echo: bool) -> tuple:
    """(seconds, [(seconds since start, line)]) of `command`; stops on failure."""
    started = time.time()
    stamped = []
    with subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout or ():
            line = line.rstrip().split("\r")[-1]
            stamped.append((time.time() - started, line))
            if echo and any(line.startswith(phase) for phase in PHASES):
                print(f"  {stamped[-1][0]:7.1f} s  {line}", flush=True)
    if process.returncode:
        sys.exit(f"error: {' '.join(command)} failed:\n" +
                 "\n".join(line for _, line in stamped[-20:]))
    return time.time() - started, stamped


def run(config: Config) -> dict:
    work = tempfile.mkdtemp(prefix="first-run-")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
    python = sys.executable
    times = {}
    try:
        if config.install:
            venv = os.path.join(work, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            python = os.path.join(venv, "bin", "python")
            print("pip install -e . ...", flush=True)
            times["install"], _ = timed([python, "-m", "pip", "install", "-q", "-e", REPO], env,
                                        work, echo=False)
        for run_name in ("cold", "warm"):
            print(f"{run_name} run:", flush=True)
            times[run_name], lines = timed([python, *job_arguments(config.job)], env, work,
                                           echo=True)
        table = [line for _, line in lines]
        if config.job == "main":
            print("\n".join(table[next(i for i, line in enumerate(table)
                                       if line.startswith("metric ")):-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{config.job}: {time.strftime('%Y-%m-%d')}")
    print(f"{'step':<32}{'seconds':>9}   ({provenance.cpu_model()}, {os.cpu_count()} CPUs)")
    for name, seconds in times.items():
        print(f"{name:<32}{seconds:>9.1f}")
    if config.install:
        print(f"{'README command 1, first time':<32}{times['install'] + times['cold']:>9.1f}")
    return times


if __name__ == "__main__":
    run_binary(Config, run)
