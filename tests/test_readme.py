"""The README starts with exactly two set-up commands, and CI runs exactly the second one."""
import os
import re

import numpy as np

from tests import REPO


def _read(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as handle:
        return handle.read()


def _code_blocks(text):
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def test_readme_starts_with_two_setup_commands_and_ci_runs_the_second():
    readme = _read("README.md")
    before_sections = readme.split("\n## ", 1)[0]
    blocks = [code.strip() for language, code in _code_blocks(before_sections)]
    assert len(blocks) == 2 and all("\n" not in block for block in blocks)
    install_and_run, install_and_test = blocks
    assert "pip install -e ." in install_and_run
    assert "python -m bam.metrics" in install_and_run
    assert 'pip install -e ".[test]"' in install_and_test and "pytest" in install_and_test
    ci_commands = [line for line in _read(".ci", "run").splitlines()
                   if line.strip() and not line.startswith("#")]
    assert install_and_test in ci_commands


def test_readme_notebook_snippet_runs(tmp_path, monkeypatch):
    readme = _read("README.md")
    snippet = next(code for language, code in _code_blocks(readme)
                   if language == "python" and "models.load" in code)
    snippet = snippet.replace("/tmp/small_cnn", str(tmp_path / "small_cnn"))
    namespace = {}
    exec(compile(snippet, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    gradient = namespace["gradient"].numpy()
    assert gradient.shape == (4, 64, 64, 3) and np.abs(gradient).max() > 0
    assert namespace["features"].shape == (4, 16, 16, 64)
