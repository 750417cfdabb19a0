"""Who this process is in the world, RPC start-up, and rank-selective
decorators (TorchOpt's ``torchopt.distributed.world`` names).

The world is read from the variables torchrun and metafuse's launcher set
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE); a process started alone
is a world of one.
"""

import atexit
import functools
import os
import subprocess
import sys
from typing import NamedTuple

import torch
import torch.distributed.rpc as rpc

from metafuse.distributed.config import (WorldConfigError, check_master_address,
                                         default_timeout, default_transports, read_world)

__all__ = ["get_world_info", "get_world_rank", "get_rank", "get_world_size",
           "get_local_rank", "get_local_world_size", "get_worker_id", "barrier",
           "auto_init_rpc", "on_rank", "not_on_rank", "rank_zero_only",
           "rank_non_zero_only", "worker_device"]


def default_worker_name_format(world_rank, world_size, local_rank, local_world_size):
    """The worker name of a rank: ``worker`` and the rank, zero-padded to the
    width of the world size (``worker0`` .. ``worker9``, ``worker00`` ..).

    Returns:
        A str.
    """
    del local_rank, local_world_size  # part of the format's signature
    return f"worker{world_rank:0{len(str(world_size))}d}"


_NAME_FORMAT = [default_worker_name_format]


class WorldInfo(NamedTuple):
    """This process's place in the world."""

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def rank(self):
        """The global rank (same as world_rank)."""
        return self.world_rank

    @property
    def worker_name(self):
        """This process's RPC worker name, by the current name format."""
        return _NAME_FORMAT[0](world_rank=self.world_rank, world_size=self.world_size,
                               local_rank=self.local_rank,
                               local_world_size=self.local_world_size)


_ATTRIBUTE_ALIASES = {
    "world_info": None, "world_rank": "world_rank", "rank": "world_rank",
    "world_size": "world_size", "local_rank": "local_rank",
    "local_world_size": "local_world_size",
}


def get_world_info():
    """This process's WorldInfo, read once from the environment.

    The values are also attributes of this function, as in TorchOpt
    (``get_world_info.world_rank``, ``get_world_info.WORLD_SIZE``, ...).

    Returns:
        A WorldInfo.

    Raises:
        WorldConfigError: the environment's values are malformed or
            inconsistent.
    """
    info = getattr(get_world_info, "world_info", None)
    if info is None:
        info = WorldInfo(*read_world())
        for alias, field in _ATTRIBUTE_ALIASES.items():
            value = info if field is None else getattr(info, field)
            setattr(get_world_info, alias, value)
            setattr(get_world_info, alias.upper(), value)
    return info


def reread_world_info():
    """Forgets the cached WorldInfo and reads the environment again (for a
    process whose variables were set after this module was imported, as
    spawn's are).

    Returns:
        The new WorldInfo.
    """
    for alias in _ATTRIBUTE_ALIASES:
        for name in (alias, alias.upper()):
            if hasattr(get_world_info, name):
                delattr(get_world_info, name)
    return get_world_info()


def get_world_rank():
    """The global rank of this process (int)."""
    return get_world_info().world_rank


get_rank = get_world_rank


def get_world_size():
    """The number of processes in the world (int)."""
    return get_world_info().world_size


def get_local_rank():
    """The rank of this process on its node (int)."""
    return get_world_info().local_rank


def get_local_world_size():
    """The number of processes on this node (int)."""
    return get_world_info().local_world_size


def worker_device(local_rank=None):
    """The device this process's tasks run on: one process per GPU, so
    ``cuda:(LOCAL_RANK mod GPUs)`` where torch has CUDA and sees a GPU,
    else the CPU. RPC start-up (``init_rpc_from_environment``) makes it
    the current CUDA device; ``TaskScheduler`` runs each worker's share
    there.

    Args:
        local_rank: the rank on this node (default: LOCAL_RANK's).

    Returns:
        A torch.device.
    """
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return torch.device("cpu")
    rank = get_local_rank() if local_rank is None else local_rank
    return torch.device("cuda", rank % torch.cuda.device_count())


