"""The packages' type annotations hold: mypy (settings in setup.cfg, no cache written) finds no
error in models, saliency_gen, bam, roar and faithfulness; the lazily loaded names that
models/ and bam/ export are the names their type-checking imports declare."""
import ast
import os
import subprocess
import sys

import pytest

from tests import REPO

PACKAGES = ("models", "saliency_gen", "bam", "roar", "faithfulness")


def test_mypy_finds_no_error_in_the_packages():
    done = subprocess.run([sys.executable, "-m", "mypy", *PACKAGES], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found in ")


@pytest.mark.parametrize("package", ["models", "bam"])
def test_the_type_checkers_names_are_the_lazy_exports(package):
    with open(os.path.join(REPO, package, "__init__.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    exports = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                   and getattr(node.targets[0], "id", None) == "_EXPORTS")
    declared = {ast.literal_eval(key): ast.literal_eval(value)
                for key, value in zip(exports.keys, exports.values)}
    checking = next(node for node in tree.body if isinstance(node, ast.If)
                    and getattr(node.test, "id", None) == "TYPE_CHECKING")
    imported = {alias.name: node.module for node in checking.body
                for alias in node.names}
    assert imported == declared
