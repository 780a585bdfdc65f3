"""The type stubs (.pyi) shipped beside each module say what the module really exports, so they cannot
drift: every public name of the runtime module is in its stub and every name in the stub exists at
run time, and the same for the members of each class the stub declares. The stubs read are the ones
installed with the package (beside module.__file__)."""
import ast
import importlib
import inspect
import os
import types

import pytest

MODULES = ["ridge", "ridge.gemm", "ridge.attention", "ridge.model", "ridge.roofline", "ridge.bench",
           "ridge.data"]


def _stub_path(mod):
    base = os.path.dirname(mod.__file__)
    leaf = "__init__" if os.path.basename(mod.__file__) == "__init__.py" else mod.__name__.rsplit(".", 1)[1]
    return os.path.join(base, leaf + ".pyi")


def _public(name):
    return not name.startswith("_")


def _stub_names(body):
    """Top-level names a stub body defines: functions, classes, assignments (overloads count once)."""
    names = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
    return {n: v for n, v in names.items() if _public(n)}


def _runtime_names(mod):
    """__all__, plus any public function or class defined in the module itself (one left out of
    __all__ is still part of what users see)."""
    names = set(getattr(mod, "__all__", []))
    for name, obj in vars(mod).items():
        if not _public(name) or isinstance(obj, types.ModuleType):
            continue
        if (inspect.isclass(obj) or callable(obj)) and getattr(obj, "__module__", None) == mod.__name__:
            names.add(name)
    return names


@pytest.mark.parametrize("name", MODULES)
def test_stub_matches_module(name):
    mod = importlib.import_module(name)
    path = _stub_path(mod)
    assert os.path.exists(path), f"{name}: no type stub at {path}"
    tree = ast.parse(open(path).read(), path)
    stub = _stub_names(tree.body)
    runtime = _runtime_names(mod)
    assert runtime - set(stub) == set(), f"{name}: public names missing from {os.path.basename(path)}"
    assert set(stub) - runtime == set(), f"{name}: {os.path.basename(path)} declares names the module lacks"
    for n in runtime:
        assert hasattr(mod, n), f"{name}.{n} is in __all__ but not defined"


@pytest.mark.parametrize("name", MODULES)
def test_stub_classes_match_runtime_classes(name):
    mod = importlib.import_module(name)
    tree = ast.parse(open(_stub_path(mod)).read())
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and _public(node.name)]
    for node in classes:
        cls = getattr(mod, node.name)
        if cls is None:  # FlashAttention2 without PyTorch
            continue
        declared = set(_stub_names(node.body))
        # Members the class itself defines (inherited ones, like autograd.Function's, are not its own).
        own = {n for n in vars(cls) if _public(n)}
        assert own - declared == set(), f"{name}.{node.name}: members missing from the stub"
        missing = {n for n in declared if not hasattr(cls, n)}
        assert missing == set(), f"{name}.{node.name}: the stub declares members the class lacks"


def test_every_stub_has_docstrings():
    """Every function and class in the stubs says what it does (the bound C++ functions carry no
    docstrings of their own, so the stubs are where editors find them)."""
    for name in MODULES:
        mod = importlib.import_module(name)
        tree = ast.parse(open(_stub_path(mod)).read())
        undocumented = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and _public(node.name):
                if ast.get_docstring(node) is None and not any(
                        isinstance(d, ast.Name) and d.id == "overload" for d in getattr(node, "decorator_list", [])):
                    undocumented.append(node.name)
        assert undocumented == [], f"{name}: no docstring in the stub for {undocumented}"
