"""Builds one optimizer class per alias, so every alias has its Optimizer and
MetaOptimizer without repeated code.

Each class has TorchOpt 0.7.3's signature for its name (argument order and
defaults, which differ in places from the functional alias's, exactly as in
TorchOpt); the alias's remaining options (``fused``, ``amsgrad``, ...) follow
as keyword-only extensions with the alias's defaults.
"""

import inspect

from metafuse import alias

_REQUIRED = inspect.Parameter.empty
_BETAS = (0.9, 0.999)

# Class-name stem -> functional alias.
ALIASES = {
    "SGD": alias.sgd,
    "Adam": alias.adam,
    "AdamW": alias.adamw,
    "Adamax": alias.adamax,
    "Adadelta": alias.adadelta,
    "Adagrad": alias.adagrad,
    "RAdam": alias.radam,
    "RMSProp": alias.rmsprop,
}

# TorchOpt's signatures: (positional-or-keyword, keyword-only), each a list
# of (name, default).
OOP_SIGNATURES = {
    "SGD": ([("lr", _REQUIRED), ("momentum", 0.0), ("weight_decay", 0.0),
             ("dampening", 0.0), ("nesterov", False), ("maximize", False)], []),
    "Adam": ([("lr", 1e-3), ("betas", _BETAS), ("eps", 1e-8),
              ("weight_decay", 0.0)],
             [("eps_root", 0.0), ("maximize", False),
              ("use_accelerated_op", False)]),
    "AdamW": ([("lr", 1e-3), ("betas", _BETAS), ("eps", 1e-8),
               ("weight_decay", 1e-2)],
              [("eps_root", 0.0), ("mask", None), ("maximize", False),
               ("use_accelerated_op", False)]),
    "Adamax": ([("lr", 2e-3), ("betas", _BETAS), ("eps", 1e-8),
                ("weight_decay", 0.0)], []),
    "Adadelta": ([("lr", 1.0), ("rho", 0.9), ("eps", 1e-6),
                  ("weight_decay", 0.0)], []),
    "Adagrad": ([("lr", 1e-2), ("lr_decay", 0.0), ("weight_decay", 0.0),
                 ("initial_accumulator_value", 0.0), ("eps", 1e-10)],
                [("maximize", False)]),
    "RAdam": ([("lr", 1e-3), ("betas", _BETAS), ("eps", 1e-8),
               ("weight_decay", 0.0)], []),
    "RMSProp": ([("lr", 1e-2), ("alpha", 0.99), ("eps", 1e-8),
                 ("weight_decay", 0.0), ("momentum", 0.0), ("centered", False)],
                [("initial_scale", 0.0), ("nesterov", False),
                 ("maximize", False)]),
}

META_SIGNATURES = {
    "SGD": ([("lr", _REQUIRED), ("momentum", 0.0), ("weight_decay", 0.0),
             ("dampening", 0.0), ("nesterov", False),
             ("moment_requires_grad", True), ("maximize", False)], []),
    "Adam": (OOP_SIGNATURES["Adam"][0],
             [("eps_root", 0.0), ("moment_requires_grad", True),
              ("maximize", False), ("use_accelerated_op", False)]),
    "AdamW": (OOP_SIGNATURES["AdamW"][0],
              [("eps_root", 0.0), ("mask", None),
               ("moment_requires_grad", False), ("maximize", False),
               ("use_accelerated_op", False)]),
    "Adamax": (OOP_SIGNATURES["Adamax"][0], [("moment_requires_grad", True)]),
    "Adadelta": (OOP_SIGNATURES["Adadelta"][0],
                 [("moment_requires_grad", True)]),
    "Adagrad": OOP_SIGNATURES["Adagrad"],
    "RAdam": (OOP_SIGNATURES["RAdam"][0], [("moment_requires_grad", True)]),
    "RMSProp": OOP_SIGNATURES["RMSProp"],
}


def signature_parameters(stem, table):
    """inspect.Parameters: TorchOpt's, then the alias's other options."""
    positional, keyword = table[stem]
    P = inspect.Parameter
    params = [P(n, P.POSITIONAL_OR_KEYWORD, default=d) for n, d in positional]
    params += [P(n, P.KEYWORD_ONLY, default=d) for n, d in keyword]
    taken = {n for n, _ in positional + keyword}
    for p in inspect.signature(ALIASES[stem]).parameters.values():
        if p.name not in taken:
            params.append(p.replace(kind=P.KEYWORD_ONLY))
    return params


def hyperparameters(signature, args, kwargs, what):
    """Binds (args, kwargs) to ``signature``: the full dict of
    hyperparameters, defaults filled in; a clear TypeError otherwise."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{what}{signature}: {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def make_class(name, base, stem, first_arg, doc, table):
    alias_fn = ALIASES[stem]
    P = inspect.Parameter
    hyper_params = signature_parameters(stem, table)
    full_signature = inspect.Signature(
        [P(first_arg, P.POSITIONAL_OR_KEYWORD)] + hyper_params)

    def __init__(self, *args, **kwargs):
        hyper = hyperparameters(full_signature, args, kwargs, name)
        target = hyper.pop(first_arg)
        base.__init__(self, target, alias_fn, hyper)

    __init__.__signature__ = inspect.Signature(
        [P("self", P.POSITIONAL_OR_KEYWORD)] + list(full_signature.parameters.values()))
    return type(name, (base,), {"__init__": __init__, "__doc__": doc,
                                "__module__": base.__module__})
