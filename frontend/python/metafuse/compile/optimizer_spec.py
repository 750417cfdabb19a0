"""The compiler's description of a metafuse optimizer alias (sgd, with or
without momentum, adam, adamw): the OptimizerSpec that compile_inner_loop
compiles, or why the optimizer is not compiled."""

import numbers

import torch

from metafuse.alias import _is_rate_tree

__all__ = ["optimizer_spec"]


def optimizer_spec(optimizer):
    """The compiler's description of an alias, or (None, reason)."""
    config = getattr(optimizer, "_config", None)
    if config is None:
        return None, "the optimizer is not a metafuse alias (sgd, adam, adamw)"
    name, h = config
    if name not in ("sgd", "adam", "adamw"):
        return None, f"the compiler does not support metafuse.{name} yet"
    if h.get("moment_requires_grad"):
        return None, "moment_requires_grad=True is not compiled"
    lr = h["lr"]
    spec = {"kind": name, "lr": 0.0, "lr_is_input": False, "lr_per_param": False,
            "weight_decay": float(h.get("weight_decay", 0.0)),
            "maximize": bool(h.get("maximize", False)),
            "b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0,
            "momentum": 0.0, "dampening": 0.0, "nesterov": False}
    if isinstance(lr, torch.Tensor) or (name == "sgd" and _is_rate_tree(lr)):
        if name != "sgd":
            return None, "a tensor learning rate is compiled for sgd only"
        spec["lr_is_input"] = True
        spec["lr_per_param"] = not isinstance(lr, torch.Tensor)
    elif isinstance(lr, numbers.Real):
        spec["lr"] = float(lr)
    else:
        return None, "a learning-rate schedule is not compiled"
    if name == "sgd" and float(h.get("momentum", 0.0)) != 0.0:
        # compiled as a loop only (compile_inner_loop checks the form)
        spec["momentum"] = float(h["momentum"])
        spec["dampening"] = float(h.get("dampening", 0.0))
        spec["nesterov"] = bool(h.get("nesterov", False))
    if name != "sgd":
        if h.get("amsgrad"):
            return None, "amsgrad is not compiled"
        spec["b1"], spec["b2"] = (float(b) for b in h["betas"])
        spec["eps"] = float(h["eps"])
        spec["eps_root"] = float(h["eps_root"])
    return spec, None
