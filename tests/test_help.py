"""Every binary answers --help with its own flags and their defaults, exits 0, and does so in
under 3 s of CPU time: binaries import nothing heavy at their top level, so the help comes from
the real `Config` before TensorFlow loads (models.foundation.cli.run_binary); and importing a
package or a binary has no side effect."""
import dataclasses
import importlib
import os
import resource
import subprocess
import sys
import time

import pytest

from models.foundation import cli, rules
from tests import REPO

PACKAGES = ("bam", "roar", "faithfulness", "saliency_gen", "models", "scripts")


def main_calls(dotted: str) -> list:
    """What a binary's `__main__` block may be: `run_binary(Config, run)`, or for a Beam
    binary the same run from its importable module (`saliency_gen.beam_support.main`, so that
    Beam pickles its DoFns by name: docs/scale_out.md, "Dask")."""
    return ["run_binary(Config, run)", f"beam_support.main({dotted!r})"]


def _binaries():
    """Dotted names of the modules that end in one of their `main_calls`."""
    found = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            for name in sorted(files):
                path = os.path.join(folder, name)
                if not name.endswith(".py") or path.endswith(
                        os.path.join("models", "foundation", "cli.py")):
                    continue
                dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                if any(call in text or call.replace("'", '"') in text
                       for call in main_calls(dotted)):
                    found.append(dotted)
    return sorted(found)


BINARIES = _binaries()


def test_every_binary_is_found():
    assert len(BINARIES) >= 30 and "bam.metrics" in BINARIES and "roar.road" in BINARIES


def _timed(command: list) -> tuple:
    """(the finished process, the CPU seconds it and its children spent, the wall seconds).
    The CPU time is what --help costs on an idle machine; the wall time on a loaded one also
    holds the other test worker's load (stop 76's CI: 3.1 s for a --help of 0.4 s here)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    wall_seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu_seconds, wall_seconds


@pytest.mark.parametrize("module", BINARIES)
def test_help_lists_the_binarys_own_flags_with_their_defaults(module):
    done, cpu_seconds, wall_seconds = _timed([sys.executable, "-m", module, "--help"])
    assert done.returncode == 0, done.stderr
    assert cpu_seconds < 3, f"--help took {cpu_seconds:.1f} s of CPU"
    assert wall_seconds < 15, f"--help took {wall_seconds:.1f} s"
    assert done.stdout.startswith(f"usage: python -m {module}") and not done.stderr
    config = importlib.import_module(module).Config
    lines = done.stdout.splitlines()
    for field in dataclasses.fields(config):  # the real defaults, help texts and rules
        flag_line = f"  --{field.name} [{cli.flag_text(field.default)}]"
        assert flag_line in lines, field.name
        for rule in rules.rules_of(field):  # and each rule the option declares
            assert rule.text in lines[lines.index(flag_line) + 1], field.name
    assert "--verbosity" not in done.stdout  # absl's own flags stay in --helpfull


IMPORT_EVERY_BINARY = """
import os, sys
OWN = ("bam", "roar", "faithfulness", "saliency_gen", "models", "scripts")
def own_hooks():  # (libraries such as absl and six add import hooks of their own)
    return [hook for hook in sys.meta_path if type(hook).__module__.startswith(OWN)]
before = (dict(os.environ), own_hooks(), list(sys.argv))
sys.argv[1:] = ["--help"]  # a module that answered it on import would exit here
import bam, roar, faithfulness, saliency_gen, models
import models.foundation.errors, models.foundation.rules, models.foundation.files
import models.foundation.provenance, models.training.recipes, models.report.uncertainty
import models.report.reliability, models.report.meta_evaluation, models.report.card_engine
import models.report.pages
for module in %r:
    __import__(module)
after = (dict(os.environ), own_hooks(), list(sys.argv))
heavy = ("tensorflow", "keras", "torch", "scipy.stats", "scipy.ndimage")  # scipy: 1.6 s
print(sorted(name for name in heavy if name in sys.modules))
print(before[0] == after[0], before[1] == after[1], after[2][1:])
"""


def test_importing_any_package_or_binary_loads_nothing_heavy_and_changes_nothing():
    # (nor do the foundation's light modules: errors, rules, files, provenance, recipes and the
    # report's statistics and pages)
    done = subprocess.run([sys.executable, "-c", IMPORT_EVERY_BINARY % (BINARIES,)],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # no TensorFlow (nor scipy's statistics and filters), no environment variable, no import
    # hook; argv read by nobody
    assert done.stdout.splitlines() == ["[]", "True True ['--help']"], done.stdout


def test_a_missing_optional_part_is_one_line_naming_its_extra(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.require("apache_beam_not_installed_here", "scale")
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "error: apache_beam_not_installed_here is not installed; it comes with this project's "
        "'scale' extra: pip install -e '.[scale]'\n")


def test_an_unknown_flag_or_an_unreadable_value_is_one_line_and_status_2():
    # absl's own parser prints "FATAL Flags parsing error" and exits with 1
    for argument, expected in (
            ("--num_img=3", "unknown flag --num_img; did you mean --num_imgs?"),
            ("--num_imgs=ten", "flag --num_imgs=ten: invalid literal for int() with base 10: "
                               "'ten'")):
        done = subprocess.run([sys.executable, "-m", "bam.metrics", argument], check=False,
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == f"error: {expected} (--help lists the flags)\n"
