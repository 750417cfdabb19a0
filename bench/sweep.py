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

Variants, alternating meta-steps in one run on the same tasks (--variants
selects some; "eager metafuse" and "plain PyTorch" always run: they are the
baselines of the ratios and of the gradient check):
  - eager metafuse : MetaSGD / MetaAdam on the nn.Module, task by task (the
                     TorchOpt idiom)
  - plain PyTorch  : a dict of params, torch.autograd.grad(create_graph=True)
                     and the update written out (written_out_update), task by
                     task
  - torch.func vmap: the tasks vmapped (torch.func.vmap), the inner gradient
                     torch.func.grad, the net called by
                     torch.func.functional_call, the update written out; the
                     mean query loss .backward(). On torch 1.13 the same with
                     functorch.vmap / functorch.grad and
                     torch.nn.utils.stateless.functional_call (chosen in
                     one place, functional())
  - TorchOpt 0.7.3 : PyPI's torchopt: torchopt.MetaSGD / torchopt.MetaAdam
                     (eps_root as below) on the nn.Module, task by task, exactly
                     as "eager metafuse" does with metafuse's classes
  - higher 0.2.1   : PyPI's higher: higher.innerloop_ctx over torch.optim.SGD,
                     or torch.optim.Adam (higher's DifferentiableAdam), task by
                     task. higher's Adam has torch.optim.Adam's formula
                     (lr sqrt(1-b2^t)/(1-b1^t) mu / (sqrt(nu) + eps), entries
                     with nu == 0 masked) and no eps_root: its Adam cells are
                     not the sweep's formula, which the cell's note says; its
                     meta-gradient is also compared with plain PyTorch's
                     written out with that formula (grad_vs_torch_adam_plain)
  - torch.compile plain: torch.compile (default backend, inductor) of plain
                     PyTorch's per-task step (autograd.grad(create_graph=True)
                     inner loop + query loss), .backward() outside. dynamo
                     breaks the graph at autograd.grad and the inner
                     create_graph=True backward runs through AOTAutograd's
                     compiled backward, which refuses ("torch.compile with
                     aot_autograd does not currently support double
                     backward", torch 2.15): the cell records the refusal
                     and its message ("refused") instead of a time, or the
                     time and gradient check if a torch runs it
  - torch.compile func: torch.compile of the torch.func vmap variant's loss
                     (vmap over the tasks of the inner loop with
                     torch.func.grad), .backward() on the mean loss: the inner
                     gradients are traced into the forward graph, so
                     AOTAutograd's backward is first order and the
                     meta-gradient is the true second-order one (checked like
                     every variant's). Its first call is the compile. Like
                     torch.func vmap itself it is wrong on the conv net (and,
                     by the same BatchNorm, presumably the resnet, as with
                     functorch 1.13): torch.func.vmap's
                     batching of BatchNorm at second order (torch 2.15, conv
                     --small, SGD: 0.42 off, uncompiled and with the eager,
                     aot_eager and inductor backends alike)
  - torch.compile func per task: for those nets, torch.compile of one
                     task's inner loop with torch.func.grad, no vmap (the
                     inner gradients traced into the forward graph as above),
                     .backward() task by task. Right on the conv net (--small,
                     SGD, --float64: 4e-14 from plain PyTorch); in float32
                     inductor's kernels round differently enough (6e-4 from
                     the float64 truth, 23x plain's distance) to be flagged,
                     which the note then says is small
  - torch.compile first-order: the same compiled vmap with the inner
                     gradients detached (first-order MAML): a reference for
                     speed that computes a DIFFERENT meta-gradient; compared
                     with plain PyTorch's first-order meta-gradient
                     (grad_vs_first_order_plain), never flagged against the
                     second-order one
  - compiled per task: metafuse.compile_inner_loop, task by task
  - compiled batched : metafuse.vmap of adapt + query loss (one program for
                     the meta-batch)
  - compiled chunked : with --chunk-size K only: the same metafuse.vmap with
                     chunk_size=K (K tasks' saved values alive at a time, each
                     chunk run again in the backward)
The torch.compile variants and the peers run by default on torch 2.x; on
torch 1.13 (no torch.compile) they are left out unless --variants names them
(a torch.compile cell then says why it did not run). A peer that does not
import is "not installed" in its cell. learn2learn is absent: its source
build fails on Python 3.11 (its generated C includes longintrepr.h, which
3.11 moved; tools/setup_venv.sh), so it has no variant. A variant that raises
is recorded in its cell ("error", or "refused") and the sweep goes on.
Each thread count runs in its own process (torch.set_num_threads and
OMP_NUM_THREADS; an empty metafuse kernel cache and an empty inductor cache
of its own, and torch._dynamo reset at the start of every (model, optimizer)
cell, so the first call of a compiled variant is a cold compile). Peak
tensor memory: one fresh process per (model, optimizer, variant), 1 thread,
like bench/maml_compiled.py (not for a variant whose timing cell did not run,
nor by default for the torch.compile variants: --memory-variants).

    .venv/bin/python bench/sweep.py     (torch 2.x, metafuse installed)
    PYTHONPATH=frontend/python /usr/bin/python3 bench/sweep.py   (torch 1.13)
        [--models sinusoid,conv,resnet,gru] [--threads 1,2] \\
        [--optimizers sgd,adam] [--repeats N] [--small] [--chunk-size K] \\
        [--variants NAME,...] [--memory-variants NAME,...] [--json OUT]
(--variants takes variant names and the groups "torch.compile", "peers" and
"metafuse compiled"; --list-variants prints them.)
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

FUNC = "torch.func vmap"
TC_PLAIN, TC_FUNC, TC_FUNC_TASK, TC_FIRST = (
    "torch.compile plain", "torch.compile func", "torch.compile func per task",
    "torch.compile first-order")
TORCH_COMPILE = (TC_PLAIN, TC_FUNC, TC_FUNC_TASK, TC_FIRST)
TORCHOPT, HIGHER = "TorchOpt 0.7.3", "higher 0.2.1"
PEERS = {TORCHOPT: ("torchopt", "0.7.3"), HIGHER: ("higher", "0.2.1")}  # module, pinned
CHUNKED = "compiled chunked"
COMPILED = ("compiled per task", "compiled batched", CHUNKED)  # metafuse's
BASELINES = ("eager metafuse", "plain PyTorch")
# Every variant, in the table's order.
VARIANTS = BASELINES + (FUNC, TORCHOPT, HIGHER) + TORCH_COMPILE + COMPILED
# Variants that compute another meta-gradient than plain PyTorch's second-order
# one: compared with plain PyTorch's first-order meta-gradient instead.
FIRST_ORDER = (TC_FIRST,)
# Torch 2.x variants that compute the second-order meta-gradient: the rivals
# of the summary's "fastest torch 2.x variant" target.
TORCH2_RIVALS = (FUNC, TC_PLAIN, TC_FUNC, TC_FUNC_TASK)
LEGACY_NAMES = {"functorch vmap": FUNC}  # names in JSON files of earlier sweeps
GROUPS = {"torch.compile": TORCH_COMPILE, "peers": tuple(PEERS), "metafuse compiled": COMPILED}
HAS_TORCH_COMPILE = hasattr(torch, "compile")
CHUNK_SIZE = None  # --chunk-size: adds the CHUNKED variant
SELECTED = None    # --variants: the variants run (None: default_variants())


def default_variants():
    """All but the chunked one (--chunk-size adds it); on torch 1.13 also
    without the torch.compile variants and the peers (torch 2.x rivals)."""
    names = [n for n in VARIANTS if n != CHUNKED]
    if not HAS_TORCH_COMPILE:
        names = [n for n in names if n not in TORCH_COMPILE and n not in PEERS]
    return tuple(names)


def variant_names():
    chosen = SELECTED if SELECTED is not None else default_variants() + (
        (CHUNKED,) if CHUNK_SIZE else ())
    return tuple(n for n in VARIANTS if n in chosen or n in BASELINES)


def functional():
    """The functional transforms of the torch.func vmap variants, chosen here
    once: (vmap, grad, functional_call) of torch.func on torch 2.x; on torch
    1.13 functorch's vmap and grad with torch.nn.utils.stateless's
    functional_call (functorch 1.13 has none), and a label saying so."""
    func = getattr(torch, "func", None)
    if func is not None and hasattr(func, "functional_call"):
        return func.vmap, func.grad, func.functional_call, None
    import functorch
    return (functorch.vmap, functorch.grad, torch.nn.utils.stateless.functional_call,
            "torch 1.13: functorch.vmap/grad + torch.nn.utils.stateless.functional_call")


class Skipped(Exception):
    """A variant that cannot run here (a peer not installed, no torch.compile):
    its cell says why instead of an error."""


def set_dynamo_limits():
    """Each cell recompiles its torch.compile'd methods for new Variant
    objects (guards on self): more room than dynamo's default of 8 entries
    per code object, so a long sweep never falls back to eager silently."""
    import torch._dynamo
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 256))


