"""What a spawned world reports about its use of the host's cores (for
test_cpu_share.py; module-level, so that workers import it by name)."""

import ctypes
import os
import resource
import time

import torch

import metafuse.distributed as todist


def process_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def openmp_threads_before_torch():
    """OpenMP's team size in this (RPC) thread before torch sets it."""
    return os.environ.get("OMP_NUM_THREADS"), ctypes.CDLL("libgomp.so.1").omp_get_max_threads()


def idle_world(seconds):
    """Rank 0: rank 1's CPU seconds while the world is idle for ``seconds``,
    and what rank 1's RPC thread sees of OpenMP."""
    if todist.get_world_rank() != 0:
        return None
    seen = {"omp": torch.distributed.rpc.rpc_sync(1, openmp_threads_before_torch)}
    before = torch.distributed.rpc.rpc_sync(1, process_cpu_seconds)
    time.sleep(seconds)
    seen["idle_cpu"] = torch.distributed.rpc.rpc_sync(1, process_cpu_seconds) - before
    return seen
