"""The package structure: the benchmarks are siblings on top of saliency_gen and models.

Parses every module's imports (function-local and deferred ones included: `lazy_module`,
`importlib.import_module` with a constant name, `_EXPORTS` tables) and checks the rules of
docs/architecture.md ("Layers"): no module of bam/, roar/ or faithfulness/ imports another of
those three packages; saliency_gen imports only models, and its two parts (attribution, data)
never import each other; models imports no other package of the project, and inside it each
part (foundation, report, architectures, formats, training) imports only the parts below it; no
project import hides inside a function; and the module import graph has no cycle (but the one
declared in `ALLOWED_DEFERRED`, with its reason).
"""
import ast
import os

from tests import REPO

PACKAGES = ("models", "saliency_gen", "bam", "roar", "faithfulness")
ALLOWED = {  # package -> project packages it may import (besides itself)
    "models": set(),
    "saliency_gen": {"models"},
    "bam": {"models", "saliency_gen"},
    "roar": {"models", "saliency_gen"},
    "faithfulness": {"models", "saliency_gen"},
}


def _modules():
    """{dotted module name: path} of every module of the project's packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                    found[dotted[:-len(".__init__")] if dotted.endswith(".__init__")
                          else dotted] = path
    return found


MODULES = _modules()


def _deferred_imports(node) -> list:
    """The modules `node` imports on first use: a call `lazy_module("dotted.name")` or
    `importlib.import_module("dotted.name")` (a constant name), or the module names of a lazily
    exported names table (`_EXPORTS = {name: "dotted.module"}`)."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
            getattr(node.func, "id", getattr(node.func, "attr", None)) in ("lazy_module",
                                                                            "import_module"):
        return [node.args[0].value]
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
            getattr(target, "id", None) == "_EXPORTS" for target in node.targets):
        return sorted({value.value for value in node.value.values
                       if isinstance(value, ast.Constant) and isinstance(value.value, str)})
    return []


# The one deferred import allowed inside a function, and so the one cycle: the built-in method
# units register themselves into the registry of `units` when their package is imported, and
# `units.registered()` imports that package on first use, so that importing `units` (and
# `saliency_gen`) loads no method module and no TensorFlow (docs/architecture.md, "Layers").
ALLOWED_DEFERRED = {("saliency_gen.attribution.units", "saliency_gen.attribution.methods")}


def _imports(path, module):
    """[(imported module, line, inside a function)] of the project modules `module` imports,
    deferred ones (`lazy_module`) included."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = []

    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - child.level + 1]
                                    + ([base] if base else []))
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                         for alias in child.names]
            elif deferred := _deferred_imports(child):  # lazy_module, import_module, _EXPORTS
                names = deferred
            else:
                visit(child, inner)
                continue
            for name in names:
                while name and name not in MODULES:
                    name = name.rpartition(".")[0]
                if name:
                    found.append((name, child.lineno, local))
        return found

    return visit(tree, False)


GRAPH = {module: _imports(path, module) for module, path in MODULES.items()}


def test_packages_import_only_the_layers_below_them():
    violations = []
    for module, imports in GRAPH.items():
        package = module.split(".")[0]
        for imported, line, _ in imports:
            other = imported.split(".")[0]
            if other != package and other not in ALLOWED[package]:
                violations.append(f"{MODULES[module]}:{line} imports {imported}")
    assert not violations, "\n".join(violations)


# Inside models/: each part -> the parts it may import (besides itself); the package's own
# __init__ (its lazily exported names) may name any of them.
MODEL_PARTS = {
    "foundation": set(),
    "report": {"foundation"},
    "architectures": {"foundation"},
    "formats": {"foundation", "architectures"},
    "training": {"foundation", "architectures", "formats"},
}


def test_models_parts_import_only_the_parts_below_them():
    assert {module.split(".")[1] for module in MODULES
            if module.startswith("models.")} == set(MODEL_PARTS)  # no module outside a part
    violations = []
    for module, imports in GRAPH.items():
        if not module.startswith("models."):
            continue
        part = module.split(".")[1]
        for imported, line, _ in imports:
            other = imported.split(".")[1] if imported.startswith("models.") else None
            if other and other != part and other not in MODEL_PARTS[part]:
                violations.append(f"{MODULES[module]}:{line} imports {imported}")
    assert not violations, "\n".join(violations)


# Inside saliency_gen/: attribution and data never import each other; the package's own modules
# (the binaries, the Beam runtime, the lazily exported names) stand on both.
SALIENCY_PARTS = ("saliency_gen.attribution", "saliency_gen.data")


def _part(module: str):
    return next((part for part in SALIENCY_PARTS
                 if module == part or module.startswith(part + ".")), None)


def test_saliency_gen_attribution_and_data_never_import_each_other():
    violations = []
    for module, imports in GRAPH.items():
        part = _part(module)
        for imported, line, _ in imports:
            if part and imported.startswith("saliency_gen") and _part(imported) != part:
                violations.append(f"{MODULES[module]}:{line} imports {imported}")
    assert not violations, "\n".join(violations)
    assert {_part(module) for module in MODULES if module.startswith("saliency_gen.")} == \
        {*SALIENCY_PARTS, None}


def test_no_project_import_hides_inside_a_function():
    local = [f"{MODULES[module]}:{line} imports {imported} inside a function"
             for module, imports in GRAPH.items() for imported, line, inside in imports
             if inside and (module, imported) not in ALLOWED_DEFERRED]
    assert not local, "\n".join(local)


def _cycles(graph):
    """Every import cycle found by a depth-first walk of {module: [imported, ...]}."""
    state, stack, cycles = {}, [], []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for imported in graph.get(module, ()):
            if imported == module:
                continue
            if state.get(imported) == "open":
                cycles.append(" -> ".join(stack[stack.index(imported):] + [imported]))
            elif imported not in state:
                visit(imported)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def test_the_module_graph_has_no_cycle():
    cycles = _cycles({module: [name for name, _, _ in imports
                               if (module, name) not in ALLOWED_DEFERRED]
                      for module, imports in GRAPH.items()})
    assert not cycles, "\n".join(cycles)


def test_the_checks_catch_what_they_forbid(tmp_path):
    """Each check sees its kind of violation (so the tests above can fail)."""
    path = tmp_path / "probe.py"
    path.write_text("from roar import masked_data\n\n\ndef f():\n"
                    "    from models.architectures import zoo\n"
                    "\n\nrmcs = lazy_module('bam.rmcs')\n"
                    "_EXPORTS = {'run': 'roar.road', 'x': 'bam.train'}\n\n\ndef g():\n"
                    "    importlib.import_module('saliency_gen.data.records')\n")
    assert _imports(str(path), "faithfulness.probe") == [
        ("roar.masked_data", 1, False), ("models.architectures.zoo", 5, True),
        ("bam.rmcs", 8, False), ("bam.train", 9, False), ("roar.road", 9, False),
        ("saliency_gen.data.records", 13, True)]
    assert _part("saliency_gen.data.world.cache") == "saliency_gen.data"
    assert _part("saliency_gen.generate") is None
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a -> b -> c -> a"]