def dynamo_graphs():
    """Graphs dynamo has compiled in this process so far (None without dynamo)."""
    if not HAS_TORCH_COMPILE:
        return None
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


INNER_STEPS = 5
TORCH_ADAM = "torch adam"  # written_out_update's torch.optim.Adam formula
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
# A flagged float32 meta-gradient this close to the truth may be another
# rounding (inductor's kernels on the conv net): its note says so.
SMALL_MISMATCH = 1e-2
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
    formula (eps_root inside the square root); "torch adam": torch.optim.Adam's
    formula, higher's (only to check higher's Adam against its own formula)."""
    if opt == "sgd":
        return {k: params[k] - lr * grads[k] for k in params}, state
    b1, b2, eps = 0.9, 0.999, 1e-8
    mu = {k: b1 * state[0][k] + (1 - b1) * grads[k] for k in params}
    nu = {k: b2 * state[1][k] + (1 - b2) * grads[k] * grads[k] for k in params}
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    if opt == TORCH_ADAM:  # entries with nu == 0: no gradient through sqrt (higher's mask)
        root = {k: torch.where(nu[k] == 0, 0.0, torch.sqrt(torch.where(nu[k] == 0, 1.0, nu[k])))
                for k in params}
        new = {k: params[k] - (lr * math.sqrt(bc2) / bc1) * mu[k] / (root[k] + eps)
               for k in params}
    else:
        new = {k: params[k] - lr * (mu[k] / bc1) / (torch.sqrt(nu[k] / bc2 + ADAM_EPS_ROOT)
                                                    + eps)
               for k in params}
    return new, (mu, nu)


def zero_state(params):
    return ({k: torch.zeros_like(v) for k, v in params.items()},
            {k: torch.zeros_like(v) for k, v in params.items()})


class Variant:
    """One variant of one (model, optimizer) cell, with its own copy of the
    net (same initial weights) and outer optimizer. Raises Skipped where the
    variant cannot run here."""

    def __init__(self, name, model, opt):
        self.name, self.model, self.opt = name, model, opt
        self.lr = model.sgd_lr if opt == "sgd" else model.adam_lr
        self.vmap, self.grad, self.call, self.implementation = functional()
        self.note = None  # what the cell should say about the variant itself
        if name in PEERS:
            module, pinned = PEERS[name]
            try:
                self.peer = __import__(module)
            except ImportError as e:
                raise Skipped(f"not installed ({e})") from e
            version = getattr(self.peer, "__version__", None)
            if version is None:
                from importlib import metadata
                version = metadata.version(module)
            if version != pinned:
                self.note = f"{module} {version} installed (pinned {pinned})"
        if name in TORCH_COMPILE and not HAS_TORCH_COMPILE:
            raise Skipped(f"torch {torch.__version__} has no torch.compile")
        self.net = model.net()
        self.outer = mf.Adam(self.net.parameters(), lr=1e-3)
        self.adapt = self.batched = self.compiled = None
        if name in COMPILED:
            tx = mf.sgd(self.lr) if opt == "sgd" else mf.adam(self.lr, eps_root=ADAM_EPS_ROOT)
            self.adapt = mf.compile_inner_loop(self.compiled_loss, tx, steps=INNER_STEPS)
        if name in ("compiled batched", CHUNKED):
            self.batched = mf.vmap(
                lambda p, s, q: self.compiled_loss(self.adapt(p, *s), *q), in_dims=(None, 0, 0),
                chunk_size=CHUNK_SIZE if name == CHUNKED else None)
        if name == HIGHER:
            # higher reads the hyperparameters of a torch.optim optimizer; its
            # state stays empty (each innerloop_ctx starts from zero moments)
            self.torch_opt = (torch.optim.SGD(self.net.parameters(), lr=self.lr)
                              if opt == "sgd" else
                              torch.optim.Adam(self.net.parameters(), lr=self.lr,
                                               betas=(0.9, 0.999), eps=1e-8))
            if opt == "adam":
                self.note = ("another Adam: higher's is torch.optim.Adam's formula (eps "
                             "added to sqrt(nu)/sqrt(1-b2^t), nu == 0 masked, no eps_root), "
                             f"not the sweep's (eps_root={ADAM_EPS_ROOT:g} inside the "
                             "square root): grad vs plain/float64 compare two formulas")
        if name == TC_PLAIN:
            self.compiled = torch.compile(self.plain_task)
        elif name == TC_FUNC:
            self.compiled = torch.compile(self.func_loss)
        elif name == TC_FUNC_TASK:
            self.compiled = torch.compile(self.func_task)
        elif name == TC_FIRST:
            self.compiled = torch.compile(self.func_loss_first_order)
        if name == FUNC:
            self.note = self.implementation
        self.run = {"eager metafuse": self.eager, "plain PyTorch": self.plain,
                    FUNC: self.func_vmap, TORCHOPT: self.torchopt, HIGHER: self.higher,
                    TC_PLAIN: self.each_compiled_task, TC_FUNC: self.func_vmap,
                    TC_FUNC_TASK: self.each_compiled_task,
                    TC_FIRST: self.func_vmap, "compiled per task": self.per_task,
                    "compiled batched": self.batched_loss, CHUNKED: self.batched_loss}[name]

    def compiled_loss(self, p, x, *targets):
        return self.model.criterion(mf.functional_call(self.net, p, x), *targets)

    def module_loop(self, lib, support, query):
        """The TorchOpt idiom, with `lib`'s MetaSGD / MetaAdam and
        extract_state_dict / recover_state_dict (metafuse or torchopt)."""
        cls, options = ((lib.MetaSGD, {}) if self.opt == "sgd"
                        else (lib.MetaAdam, {"eps_root": ADAM_EPS_ROOT}))
        initial = lib.extract_state_dict(self.net)
        n, total = self.model.meta_batch, 0.0
        for t in range(n):
            (x, *ys), (xq, *yq) = task_slice(support, t), task_slice(query, t)
            inner = cls(self.net, lr=self.lr, **options)
            for _ in range(INNER_STEPS):
                inner.step(self.model.criterion(self.net(x), *ys))
            loss = self.model.criterion(self.net(xq), *yq) / n
            loss.backward()
            total += float(loss)
            lib.recover_state_dict(self.net, initial)
        return total

    def eager(self, support, query):
        return self.module_loop(mf, support, query)

    def torchopt(self, support, query):
        return self.module_loop(self.peer, support, query)

    def higher(self, support, query):
        n, total = self.model.meta_batch, 0.0
        for t in range(n):
            (x, *ys), (xq, *yq) = task_slice(support, t), task_slice(query, t)
            with self.peer.innerloop_ctx(self.net, self.torch_opt,
                                         copy_initial_weights=False) as (fnet, diffopt):
                for _ in range(INNER_STEPS):
                    diffopt.step(self.model.criterion(fnet(x), *ys))
                loss = self.model.criterion(fnet(xq), *yq) / n
                loss.backward()
            total += float(loss)
        return total

    def plain_task(self, meta, support, query, first_order=False):
        """Plain PyTorch's query loss of one task after the inner loop
        (first_order: the inner gradients detached)."""
        (x, *ys), (xq, *yq) = support, query
        params, state = meta, zero_state(meta)
        for step in range(1, INNER_STEPS + 1):
            loss = self.model.criterion(self.call(self.net, params, (x,)), *ys)
            grads = torch.autograd.grad(loss, list(params.values()),
                                        create_graph=not first_order)
            params, state = written_out_update(self.opt, self.lr, params,
                                               dict(zip(params, grads)), state, step)
        return self.model.criterion(self.call(self.net, params, (xq,)), *yq)

    def each_task(self, task_loss, support, query):
        meta = dict(self.net.named_parameters())
        n, total = self.model.meta_batch, 0.0
        for t in range(n):
            loss = task_loss(meta, task_slice(support, t), task_slice(query, t)) / n
            loss.backward()
            total += float(loss)
        return total

    def plain(self, support, query):
        return self.each_task(self.plain_task, support, query)

    def plain_first_order(self, support, query):
        return self.each_task(lambda m, s, q: self.plain_task(m, s, q, first_order=True),
                              support, query)

    def each_compiled_task(self, support, query):
        """torch.compile plain / func per task: the compiled task loss
        (self.compiled), .backward() task by task."""
        return self.each_task(self.compiled, support, query)

    def func_task(self, p, support, query, first_order=False):
        """One task's query loss after the inner loop, the inner gradient
        torch.func.grad (detached with first_order), the update written out."""
        def loss_fn(p, x, *targets):
            return self.model.criterion(self.call(self.net, p, (x,)), *targets)

        state = zero_state(p)
        for step in range(1, INNER_STEPS + 1):
            grads = self.grad(loss_fn)(p, *support)
            if first_order:
                grads = {k: g.detach() for k, g in grads.items()}
            p, state = written_out_update(self.opt, self.lr, p, grads, state, step)
        return loss_fn(p, *query)

    def func_loss(self, params, support, query, first_order=False):
        """The mean query loss over the tasks, func_task vmapped."""
        return self.vmap(lambda p, s, q: self.func_task(p, s, q, first_order),
                         in_dims=(None, 0, 0))(params, support, query).mean()

    def func_loss_first_order(self, params, support, query):
        return self.func_loss(params, support, query, first_order=True)

    def func_vmap(self, support, query):
        """torch.func vmap, or its torch.compile'd loss (self.compiled)."""
        loss = (self.compiled or self.func_loss)(dict(self.net.named_parameters()),
                                                 support, query)
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


