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


def test_readme_user_method_example_is_shipped_and_is_gradient_times_input(monkeypatch):
    import keras

    import models
    import saliency_gen

    commands = re.findall(r"PYTHONPATH=(\S+) python \S+ --methods=(\S+)", _read("README.md"))
    assert commands
    for folder, methods in commands:
        monkeypatch.syspath_prepend(os.path.join(REPO, folder))
        user = [name for name in methods.split(",") if ":" in name and "bam:" not in name]
        assert user == ["my_methods:gradient_times_input"]
    keras.utils.set_random_seed(0)
    model = models.build("small_cnn", 10, (16, 16, 3), width=4)
    images = np.random.RandomState(0).rand(3, 16, 16, 3).astype("float32")
    targets = np.array([0, 4, 9])
    mine = saliency_gen.attribute(model, images, "my_methods:gradient_times_input", targets=targets)
    builtin = saliency_gen.attribute(model, images, "grad_x_input", targets=targets)
    assert np.abs(mine).max() > 0
    np.testing.assert_allclose(mine, builtin, rtol=1e-5, atol=1e-7)

