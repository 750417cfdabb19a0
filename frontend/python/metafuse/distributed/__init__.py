"""Distributed meta-learning over torch.distributed collectives (gloo, NCCL)
and over torch.distributed.rpc (TensorPipe) with torch.distributed.autograd.

Three layers:

- TorchOpt's distributed API under its names (``import metafuse.distributed
  as todist``): world information, ``auto_init_rpc``, rank decorators,
  ``parallelize`` with partitioners and reducers, remote calls, and the
  distributed-autograd helpers (``todist.autograd``).
- metafuse's scheduler for compiled tasks (``TaskScheduler``): a meta-batch
  partitioned over workers, each keeping its compiled program across
  meta-steps; one RPC per worker per meta-step; the meta-gradient comes
  back through the caller's ordinary ``loss.backward()``.
- the same scheduler over collectives (``CollectiveScheduler``, what
  ``TaskScheduler`` makes where torch.distributed is initialised, e.g. by
  ``init_collectives`` under torchrun): every rank runs the meta-step and
  its share, one all_reduce per step.

Processes start with torchrun (torch 2.x) or ``python3 -m metafuse.distributed.launch``;
``spawn`` starts a local world from Python (docs/distributed.md).
"""

import torch.distributed as _dist

from metafuse.distributed import api, autograd, rpc, world
from metafuse.distributed.api import *  # noqa: F403
from metafuse.distributed.collective import CollectiveScheduler
from metafuse.distributed.config import DEFAULT_TIMEOUT, WorldConfigError
from metafuse.distributed.errors import RankError, WorkerError
from metafuse.distributed.process_group import init_collectives
from metafuse.distributed.scheduler import TaskScheduler
from metafuse.distributed.spawn import SpawnError, spawn
from metafuse.distributed.world import *  # noqa: F403


def is_available():
    """Whether torch has torch.distributed, RPC and distributed autograd (bool)."""
    return _dist.is_available() and rpc.is_available() and autograd.is_available()


__all__ = ["is_available", *api.__all__, *world.__all__]
