"""torch.distributed's process group for the collective scheduler: started
from the environment torchrun sets, re-formed when a restarted rank
rejoins.

    todist.init_collectives()        # every rank, after torchrun started it
    scheduler = todist.TaskScheduler(task_loss)      # collectives: every rank

The back end is gloo where this rank runs on the CPU and NCCL where it has a
GPU (``worker_device()``). The rendezvous store (a TCPStore at
MASTER_ADDR:MASTER_PORT: torchrun's agent serves it, or rank 0 does when
the processes were started otherwise) stays up for the whole job, and
every process group after the first is formed on it under a generation's
prefix (``metafuse/generation``), so that a restarted rank finds the one
its peers are forming.
"""

import datetime
import os

import torch
import torch.distributed as dist

from metafuse.distributed.config import (WorldConfigError, check_master_address,
                                         default_timeout)
from metafuse.distributed.world import get_world_info, reread_world_info, worker_device

__all__ = ["init_collectives", "collective_backend", "rendezvous_store", "connect_store",
           "generation", "next_group_number", "reform"]

_GENERATION_KEY = "metafuse/generation"
_STATE = {}  # "store": the TCPStore, "backend", "timeout": the group's


def collective_backend(device=None):
    """"nccl" for a CUDA device, else "gloo" (``device``: default this
    rank's ``worker_device()``)."""
    device = worker_device() if device is None else torch.device(device)
    return "nccl" if device.type == "cuda" else "gloo"


def _under_torchrun():
    # torchrun's agent serves the store; its workers connect as clients.
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"


def _timedelta(seconds):
    return datetime.timedelta(seconds=seconds)


def connect_store(timeout=None, serve=False):
    """A new connection to the job's rendezvous store at MASTER_ADDR:MASTER_PORT
    (``serve``: this process serves it).

    Raises:
        WorldConfigError: MASTER_ADDR or MASTER_PORT is missing or wrong.
    """
    if serve or not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
        check_master_address(0 if serve else 1)  # names a missing or wrong variable
    seconds = default_timeout() if timeout is None else timeout
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, serve,
                         _timedelta(seconds), wait_for_workers=False)


def rendezvous_store(timeout=None):
    """This process's connection to the job's rendezvous store (made on
    first use). ``init_collectives`` on rank 0 serves it, unless torchrun's
    agent does; a process group started otherwise (``init_process_group``
    with env://) has its own server there, which this connects to.
    """
    if "store" not in _STATE:
        serve = (_STATE.get("may_serve", False) and get_world_info().rank == 0
                 and not _under_torchrun())
        _STATE["store"] = connect_store(timeout, serve)
    return _STATE["store"]


def generation():
    """The number of process groups this job has formed so far, less one
    (0 for the first; the store's ``metafuse/generation``)."""
    store = rendezvous_store()
    return int(store.add(_GENERATION_KEY, 0))


def next_group_number():
    """(this process's group generation, how many schedulers formed their
    groups in it before): every rank forms them in the same order, so the
    pair names the same scheduler on every rank."""
    number = _STATE.get("generation", 0)
    count = _STATE.setdefault("groups", {}).get(number, 0)
    _STATE["groups"][number] = count + 1
    return number, count


def _form(number):
    info = get_world_info()
    store = dist.PrefixStore(f"metafuse/group{number}/", rendezvous_store())
    dist.init_process_group(_STATE["backend"], store=store, rank=info.rank,
                            world_size=info.world_size, timeout=_timedelta(_STATE["timeout"]))
    _STATE["generation"] = number
    rendezvous_store().set(f"metafuse/formed/{number}", "1")


def _joining_generation():
    """The generation this process joins: the current one if it is still
    forming, else (a restarted rank: its peers formed it and run) the next
    one, once the others open it (``reform``), within the timeout."""
    store = rendezvous_store()
    number = generation()
    if not store.check([f"metafuse/formed/{number}"]):
        return number
    store.wait([f"metafuse/open/{number + 1}"], _timedelta(_STATE["timeout"]))
    return number + 1


def init_collectives(backend=None, timeout=None):
    """Starts torch.distributed's default process group for this rank from
    the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: torchrun's),
    with its GPU as the current device where it has one. A rank restarted
    while the others run (after a RankError) joins the group they re-form
    (``CollectiveScheduler.regroup``).

    Args:
        backend: "gloo", "nccl", or None (``collective_backend()``).
        timeout: seconds the rendezvous and every collective may take
            (default: METAFUSE_RPC_TIMEOUT, 30).

    Returns:
        This process's WorldInfo.

    Raises:
        WorldConfigError: the environment is wrong, or the rendezvous did
            not complete within ``timeout`` (the message names what to check).
    """
    info = reread_world_info()
    device = worker_device(info.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _STATE["backend"] = collective_backend(device) if backend is None else backend
    _STATE["timeout"] = default_timeout() if timeout is None else float(timeout)
    _STATE["may_serve"] = True
    try:
        _form(_joining_generation())
    except RuntimeError as exc:  # torch's DistError (2.x) is one
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise WorldConfigError(
            f"torch.distributed start-up of rank {info.rank} (WORLD_SIZE={info.world_size}) at "
            f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} failed within "
            f"{_STATE['timeout']:g} s: {first}. Check that all WORLD_SIZE processes were "
            "started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE and distinct "
            "RANKs") from None
    return info


def reform():
    """Destroys this process's default group and forms the next
    generation's with the same ranks (a restarted rank joins it through
    ``init_collectives``); every rank still running calls it.

    Returns:
        The new generation number.

    Raises:
        RuntimeError: ``init_collectives`` did not start this process's group.
    """
    if "backend" not in _STATE:
        raise RuntimeError("reform: the process group was not started by "
                           "metafuse.distributed.init_collectives, so it cannot be re-formed")
    number = _STATE["generation"] + 1
    store = rendezvous_store()
    # Every survivor moves the counter to the same value (compare_set from
    # the old one: one that comes later finds it moved already), then opens
    # the generation for the restarted rank.
    store.compare_set(_GENERATION_KEY, str(number - 1), str(number))
    store.set(f"metafuse/open/{number}", "1")
    dist.destroy_process_group()
    _form(number)
    return number
