"""The capture fronts against each other on torch 2.x: make_fx converted by
metafuse/compile/fx_graph.py ("fx", the default) versus TorchScript's
deprecated tracer ("torchscript", METAFUSE_CAPTURE=torchscript), in one
run, alternating.

Each round runs bench/maml_compiled.py (the main job: MAML sinusoid, 1
thread) once per front, in fronts' alternating order, in fresh processes,
and optionally bench/sweep.py's conv cell with the metafuse variants. It
reports per front the median over rounds of the steady meta-step times
(compiled per task, compiled batched), the compile latencies (batched
meta-step cold, first task cold and warm) and the conv cell's times, and
the ratio fx / torchscript (below 1: fx is faster).

    .venv/bin/python bench/capture_fronts.py [--rounds 3] [--iterations 60]
        [--conv] [--no-main] [--json FILE]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTS = ("fx", "torchscript")


def run_main_job(front, iterations):
    """bench/maml_compiled.py's JSON under one capture front."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, METAFUSE_CAPTURE=front, PYTHONWARNINGS="ignore")
        subprocess.run([sys.executable, os.path.join(HERE, "maml_compiled.py"),
                        "--iterations", str(iterations), "--json", out.name],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            result = json.load(f)
    compile_ = result["compile"]
    return {"per task ms": result["median_ms"]["compiled per task"],
            "batched ms": result["median_ms"]["compiled batched"],
            "eager ms": result["median_ms"]["eager unfused"],
            "batched cold first step ms": compile_["batched_cold"]["first_step_ms"],
            "first task cold ms": compile_["cold"]["first_task_ms"],
            "first task warm ms": compile_["warm"]["first_task_ms"]}


def run_conv(front):
    """bench/sweep.py's conv cell (1 thread, SGD), metafuse variants."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, METAFUSE_CAPTURE=front, PYTHONWARNINGS="ignore")
        subprocess.run([sys.executable, os.path.join(HERE, "sweep.py"), "--models", "conv",
                        "--threads", "1", "--optimizers", "sgd", "--repeats", "5",
                        "--no-memory", "--variants", "metafuse compiled", "--json", out.name],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            result = json.load(f)
    times = {}
    for cell in result["cells"].values():  # "conv/sgd" -> {threads: {variant: ...}}
        for variant, measured in cell["1"].items():
            times[f"conv {variant} ms"] = measured["median_ms"]
            if measured.get("fallback"):
                raise RuntimeError(f"{front}: conv {variant} fell back: {measured['fallback']}")
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--conv", action="store_true", help="also the sweep's conv cell")
    parser.add_argument("--no-main", action="store_true", help="leave out the main job")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.rounds < 1 or args.iterations < 2:
        parser.error("--rounds must be >= 1 and --iterations >= 2")
    if args.no_main and not args.conv:
        parser.error("--no-main needs --conv (nothing would run)")
    runs = {front: [] for front in FRONTS}
    for r in range(args.rounds):
        order = FRONTS if r % 2 == 0 else FRONTS[::-1]
        for front in order:
            measured = {} if args.no_main else run_main_job(front, args.iterations)
            if args.conv:
                measured.update(run_conv(front))
            runs[front].append(measured)
            print(f"round {r + 1}, {front}: " + ", ".join(
                f"{k} {v:.1f}" for k, v in measured.items()), flush=True)
    keys = [k for k in runs["fx"][0] if all(k in m for ms in runs.values() for m in ms)]
    medians = {front: {k: statistics.median(m[k] for m in ms) for k in keys}
               for front, ms in runs.items()}
    print(f"\nmedians of {args.rounds} rounds (fx / torchscript: below 1, fx is faster)")
    print(f"  {'':28s} {'fx':>10s} {'torchscript':>12s} {'ratio':>7s}")
    for k in keys:
        fx, ts = medians["fx"][k], medians["torchscript"][k]
        print(f"  {k:28s} {fx:10.1f} {ts:12.1f} {fx / ts:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "iterations": args.iterations, "runs": runs,
                       "medians": medians}, f, indent=1)


if __name__ == "__main__":
    main()
