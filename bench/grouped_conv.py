"""One grouped convolution against its groups one after another (forward and
convolution_backward), the measurement behind compiler/fusion/split_grouped_convolutions:
the shapes of one Omniglot MAML layer batched over 4 tasks by metafuse.vmap.
Alternating, median of 5 after a warm-up.

    PYTHONPATH=$PWD/frontend/python /usr/bin/python3 bench/grouped_conv.py [--threads N]
"""

import argparse
import time

import torch


def median_ms(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tasks, images, channels, side = args.tasks, 80, 64, 14
    x = torch.randn(images, tasks * channels, side, side)
    w = torch.randn(tasks * channels, channels, 3, 3)
    gy = torch.randn(images, tasks * channels, side, side)
    xs = [x[:, t * channels:(t + 1) * channels].contiguous() for t in range(tasks)]
    gys = [gy[:, t * channels:(t + 1) * channels].contiguous() for t in range(tasks)]
    ws = list(w.chunk(tasks, 0))

    def backward(g, inp, weight, groups):
        return torch.ops.aten.convolution_backward(g, inp, weight, None, [1, 1], [1, 1], [1, 1],
                                                   False, [0, 0], groups, [True, True, False])

    variants = {
        "forward, grouped": lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=tasks),
        "forward, per group": lambda: torch.cat(
            [torch.nn.functional.conv2d(xs[t], ws[t], padding=1) for t in range(tasks)], 1),
        "backward, grouped": lambda: backward(gy, x, w, tasks),
        "backward, per group": lambda: [backward(gys[t], xs[t], ws[t], 1) for t in range(tasks)],
    }
    results = {name: [] for name in variants}
    for _ in range(2):  # alternating rounds
        for name, fn in variants.items():
            results[name].append(median_ms(fn))
    print(f"torch {torch.__version__}, {args.threads} thread(s), {tasks} tasks")
    for name, ms in results.items():
        print(f"{name:22s} {min(ms):9.1f} ms")
    for kind in ("forward", "backward"):
        ratio = min(results[f"{kind}, grouped"]) / min(results[f"{kind}, per group"])
        print(f"{kind}: per group is {ratio:.1f}x faster")


if __name__ == "__main__":
    main()