def get_worker_id(id=None):  # noqa: A002 (TorchOpt's argument name)
    """The rank of a worker given by rank or name.

    Args:
        id: an int (returned as is), a worker name, or None (this worker).

    Returns:
        An int.
    """
    if isinstance(id, int):
        return id
    return rpc.get_worker_info(worker_name=id).id


def barrier(worker_names=None):
    """Blocks until every named worker (all if None) reaches a barrier, so
    that their outstanding RPC work is done.

    Args:
        worker_names: an iterable of worker names, or None for all.
    """
    names = set() if worker_names is None else set(worker_names)
    rpc.api._barrier(names)  # torch's own barrier over RPC (no public name)


def _shutdown_bounded():
    """Graceful shutdown, else a local one: with a dead peer the graceful
    handshake fails (bounded by the RPC timeout) instead of returning."""
    try:
        rpc.shutdown(graceful=True)
    except Exception:  # noqa: BLE001 - a peer is gone; leave without it
        try:
            rpc.shutdown(graceful=False)
        except RuntimeError:  # the failed graceful attempt already stopped the agent
            pass


def _backend_options(options):
    """RPC options with metafuse's default timeout and transports (no
    busy-polling shm reactor: config.DEFAULT_TRANSPORTS) when none were
    given."""
    if options is not None:
        return options
    return rpc.TensorPipeRpcBackendOptions(rpc_timeout=default_timeout(),
                                           _transports=default_transports())


def _startup_failure(info, options, detail):
    """The WorldConfigError for an RPC start-up that failed or did not end."""
    return WorldConfigError(
        f"RPC start-up of {info.worker_name} (RANK={info.rank}, WORLD_SIZE={info.world_size}) "
        f"at {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} failed: {detail}. "
        "Check that all WORLD_SIZE processes were started, with the same WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT and distinct RANKs")


_WATCHDOG = """
import os, signal, sys, time
parent, seconds, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
time.sleep(seconds)
if os.getppid() == parent:
    sys.stderr.write("metafuse.distributed: " + message + "\\n")
    sys.stderr.flush()
    os.kill(parent, signal.SIGKILL)
"""


