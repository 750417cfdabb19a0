"""Meta-step sweep (issue 15): models x threads x inner optimizer x variants.

Models (float32, synthetic data, outer metafuse.Adam 1e-3):
  - sinusoid: MLP 1-40-40-1, 25 tasks, 10 support + 10 query shots, MSE
  - conv:     the Omniglot MAML net: 4 x [conv 3x3 64, BatchNorm2d
              (track_running_stats=False), ReLU, MaxPool2d(2)], flatten,
              Linear to 5 ways; 1x28x28 inputs, 5-way 1-shot, 15 queries per
              class, meta-batch 4 (--small: 32 channels, 3 queries per class)
  - resnet:   a residual net: conv-BN-ReLU stem, one block conv-BN-ReLU-conv-BN
              + skip, ReLU, global average pool, Linear; 3x16x16 images, 5-way
              1-shot, 5 queries per class, meta-batch 4
  - gru:      a GRU policy for meta-RL: a GRU cell (gates written from Linear
              layers) over 8 observations, a linear head to 4 action logits,
              the policy-gradient surrogate -mean(log pi(a|s) * advantage) on
              synthetic trajectories; 10 tasks of 10 + 10 trajectories
Inner loop: 5 steps of SGD (the model's rate) or Adam (metafuse.adam, lr
0.01 for the MLP and GRU, 0.001 for the conv nets, eps_root=1e-10 for a
finite second order).

Variants, alternating meta-steps in one run on the same tasks:
  - eager metafuse : MetaSGD / MetaAdam on the nn.Module, task by task (the
                     TorchOpt idiom)
  - plain PyTorch  : a dict of params, torch.autograd.grad(create_graph=True)
                     and the update written out, task by task
  - functorch vmap : the tasks vmapped, the inner gradient functorch.grad
  - compiled per task: metafuse.compile_inner_loop, task by task
  - compiled batched : metafuse.vmap of adapt + query loss (one program for
                     the meta-batch)
  - compiled chunked : with --chunk-size K only: the same metafuse.vmap with
                     chunk_size=K (K tasks' saved values alive at a time, each
                     chunk run again in the backward)
Each thread count runs in its own process (torch.set_num_threads and
OMP_NUM_THREADS; an empty kernel cache of its own, so the first call of a
compiled variant is a cold compile). Peak tensor memory: one fresh process
per (model, optimizer, variant), 1 thread, like bench/maml_compiled.py.

    PYTHONPATH=frontend/python /usr/bin/python3 bench/sweep.py \\
        [--models sinusoid,conv,resnet,gru] [--threads 1,2] \\
        [--optimizers sgd,adam] [--repeats N] [--small] [--chunk-size K] \\
        [--json OUT]
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

import metafuse as mf

VARIANTS = ("eager metafuse", "plain PyTorch", "functorch vmap", "compiled per task",
            "compiled batched")
CHUNKED = "compiled chunked"
COMPILED = ("compiled per task", "compiled batched", CHUNKED)
CHUNK_SIZE = None  # --chunk-size: adds the CHUNKED variant


def variant_names():
    return VARIANTS + ((CHUNKED,) if CHUNK_SIZE else ())
INNER_STEPS = 5
ADAM_EPS_ROOT = 1e-10
# Meta-gradients of the first meta-step, each variant's: the largest over
# parameter tensors of max|g - g_ref| / max(max|g_ref|, 1% of the largest
# entry of any tensor) (a conv bias before BatchNorm has a gradient that is
# 0 up to rounding: it is measured against the 1%).
# - float32 runs: against a float64 truth (plain PyTorch in float64, same
#   weights and tasks). float32 rounding is amplified by 5 inner steps at lr
#   0.4 and by Adam's 1/sqrt(nu): plain PyTorch itself is ~5e-3 off the truth
#   on the conv net with Adam. A variant is flagged when it is more than
#   TRUTH_FACTOR times as far from the truth as plain PyTorch float32 (a
#   wrong derivative is off by O(1); another valid rounding order, by the
#   same order as plain's). The difference to plain float32 is shown too.
# - float64 runs (--float64): against plain PyTorch float64, to
#   FLOAT64_TOLERANCE.
TRUTH_FACTOR = 10
FLOAT64_TOLERANCE = 1e-10


# ----------------------------------------------------------------- models

class Sinusoid:
    name, meta_batch, sgd_lr, adam_lr = "sinusoid", 25, 0.01, 0.01
    shots = 10

    def __init__(self, small):
        del small

    def net(self):
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(1, 40), torch.nn.ReLU(), torch.nn.Linear(40, 40),
            torch.nn.ReLU(), torch.nn.Linear(40, 1))

    def tasks(self, g):
        n = self.meta_batch
        amplitude = 0.1 + 4.9 * torch.rand(n, 1, 1, generator=g)
        phase = math.pi * torch.rand(n, 1, 1, generator=g)
        x = 10 * torch.rand(n, 2 * self.shots, 1, generator=g) - 5
        y = amplitude * torch.sin(x + phase)
        return (x[:, :self.shots], y[:, :self.shots]), (x[:, self.shots:], y[:, self.shots:])

    @staticmethod
    def criterion(out, y):
        return F.mse_loss(out, y)


def conv_block(cin, cout):
    return [torch.nn.Conv2d(cin, cout, 3, padding=1),
            torch.nn.BatchNorm2d(cout, track_running_stats=False), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2)]


def few_shot_images(g, meta_batch, ways, queries, shape):
    """Per task and class a random prototype; support (1 shot) and queries
    are the prototype plus noise."""
    protos = torch.randn(meta_batch, ways, *shape, generator=g)

    def draw(per_class):
        x = protos.repeat_interleave(per_class, dim=1)
        x = x + 0.5 * torch.randn(x.shape, generator=g)
        y = torch.arange(ways).repeat_interleave(per_class).expand(meta_batch, -1)
        return x, y.contiguous()

    return draw(1), draw(queries)


class FewShot:
    """5-way 1-shot classification on synthetic images of `image` shape."""
    meta_batch, ways, adam_lr = 4, 5, 0.001

    def tasks(self, g):
        return few_shot_images(g, self.meta_batch, self.ways, self.queries, self.image)

    @staticmethod
    def criterion(out, y):
        return F.cross_entropy(out, y)


class Conv(FewShot):
    name, sgd_lr, image = "conv", 0.4, (1, 28, 28)

    def __init__(self, small):
        self.channels, self.queries = (32, 3) if small else (64, 15)

    def net(self):
        torch.manual_seed(0)
        c = self.channels
        return torch.nn.Sequential(*conv_block(1, c), *conv_block(c, c), *conv_block(c, c),
                                   *conv_block(c, c), torch.nn.Flatten(),
                                   torch.nn.Linear(c, self.ways))


class ResidualNet(torch.nn.Module):
    def __init__(self, channels, ways):
        super().__init__()
        bn = lambda: torch.nn.BatchNorm2d(channels, track_running_stats=False)  # noqa: E731
        conv = lambda: torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)  # noqa
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, channels, 3, padding=1), bn(),
                                        torch.nn.ReLU())
        self.block = torch.nn.Sequential(conv(), bn(), torch.nn.ReLU(), conv(), bn())
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(channels, ways)

    def forward(self, x):
        h = self.stem(x)
        h = F.relu(h + self.block(h))
        return self.head(self.pool(h).flatten(1))


class ResNet(FewShot):
    name, sgd_lr, image, channels, queries = "resnet", 0.1, (3, 16, 16), 16, 5

    def __init__(self, small):
        del small

    def net(self):
        torch.manual_seed(0)
        return ResidualNet(self.channels, self.ways)


class GRUPolicy(torch.nn.Module):
    """GRU cell h' = (1 - z) n + z h with r, z, n from one Linear per gate
    and input (nn.GRUCell traces to in-place ops the compiler does not take).
    The observations come as a tuple of steps (x[:, t] is aten::select,
    outside the compiler's primitive set); h0 = 0, so the first step reads
    only the hidden biases."""

    def __init__(self, obs, hidden, actions):
        super().__init__()
        self.xr, self.xz, self.xn = (torch.nn.Linear(obs, hidden) for _ in range(3))
        self.hr, self.hz, self.hn = (torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.head = torch.nn.Linear(hidden, actions)

    def forward(self, steps):
        h, logits = None, []
        for x in steps:
            hr, hz, hn = ((self.hr.bias, self.hz.bias, self.hn.bias) if h is None
                          else (self.hr(h), self.hz(h), self.hn(h)))
            r = torch.sigmoid(self.xr(x) + hr)
            z = torch.sigmoid(self.xz(x) + hz)
            n = torch.tanh(self.xn(x) + r * hn)
            h = (1 - z) * n if h is None else (1 - z) * n + z * h
            logits.append(self.head(h))
        return torch.stack(logits, 1)


class GRU:
    name, meta_batch, sgd_lr, adam_lr = "gru", 10, 0.1, 0.01
    obs, hidden, actions, length, episodes = 4, 32, 4, 8, 10

    def __init__(self, small):
        del small

    def net(self):
        torch.manual_seed(0)
        return GRUPolicy(self.obs, self.hidden, self.actions)

    def tasks(self, g):
        shape = (self.meta_batch, self.episodes)

        def draw():
            steps = tuple(torch.randn(*shape, self.obs, generator=g) for _ in range(self.length))
            actions = torch.randint(self.actions, shape + (self.length,), generator=g)
            advantages = torch.randn(shape + (self.length,), generator=g)
            return steps, actions, advantages

        return draw(), draw()

    @staticmethod
    def criterion(logits, actions, advantages):
        logp = F.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return -(logp * advantages).mean()


MODELS = {m.name: m for m in (Sinusoid, Conv, ResNet, GRU)}


# --------------------------------------------------------------- variants

def task_slice(batch, t):
    """Task t of a batch tuple whose leaves have a leading task dimension."""
    return tuple(tuple(x[t] for x in b) if isinstance(b, tuple) else b[t] for b in batch)


def written_out_update(opt, lr, params, grads, state, step):
    """Plain PyTorch's inner update, written out: SGD, or Adam with metafuse's
    formula (eps_root inside the square root)."""
    if opt == "sgd":
        return {k: params[k] - lr * grads[k] for k in params}, state
    b1, b2, eps = 0.9, 0.999, 1e-8
    mu = {k: b1 * state[0][k] + (1 - b1) * grads[k] for k in params}
    nu = {k: b2 * state[1][k] + (1 - b2) * grads[k] * grads[k] for k in params}
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    new = {k: params[k] - lr * (mu[k] / bc1) / (torch.sqrt(nu[k] / bc2 + ADAM_EPS_ROOT) + eps)
           for k in params}
    return new, (mu, nu)


def zero_state(params):
    return ({k: torch.zeros_like(v) for k, v in params.items()},
            {k: torch.zeros_like(v) for k, v in params.items()})


class Variant:
    """One variant of one (model, optimizer) cell, with its own copy of the
    net (same initial weights) and outer optimizer."""

    def __init__(self, name, model, opt):
        self.name, self.model, self.opt = name, model, opt
        self.lr = model.sgd_lr if opt == "sgd" else model.adam_lr
        self.net = model.net()
        self.outer = mf.Adam(self.net.parameters(), lr=1e-3)
        self.adapt = self.batched = None
        if name in COMPILED:
            tx = mf.sgd(self.lr) if opt == "sgd" else mf.adam(self.lr, eps_root=ADAM_EPS_ROOT)
            self.adapt = mf.compile_inner_loop(self.compiled_loss, tx, steps=INNER_STEPS)
        if name in ("compiled batched", CHUNKED):
            self.batched = mf.vmap(
                lambda p, s, q: self.compiled_loss(self.adapt(p, *s), *q), in_dims=(None, 0, 0),
                chunk_size=CHUNK_SIZE if name == CHUNKED else None)
        self.run = {"eager metafuse": self.eager, "plain PyTorch": self.plain,
                    "functorch vmap": self.functorch, "compiled per task": self.per_task,
                    "compiled batched": self.batched_loss, CHUNKED: self.batched_loss}[name]

    def compiled_loss(self, p, x, *targets):
        return self.model.criterion(mf.functional_call(self.net, p, x), *targets)

    def eager(self, support, query):
        cls, options = ((mf.MetaSGD, {}) if self.opt == "sgd"
                        else (mf.MetaAdam, {"eps_root": ADAM_EPS_ROOT}))
        initial = mf.extract_state_dict(self.net)
        n, total = self.model.meta_batch, 0.0
        for t in range(n):
            (x, *ys), (xq, *yq) = task_slice(support, t), task_slice(query, t)
            inner = cls(self.net, lr=self.lr, **options)
            for _ in range(INNER_STEPS):
                inner.step(self.model.criterion(self.net(x), *ys))
            loss = self.model.criterion(self.net(xq), *yq) / n
            loss.backward()
            total += float(loss)
            mf.recover_state_dict(self.net, initial)
        return total

    def plain(self, support, query):
        call = torch.nn.utils.stateless.functional_call
        meta = dict(self.net.named_parameters())
        n, total = self.model.meta_batch, 0.0
        for t in range(n):
            (x, *ys), (xq, *yq) = task_slice(support, t), task_slice(query, t)
            params, state = meta, zero_state(meta)
            for step in range(1, INNER_STEPS + 1):
                loss = self.model.criterion(call(self.net, params, (x,)), *ys)
                grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()),
                                                             create_graph=True)))
                params, state = written_out_update(self.opt, self.lr, params, grads, state,
                                                   step)
            loss = self.model.criterion(call(self.net, params, (xq,)), *yq) / n
            loss.backward()
            total += float(loss)
        return total

    def functorch(self, support, query):
        import functorch
        call = torch.nn.utils.stateless.functional_call  # functorch 1.13 has none

        def loss_fn(p, x, *targets):
            return self.model.criterion(call(self.net, p, (x,)), *targets)

        def task(p, s, q):
            state = zero_state(p)
            for step in range(1, INNER_STEPS + 1):
                p, state = written_out_update(self.opt, self.lr, p,
                                              functorch.grad(loss_fn)(p, *s), state, step)
            return loss_fn(p, *q)

        loss = functorch.vmap(task, in_dims=(None, 0, 0))(
            dict(self.net.named_parameters()), support, query).mean()
        loss.backward()
        return float(loss)

    def per_task(self, support, query):
        params = dict(self.net.named_parameters())
        n, total = self.model.meta_batch, 0.0
        for t in range(n):
            s, q = task_slice(support, t), task_slice(query, t)
            loss = self.compiled_loss(self.adapt(params, *s), *q) / n
            loss.backward()
            total += float(loss)
        return total

    def batched_loss(self, support, query):
        loss = self.batched(dict(self.net.named_parameters()), support, query).mean()
        loss.backward()
        return float(loss)

    def meta_grad(self, tasks):
        self.outer.zero_grad()
        return self.run(*tasks)

    def step(self, tasks):
        loss = self.meta_grad(tasks)
        self.outer.step()
        return loss

    def compile_count(self):
        return (self.batched or self.adapt).compile_count if self.adapt else None


def fallback_reasons(caught):
    return sorted({str(w.message) for w in caught
                   if issubclass(w.category, mf.CompilationFallbackWarning)})


def max_relative_difference(grads, reference):
    floor = 0.01 * max(float(r.abs().max()) for r in reference)
    return max(float((g - r).abs().max()) / max(float(r.abs().max()), floor, 1e-30)
               for g, r in zip(grads, reference))


def float64_truth(model, opt, tasks):
    """Plain PyTorch's first meta-gradient in float64 (same initial weights
    and tasks), in a float32 run; None in a float64 run (plain itself is the
    reference there)."""
    if torch.get_default_dtype() == torch.float64:
        return None
    v = Variant("plain PyTorch", model, opt)
    v.net.double()
    v.meta_grad(mf.pytree.tree_map(
        lambda x: x.double() if torch.is_tensor(x) and x.is_floating_point() else x, tasks))
    return [p.grad.detach().clone() for p in v.net.parameters()]


def gradient_mismatch(c, plain):
    """Whether a cell's meta-gradient is off (see TRUTH_FACTOR)."""
    if "grad_vs_float64" in c and "grad_vs_float64" in plain:
        return c["grad_vs_float64"] > TRUTH_FACTOR * plain["grad_vs_float64"]
    return c.get("grad_max_rel_diff", 0) > FLOAT64_TOLERANCE


