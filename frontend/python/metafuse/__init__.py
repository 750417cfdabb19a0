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

__version__ = "0.1.0"


def build_info():
    """Versions and optional features of this build (a dict)."""
    return _C.build_info()


def cuda_status():
    """(available, reason): whether the CUDA driver can be used here."""
    return _C.cuda_status()


__all__ = ["build_info", "cuda_status", "ema_update", "ops", "tree"]
