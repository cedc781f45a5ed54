"""Every public name of the library says what it is: a docstring (inherited ones count, as in
``help()``), and every public function of the core has a return annotation."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import glassformer

MODULES = sorted(m.name for m in pkgutil.walk_packages(glassformer.__path__, "glassformer.")
                 if ".commands." not in m.name and not m.name.endswith("__main__"))
CORE = ("glassformer.nn", "glassformer.models", "glassformer.generation", "glassformer.config")


def _public(module):
    """(qualified name, object) for the classes, functions and methods defined in ``module``."""
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            yield name, obj
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__call__":
                    continue
                if inspect.isfunction(member) or isinstance(member, (property, classmethod, staticmethod)):
                    yield f"{name}.{attr}", getattr(obj, attr)
        elif inspect.isfunction(obj):
            yield name, obj


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_has_a_docstring(module_name):
    module = importlib.import_module(module_name)
    assert inspect.getdoc(module), f"{module_name} has no module docstring"
    missing = [name for name, obj in _public(module) if not inspect.getdoc(obj)]
    assert missing == [], f"{module_name}: no docstring on {missing}"


@pytest.mark.parametrize("module_name", [m for m in MODULES if m.startswith(CORE)])
def test_core_functions_have_return_annotations(module_name):
    module = importlib.import_module(module_name)
    missing = []
    for name, obj in _public(module):
        function = obj.fget if isinstance(obj, property) else obj
        if inspect.isfunction(function) and not name.endswith("__init__") and \
                "return" not in function.__annotations__:
            missing.append(name)
    assert missing == [], f"{module_name}: no return annotation on {missing}"