def time_cell(model, opt, repeats):
    """One (model, optimizer) cell at the current thread count: the first
    meta-step of each variant (compile for the compiled ones; its
    meta-gradient is compared with plain PyTorch's), then `repeats` timed
    meta-steps, variants alternating (forward, then reversed order)."""
    variants, cells = [], {}
    for name in variant_names():
        try:
            variants.append(Variant(name, model, opt))
        except Exception as e:  # noqa: BLE001  a variant that cannot even be built
            cells[name] = {"error": f"{type(e).__name__}: {e}"}
    generator = torch.Generator().manual_seed(1)
    first_tasks = model.tasks(generator)
    grads = {}
    for v in list(variants):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            try:
                v.meta_grad(first_tasks)
            except Exception as e:  # noqa: BLE001  e.g. functorch cannot batch an op
                cells[v.name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
                variants.remove(v)
                continue
            first = (time.perf_counter() - start) * 1e3
        grads[v.name] = [p.grad.detach().clone() for p in v.net.parameters()]
        cells[v.name] = {"first_call_ms": first, "fallback": fallback_reasons(caught),
                         "times_ms": []}
        v.outer.step()
    truth = float64_truth(model, opt, first_tasks) if "plain PyTorch" in grads else None
    for v in variants:
        cells[v.name]["grad_max_rel_diff"] = max_relative_difference(
            grads[v.name], grads["plain PyTorch"])
        if truth is not None:
            cells[v.name]["grad_vs_float64"] = max_relative_difference(grads[v.name], truth)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(repeats):
            tasks = model.tasks(generator)
            for v in (variants if i % 2 == 0 else variants[::-1]):
                start = time.perf_counter()
                v.step(tasks)
                cells[v.name]["times_ms"].append((time.perf_counter() - start) * 1e3)
    later = fallback_reasons(caught)
    for v in variants:
        c = cells[v.name]
        c["median_ms"] = statistics.median(c["times_ms"]) if c["times_ms"] else None
        c["compile_count"] = v.compile_count()
        if v.batched is not None:  # what metafuse.vmap's cost check chose, with its times
            c["strategies"] = v.batched.strategies()
        if v.name in COMPILED:
            c["fallback"] = sorted(set(c["fallback"]) | {m for m in later if v.name in m})
    return cells


def memory_of(model, opt, name):
    """Tensor memory of one meta-step after one warm one, fresh process:
    the peak of live CPU tensor bytes above the level at its start (the
    allocator wrapper of bench/maml_compiled.py)."""
    import tensor_memory  # bench/tensor_memory.py
    tensor_memory.install()
    # oneDNN's convolution takes its scratchpad through Allocator::raw_allocate,
    # which the meter's wrapper does not support (c10 asserts): measure with
    # ATen's own convolution, for every variant alike.
    torch.backends.mkldnn.enabled = False
    torch.set_num_threads(1)
    v = Variant(name, model, opt)
    generator = torch.Generator().manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v.step(model.tasks(generator))
        tasks = model.tasks(generator)
        gc.collect()
        return tensor_memory.peak_during(lambda: v.step(tasks))


# ------------------------------------------------------------ the driver

def child(args):
    threads = int(args.child_threads)
    torch.set_num_threads(threads)
    if args.float64:
        torch.set_default_dtype(torch.float64)
    models = [MODELS[m](args.small) for m in args.models]
    if args.memory_variant:
        try:
            out = memory_of(models[0], args.optimizers[0], args.memory_variant)
        except Exception as e:  # noqa: BLE001
            out = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        print(json.dumps(out))
        return
    out = {}
    for model in models:
        for opt in args.optimizers:
            out[f"{model.name}/{opt}"] = time_cell(model, opt, args.repeats)
            print(f"  done {model.name}/{opt} at {threads} thread(s)", file=sys.stderr,
                  flush=True)
    print(json.dumps(out))


def run_child(args, threads, extra, timeout):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               XDG_CACHE_HOME=tempfile.mkdtemp(prefix="metafuse-sweep-cache-"))
    cmd = [sys.executable, __file__, "--child-threads", str(threads),
           "--models", ",".join(args.models), "--optimizers", ",".join(args.optimizers),
           "--repeats", str(args.repeats)] + (["--small"] if args.small else []) + (
               ["--float64"] if args.float64 else []) + (
               ["--chunk-size", str(args.chunk_size)] if args.chunk_size else []) + extra
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env,
                         timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio(base, ms):
    return f"{base / ms:.2f}x" if base and ms else "-"


