"""How metafuse.vmap runs a meta-batch: the strategies ("batched": one
program for all tasks; "tasks": the one-task program task after task;
"calls": the function as written, per task; "parallel" / "parallel-tasks":
chunks on threads), the METAFUSE_VMAP_STRATEGY override, and the margins
and conditions of the measured choice between them (function.py times
them)."""

import os

import torch

from metafuse import tree as _tree

__all__ = ["STRATEGY_VARIABLE", "STRATEGIES", "TASKS_MARGIN", "CALLS_MARGIN",
           "PARALLEL_MARGIN", "strategy_setting", "parallel_tasks_apply",
           "has_grouped_convolutions", "gradient_may_follow"]

STRATEGY_VARIABLE = "METAFUSE_VMAP_STRATEGY"
STRATEGIES = ("auto", "batched", "tasks", "calls", "parallel", "parallel-tasks")
# A task loop must be this much faster than the batched program to be
# chosen (a near tie keeps the one program), and the loop of calls this much
# faster than the loop of one-task programs (a tie keeps the compiled one).
TASKS_MARGIN = 1.1
CALLS_MARGIN = 1.05
# The one-task programs in parallel chunks need only beat the task loop
# (the same programs on one thread each) by this much: the check's first
# parallel calls understate their lead (the conv net at 2 threads: timed
# 8% ahead, 158 ms against 172 ms, where the meta-steps that followed ran
# 15-25% ahead, and a 10% margin kept the slower loop for the whole run).
PARALLEL_MARGIN = 1.02


def parallel_tasks_apply(args, size):
    """Whether the cost check also times the one-task programs in parallel
    chunks: more than one intra-op thread, at least two tasks, CPU tensors
    only (the chunks' threads run CPU programs)."""
    if torch.get_num_threads() < 2 or size < 2:
        return False
    return all(t.device.type == "cpu" for arg in args for t in _tree.leaves(arg)
               if isinstance(t, torch.Tensor))


def strategy_setting():
    value = os.environ.get(STRATEGY_VARIABLE, "auto") or "auto"
    if value not in STRATEGIES:
        raise ValueError(f"metafuse.vmap: {STRATEGY_VARIABLE} must be one of "
                         f"{', '.join(STRATEGIES)}, got {value!r}")
    return value


def has_grouped_convolutions(compiled, args):
    """True when the program compiled for ``args`` runs a convolution
    grouped over the tasks (read from its fusion report)."""
    program = compiled.program_for(*args)
    if program is None:
        return False  # fell back to eager functorch.vmap: nothing to choose
    report = program.fusion_report()
    return any(report.get(part, {}).get("grouped_convolutions", 0)
               for part in ("forward", "backward"))


def gradient_may_follow(args):
    """Grad mode is on and some argument's tensor requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for arg in args for t in _tree.leaves(arg))
