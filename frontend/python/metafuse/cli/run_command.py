"""``metafuse run job.mfa [--steps N]``: trains a job artifact step after
step (each step's new state feeds the next; step i uses stored batch
i mod count), printing its metrics, with a progress bar on stderr for runs
longer than a second."""

import argparse
import json
import time

import torch

from metafuse.cli import artifacts
from metafuse.cli.errors import CliError
from metafuse.cli.progress import Progress


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "run", help="run a job artifact for some steps",
        description="Run the training step of a job artifact (made by `metafuse "
                    "compile` from a JobData example, or metafuse.aot.save_job) from "
                    "its stored initial state, each step's new state feeding the next.")
    parser.add_argument("artifact", metavar="JOB.mfa")
    parser.add_argument("--steps", type=_positive, default=None, metavar="N",
                        help="how many steps (default: one pass over the stored batches)")
    parser.add_argument("--every", type=_positive, default=None, metavar="K",
                        help="print the metrics every K steps (default: about 10 lines)")
    parser.add_argument("--json", metavar="PATH",
                        help="write every step's metrics (exact floats) to PATH")
    parser.add_argument("--save-state", metavar="PATH",
                        help="torch.save the final state to PATH")
    artifacts.add_trust_arguments(parser)
    parser.set_defaults(run=run)


def _format(metrics):
    return "  ".join(f"{name} {value:.6g}" for name, value in metrics.items())


def run(args):
    job = artifacts.load_job(args.artifact, artifacts.key(args), args.trust)
    steps = args.steps or len(job.batches)
    every = args.every or max(1, steps // 10)
    progress = Progress(steps)
    start = time.perf_counter()

    def report(index, metrics):
        if index % every == 0 or index == steps - 1:
            # Clear the in-place bar so the line is not glued to it.
            if progress.tty and progress.drawn:
                progress.stream.write("\r\033[K")
            print(f"step {index + 1:>{len(str(steps))}}/{steps}  {_format(metrics)}",
                  flush=True)
        progress.update(index + 1)

    try:
        state, history = job.run(steps, callback=report)
    except RuntimeError as exc:
        raise CliError(f"running {args.artifact} failed: {str(exc).splitlines()[0]}") from None
    finally:
        progress.close()
    seconds = time.perf_counter() - start
    first, last = history[0], history[-1]
    change = "  ".join(f"{k} {first[k]:.6g} -> {last[k]:.6g}" for k in job.metric_names)
    print(f"{steps} steps in {seconds:.2f} s ({1e3 * seconds / steps:.2f} ms/step): {change}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": steps, "metrics": history, "seconds": seconds}, f)
    if args.save_state:
        torch.save(state, args.save_state)
    return 0