def cell_note(c, plain):
    if "error" in c:
        return "not run: " + c["error"][:120]
    notes = []
    if c.get("fallback"):
        notes.append("fallback: " + "; ".join(m.split(": ", 1)[-1][:160] for m in c["fallback"]))
    if c.get("compile_count") not in (None, 1):
        notes.append(f"compiled {c['compile_count']} times")
    for record in c.get("strategies") or []:
        times = ", ".join(f"{k[:-2]} {v * 1e3:.0f} ms" for k, v in record.items()
                          if k.endswith("_s"))
        notes.append(f"ran as {record['strategy']}" + (f" ({times})" if times else ""))
    if gradient_mismatch(c, plain):
        notes.append("GRADIENT MISMATCH")
    return "; ".join(notes)


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def table(result):
    lines = ["| model | inner | threads | variant | median ms | eager / variant | "
             "plain / variant | first call ms | peak tensor MiB | grad vs plain | "
             "grad vs float64 | notes |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for key, by_threads in result["cells"].items():
        model, opt = key.split("/")
        for threads, cells in by_threads.items():
            eager = cells["eager metafuse"].get("median_ms")
            plain = cells["plain PyTorch"].get("median_ms")
            for name in [n for n in VARIANTS + (CHUNKED,) if n in cells]:
                c = cells[name]
                ms = c.get("median_ms")
                mem = result["memory"].get(key, {}).get(name, {})
                lines.append(" | ".join([
                    f"| {model}", opt, threads, name, fmt(ms, ".1f"), ratio(eager, ms),
                    ratio(plain, ms), fmt(c.get("first_call_ms"), ".0f"),
                    fmt(mem.get("peak_tensor_mib"), ".2f"),
                    fmt(c.get("grad_max_rel_diff"), ".1e"), fmt(c.get("grad_vs_float64"), ".1e"),
                    cell_note(c, cells["plain PyTorch"]) + " |"]))
    return "\n".join(lines)


def speedup(cells, name, base):
    a, b = cells[base].get("median_ms"), cells[name].get("median_ms")
    return a / b if a and b else None


def summary(result):
    """The issue's targets and every compiled cell slower than eager."""
    lines = []
    for key, by_threads in result["cells"].items():
        for threads, cells in by_threads.items():
            for name in COMPILED:
                s = speedup(cells, name, "eager metafuse")
                if s is not None and s < 1:
                    lines.append(f"- slower than eager: {key}, {threads} thread(s), {name} "
                                 f"({s:.2f}x)")
    checks = [("sinusoid/sgd", "compiled batched", "eager metafuse", 25),
              ("sinusoid/sgd", "compiled batched", "functorch vmap", 5),
              ("conv/sgd", "compiled batched", "plain PyTorch", 2),
              ("conv/sgd", "compiled per task", "plain PyTorch", 2)]
    for key, name, base, target in checks:
        for threads, cells in result["cells"].get(key, {}).items():
            s = speedup(cells, name, base)
            verdict = "-" if s is None else ("met" if s >= target else "NOT met")
            lines.append(f"- target {key} {name} >= {target}x {base}, {threads} thread(s): "
                         f"{fmt(s, '.2f')}x, {verdict}")
    for key, memory in result["memory"].items():
        eager = memory.get("eager metafuse", {}).get("peak_tensor_mib")
        for name in ("compiled batched", CHUNKED):
            batched = memory.get(name, {}).get("peak_tensor_mib")
            if eager is not None and batched is not None:
                lines.append(f"- memory {key}: {name} {batched:.2f} MiB vs eager "
                             f"{eager:.2f} MiB, {'met' if batched <= eager else 'NOT met'}")
    return "\n".join(lines)


def csv(value):
    return [s for s in value.split(",") if s]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=csv, default=list(MODELS))
    parser.add_argument("--threads", type=csv, default=["1", "2"])
    parser.add_argument("--optimizers", type=csv, default=["sgd", "adam"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true",
                        help="scale the conv net down (32 channels, 3 queries per class)")
    parser.add_argument("--float64", action="store_true",
                        help="run in float64 (to tell rounding from a wrong gradient)")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the peak-memory processes")
    parser.add_argument("--chunk-size", type=int, metavar="K",
                        help="also run metafuse.vmap with chunk_size=K ('compiled chunked')")
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument("--table-from", metavar="JSON",
                        help="print the table and summary of an earlier --json file")
    parser.add_argument("--child-threads", help=argparse.SUPPRESS)
    parser.add_argument("--memory-variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for m in args.models:
        if m not in MODELS:
            parser.error(f"--models: unknown model {m!r}, expected some of {list(MODELS)}")
    for o in args.optimizers:
        if o not in ("sgd", "adam"):
            parser.error(f"--optimizers: unknown optimizer {o!r}, expected sgd and/or adam")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.chunk_size is not None and args.chunk_size < 1:
        parser.error("--chunk-size must be >= 1")
    global CHUNK_SIZE
    CHUNK_SIZE = args.chunk_size
    if args.child_threads is not None:
        child(args)
        return
    if args.table_from:
        with open(args.table_from) as f:
            result = json.load(f)
        print(table(result))
        print(summary(result))
        return

    load = os.getloadavg()
    started = time.time()
    result = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "load_average_start": load, "small": args.small, "repeats": args.repeats,
              "chunk_size": args.chunk_size,
              "truth_factor": TRUTH_FACTOR, "float64_tolerance": FLOAT64_TOLERANCE,
              "float64": args.float64,
              "memory_note": "1 thread, oneDNN off (see memory_of)", "cells": {}, "memory": {}}
    for threads in args.threads:
        print(f"timing at {threads} thread(s) ...", file=sys.stderr, flush=True)
        for key, cells in run_child(args, threads, [], 3600).items():
            result["cells"].setdefault(key, {})[threads] = cells
    if not args.no_memory:
        for m in args.models:
            for opt in args.optimizers:
                key = f"{m}/{opt}"
                print(f"memory {key} ...", file=sys.stderr, flush=True)
                sub = argparse.Namespace(**dict(vars(args), models=[m], optimizers=[opt]))
                result["memory"][key] = {
                    name: run_child(sub, 1, ["--memory-variant", name], 1800)
                    for name in variant_names()}
    result["load_average_end"] = os.getloadavg()
    result["wall_s"] = time.time() - started
    print(f"meta-step sweep, {args.repeats} timed meta-steps per variant (median), "
          f"load average {load[0]:.2f} at the start, "
          f"{result['load_average_end'][0]:.2f} at the end, {result['wall_s']:.0f} s")
    print(table(result))
    print(summary(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
