"""No two modules of the metafuse package import each other, at module level
or inside functions: the package's modules form layers."""

import ast
import os

from package_under_test import PACKAGE_DIR

ROOT = os.path.join(PACKAGE_DIR, "metafuse")


def _modules():
    """module name -> path, for every .py file of the package."""
    found = {}
    for directory, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, PACKAGE_DIR)[:-3].replace(os.sep, ".")
                found[relative[:-len(".__init__")] if relative.endswith(".__init__")
                      else relative] = path
    return found


def _imported(tree, module, modules, is_package):
    """The package's modules that ``tree`` imports (anywhere in the file)."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                if name in modules:
                    out.add(name)
                elif base in modules and base != "metafuse":
                    out.add(base)
    out.discard(module)
    return out


def test_no_two_modules_import_each_other():
    modules = _modules()
    imports = {}
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        imports[module] = _imported(tree, module, modules, path.endswith("__init__.py"))
    mutual = sorted({tuple(sorted((a, b))) for a, targets in imports.items()
                     for b in targets if a in imports.get(b, ())})
    assert not mutual, f"modules that import each other: {mutual}"


def test_every_compiled_callable_declares_the_protocol():
    import torch

    import metafuse as mf
    from metafuse.compile.compiled import CompiledCallable, kind_of

    loss = lambda p, x: ((p * x) ** 2).sum()  # noqa: E731
    made = {"inner_loop": mf.compile_inner_loop(loss, mf.sgd(0.1), steps=1),
            "function": mf.compile(loss),
            "batched": mf.vmap(loss, in_dims=(None, 0))}
    for kind, compiled in made.items():
        assert isinstance(compiled, CompiledCallable) and kind_of(compiled) == kind
    assert kind_of(loss) is None and kind_of(torch.sin) is None


def test_the_package_names_stay_bound_to_the_functions():
    import metafuse as mf
    from metafuse.compile import capture, profile  # noqa: F401  (the packages load)
    from metafuse.vmap import strategy  # noqa: F401

    assert callable(mf.compile) and mf.compile.__module__ == "metafuse.compile.function"
    assert callable(mf.vmap) and mf.vmap.__module__ == "metafuse.vmap.function"
    assert mf.compiler.CompiledFunction is mf.compile(lambda x: x).__class__
