"""Measures what the report card's trust section costs: the default card on the synthetic world
with and without its meta-evaluation, each from no cells (issue 31's budget: with the trust
section on, at most 1.5 times the card without it).

    python scripts/measure_card_cost.py                  # both runs, one after the other
    python scripts/measure_card_cost.py --settings=default

Both runs share one temporary project cache (XDG_CACHE_HOME), prepared first by a card of one
image that is thrown away (the synthetic world and its shipped models), so each measured run
starts with a warm world and no card cell, as a user's second card with other settings would.
Each card shows its own progress and ETA on stderr as it runs. Prints the seconds of each run,
their ratio to the first and the CPU (docs/report_card.md quotes them).
"""
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time

from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.rules import some_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARD = os.path.join(REPO, "scripts", "report_card.py")
# name -> the card's flags (besides --output_dir)
SETTINGS = {"no_meta_evaluation": ["--nometa_evaluation"],
            "default": []}


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    settings: tuple = option(tuple(SETTINGS), "Which cards to time, in order (the first is "
                             "the reference of the ratios).",
                             rule=some_of(tuple(SETTINGS), "setting"))


def timed_card(flags: list, output_dir: str, env: dict) -> float:
    """Seconds of one card run, its progress (with its ETA) and messages passed through on
    stderr, its tables not shown; stops with one line on failure (the card's own error line is
    just above it)."""
    started = time.time()
    done = subprocess.run([sys.executable, CARD, f"--output_dir={output_dir}", *flags], env=env,
                          cwd=REPO, stdout=subprocess.DEVNULL, check=False)
    if done.returncode:
        raise UserError(f"the card with {flags or 'its defaults'} failed (exit "
                        f"{done.returncode}; its messages are above)")
    return time.time() - started


def run(config: Config) -> dict:
    """{setting: seconds} of each card, printed with the ratios and the CPU."""
    work = tempfile.mkdtemp(prefix="card-cost-")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
    times = {}
    try:
        print("preparing the synthetic world (a one-image card, not measured) ...", flush=True)
        timed_card(["--nr_images=1", "--num_imgs=1", "--benchmarks=Deletion", "--nosanity",
                    "--gallery_images=0", "--nometa_evaluation", "--methods=random"],
                   os.path.join(work, "prepare"), env)
        for name in config.settings:
            print(f"{name} ...", flush=True)
            times[name] = timed_card(SETTINGS[name], os.path.join(work, name), env)
            print(f"  {times[name]:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = times[config.settings[0]]
    print(f"\n{'card':<24}{'seconds':>9}{'ratio':>8}   ({provenance.cpu_model()}, "
          f"{os.cpu_count()} CPUs)")
    for name, seconds in times.items():
        print(f"{name:<24}{seconds:>9.1f}{seconds / first:>8.2f}")
    return times


if __name__ == "__main__":
    run_binary(Config, run)
