"""tests/binaries.py, the warm runner of the suite's binaries, gives what `subprocess.run` gives:
the same exit status (from `sys.exit`, a raised exception or a normal end), stdout, stderr,
environment, folder and arguments; and a command it cannot fork runs as a plain subprocess."""
import os
import subprocess
import sys

from tests import binaries

SCRIPT = """import os, sys
import tests
print("argv", sys.argv[1:], "cwd", os.getcwd(), "cache", os.environ.get("XDG_CACHE_HOME"))
print("to stderr", file=sys.stderr)
if sys.argv[1] == "raise":
    raise ValueError("raised")
sys.exit(int(sys.argv[1]))
"""


def test_the_warm_child_ends_as_a_fresh_process_would(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
                   "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    for argument in ("0", "3", "raise"):
        command = [sys.executable, str(script), argument]
        warm = binaries.run(command, cwd=tmp_path, env=environment)
        fresh = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True,
                               text=True, check=False)
        assert (warm.returncode, warm.stdout) == (fresh.returncode, fresh.stdout)
        assert warm.stderr.splitlines()[0] == fresh.stderr.splitlines()[0] == "to stderr"
        assert warm.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert warm.returncode == 1 and warm.stderr.splitlines()[-1] == "ValueError: raised"
    assert f"cwd {tmp_path} cache {tmp_path / 'cache'}" in warm.stdout


def test_a_start_up_variable_or_another_interpreter_is_not_forked():
    assert binaries._forkable([sys.executable, "-m", "roar.train"], dict(os.environ))
    assert not binaries._forkable([sys.executable, "-m", "roar.train"],
                                  {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert not binaries._forkable([sys.executable, "-c", "print(1)"], dict(os.environ))
    assert not binaries._forkable(["python2", "-m", "roar.train"], dict(os.environ))
