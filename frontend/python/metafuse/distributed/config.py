"""The world configuration a process is started with, read and checked.

torchrun and ``python3 -m metafuse.distributed.launch`` set the same six
variables; a process started by hand must set them too. Every check here
names the variable and what was expected, before RPC starts (a wrong
configuration would otherwise hang in the rendezvous).
"""

import errno
import os
import socket

__all__ = ["WorldConfigError", "DEFAULT_TIMEOUT", "DEFAULT_TRANSPORTS", "default_timeout",
           "default_transports", "thread_share", "read_world", "check_master_address",
           "free_port", "worker_environment"]

DEFAULT_TIMEOUT = 30.0
"""Seconds an RPC (and the rendezvous) may take before it fails; the
METAFUSE_RPC_TIMEOUT variable overrides it."""


DEFAULT_TRANSPORTS = ("uv",)
"""TensorPipe transports RPC uses (METAFUSE_RPC_TRANSPORTS overrides). Not
torch's default, which puts "shm" first on one host: the shm transport's
reactor thread busy-polls, and took 29-45% of a core in every process of a
world even while it was idle (measured over 3 s; "uv", libuv over TCP,
took 0.4%). On a machine with a core per worker that stolen time is what
kept 2 workers from being faster than 1."""

_KNOWN_TRANSPORTS = ("uv", "shm", "ibv")


class WorldConfigError(RuntimeError):
    """The process's world configuration is wrong; the message names the
    variable and how to fix it."""


def default_timeout():
    """The RPC timeout in seconds: METAFUSE_RPC_TIMEOUT, else 30.

    Raises:
        WorldConfigError: METAFUSE_RPC_TIMEOUT is not a positive number.
    """
    text = os.environ.get("METAFUSE_RPC_TIMEOUT", "")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise WorldConfigError(f"METAFUSE_RPC_TIMEOUT must be a positive number of "
                               f"seconds, got {text!r}")
    return value


def default_transports():
    """The TensorPipe transports: METAFUSE_RPC_TRANSPORTS (comma-separated,
    in order of preference, e.g. "shm,uv" for torch's own choice), else
    DEFAULT_TRANSPORTS.

    Returns:
        A list of str.

    Raises:
        WorldConfigError: a name is not a TensorPipe transport.
    """
    text = os.environ.get("METAFUSE_RPC_TRANSPORTS", "")
    if not text.strip():
        return list(DEFAULT_TRANSPORTS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in _KNOWN_TRANSPORTS]
    if unknown or not names:
        raise WorldConfigError(f"METAFUSE_RPC_TRANSPORTS must be a comma-separated list of "
                               f"{', '.join(_KNOWN_TRANSPORTS)}; got {text!r}")
    return names


def thread_share(processes, cpus=None):
    """Intra-op threads for each of ``processes`` processes on one host: the
    usable cores divided among them, at least 1 (so that N workers with
    OpenMP teams do not oversubscribe the cores; torchrun sets 1).

    Args:
        processes: processes on this host (positive int).
        cpus: usable cores (default: this process's CPU affinity).

    Returns:
        An int >= 1.
    """
    if not isinstance(processes, int) or processes < 1:
        raise ValueError(f"thread_share: `processes` must be a positive int, got {processes!r}")
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    return max(1, cpus // processes)


def _int_variable(name, default, minimum):
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise WorldConfigError(f"{name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise WorldConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def read_world():
    """(rank, world_size, local_rank, local_world_size) from the environment,
    checked for consistency (defaults: a world of one process).

    Returns:
        A tuple of four ints.

    Raises:
        WorldConfigError: a variable is not an integer, out of range, or
            inconsistent with another.
    """
    world_size = _int_variable("WORLD_SIZE", 1, 1)
    rank = _int_variable("RANK", 0, 0)
    local_world_size = _int_variable("LOCAL_WORLD_SIZE", 1, 1)
    local_rank = _int_variable("LOCAL_RANK", 0, 0)
    if rank >= world_size:
        raise WorldConfigError(f"RANK={rank} must be smaller than WORLD_SIZE={world_size}; "
                               "every process of one job needs the same WORLD_SIZE and a "
                               "distinct RANK in [0, WORLD_SIZE)")
    if local_rank >= local_world_size:
        raise WorldConfigError(f"LOCAL_RANK={local_rank} must be smaller than "
                               f"LOCAL_WORLD_SIZE={local_world_size}")
    if local_world_size > world_size:
        raise WorldConfigError(f"LOCAL_WORLD_SIZE={local_world_size} exceeds "
                               f"WORLD_SIZE={world_size}")
    return rank, world_size, local_rank, local_world_size


def check_master_address(rank):
    """Checks MASTER_ADDR and MASTER_PORT; on rank 0 also that the port is
    free (RPC's rendezvous listens there).

    Args:
        rank: this process's rank.

    Raises:
        WorldConfigError: a variable is missing or malformed, or the port is
            in use.
    """
    address = os.environ.get("MASTER_ADDR", "")
    if not address:
        raise WorldConfigError("MASTER_ADDR is not set: the address of the rank-0 "
                               "process is needed to start RPC. Launch with "
                               "`python3 -m metafuse.distributed.launch -n N script.py` "
                               "(or torchrun), or set MASTER_ADDR and MASTER_PORT")
    port = _int_variable("MASTER_PORT", None, 1)
    if port is None:
        raise WorldConfigError("MASTER_PORT is not set: the port of the rank-0 process "
                               "is needed to start RPC (the launcher picks a free one)")
    if port > 65535:
        raise WorldConfigError(f"MASTER_PORT must be a port number <= 65535, got {port}")
    if rank != 0:
        return
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(("", port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise WorldConfigError(f"MASTER_PORT={port} is already in use on this host; "
                                   "stop the process holding it or choose another port "
                                   "(the launcher's --master-port 0 picks a free one)") from None
        raise WorldConfigError(f"MASTER_PORT={port} cannot be used here ({exc})") from None
    finally:
        probe.close()


def free_port(address="127.0.0.1"):
    """A TCP port that was free on ``address`` a moment ago (int)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def worker_environment(local_rank, nproc_per_node, *, master_addr, master_port,
                       nnodes=1, node_rank=0, base=None, threads=None):
    """The environment of one worker process, as torchrun sets it, with
    OMP_NUM_THREADS set to the process's share of the cores unless ``base``
    sets it (OpenMP reads it in every thread at start; torch.set_num_threads
    later sets only the calling thread's, not RPC threads').

    Args:
        local_rank: the process's index on this node.
        nproc_per_node: processes on each node.
        master_addr, master_port: where rank 0 listens.
        nnodes, node_rank: the number of nodes and this node's index.
        base: the environment to extend (default: os.environ).
        threads: OMP_NUM_THREADS to set (overrides ``base``'s), or None for
            ``base``'s, else thread_share(nproc_per_node).

    Returns:
        A dict.
    """
    env = dict(os.environ if base is None else base)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    elif not env.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(thread_share(nproc_per_node))
    env.update(MASTER_ADDR=str(master_addr), MASTER_PORT=str(master_port),
               RANK=str(node_rank * nproc_per_node + local_rank),
               LOCAL_RANK=str(local_rank), WORLD_SIZE=str(nnodes * nproc_per_node),
               LOCAL_WORLD_SIZE=str(nproc_per_node),
               GROUP_RANK=str(node_rank), ROLE_RANK=str(node_rank * nproc_per_node + local_rank))
    return env