class _StartupWatchdog:
    """Ends the process with a clear message if RPC start-up blocks past its
    limit. torch's rendezvous waits up to 30 minutes for missing processes
    while holding the GIL, so no Python thread or signal handler could run:
    the watchdog is a small separate process."""

    def __init__(self, seconds, message):
        self._args = [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(seconds), message]
        self._process = None

    def __enter__(self):
        self._process = subprocess.Popen(self._args, stdin=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        self._process.kill()
        self._process.wait()
        return False


def init_rpc_from_environment(*, backend=None, rpc_backend_options=None):
    """Starts RPC for this process from the environment, after checking it.

    Args:
        backend: an rpc.BackendType or None (TensorPipe).
        rpc_backend_options: options, or None for TensorPipe with the
            default timeout (METAFUSE_RPC_TIMEOUT, 30 s) and transports
            (METAFUSE_RPC_TRANSPORTS, "uv").

    Returns:
        This process's WorldInfo.

    Raises:
        WorldConfigError: the configuration is wrong, or the rendezvous
            failed. If it blocks for twice the RPC timeout (processes
            missing), the process prints the same message and is killed
            instead of hanging.
    """
    info = get_world_info()
    check_master_address(info.rank)
    device = worker_device(info.local_rank)
    if device.type == "cuda":  # one process per GPU: its GPU is the current device
        torch.cuda.set_device(device)
    options = _backend_options(rpc_backend_options)
    limit = 2 * options.rpc_timeout + 5
    waiting = _startup_failure(info, options, f"not every process joined within {limit:g} s")
    try:
        with _StartupWatchdog(limit, str(waiting)):
            rpc.init_rpc(name=info.worker_name, rank=info.rank, world_size=info.world_size,
                         backend=backend, rpc_backend_options=options)
    except RuntimeError as exc:
        text = str(exc)
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        lowered = text.lower()
        if "timeout" in lowered or "timed out" in lowered:
            raise _startup_failure(info, options, f"not every process joined within "
                                   f"{options.rpc_timeout:g} s ({first})") from None
        if "gloo" in lowered and "address" in lowered:
            raise _startup_failure(info, options, "the processes disagree on WORLD_SIZE "
                                   f"(the rendezvous exchanged mismatched data: {first})") from None
        if "in use" in lowered:
            raise WorldConfigError(f"MASTER_PORT={os.environ['MASTER_PORT']} is in use "
                                   f"({first})") from None
        raise
    atexit.register(_shutdown_bounded)
    return info


def auto_init_rpc(worker_init_fn=None, worker_name_format=default_worker_name_format, *,
                  backend=None, rpc_backend_options=None):
    """A decorator that starts RPC before the decorated function runs.

    The wrapped function starts RPC under this process's worker name, runs
    ``worker_init_fn`` (after a barrier) on every worker, waits at a
    barrier, then calls the function; RPC is shut down at exit.

    Args:
        worker_init_fn: called once on every worker after RPC starts, or None.
        worker_name_format: ``f(world_rank, world_size, local_rank,
            local_world_size) -> str``, the worker names.
        backend: an rpc.BackendType, or None for TensorPipe.
        rpc_backend_options: options, or None for TensorPipe with metafuse's
            default timeout (METAFUSE_RPC_TIMEOUT, 30 s; torch's is 60 s)
            and transports (METAFUSE_RPC_TRANSPORTS, "uv").

    Returns:
        The decorator.

    Raises:
        TypeError: ``worker_name_format`` or ``worker_init_fn`` is not
            callable.
    """
    if not callable(worker_name_format):
        raise TypeError("auto_init_rpc: `worker_name_format` must be callable, got "
                        f"{worker_name_format!r}")
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise TypeError("auto_init_rpc: `worker_init_fn` must be callable or None, got "
                        f"{worker_init_fn!r}")
    _NAME_FORMAT[0] = worker_name_format

    def decorate(func):
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            init_rpc_from_environment(backend=backend, rpc_backend_options=rpc_backend_options)
            if worker_init_fn is not None:
                barrier()
                worker_init_fn()
            barrier()
            return func(*args, **kwargs)
        return wrapped
    return decorate


def _on_ranks(ranks, run_there):
    ranks = frozenset(ranks)
    if not all(isinstance(r, int) for r in ranks):
        raise TypeError(f"on_rank / not_on_rank: ranks must be ints, got {sorted(ranks, key=str)}")

    def decorate(func):
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            if (get_world_rank() in ranks) == run_there:
                return func(*args, **kwargs)
            return None
        return wrapped
    return decorate


def on_rank(*ranks):
    """A decorator: the function runs only on the given ranks (elsewhere it
    returns None)."""
    return _on_ranks(ranks, run_there=True)


def not_on_rank(*ranks):
    """A decorator: the function runs on every rank but the given ones
    (there it returns None)."""
    return _on_ranks(ranks, run_there=False)


def rank_all(func):
    """A decorator that runs the function on every rank (the identity)."""
    return func


def rank_zero_only(func):
    """A decorator: the function runs on rank 0 only."""
    return on_rank(0)(func)


def rank_non_zero_only(func):
    """A decorator: the function runs on every rank but 0."""
    return not_on_rank(0)(func)


# Read at import, as TorchOpt does (its attributes exist after import); a
# malformed environment raises its WorldConfigError at the first use.
try:
    get_world_info()
except WorldConfigError:  # raised again, with its message, at first use
    pass
