"""metafuse.tree versus torch.utils._pytree on the same trees, same run.

Run from the repository root after a build:
    PYTHONPATH=frontend/python /usr/bin/python3 bench/tree_bench.py

Prints, for every (tree, operation), the median time per call over several
repeats for both libraries and the ratio torch / metafuse (higher is better
for metafuse). optree is not installed here (PyPI is unreachable), so it is
not part of the comparison.
"""

import argparse
import collections
import statistics
import timeit

import torch
import torch.utils._pytree as tp

from metafuse import tree as mt


def resnet_like_params():
    """A ResNet-18-shaped named-parameter dict (62 tensors, flat, str keys)."""
    params = {"conv1.weight": torch.zeros(1), "bn1.weight": torch.zeros(1),
              "bn1.bias": torch.zeros(1)}
    for layer in range(1, 5):
        for block in range(2):
            prefix = f"layer{layer}.{block}."
            for name in ("conv1", "bn1", "conv2", "bn2"):
                params[prefix + name + ".weight"] = torch.zeros(1)
                if name.startswith("bn"):
                    params[prefix + name + ".bias"] = torch.zeros(1)
            if block == 0 and layer > 1:
                params[prefix + "downsample.0.weight"] = torch.zeros(1)
                params[prefix + "downsample.1.weight"] = torch.zeros(1)
                params[prefix + "downsample.1.bias"] = torch.zeros(1)
    params["fc.weight"] = torch.zeros(1)
    params["fc.bias"] = torch.zeros(1)
    return params


AdamState = collections.namedtuple("AdamState", ["mu", "nu", "count"])
EmptyState = collections.namedtuple("EmptyState", [])


def nested_module_params():
    """Module-shaped nesting: {'layer1': {'0': {'conv1': {'weight': t}}}}."""
    root = {}
    for name, value in resnet_like_params().items():
        node = root
        *path, leaf = name.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return root


def optimizer_state():
    """An Optax/TorchOpt-style chained state: (AdamState(mu, nu, count), ...)."""
    params = resnet_like_params()
    mu = {k: torch.zeros(1) for k in params}
    nu = {k: torch.zeros(1) for k in params}
    return (AdamState(mu, nu, torch.zeros(())), EmptyState(),
            [AdamState(nested_module_params(), nested_module_params(), torch.zeros(()))])


def small_tree():
    return {"w": torch.zeros(1), "b": torch.zeros(1), "state": (torch.zeros(1), [])}


def torch_map2(f, a, b):
    """torch 1.13's tree_map is unary; the usual binary form."""
    la, spec = tp.tree_flatten(a)
    lb, _ = tp.tree_flatten(b)
    return tp.tree_unflatten([f(x, y) for x, y in zip(la, lb)], spec)


def calibrate(fn, budget):
    """Calls per timed repeat so that one repeat takes about `budget` seconds."""
    return max(1, int(budget / max(timeit.timeit(fn, number=3) / 3, 1e-9)))


def median_times(fns, repeats, budget):
    """Median seconds per call of each fn; repeats interleaved across the fns so
    that load from other processes hits all of them alike."""
    numbers = [calibrate(fn, budget) for fn in fns]
    samples = [[] for _ in fns]
    for _ in range(repeats):
        for fn, number, out in zip(fns, numbers, samples):
            out.append(timeit.timeit(fn, number=number) / number)
    return [statistics.median(s) for s in samples]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget", type=float, default=0.02,
                        help="seconds per repeat")
    args = parser.parse_args()
    ident = lambda x: x  # noqa: E731
    first = lambda x, y: x  # noqa: E731
    trees = {
        "resnet18 params (flat dict, 62 leaves)": resnet_like_params(),
        "resnet18 params (nested modules)": nested_module_params(),
        "adam state (namedtuples of dicts)": optimizer_state(),
        "small dict (4 leaves)": small_tree(),
    }
    print(f"torch {torch.__version__}; median of {args.repeats} repeats; "
          "ratio = torch.utils._pytree time / metafuse.tree time")
    print(f"{'tree':40s} {'operation':24s} {'torch (us)':>11s} {'metafuse (us)':>14s} "
          f"{'ratio':>7s}")
    for name, tree in trees.items():
        leaves, spec = mt.flatten(tree)
        tleaves, tspec = tp.tree_flatten(tree)

        cases = [
            ("flatten", lambda: tp.tree_flatten(tree), lambda: mt.flatten(tree)),
            ("flatten (cache off)", lambda: tp.tree_flatten(tree), lambda: mt.flatten(tree)),
            ("flatten_as (known spec)", lambda: tp.tree_flatten(tree),
             lambda: mt.flatten_as(spec, tree)),
            ("unflatten", lambda: tp.tree_unflatten(tleaves, tspec),
             lambda: mt.unflatten(spec, leaves)),
            ("map (unary)", lambda: tp.tree_map(ident, tree), lambda: mt.map(ident, tree)),
            ("map (binary)", lambda: torch_map2(first, tree, tree),
             lambda: mt.map(first, tree, tree)),
        ]
        for op, torch_fn, mf_fn in cases:
            mt.set_cache_enabled("cache off" not in op)
            try:
                t_torch, t_mf = median_times([torch_fn, mf_fn], args.repeats, args.budget)
            finally:
                mt.set_cache_enabled(True)
            print(f"{name:40s} {op:24s} {t_torch * 1e6:11.2f} {t_mf * 1e6:14.2f} "
                  f"{t_torch / t_mf:6.1f}x")


if __name__ == "__main__":
    main()
