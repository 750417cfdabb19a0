"""metafuse: fast differentiable optimization for PyTorch.

Importing the package loads the C++ core (metafuse._C), which registers the
fused operators as torch.ops.metafuse.*.
"""

import torch  # noqa: F401  (libtorch must be loaded before the extension)

try:
    from metafuse import _C
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "metafuse's C++ extension metafuse._C is missing or does not load "
        f"({exc}). Build it first: `bash tools/build.sh` from the repository "
        "root, then use /usr/bin/python3 (the interpreter that sees Debian's "
        "torch)."
    ) from exc

from metafuse import ops
from metafuse import tree
from metafuse.ops import ema_update

# The differentiable-optimizer API (functional, torch.optim-style, meta).
from metafuse import alias, diff, hook, schedule, transform, utils
from metafuse import aot
from metafuse.compiler import (CompilationFallbackWarning, compile,
                               compile_inner_loop, grad, profile)
from metafuse.alias import (adadelta, adagrad, adam, adamax, adamw, radam,
                            rmsprop, sgd)
from metafuse.base import (GradientTransformation, apply_updates, chain,
                           identity)
from metafuse.optim import (SGD, Adadelta, Adagrad, Adam, Adamax, AdamW,
                            FuncOptimizer, MetaAdadelta, MetaAdagrad,
                            MetaAdam, MetaAdamax, MetaAdamW, MetaOptimizer,
                            MetaRAdam, MetaRMSProp, MetaSGD, Optimizer, RAdam,
                            RMSProp)
from metafuse.utils import (extract_state_dict, functional_call, module_clone,
                            recover_state_dict, stop_gradient)

__version__ = "0.1.0"


def build_info():
    """Versions and optional features of this build (a dict)."""
    return _C.build_info()


def cuda_status():
    """(available, reason): whether the CUDA driver can be used here."""
    return _C.cuda_status()


__all__ = [
    "build_info", "cuda_status", "ema_update", "ops", "tree",
    "alias", "aot", "diff", "hook", "schedule", "transform", "utils",
    "compile_inner_loop", "compile", "grad", "profile",
    "CompilationFallbackWarning",
    "GradientTransformation", "apply_updates", "chain", "identity",
    "sgd", "adam", "adamw", "adamax", "adadelta", "adagrad", "radam",
    "rmsprop",
    "Optimizer", "SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad",
    "RAdam", "RMSProp",
    "MetaOptimizer", "MetaSGD", "MetaAdam", "MetaAdamW", "MetaAdamax",
    "MetaAdadelta", "MetaAdagrad", "MetaRAdam", "MetaRMSProp",
    "FuncOptimizer",
    "extract_state_dict", "recover_state_dict", "stop_gradient",
    "module_clone", "functional_call",
]
