"""The collective scheduler across "hosts": ranks in two network namespaces
joined by a veth link (hosts.py; rendezvous over TCP on the link's
addresses), and the same failure checks on this host, where namespaces
cannot be made. Each job's ranks are collective_job.py."""

import json
import os
import subprocess
import sys
import time

import pytest

from hosts import Hosts
from package_under_test import PACKAGE_DIR

from metafuse.distributed.config import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "collective_job.py")
LIMIT = 30.0  # seconds in which every other rank must have named a failed one
NO_HOSTS = Hosts.unavailable()
needs_hosts = pytest.mark.skipif(NO_HOSTS is not None, reason=f"no network namespaces: "
                                 f"{NO_HOSTS}; the same failure checks run on this host")


def _env(rank, master, port, link=None, **extra):
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, OMP_NUM_THREADS="1", MASTER_ADDR=master,
               MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE="2",
               LOCAL_WORLD_SIZE="1", **extra)
    if link is not None:
        env["GLOO_SOCKET_IFNAME"] = link  # gloo's address: the one on the link
    return env


def _wait_for(path, processes, limit):
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {limit} s")
        dead = [p.returncode for p in processes if p.poll() not in (None, 0)]
        if dead:
            raise AssertionError(f"a rank failed (exit codes {dead}) before {path}")
        time.sleep(0.05)
    time.sleep(0.05)  # written whole
    with open(path) as f:
        return f.read()


def _finish(processes, limit=60):
    """Waits up to ``limit`` seconds for the processes, then kills the rest."""
    deadline = time.monotonic() + limit
    try:
        for p in processes:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()


def _read(tmp_path, name):
    return json.loads((tmp_path / name).read_text())


def _start(hosts, rank, argv, env):
    if hosts is None:
        return subprocess.Popen(argv, env=env)
    return hosts.popen(rank, argv, env)


def _rejoin_job(tmp_path, hosts):
    """Rank 1 dies in meta-step 1; once rank 0 named it, rank 1 is restarted
    and both run the next meta-step."""
    master = "127.0.0.1" if hosts is None else hosts.addresses[0]
    port = free_port()
    links = [None, None] if hosts is None else hosts.links
    argv = [sys.executable, JOB, "rejoin", str(tmp_path)]
    ranks = [_start(hosts, r, argv, _env(r, master, port, links[r])) for r in (0, 1)]
    try:
        _wait_for(tmp_path / "failure-seen", ranks[:1], 90)
        ranks.append(_start(hosts, 1, argv, _env(1, master, port, links[1],
                                                 METAFUSE_TEST_REJOINED="1")))
    finally:
        _finish(ranks)
    assert ranks[0].returncode == 0 and ranks[2].returncode == 0, [p.returncode for p in ranks]
    return _read(tmp_path, "rank0.json"), _read(tmp_path, "rank1-rejoined.json")


def _check_named(failed, reason):
    assert failed["raised"] is not None
    assert failed["ranks"] == [1] and failed["reason"] == reason, failed
    assert failed["raised"].startswith("rank 1 "), failed["raised"]
    assert failed["seconds"] < LIMIT, failed  # named in bounded time, no hang
    assert failed["params untouched"] and failed["grads untouched"]


def _check_rejoined(seen, rejoined):
    _check_named(seen["failed"], "silent")
    assert seen["rejoined step exact"] and rejoined["rejoined step exact"]
    assert seen["rejoined partition"] == [[0, 0, 3], [1, 3, 6]]


def test_a_killed_rank_is_named_and_a_restarted_one_rejoins_on_this_host(tmp_path):
    seen, rejoined = _rejoin_job(tmp_path, None)
    _check_rejoined(seen, rejoined)


@needs_hosts
def test_across_hosts_a_killed_rank_is_named_and_a_restarted_one_rejoins(tmp_path):
    with Hosts() as hosts:
        seen, rejoined = _rejoin_job(tmp_path, hosts)
    _check_rejoined(seen, rejoined)


@needs_hosts
def test_a_rank_whose_host_is_cut_off_is_named(tmp_path):
    with Hosts() as hosts:
        port = free_port()
        argv = [sys.executable, JOB, "cut", str(tmp_path)]
        ranks = [hosts.popen(r, argv, _env(r, hosts.addresses[0], port, hosts.links[r]))
                 for r in (0, 1)]
        try:
            _wait_for(tmp_path / "cut-me", ranks, 90)
            hosts.cut(1)
            _wait_for(tmp_path / "rank0.json", ranks[:1], 60)
        finally:
            _finish(ranks, 0)
    _check_named(_read(tmp_path, "rank0.json")["failed"], "silent")


@needs_hosts
def test_torchrun_across_hosts_gives_the_single_process_meta_gradient(tmp_path):
    with Hosts() as hosts:
        port = free_port()
        nodes = []
        for node in (0, 1):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                    "--nproc-per-node", "1", "--node-rank", str(node), "--master-addr",
                    hosts.addresses[0], "--master-port", str(port), JOB, "equal", str(tmp_path)]
            env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, OMP_NUM_THREADS="1",
                       GLOO_SOCKET_IFNAME=hosts.links[node])
            nodes.append(hosts.popen(node, argv, env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True))
        _finish(nodes, 120)
        logs = [p.stdout.read()[-3000:] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], logs
    for rank in (0, 1):
        seen = _read(tmp_path, f"rank{rank}.json")
        assert seen["backend"] == "gloo"
        assert seen["batched False"] and seen["batched True"], seen
