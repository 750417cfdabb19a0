"""Start-up of a whole MAML meta-training step in fresh processes: compiling
it against loading its job artifact, with an empty and a filled kernel cache.

The step is examples/sinusoid_maml_job.py (MLP 1-40-40-1, meta-batch 4,
5 inner SGD steps with metafuse.grad, meta-gradient, outer SGD; float32).
Five configurations, each a fresh `/usr/bin/python3` per repeat, run in
alternating rounds; the artifact is signed with a key made for the run
(docs/aot.md, "Trust"):
  - compile, cold cache : metafuse.compile + first step, METAFUSE_CACHE_DIR an
                          empty directory (every kernel built by LLVM)
  - compile, warm cache : the same with the cache a previous run filled
  - load, cold cache    : metafuse.aot.load_job with the key + first step,
                          empty cache (the artifact's object code is linked)
  - load, warm cache    : the same with a filled cache
  - untrusted, cold cache: load_job without the key + first step, empty
                          cache (kernels printed from their kernel IR and
                          built here)
Each child reports the time from its imports being done to the first step's
result; the parent reports the whole process wall time too. Medians of the
repeats, ratios against "compile, cold cache", and the artifact's size.

    PYTHONPATH=frontend/python /usr/bin/python3 bench/aot_startup.py [--repeats 5]
"""

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "sinusoid_maml_job.py")

CHILD = r"""
import json, sys, time
import torch
import metafuse as mf
from metafuse import aot
torch.set_num_threads(1)
sys.path.insert(0, {examples!r})
import sinusoid_maml_job as example
mode, artifact = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if mode == "compile":
    data = example.example_args()
    state, metrics = mf.compile(example.meta_step)(data.state, *data.batches[0])
else:
    job = aot.load_job(artifact)
    state, metrics = job.step(job.state, 0)
loss = float(metrics["loss"])
print(json.dumps({{"ms": (time.perf_counter() - start) * 1e3, "loss": loss}}))
"""

CONFIGS = ("compile, cold cache", "compile, warm cache", "load, cold cache",
           "load, warm cache", "untrusted, cold cache")
KEY = secrets.token_hex(32)  # METAFUSE_ARTIFACT_KEY: signs and verifies the artifact


def child(mode, artifact, cache_dir, key=KEY):
    env = dict(os.environ, METAFUSE_CACHE_DIR=cache_dir, METAFUSE_ARTIFACT_KEY=key or "",
               PYTHONPATH=os.path.join(ROOT, "frontend", "python"))
    code = CHILD.format(examples=os.path.dirname(EXAMPLE))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, mode, artifact], env=env,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"child ({mode}) failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    work = tempfile.mkdtemp(prefix="metafuse-aot-startup-")
    artifact = os.path.join(work, "maml_job.mfa")
    warm = os.path.join(work, "warm-cache")
    made = subprocess.run([sys.executable, "-m", "metafuse", "compile",
                           f"{EXAMPLE}:meta_step", "-o", artifact],
                          env=dict(os.environ, METAFUSE_CACHE_DIR=warm, METAFUSE_ARTIFACT_KEY=KEY,
                                   PYTHONPATH=os.path.join(ROOT, "frontend", "python")),
                          capture_output=True, text=True, timeout=600)
    if made.returncode != 0:
        raise SystemExit(f"metafuse compile failed:\n{made.stderr[-2000:]}")
    child("load", artifact, warm)  # fills the warm cache with the loaded kernels too
    results = {name: [] for name in CONFIGS}
    for r in range(args.repeats):
        for name in CONFIGS:
            mode = "compile" if name.startswith("compile") else "load"
            cache = warm if "warm" in name else tempfile.mkdtemp(dir=work, prefix="cold-")
            key = None if name.startswith("untrusted") else KEY
            results[name].append(child(mode, artifact, cache, key))
    losses = {x["loss"] for rs in results.values() for x in rs}
    base = statistics.median(x["ms"] for x in results[CONFIGS[0]])
    print(f"MAML meta-step start-up (examples/sinusoid_maml_job.py), {args.repeats} fresh "
          "processes per configuration, 1 thread, medians")
    print(f"{'configuration':<23}{'to first step (ms)':>20}{'process wall (s)':>18}"
          f"{'speed-up':>10}")
    for name in CONFIGS:
        ms = statistics.median(x["ms"] for x in results[name])
        wall = statistics.median(x["wall_s"] for x in results[name])
        print(f"{name:<23}{ms:>20.1f}{wall:>18.2f}{base / ms:>9.1f}x")
    print(f"artifact size {os.path.getsize(artifact) / 1024:.1f} KiB; first-step losses "
          f"bit-equal across configurations: {len(losses) == 1}")


if __name__ == "__main__":
    main()
