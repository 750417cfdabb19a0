"""Builds one optimizer class per alias, with the alias's own signature, so
every alias has its Optimizer and MetaOptimizer without repeated code."""

import inspect

from metafuse import alias

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


def hyperparameters(alias_fn, args, kwargs, what):
    """Binds (args, kwargs) to the alias's signature: the full dict of
    hyperparameters, defaults filled in; a clear TypeError otherwise."""
    signature = inspect.signature(alias_fn)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{what}{signature}: {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def make_class(name, base, alias_fn, first_arg, doc):
    def __init__(self, target, *args, **kwargs):
        base.__init__(self, target, alias_fn,
                      hyperparameters(alias_fn, args, kwargs, name))

    __init__.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         inspect.Parameter(first_arg, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + list(inspect.signature(alias_fn).parameters.values()))
    return type(name, (base,), {"__init__": __init__, "__doc__": doc,
                                "__module__": base.__module__})