def plain_reference(model, opt, tasks, first_order=False, formula=None):
    """Plain PyTorch's float32 meta-gradient of another kind: first-order
    (inner gradients not differentiated: the FIRST_ORDER variants'), or with
    another inner formula (TORCH_ADAM: higher's Adam)."""
    v = Variant("plain PyTorch", model, opt)
    v.opt = formula or opt
    v.outer.zero_grad()
    (v.plain_first_order if first_order else v.plain)(*tasks)
    return [p.grad.detach().clone() for p in v.net.parameters()]


def gradient_mismatch(c, plain):
    """Whether a cell's meta-gradient is off (see TRUTH_FACTOR); a variant
    with another meta-gradient (first-order; higher's Adam formula) against
    plain PyTorch's float32 meta-gradient of that kind."""
    for key in ("grad_vs_first_order_plain", "grad_vs_torch_adam_plain"):
        if key in c:
            if "grad_vs_float64" in plain:
                return c[key] > TRUTH_FACTOR * max(plain["grad_vs_float64"], 1e-6)
            return c[key] > FLOAT64_TOLERANCE
    if "grad_vs_float64" in c and "grad_vs_float64" in plain:
        return c["grad_vs_float64"] > TRUTH_FACTOR * plain["grad_vs_float64"]
    return c.get("grad_max_rel_diff", 0) > FLOAT64_TOLERANCE


