"""Starts the processes of a distributed job on this machine, setting what
torchrun sets (MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE), for where torchrun does not start (Debian's torch 1.13
on Python 3.11 fails in elastic's argument parsing).

    python3 -m metafuse.distributed.launch -n 2 examples/distributed_maml.py --steps 5
    python3 -m metafuse.distributed.launch --nnodes 2 --node-rank 0 \\
        --master-addr 10.0.0.1 --master-port 29500 -n 4 train.py

Each process gets OMP_NUM_THREADS = its share of the cores (at least 1),
unless the environment sets it or ``--threads`` says otherwise, so that N
workers' OpenMP teams do not oversubscribe the cores. The job ends when
every process has exited. If one fails (non-zero exit)
the others are stopped (SIGTERM, then SIGKILL) and its exit code is the
launcher's (as torchrun; with ``--keep-going`` only rank 0's failure
does, so that rank 0 can go on without a dead worker); after rank 0 succeeds the others get ``--grace`` seconds to
finish before they are stopped, so a hung worker never hangs the job.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

__all__ = ["launch", "main", "add_arguments", "run_parsed"]

from metafuse.distributed.config import free_port, worker_environment


def _stop(processes, wait=5.0):
    """SIGTERM to every live process group, SIGKILL to what is left after
    ``wait`` seconds; returns the local ranks that had to be stopped."""
    stopped = [r for r, p in enumerate(processes) if p.poll() is None]
    for r in stopped:
        try:
            os.killpg(processes[r].pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait
    for r in stopped:
        try:
            processes[r].wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(processes[r].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            processes[r].wait()
    return stopped


def _check_launch_arguments(command, nproc_per_node, nnodes, node_rank, master_port):
    if not command:
        raise ValueError("launch: `command` must name the program to run")
    if not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise ValueError(f"launch: `nproc_per_node` must be a positive int, got {nproc_per_node!r}")
    if not isinstance(nnodes, int) or nnodes < 1:
        raise ValueError(f"launch: `nnodes` must be a positive int, got {nnodes!r}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"launch: `node_rank` must be in [0, nnodes={nnodes}), got {node_rank}")
    if master_port == 0 and nnodes > 1:
        raise ValueError("launch: with several nodes `master_port` must be given (every node "
                         "needs the same one); 0 picks a free port on one machine only")


def launch(command, nproc_per_node, *, nnodes=1, node_rank=0, master_addr="127.0.0.1",
           master_port=0, grace=10.0, timeout=None, keep_going=False, log=None,
           threads=None):
    """Runs ``command`` in ``nproc_per_node`` processes with the world set.

    Args:
        command: the argv of each process (e.g. ``[sys.executable, "job.py"]``).
        nproc_per_node: processes on this node.
        nnodes, node_rank: the number of nodes and this node's index.
        master_addr, master_port: where rank 0 listens (port 0: a free one,
            on one machine only).
        grace: seconds the others may run on after rank 0 succeeded.
        timeout: seconds the whole job may take (None: no limit).
        keep_going: a worker other than rank 0 that fails does not stop the
            job (rank 0 gets WorkerError and may go on without it).
        log: where the launcher reports stopped processes (default stderr).
        threads: OMP_NUM_THREADS of each process (None: the environment's
            if set, else the cores divided among the node's processes).

    Returns:
        The job's exit code: the first failing process's, 124 on timeout,
        else 0.

    Raises:
        ValueError: an argument is out of range.
    """
    _check_launch_arguments(command, nproc_per_node, nnodes, node_rank, master_port)
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"launch: `threads` must be a positive int, got {threads!r}")
    port = master_port or free_port(master_addr)
    log = sys.stderr if log is None else log
    processes = []
    try:
        for local_rank in range(nproc_per_node):
            env = worker_environment(local_rank, nproc_per_node, master_addr=master_addr,
                                     master_port=port, nnodes=nnodes, node_rank=node_rank,
                                     threads=threads)
            processes.append(subprocess.Popen(command, env=env, start_new_session=True))
        return _supervise(processes, node_rank, grace, timeout, log, keep_going)
    finally:
        _stop(processes)


def _supervise(processes, node_rank, grace, timeout, log, keep_going=False):
    start = time.monotonic()
    rank0_done = None
    while True:
        codes = [p.poll() for p in processes]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if keep_going:  # only rank 0's failure ends the job; it sees the others' as WorkerError
            failed = [(r, c) for r, c in failed if r == 0 and node_rank == 0]
        if failed:
            rank, code = failed[0]
            stopped = _stop(processes)
            print(f"metafuse.distributed.launch: local rank {rank} exited with code {code}; "
                  f"stopped local ranks {stopped}", file=log)
            return code
        if all(c is not None for c in codes):
            return next((c for c in codes if c != 0), 0)
        now = time.monotonic()
        if node_rank == 0 and codes[0] == 0 and rank0_done is None:
            rank0_done = now
        if rank0_done is not None and now - rank0_done > grace:
            stopped = _stop(processes)
            print(f"metafuse.distributed.launch: rank 0 finished; local ranks {stopped} did "
                  f"not exit within {grace:g} s and were stopped", file=log)
            return 0
        if timeout is not None and now - start > timeout:
            stopped = _stop(processes)
            print(f"metafuse.distributed.launch: the job exceeded {timeout:g} s; stopped "
                  f"local ranks {stopped}", file=log)
            return 124
        time.sleep(0.05)


def add_arguments(parser):
    """Adds the launcher's options and positionals to ``parser`` (this
    module's command line and ``metafuse launch`` share them)."""
    parser.add_argument("-n", "--nproc-per-node", "--nproc_per_node", type=int, default=1,
                        dest="nproc_per_node", help="processes on this node (default 1)")
    parser.add_argument("--nnodes", type=int, default=1, help="number of nodes (default 1)")
    parser.add_argument("--node-rank", "--node_rank", type=int, default=0, dest="node_rank",
                        help="this node's index (default 0)")
    parser.add_argument("--master-addr", "--master_addr", default="127.0.0.1",
                        dest="master_addr", help="address of the rank-0 node")
    parser.add_argument("--master-port", "--master_port", type=int, default=0,
                        dest="master_port", help="port of rank 0 (default: a free one)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS of each process (default: OMP_NUM_THREADS if "
                             "set, else the cores divided among the processes)")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds the others may run after rank 0 succeeded")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds the whole job may take")
    parser.add_argument("--keep-going", action="store_true",
                        help="a failing worker other than rank 0 does not stop the job")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run the script argument as a module (python -m)")
    parser.add_argument("script", help="the Python script (or module with -m)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER,
                        help="the script's own arguments")
    return parser


DESCRIPTION = "Run a script in N local processes with the variables torchrun sets."


def run_parsed(args, parser):
    """Runs the job ``args`` (from add_arguments' options) describes.

    Returns:
        The job's exit code; bad values exit through ``parser.error`` (2).
    """
    target = ["-m", args.script] if args.module else [args.script]
    try:
        return launch([sys.executable, "-u", *target, *args.script_args], args.nproc_per_node,
                      nnodes=args.nnodes, node_rank=args.node_rank,
                      master_addr=args.master_addr, master_port=args.master_port,
                      grace=args.grace, timeout=args.timeout, keep_going=args.keep_going,
                      threads=args.threads)
    except ValueError as exc:
        parser.error(str(exc).removeprefix("launch: "))
    except KeyboardInterrupt:
        return 130


def main(argv=None):
    """The command line (see the module docstring). Returns the exit code."""
    parser = add_arguments(argparse.ArgumentParser(
        prog="python3 -m metafuse.distributed.launch", description=DESCRIPTION))
    try:
        return run_parsed(parser.parse_args(argv), parser)
    except SystemExit as exc:  # argparse's usage errors: 2, as a return value
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
