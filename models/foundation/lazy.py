"""Packages whose names load on first use (docs/architecture.md, "Light imports"): importing a
package, or a light module of it, then loads no TensorFlow; `package.name` imports the module
that defines `name` (or the submodule `package.name`) the first time it is asked for."""
import importlib
import sys
import types
from typing import Any, Callable, Mapping


def lazy_names(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: each name of `exports` (name -> defining module)
    and each submodule, imported on first use and then kept in the package's namespace."""

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        elif not name.startswith("__"):
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


class _ModuleOnFirstUse(types.ModuleType):
    """Stands for the module of the same name: reading (or setting) an attribute imports it, if
    it is not yet imported, and forwards to it. The import system's own locks make the first use
    safe from any thread."""

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self.__name__), attribute)

    def __setattr__(self, attribute: str, value) -> None:
        setattr(importlib.import_module(self.__name__), attribute, value)

    def __delattr__(self, attribute: str) -> None:
        delattr(importlib.import_module(self.__name__), attribute)

    def __reduce__(self):  # pickled by name (Beam pickles a binary's DoFn with its globals)
        return lazy_module, (self.__name__,)


def lazy_module(name: str) -> types.ModuleType:
    """The module `name`, imported on the first use of one of its attributes instead of now: a
    binary takes its heavy modules this way, so that its flags are checked, and a bad one
    reported, before TensorFlow loads (docs/architecture.md, "Light imports")."""
    return sys.modules.get(name) or _ModuleOnFirstUse(name)