def first_line(e):
    return f"{type(e).__name__}: {e}".strip().splitlines()[0]


def time_cell(model, opt, repeats):
    """One (model, optimizer) cell at the current thread count: the first
    meta-step of each variant (compile for the compiled ones; its
    meta-gradient is compared with plain PyTorch's), then `repeats` timed
    meta-steps, variants alternating (forward, then reversed order). A
    variant that raises gets its exception in its cell ("refused" for
    torch.compile plain's first call, "error" otherwise) and drops out."""
    if HAS_TORCH_COMPILE:
        import torch._dynamo
        torch._dynamo.reset()  # cold compiles; the cell's compiled methods only
        set_dynamo_limits()
    variants, cells = [], {}
    for name in variant_names():
        try:
            variants.append(Variant(name, model, opt))
        except Skipped as e:
            cells[name] = {"skipped": str(e)}
        except Exception as e:  # noqa: BLE001  a variant that cannot even be built
            cells[name] = {"error": f"{type(e).__name__}: {e}"}
    generator = torch.Generator().manual_seed(1)
    first_tasks = model.tasks(generator)
    grads = {}
    for v in list(variants):
        graphs = dynamo_graphs()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            try:
                v.meta_grad(first_tasks)
            except Exception as e:  # noqa: BLE001  e.g. functorch cannot batch an op
                cells[v.name] = {"refused" if v.name == TC_PLAIN else "error": first_line(e)}
                if v.note:
                    cells[v.name]["note"] = v.note
                variants.remove(v)
                continue
            first = (time.perf_counter() - start) * 1e3
        grads[v.name] = [p.grad.detach().clone() for p in v.net.parameters()]
        cells[v.name] = {"first_call_ms": first, "fallback": fallback_reasons(caught),
                         "times_ms": []}
        if v.note:
            cells[v.name]["note"] = v.note
        if v.name in TORCH_COMPILE:
            cells[v.name]["dynamo_graphs"] = dynamo_graphs() - graphs
            cells[v.name]["recompiles"] = 0
        v.outer.step()
    truth = float64_truth(model, opt, first_tasks) if "plain PyTorch" in grads else None
    first_order = (plain_reference(model, opt, first_tasks, first_order=True)
                   if any(v.name in FIRST_ORDER for v in variants) else None)
    for v in variants:
        c = cells[v.name]
        c["grad_max_rel_diff"] = max_relative_difference(grads[v.name], grads["plain PyTorch"])
        if truth is not None:
            c["grad_vs_float64"] = max_relative_difference(grads[v.name], truth)
        if v.name in FIRST_ORDER:
            c["grad_vs_first_order_plain"] = max_relative_difference(grads[v.name], first_order)
        if v.name == HIGHER and opt == "adam":
            c["grad_vs_torch_adam_plain"] = max_relative_difference(
                grads[v.name], plain_reference(model, opt, first_tasks, formula=TORCH_ADAM))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(repeats):
            tasks = model.tasks(generator)
            for v in list(variants if i % 2 == 0 else variants[::-1]):
                c = cells[v.name]
                graphs = dynamo_graphs()
                start = time.perf_counter()
                try:
                    v.step(tasks)
                except Exception as e:  # noqa: BLE001  a later call that fails
                    c["error"] = "in a timed meta-step: " + first_line(e)
                    c["times_ms"] = []
                    variants.remove(v)
                    continue
                c["times_ms"].append((time.perf_counter() - start) * 1e3)
                if v.name in TORCH_COMPILE:
                    c["recompiles"] += dynamo_graphs() - graphs
    later = fallback_reasons(caught)
    for v in variants:
        c = cells[v.name]
        c["median_ms"] = statistics.median(c["times_ms"]) if c["times_ms"] else None
        c["compile_count"] = v.compile_count()
        if v.batched is not None:  # what metafuse.vmap's cost check chose, with its times
            c["strategies"] = v.batched.strategies()
        if v.name in COMPILED:
            c["fallback"] = sorted(set(c["fallback"]) | {m for m in later if v.name in m})
    return {name: cells[name] for name in variant_names() if name in cells}


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
    cache = tempfile.mkdtemp(prefix="metafuse-sweep-cache-")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               XDG_CACHE_HOME=cache, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
    cmd = [sys.executable, __file__, "--child-threads", str(threads),
           "--models", ",".join(args.models), "--optimizers", ",".join(args.optimizers),
           "--repeats", str(args.repeats)] + (["--small"] if args.small else []) + (
               ["--float64"] if args.float64 else []) + (
               ["--chunk-size", str(args.chunk_size)] if args.chunk_size else []) + (
               ["--variants", ",".join(args.variants)] if args.variants is not None else []
           ) + extra
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env,
                         timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_child(args, name):
    try:
        return run_child(args, 1, ["--memory-variant", name], 1800)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        return {"error": first_line(e)}


