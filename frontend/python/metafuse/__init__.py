"""metafuse: fast differentiable optimization for PyTorch.

Importing the package loads the C++ core (metafuse._C), which registers the
fused operators as torch.ops.metafuse.*.
"""

from metafuse import _torch_check

_torch_check.require_torch()  # a clear error where this interpreter has no usable torch

import torch  # noqa: E402,F401  (libtorch must be loaded before the extension)

try:
    from metafuse import _C
except ImportError as exc:  # pragma: no cover - only without a matching build
    raise ImportError(_torch_check.extension_error(exc)) from exc

from metafuse import ops
from metafuse import tree
from metafuse.ops import ema_update

# The differentiable-optimizer API (functional, torch.optim-style, meta),
# under TorchOpt 0.7.3's names: `import metafuse as torchopt` runs TorchOpt
# programs (see docs/migration.md).
from metafuse import alias, diff, hook, schedule, transform, utils
from metafuse import (accelerated_op, base, clip, combine, linalg, version,
                      linear_solve, nn, optim, pytree, typing, update, visual)
from metafuse import aot
from metafuse import tuning
# metafuse.compile and metafuse.vmap are functions; the packages of the same
# names (metafuse/compile/, metafuse/vmap/) hold their implementation and
# are imported first, so that these names end bound to the functions.
from metafuse.compile.compiled import CompilationFallbackWarning
from metafuse.compile.function import compile  # noqa: A004
from metafuse.compile.gradient import grad
from metafuse.compile.inner_loop import compile_inner_loop
from metafuse.compile.profile import profile
from metafuse.vmap.function import vmap
from metafuse import batching, compiler  # noqa: E402  (the former module names)
from metafuse.accelerated_op import is_available as accelerated_op_available
from metafuse.alias import (adadelta, adagrad, adam, adamax, adamw, radam,
                            rmsprop, sgd)
from metafuse.base import (ChainedGradientTransformation, EmptyState,
                           GradientTransformation, UninitializedState,
                           apply_updates, chain, identity)
from metafuse.clip import clip_grad_norm
from metafuse.hook import register_hook
from metafuse.optim import (SGD, AdaDelta, Adadelta, AdaGrad, Adagrad, Adam,
                            AdaMax, Adamax, AdamW, FuncOptimizer,
                            MetaAdaDelta, MetaAdadelta, MetaAdaGrad,
                            MetaAdagrad, MetaAdam, MetaAdaMax, MetaAdamax,
                            MetaAdamW, MetaOptimizer, MetaRAdam, MetaRMSProp,
                            MetaRMSprop, MetaSGD, Optimizer, RAdam, RMSProp,
                            RMSprop)
from metafuse.transform import nan_to_num
from metafuse.utils import (ModuleState, extract_state_dict, functional_call,
                            module_clone, module_detach_, recover_state_dict,
                            stop_gradient)

from metafuse.version import __version__  # noqa: E402


def build_info():
    """Versions and optional features of this build.

    Returns:
        A dict: ``torch_version`` (the torch it was built against), ``llvm``,
        ``nvrtc`` and ``cuda_torch`` (whether those parts are compiled in)
        and ``llvm_host`` (LLVM's host target and CPU).
    """
    return _C.build_info()


def cuda_status():
    """Whether the CUDA driver can be used here.

    Returns:
        ``(available, reason)``: a bool, and a string that explains it (what
        is missing when the driver cannot be used).
    """
    return _C.cuda_status()


__all__ = [
    # TorchOpt 0.7.3's top-level names.
    "accelerated_op_available", "adam", "adamax", "adadelta", "radam", "adamw",
    "adagrad", "rmsprop", "sgd", "clip_grad_norm", "nan_to_num",
    "register_hook", "chain", "Optimizer", "SGD", "Adam", "AdaMax", "Adamax",
    "AdaDelta", "Adadelta", "RAdam", "AdamW", "AdaGrad", "Adagrad", "RMSProp",
    "RMSprop", "MetaOptimizer", "MetaSGD", "MetaAdam", "MetaAdaMax",
    "MetaAdamax", "MetaAdaDelta", "MetaAdadelta", "MetaRAdam", "MetaAdamW",
    "MetaAdaGrad", "MetaAdagrad", "MetaRMSProp", "MetaRMSprop",
    "FuncOptimizer", "apply_updates", "extract_state_dict",
    "recover_state_dict", "stop_gradient", "module_clone", "module_detach_",
    # metafuse's own.
    "build_info", "cuda_status", "ema_update", "ops", "tree",
    "alias", "aot", "diff", "hook", "schedule", "transform", "utils",
    "accelerated_op", "base", "clip", "combine", "linalg", "linear_solve",
    "nn", "optim", "pytree", "typing", "update", "visual",
    "compile_inner_loop", "compile", "grad", "profile", "vmap", "tuning",
    "CompilationFallbackWarning", "GradientTransformation",
    "ChainedGradientTransformation", "EmptyState", "UninitializedState",
    "identity", "ModuleState", "functional_call", "version",
]
