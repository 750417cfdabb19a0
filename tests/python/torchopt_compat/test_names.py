"""Every public name of TorchOpt 0.7.3 exists under `import metafuse as
torchopt` with TorchOpt's signature and defaults.

The name list (torchopt_0_7_3_names.json) and the signatures
(torchopt_0_7_3_signatures.json) were written from TorchOpt 0.7.3's source:
its __init__ and each public submodule's __all__, and the parameters of its
public functions and classes. NOT_PROVIDED lists the names deliberately not
provided (each with the reason); the test fails if any other name is
missing, and also if a name listed there appears (keep the list true).
"""

import importlib
import inspect
import json
import os

import pytest

import metafuse

HERE = os.path.dirname(__file__)
with open(os.path.join(HERE, "torchopt_0_7_3_names.json")) as f:
    NAMES = json.load(f)
with open(os.path.join(HERE, "torchopt_0_7_3_signatures.json")) as f:
    SIGNATURES = json.load(f)

NOT_PROVIDED = {}

# Deliberate signature differences (documented in docs/migration.md).
SIGNATURE_DIFFERENCES = {
    # explicit keyword options instead of **kwargs (the same keywords work)
    "torchopt.linear_solve.solve_cg", "torchopt.linear_solve.solve_normal_cg",
    "torchopt.linear_solve.solve_inv",
}


def _module(qualified):
    return importlib.import_module(qualified.replace("torchopt", "metafuse", 1))


def _all_names():
    excluded = set(NAMES["excluded"])
    for module, names in NAMES["modules"].items():
        for name in names:
            qualified = f"{module}.{name}"
            if qualified not in excluded:
                yield module, name, qualified


def _resolve(module, name):
    return getattr(_module(module), name)


def test_every_torchopt_name_exists():
    missing, unexpected = [], []
    for module, name, qualified in _all_names():
        try:
            _resolve(module, name)
            if qualified in NOT_PROVIDED:
                unexpected.append(qualified)
        except (AttributeError, ImportError):
            if qualified not in NOT_PROVIDED:
                missing.append(qualified)
    assert not missing, f"missing TorchOpt names: {missing}"
    assert not unexpected, f"provided now, remove from NOT_PROVIDED: {unexpected}"
    total = sum(1 for _ in _all_names())
    assert total - len(NOT_PROVIDED) >= 0.9 * total


def _parameters(obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = list(inspect.signature(target).parameters.values())
    return [p for p in params if p.name not in ("self", "cls")]


def _same_default(ours, theirs):
    if theirs is None:
        return ours is inspect.Parameter.empty
    try:
        expected = eval(theirs, {"torch": __import__("torch"), "None": None})  # noqa: S307
    except Exception:  # noqa: BLE001 - an expression we cannot evaluate here
        return True
    return ours == expected


@pytest.mark.parametrize("qualified", sorted(SIGNATURES))
def test_signature_matches_torchopt(qualified):
    if qualified in SIGNATURE_DIFFERENCES or qualified in NOT_PROVIDED:
        pytest.skip("documented difference")
    module, _, name = qualified.rpartition(".")
    obj = _resolve(module, name)
    if inspect.ismodule(obj):  # a callable module (diff.zero_order): its function
        obj = getattr(obj, name)
    ours = _parameters(obj)
    ours_by_name = {p.name: p for p in ours}
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    theirs_positional = [t for t in SIGNATURES[qualified] if t[1] == "positional"]
    if any(p.kind == p.VAR_POSITIONAL for p in ours) and not theirs_positional:
        return
    for i, (pname, kind, default) in enumerate(SIGNATURES[qualified]):
        if kind == "positional":
            assert i < len(positional) and positional[i].name == pname, \
                f"{qualified}: positional argument {i} must be {pname!r}, " \
                f"ours are {[p.name for p in positional]}"
            assert _same_default(positional[i].default, default), \
                f"{qualified}: default of {pname} is {positional[i].default!r}, " \
                f"TorchOpt's {default}"
        elif kind == "keyword_only":
            assert pname in ours_by_name, f"{qualified}: no keyword argument {pname!r}"
            assert _same_default(ours_by_name[pname].default, default), \
                f"{qualified}: default of {pname} is " \
                f"{ours_by_name[pname].default!r}, TorchOpt's {default}"
        elif kind == "var_positional":
            assert any(p.kind == p.VAR_POSITIONAL for p in ours), \
                f"{qualified}: must take *{pname}"
        elif kind == "var_keyword":
            assert any(p.kind in (p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in ours), \
                f"{qualified}: must take keyword arguments"
