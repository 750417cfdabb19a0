"""A program fuzzer through the capture front (metafuse/compile/capture.py):
the C++ autodiff fuzzer (tests/cpp/compiler/autodiff_fuzz_test.cc) builds
graphs directly, this one writes random Python functions and lets
``metafuse.compile`` capture them (make_fx on torch 2.x, TorchScript's
tracer on 1.13).

With fixed seeds each function composes random unary, binary (with
broadcasting) and reducing operators of a weight and a data tensor, in
float64, and is checked against eager PyTorch:
  (a) the value,
  (b) the gradient (the compiled meta-backward) with respect to the weight,
  (c) second order: the function rewritten as one inner SGD step taken with
      ``metafuse.grad`` (recorded as one gradient node, differentiated
      symbolically) and the loss after it, whose gradient is a double
      backward.
Domain-restricted operators get safe operands (log of x^2 + 1, division by
y^2 + 1), so every derivative exists.
"""

import random
import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

F64 = torch.float64
SEEDS = range(24)

UNARY = [
    ("sin", torch.sin), ("tanh", torch.tanh), ("sigmoid", torch.sigmoid),
    ("softplus", torch.nn.functional.softplus), ("square", lambda x: x * x),
    ("log1p_sq", lambda x: torch.log(x * x + 1.0)), ("exp_tanh", lambda x: torch.exp(x.tanh())),
    ("neg_scaled", lambda x: -0.5 * x), ("gelu", torch.nn.functional.gelu),
    ("sqrt_sq", lambda x: torch.sqrt(x * x + 1.0)),
]
BINARY = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div_safe", lambda a, b: a / (b * b + 1.0)), ("maximum", torch.maximum),
    ("where", lambda a, b: torch.where(a > b, a, 0.5 * b)),
]
REDUCE = [
    ("sum0", lambda x: x.sum(0, keepdim=True)), ("mean1", lambda x: x.mean(-1, keepdim=True)),
    ("logsumexp1", lambda x: torch.logsumexp(x, -1, keepdim=True)),
    ("softmax1", lambda x: torch.softmax(x, -1)),
]


def random_function(seed):
    """(f(w, x) -> scalar, its recipe as text, w's and x's shapes)."""
    rng = random.Random(seed)
    rows, cols = rng.randint(1, 5), rng.randint(1, 6)
    w_shape = rng.choice([(rows, cols), (1, cols), (rows, 1), (cols,)])
    recipe = []
    for _ in range(rng.randint(3, 8)):
        kind = rng.choice(["unary", "unary", "binary", "binary", "reduce", "matmul"])
        if kind == "unary":
            recipe.append(("unary", rng.randrange(len(UNARY)), rng.randrange(4)))
        elif kind == "binary":
            recipe.append(("binary", rng.randrange(len(BINARY)), rng.randrange(4),
                           rng.randrange(4)))
        elif kind == "reduce":
            recipe.append(("reduce", rng.randrange(len(REDUCE)), rng.randrange(4)))
        else:
            recipe.append(("matmul", rng.randrange(4)))

    def f(w, x):
        pool = [w, x, w * x, torch.tanh(x) + w]
        for step in recipe:
            if step[0] == "unary":
                out = UNARY[step[1]][1](pool[-1 - step[2] % len(pool)])
            elif step[0] == "binary":
                out = BINARY[step[1]][1](pool[-1 - step[2] % len(pool)],
                                         pool[-1 - step[3] % len(pool)])
            elif step[0] == "reduce":
                out = REDUCE[step[1]][1](pool[-1 - step[2] % len(pool)])
            else:  # a product with x's transpose, back to x's shape
                a = pool[-1 - step[1] % len(pool)].expand(rows, cols)
                out = (a @ x.t()) @ x / cols
            pool.append(out)
        return sum(p.sum() for p in pool[-3:]) / 3

    text = " ".join(str(step) for step in recipe)
    return f, text, w_shape, (rows, cols)


def inner_step(f):
    """One inner SGD step with metafuse.grad, then the loss after it."""
    def stepped(w, x):
        g = mf.grad(f(w, x), w)
        return f(w - 0.1 * g, x)
    return stepped


def eager_inner_step(f):
    def stepped(w, x):
        g, = torch.autograd.grad(f(w, x), w, create_graph=True)
        return f(w - 0.1 * g, x)
    return stepped


def check(compiled_fn, eager_fn, w, x, recipe):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        got = compiled_fn(w, x)
    want = eager_fn(w, x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=lambda m: f"{recipe}: {m}")
    got_grad, = torch.autograd.grad(got, w)
    want_grad, = torch.autograd.grad(want, w)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-9, atol=1e-11,
                               msg=lambda m: f"{recipe} (gradient): {m}")


@pytest.mark.parametrize("seed", SEEDS)
def test_captured_functions_match_eager_to_second_order(seed):
    f, recipe, w_shape, x_shape = random_function(seed)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(w_shape, generator=g, dtype=F64, requires_grad=True)
    x = torch.randn(x_shape, generator=g, dtype=F64)
    check(mf.compile(f), f, w, x, recipe)
    check(mf.compile(inner_step(f)), eager_inner_step(f), w, x, recipe + " [inner step]")
