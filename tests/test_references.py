"""Every reference resolves inside the repository: code cites the project's docs by section (and
the section exists), never a file outside the repository; every binary follows the one
command-line convention; every package exports its documented API."""
import ast
import dataclasses
import glob
import importlib
import os
import re

import pytest

from tests import REPO
from tests.test_help import main_calls

PACKAGES = ("models", "saliency_gen", "bam", "roar", "faithfulness")
BINARIES = ("saliency_gen.generate", "bam.metrics", "bam.train", "bam.run_tcav", "roar.train",
            "roar.road", "roar.sweep", "roar.report", "faithfulness.evaluate",
            "faithfulness.finetune", "saliency_gen.beam_generate", "faithfulness.beam_scoring",
            "roar.beam_road")
CITATION = re.compile(r'docs/(\w+)\.md,\s*"([^"]+)"')


def _sources():
    paths = [path for package in PACKAGES + ("scripts", "tests")
             for path in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)]
    return {path: open(path, encoding="utf-8").read() for path in paths}


def _headings(name):
    text = open(os.path.join(REPO, "docs", f"{name}.md"), encoding="utf-8").read()
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def test_code_cites_existing_sections_of_the_projects_docs():
    missing, count = [], 0
    for path, text in _sources().items():
        for name, section in CITATION.findall(re.sub(r"\s*\n\s*#?\s*", " ", text)):
            count += 1
            if not os.path.isfile(os.path.join(REPO, "docs", f"{name}.md")):
                missing.append(f"{path}: docs/{name}.md does not exist")
            elif not any(heading.startswith(section) for heading in _headings(name)):
                missing.append(f"{path}: docs/{name}.md has no section {section!r}")
    assert count > 40 and not missing, "\n".join(missing)


def test_no_reference_points_outside_the_repository():
    outside = re.compile(r"\.\./shared|specs/|§|\b(?<!docs/)(bam|roar|faithfulness|"
                         r"saliency_methods)\.md\b")
    found = [f"{path}:{number}: {line.strip()}" for path, text in _sources().items()
             if path != __file__
             for number, line in enumerate(text.splitlines(), 1) if outside.search(line)]
    for doc in glob.glob(os.path.join(REPO, "docs", "*.md")) + [os.path.join(REPO, "README.md")]:
        for number, line in enumerate(open(doc, encoding="utf-8"), 1):
            if re.search(r"\.\./shared|specs/|§", line):
                found.append(f"{doc}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", BINARIES)
def test_every_binary_parses_flags_into_a_config_and_calls_run(name):
    module = importlib.import_module(name)
    assert dataclasses.is_dataclass(module.Config) and callable(module.run)
    fields = dataclasses.fields(module.Config)
    assert fields and all(field.metadata.get("help") for field in fields), name
    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    main_block = [node for node in tree.body if isinstance(node, ast.If)
                  and "__main__" in ast.unparse(node.test)]
    assert [ast.unparse(statement) for statement in main_block[0].body] in [
        [call] for call in main_calls(name)], name
    assert not any(isinstance(node, ast.FunctionDef) and node.name == "main"
                   for node in tree.body), name


def test_scripts_do_not_edit_sys_path():
    for path in glob.glob(os.path.join(REPO, "scripts", "*.py")):
        assert "sys.path" not in open(path, encoding="utf-8").read(), path


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_export_their_public_api(package):
    module = importlib.import_module(package)
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)
    assert module.__doc__ and "docs/" in module.__doc__ or package in ("models", "saliency_gen")


def test_documented_entry_points_exist():
    import bam
    import faithfulness
    import roar
    import saliency_gen

    assert callable(roar.noisy_linear_impute) and callable(saliency_gen.register_method)
    assert callable(bam.score_pair) and callable(faithfulness.single_deletion)
