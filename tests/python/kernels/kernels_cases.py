"""Which fused optimizer ops exist, their state inputs and option combinations
to test, shared by the kernel test files."""

import torch

# name -> (state kinds, option combinations). A state kind says how to draw
# a valid value: "any" (a first moment), "pos" (a second moment or norm),
# "big"/"small" (centered RMSProp: square average > grad average ** 2).
# `None` marks a state that the options leave out.
OPTIMIZERS = {
    "adam": (["any", "pos"], [
        dict(count=1, lr=0.1, eps=1e-3, eps_root=1e-4),
        dict(count=5, lr=0.1, b1=0.8, b2=0.95, eps=1e-3, weight_decay=0.1),
        dict(count=3, lr=0.1, eps_root=1e-6, weight_decay=0.1,
             decoupled_weight_decay=True, maximize=True),
    ]),
    "sgd": (["any"], [
        dict(count=1, lr=0.1),
        dict(count=1, lr=0.1, momentum=0.9, dampening=0.5),
        dict(count=4, lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01,
             maximize=True),
        dict(count=2, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
    ]),
    "rmsprop": (["big", "small", "any"], [
        dict(lr=0.01),
        dict(lr=0.01, centered=True, eps=1e-3),
        dict(lr=0.01, momentum=0.9, weight_decay=0.1, eps_root=1e-4),
        dict(lr=0.01, centered=True, momentum=0.5, maximize=True),
    ]),
    "adagrad": (["pos"], [
        dict(count=1, lr=0.1),
        dict(count=3, lr=0.1, lr_decay=0.1, weight_decay=0.1, eps=1e-3,
             eps_root=1e-4, maximize=True),
    ]),
    "adamax": (["any", "pos"], [
        dict(count=1),
        dict(count=4, weight_decay=0.1, maximize=True, eps=1e-3),
    ]),
    "adadelta": (["pos", "pos"], [
        dict(),
        dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=True, eps=1e-3),
    ]),
    "radam": (["any", "pos"], [
        dict(count=2),
        dict(count=10, eps=1e-3, eps_root=1e-4),
        dict(count=10, weight_decay=0.1, decoupled_weight_decay=True,
             maximize=True),
        dict(count=6, weight_decay=0.1),
    ]),
}


def cases():
    """(name, options) pairs, with readable pytest ids."""
    out = []
    for name, (_, configs) in OPTIMIZERS.items():
        for i, cfg in enumerate(configs):
            out.append((name, cfg))
    return out


def case_id(case):
    name, cfg = case if isinstance(case, tuple) else (None, case)
    return "-".join(f"{k}={v}" for k, v in cfg.items()) or "defaults"


def used_states(name, cfg):
    """Which state slots the options use (RMSProp's are optional)."""
    kinds = OPTIMIZERS[name][0]
    if name == "rmsprop":
        return [True, bool(cfg.get("centered")), bool(cfg.get("momentum"))]
    if name == "sgd":
        return [bool(cfg.get("momentum"))]
    return [True] * len(kinds)


def draw(kind, n, dtype, gen):
    x = torch.randn(n, dtype=dtype, generator=gen)
    if kind == "pos":
        return torch.rand(n, dtype=dtype, generator=gen) + 0.1
    if kind == "big":
        return torch.rand(n, dtype=dtype, generator=gen) + 1.0
    if kind == "small":
        return 0.1 * x
    return x


def make_inputs(name, cfg, n, dtype=torch.float64, seed=0):
    """[grad, *states (None where unused), param] for the op `name`."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(n, dtype=dtype, generator=gen)
    states = [draw(k, n, dtype, gen) if used else None
              for k, used in zip(OPTIMIZERS[name][0], used_states(name, cfg))]
    p = torch.randn(n, dtype=dtype, generator=gen)
    return [g] + states + [p]