def ratio(base, ms):
    return f"{base / ms:.2f}x" if base and ms else "-"


def cell_note(c, plain):
    if "skipped" in c:
        return c["skipped"]
    notes = [c["note"]] if c.get("note") else []
    if "refused" in c:
        return "; ".join(["refused: " + c["refused"][:200]] + notes)
    if "error" in c:
        return "; ".join(["not run: " + c["error"][:160]] + notes)
    if c.get("fallback"):
        notes.append("fallback: " + "; ".join(m.split(": ", 1)[-1][:160] for m in c["fallback"]))
    if c.get("compile_count") not in (None, 1):
        notes.append(f"compiled {c['compile_count']} times")
    if "dynamo_graphs" in c:
        notes.append(f"dynamo: {c['dynamo_graphs']} graph(s)"
                     + (f", {c['recompiles']} recompiled in the timed steps"
                        if c.get("recompiles") else ""))
    for record in c.get("strategies") or []:
        times = ", ".join(f"{k[:-2]} {v * 1e3:.0f} ms" for k, v in record.items()
                          if k.endswith("_s"))
        notes.append(f"ran as {record['strategy']}" + (f" ({times})" if times else ""))
    if "grad_vs_first_order_plain" in c:
        notes.append("first-order reference: another meta-gradient (inner gradients "
                     "detached); vs plain PyTorch first-order "
                     f"{c['grad_vs_first_order_plain']:.1e}")
    if "grad_vs_torch_adam_plain" in c:
        notes.append("vs plain PyTorch with torch.optim.Adam's formula "
                     f"{c['grad_vs_torch_adam_plain']:.1e}")
    if gradient_mismatch(c, plain):
        notes.append("FIRST-ORDER GRADIENT MISMATCH" if "grad_vs_first_order_plain" in c
                     else "GRADIENT MISMATCH (against its own formula)"
                     if "grad_vs_torch_adam_plain" in c else "GRADIENT MISMATCH")
        if c.get("grad_vs_float64", 1) < SMALL_MISMATCH:
            notes[-1] += " (small: --float64 tells rounding from a wrong derivative)"
    return "; ".join(notes)


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def cells_by_name(cells):
    """A thread count's cells under today's names (earlier JSON files say
    "functorch vmap" for "torch.func vmap")."""
    return {LEGACY_NAMES.get(k, k): v for k, v in cells.items()}


