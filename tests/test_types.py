"""The packages' type annotations hold: mypy (settings in setup.cfg, no cache written, every
function body checked) finds no error in models, saliency_gen, bam, roar, faithfulness and the
scripts; every public function of the packages
annotated so far has full type hints; the lazily loaded names that models/ and bam/ export are
the names their type-checking imports declare."""
import ast
import os
import subprocess
import sys

import pytest

from tests import REPO

PACKAGES = ("models", "saliency_gen", "bam", "roar", "faithfulness")
FULLY_ANNOTATED = PACKAGES


def _unannotated(path):
    """["name: what lacks a hint"] of the public functions and methods of a module."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    found = []

    def visit(node, owner=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                visit(child, f"{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    not child.name.startswith("_") or child.name == "__init__"):
                arguments = child.args.posonlyargs + child.args.args + child.args.kwonlyargs
                lacking = [a.arg for i, a in enumerate(arguments) if a.annotation is None
                           and not (i == 0 and owner and a.arg in ("self", "cls"))]
                lacking += [f"*{a.arg}" for a in (child.args.vararg, child.args.kwarg)
                            if a is not None and a.annotation is None]
                if child.returns is None and child.name != "__init__":
                    lacking.append("return")
                if lacking:
                    found.append(f"{owner}{child.name}: {', '.join(lacking)}")

    visit(tree)
    return found


def test_mypy_finds_no_error_in_the_packages_and_scripts():
    done = subprocess.run([sys.executable, "-m", "mypy", *PACKAGES, "scripts"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found in ")


@pytest.mark.parametrize("package", FULLY_ANNOTATED)
def test_every_public_function_has_full_type_hints(package):
    missing = {}
    for folder, _, names in os.walk(os.path.join(REPO, package)):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                missing.update({f"{os.path.relpath(path, REPO)}: {entry}": None
                                for entry in _unannotated(path)})
    assert not missing, list(missing)


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
