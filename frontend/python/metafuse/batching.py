"""metafuse.vmap's public names under their first module name; the
implementation is the package metafuse/vmap/ (function.py, strategy.py,
arguments.py, task_gradients.py, parallel_chunks.py,
recomputed_chunks.py)."""

from metafuse.vmap.function import BatchedFunction, vmap
from metafuse.vmap.strategy import STRATEGY_VARIABLE

__all__ = ["vmap", "BatchedFunction", "STRATEGY_VARIABLE"]