def table(result):
    lines = ["| model | inner | threads | variant | median ms | eager / variant | "
             "plain / variant | first call ms | peak tensor MiB | grad vs plain | "
             "grad vs float64 | notes |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for key, by_threads in result["cells"].items():
        model, opt = key.split("/")
        memory = cells_by_name(result["memory"].get(key, {}))
        for threads, cells in by_threads.items():
            cells = cells_by_name(cells)
            eager = cells["eager metafuse"].get("median_ms")
            plain = cells["plain PyTorch"].get("median_ms")
            for name in [n for n in VARIANTS if n in cells]:
                c = cells[name]
                ms = c.get("median_ms")
                mem = memory.get(name, {})
                lines.append(" | ".join([
                    f"| {model}", opt, threads, name, fmt(ms, ".1f"), ratio(eager, ms),
                    ratio(plain, ms), fmt(c.get("first_call_ms"), ".0f"),
                    fmt(mem.get("peak_tensor_mib"), ".2f"),
                    fmt(c.get("grad_max_rel_diff"), ".1e"), fmt(c.get("grad_vs_float64"), ".1e"),
                    cell_note(c, cells["plain PyTorch"]) + " |"]))
    return "\n".join(lines)


def speedup(cells, name, base):
    a, b = cells.get(base, {}).get("median_ms"), cells.get(name, {}).get("median_ms")
    return a / b if a and b else None


def fastest_rival(cells):
    """The fastest torch 2.x variant (TORCH2_RIVALS) that ran and computes
    the same second-order meta-gradient as plain PyTorch: (name, ms), or
    (None, None). The skipped, refused and mismatching ones are left out."""
    ran = [(c["median_ms"], n) for n, c in cells.items()
           if n in TORCH2_RIVALS and c.get("median_ms")
           and not gradient_mismatch(c, cells["plain PyTorch"])]
    return (min(ran)[1], min(ran)[0]) if ran else (None, None)


def rival_status(c, plain):
    for key in ("skipped", "refused", "error"):
        if key in c:
            return key if key != "skipped" else c[key]
    ms = fmt(c.get("median_ms"), ".1f") + " ms"
    return ms + (" (gradient mismatch)" if gradient_mismatch(c, plain) else "")


def times(value):
    return "-" if value is None else f"{value:.2f}x"


def verdict(value, target):
    return "-" if value is None else ("met" if value >= target else "NOT met")


def summary(result):
    """The issue's targets against torch 2.x's rivals, each with its measured
    value, and every metafuse compiled cell slower than eager."""
    lines = []
    slower, compared = [], 0
    for key, by_threads in result["cells"].items():
        for threads, cells in by_threads.items():
            for name in COMPILED:
                s = speedup(cells, name, "eager metafuse")
                if s is not None:
                    compared += 1
                    if s < 1:
                        slower.append(f"{key}, {threads} thread(s), {name} ({s:.2f}x)")
    for threads, cells in result["cells"].get("sinusoid/sgd", {}).items():
        cells = cells_by_name(cells)
        s = speedup(cells, "compiled batched", "eager metafuse")
        lines.append(f"- target sinusoid/sgd compiled batched >= 25x eager metafuse, "
                     f"{threads} thread(s): {times(s)}, {verdict(s, 25)}")
        rival, ms = fastest_rival(cells)
        s = speedup(cells, "compiled batched", rival) if rival else None
        others = ", ".join(f"{n} {rival_status(cells[n], cells['plain PyTorch'])}"
                           for n in TORCH2_RIVALS if n in cells)
        lines.append(f"- target sinusoid/sgd compiled batched >= 5x the fastest torch 2.x "
                     f"variant with the same meta-gradient ({rival or 'none ran'}"
                     f"{'' if ms is None else f', {ms:.1f} ms'}), {threads} thread(s): "
                     f"{times(s)}, {verdict(s, 5)}" + (f" [{others}]" if others else ""))
    for name in ("compiled batched", "compiled per task"):
        for threads, cells in result["cells"].get("conv/sgd", {}).items():
            s = speedup(cells, name, "plain PyTorch")
            lines.append(f"- target conv/sgd {name} >= 2x plain PyTorch, {threads} "
                         f"thread(s): {times(s)}, {verdict(s, 2)}")
    for line in slower:
        lines.append(f"- slower than eager: {line}")
    lines.append(f"- target no metafuse compiled cell slower than eager: {compared - len(slower)}"
                 f" of {compared} cells not slower, "
                 f"{'-' if not compared else 'NOT met' if slower else 'met'}")
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


def variant_list(value, chunk_size):
    """--variants: names (or groups, or an earlier name) to variant names; a
    group has the chunked variant only with --chunk-size, a name needs it."""
    names = []
    for item in csv(value):
        item = LEGACY_NAMES.get(item.strip(), item.strip())
        if item in GROUPS:
            names += [n for n in GROUPS[item] if n != CHUNKED or chunk_size]
        elif item in VARIANTS:
            if item == CHUNKED and not chunk_size:
                raise ValueError(f"{CHUNKED!r} needs --chunk-size K")
            names.append(item)
        else:
            raise ValueError(f"unknown variant {item!r}, expected some of {list(VARIANTS)} "
                             f"or a group {list(GROUPS)}")
    return [n for n in VARIANTS if n in names]


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
    parser.add_argument("--variants", metavar="NAME,...",
                        help="run only these variants (and the baselines eager metafuse "
                             "and plain PyTorch); names or groups, see --list-variants "
                             "(default: all on torch 2.x, the chunked one with --chunk-size)")
    parser.add_argument("--memory-variants", metavar="NAME,...",
                        help="the variants with a peak-memory process (default: those run, "
                             "but the torch.compile ones, each of whose processes would "
                             "compile again)")
    parser.add_argument("--child-timeout", type=int, default=4 * 3600, metavar="S",
                        help="seconds for one thread count's timing process (default 4 h: "
                             "the torch.compile variants compile for minutes per cell)")
    parser.add_argument("--list-variants", action="store_true",
                        help="print the variant names and groups and exit")
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument("--table-from", metavar="JSON",
                        help="print the table and summary of an earlier --json file")
    parser.add_argument("--child-threads", help=argparse.SUPPRESS)
    parser.add_argument("--memory-variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list_variants:
        print("variants: " + ", ".join(VARIANTS))
        print("default here: " + ", ".join(default_variants()) + " (+ compiled chunked "
              "with --chunk-size)")
        for group, names in GROUPS.items():
            print(f"group {group!r}: " + ", ".join(names))
        return
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
    for option in ("variants", "memory_variants"):
        if getattr(args, option) is not None:
            try:
                setattr(args, option, variant_list(getattr(args, option), args.chunk_size))
            except ValueError as e:
                parser.error(f"--{option.replace('_', '-')}: {e}")
    global CHUNK_SIZE, SELECTED
    CHUNK_SIZE = args.chunk_size
    SELECTED = tuple(args.variants) if args.variants is not None else None
    if args.child_threads is not None:
        child(args)
        return
    if args.table_from:
        with open(args.table_from) as f:
            result = json.load(f)
        print(table(result))
        print(summary(result))
        return

    memory_names = [n for n in variant_names()
                    if (n in args.memory_variants if args.memory_variants is not None
                        else n not in TORCH_COMPILE)]
    load = os.getloadavg()
    started = time.time()
    result = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "load_average_start": load, "small": args.small, "repeats": args.repeats,
              "chunk_size": args.chunk_size, "variants": list(variant_names()),
              "memory_variants": [] if args.no_memory else memory_names,
              "torch": torch.__version__,
              "truth_factor": TRUTH_FACTOR, "float64_tolerance": FLOAT64_TOLERANCE,
              "float64": args.float64,
              "memory_note": "1 thread, oneDNN off (see memory_of)", "cells": {}, "memory": {}}
    for threads in args.threads:
        print(f"timing at {threads} thread(s) ...", file=sys.stderr, flush=True)
        try:
            out = run_child(args, threads, [], args.child_timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            # a crash or timeout of the whole process: the other thread counts go on
            result.setdefault("failed", {})[threads] = first_line(e)
            print(f"  timing at {threads} thread(s) failed: {first_line(e)}", file=sys.stderr)
            continue
        for key, cells in out.items():
            result["cells"].setdefault(key, {})[threads] = cells
    if not args.no_memory:
        for m in args.models:
            for opt in args.optimizers:
                key = f"{m}/{opt}"
                print(f"memory {key} ...", file=sys.stderr, flush=True)
                sub = argparse.Namespace(**dict(vars(args), models=[m], optimizers=[opt]))
                timing = result["cells"].get(key, {}).get(args.threads[0], {})
                result["memory"][key] = {
                    name: (memory_child(sub, name) if "median_ms" in timing.get(name, {})
                           else {"skipped": "did not run in the timing"})
                    for name in memory_names}
    result["load_average_end"] = os.getloadavg()
    result["wall_s"] = time.time() - started
    print(f"meta-step sweep, {args.repeats} timed meta-steps per variant (median), "
          f"load average {load[0]:.2f} at the start, "
          f"{result['load_average_end'][0]:.2f} at the end, {result['wall_s']:.0f} s")
    print(table(result))
    print(summary(result))
    for threads, why in result.get("failed", {}).items():
        print(f"- timing at {threads} thread(s) did not finish: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
