"""metafuse.vmap at 2 threads: the one batched program against parallel
chunks (one chunk of tasks per thread, _parallel_chunks), MAML sinusoid
(bench/maml_compiled.py's model and tasks, the meta-batch repeated to
--tasks), a call and its backward, the two alternating, medians of
--repeats and their ratio per meta-batch size.

    PYTHONPATH=frontend/python /usr/bin/python3 bench/vmap_parallel.py \\
        [--tasks 25,100,400] [--threads 2] [--repeats 21] [--json OUT]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import maml_compiled as mc  # noqa: E402

STRATEGIES = ("batched", "parallel")


def timed(variant, params, tasks):
    start = time.perf_counter()
    loss = variant.batched(params, *tasks).mean()
    torch.autograd.grad(loss, list(params.values()))
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="25,100,400")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--json", help="also write the measurements to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = mc.sample_tasks(torch.Generator().manual_seed(0))
    print(f"metafuse.vmap, MAML sinusoid, {args.threads} threads, a call and its backward, "
          f"median of {args.repeats} (alternating)")
    results = {}
    for count in (int(c) for c in args.tasks.split(",")):
        tasks = tuple(torch.cat([t] * -(-count // mc.META_BATCH))[:count] for t in base)
        variants = {}
        for strategy in STRATEGIES:  # each forced; compiled and warmed before timing
            os.environ["METAFUSE_VMAP_STRATEGY"] = strategy
            v = mc.Variant("compiled batched")
            params = dict(v.net.named_parameters())
            for _ in range(3):
                timed(v, params, tasks)
            variants[strategy] = (v, params)
        os.environ.pop("METAFUSE_VMAP_STRATEGY")
        times = {s: [] for s in STRATEGIES}
        for i in range(args.repeats):
            for s in (STRATEGIES if i % 2 == 0 else STRATEGIES[::-1]):
                times[s].append(timed(*variants[s], tasks))
        medians = {s: statistics.median(t) * 1e3 for s, t in times.items()}
        results[count] = medians
        print(f"  {count:4d} tasks: batched {medians['batched']:7.2f} ms, parallel "
              f"{medians['parallel']:7.2f} ms, batched / parallel "
              f"{medians['batched'] / medians['parallel']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "repeats": args.repeats, "median_ms": results},
                      f, indent=1)


if __name__ == "__main__":
    main()
