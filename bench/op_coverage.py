"""Which common PyTorch idioms metafuse.compile compiles, and whether the
compiled value and gradient equal eager's (float64).

Each idiom is a small loss of a weight W (losses, normalizations, norms,
activations, padding and upsampling, recurrent cells and layers, attention,
distributions, indexing). A
CompilationFallbackWarning means the function ran eagerly (correct, not
compiled); its reason is shown. Prints a markdown table and a summary.

    PYTHONPATH=frontend/python python3 bench/op_coverage.py
"""

import argparse
import json
import warnings

import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

F = torch.nn.functional
F64 = torch.float64


def idioms():
    """name -> (loss of W, W's shape)."""
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(6, 8, generator=g, dtype=F64) for _ in range(2))
    img = torch.randn(2, 8, 5, 5, generator=g, dtype=F64)
    seq = torch.randn(2, 5, 8, generator=g, dtype=F64)
    labels = torch.randint(0, 8, (6,), generator=g)
    probs = torch.softmax(torch.randn(6, 8, generator=g, dtype=F64), 1)
    unit = torch.rand(6, 8, generator=g, dtype=F64)
    torch.manual_seed(0)
    gru_cell, lstm = torch.nn.GRUCell(8, 8).to(F64), torch.nn.LSTM(8, 8, batch_first=True).to(F64)
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True).to(F64)
    for module in (gru_cell, lstm, attention):
        module.requires_grad_(False)
    conv = lambda W: F.conv2d(img, W.reshape(8, 8, 1, 1))  # noqa: E731
    return {
        "mse_loss": lambda W: F.mse_loss(x @ W, y),
        "l1_loss": lambda W: F.l1_loss(x @ W, y),
        "smooth_l1_loss": lambda W: F.smooth_l1_loss(x @ W, y),
        "huber_loss": lambda W: F.huber_loss(x @ W, y),
        "cross_entropy": lambda W: F.cross_entropy(x @ W, labels),
        "cross_entropy, label smoothing": lambda W: F.cross_entropy(x @ W, labels,
                                                                    label_smoothing=0.1),
        "cross_entropy, probabilities": lambda W: F.cross_entropy(x @ W, probs),
        "nll_loss": lambda W: F.nll_loss(F.log_softmax(x @ W, 1), labels),
        "binary_cross_entropy_with_logits": lambda W: F.binary_cross_entropy_with_logits(
            x @ W, unit),
        "binary_cross_entropy": lambda W: F.binary_cross_entropy(torch.sigmoid(x @ W), unit),
        "kl_div": lambda W: F.kl_div(F.log_softmax(x @ W, 1), probs, reduction="batchmean"),
        "batch_norm": lambda W: F.batch_norm(conv(W), None, None, training=True).pow(3).sum(),
        "layer_norm": lambda W: F.layer_norm(x @ W, (8,)).pow(3).sum(),
        "group_norm": lambda W: F.group_norm(conv(W), 2).pow(3).sum(),
        "instance_norm": lambda W: F.instance_norm(conv(W)).pow(3).sum(),
        "var / std": lambda W: (x @ W).var(0).sum() + (x @ W).std(1).sum(),
        "norm / normalize": lambda W: (x @ W).norm() + (F.normalize(x @ W) * y).sum(),
        "cosine_similarity": lambda W: F.cosine_similarity(x @ W, y).sum(),
        "relu6 / hardtanh / clamp": lambda W: (F.relu6(x @ W) + F.hardtanh(x @ W)
                                               + (x @ W).clamp(-1, 1)).sum(),
        "hardswish": lambda W: F.hardswish(4 * x @ W).sum(),
        "hardsigmoid": lambda W: F.hardsigmoid(4 * x @ W).sum(),
        "gelu / silu / mish / softplus": lambda W: (F.gelu(x @ W) + F.silu(x @ W)
                                                    + F.mish(x @ W) + F.softplus(x @ W)).sum(),
        "log1p / expm1": lambda W: (torch.log1p((x @ W).square()) + torch.expm1(
            torch.tanh(x @ W))).sum(),
        "cumsum": lambda W: (x @ W).cumsum(1).square().sum(),
        "F.pad": lambda W: F.pad(conv(W), (1, 1, 1, 1)).square().sum(),
        "F.pad reflect / replicate / circular": lambda W: sum(
            F.pad(conv(W), (1, 2, 2, 1), mode=m).pow(3).sum()
            for m in ("reflect", "replicate", "circular")),
        "F.interpolate nearest": lambda W: F.interpolate(conv(W), scale_factor=2).pow(3).sum()
        + F.interpolate(conv(W), size=(7, 8)).pow(3).sum(),
        "matmul of 3-D by 2-D": lambda W: (seq @ W).square().sum(),
        "attention (softmax(q k^T) v)": lambda W: (torch.softmax((seq @ W) @ (seq @ W)
                                                                 .transpose(1, 2), -1)
                                                   @ seq).square().sum(),
        "nn.MultiheadAttention": lambda W: attention(seq @ W, seq @ W, seq @ W,
                                                     need_weights=False)[0].square().sum(),
        "einsum": lambda W: torch.einsum("bij,jk->bik", seq, W).square().sum(),
        "nn.GRUCell": lambda W: gru_cell(x @ W, x).square().sum(),
        "nn.LSTM": lambda W: lstm(seq @ W)[0].square().sum(),
        "Normal.log_prob": lambda W: torch.distributions.Normal(x @ W, 0.5).log_prob(y).sum(),
        "Categorical.log_prob": lambda W: torch.distributions.Categorical(
            logits=x @ W).log_prob(labels).sum(),
        "x[arange(n), actions]": lambda W: (x @ W)[torch.arange(6), labels].sum(),
        "embedding / index_select": lambda W: F.embedding(labels, W).square().sum()
        + torch.index_select(x @ W, 1, labels).square().sum(),
        "masked_fill / tril / one_hot": lambda W: ((x @ W).masked_fill(unit > 0.5, 0).sum()
                                                   + (x @ W).tril().sum()
                                                   + ((x @ W) * F.one_hot(labels, 8)).sum()),
        "flip / repeat / unbind": lambda W: ((x @ W).flip(1).square().sum()
                                             + (x @ W).repeat(2, 1).sin().sum()
                                             + sum(r.sin().sum() for r in (x @ W).unbind(0))),
        "prod": lambda W: (x @ W).prod(1).sum(),
        "topk / sort": lambda W: (x @ W).topk(2, 1).values.sum(),
    }


def check(name, loss):
    W = torch.randn(8, 8, generator=torch.Generator().manual_seed(1), dtype=F64)
    W = (0.3 * W).requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = mf.compile(loss)
        out = compiled(W)
    reasons = [str(w.message) for w in caught
               if issubclass(w.category, CompilationFallbackWarning)]
    expected = loss(W)
    got, = torch.autograd.grad(out, W)
    want, = torch.autograd.grad(expected, W)
    scale = max(float(want.abs().max()), 1e-30)
    return {"idiom": name, "compiled": not reasons,
            "value_diff": float((out - expected).abs()) / max(float(expected.abs()), 1e-30),
            "grad_diff": float((got - want).abs().max()) / scale,
            "fallback": reasons[0].split(" is outside")[0].split(": ", 1)[-1] if reasons else ""}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = [check(name, loss) for name, loss in idioms().items()]
    print("| idiom | compiled | value rel. diff | gradient rel. diff | why not |")
    print("| --- | --- | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['idiom']} | {'yes' if r['compiled'] else 'no'} | {r['value_diff']:.1e} | "
              f"{r['grad_diff']:.1e} | {r['fallback'][:90]} |")
    compiled = sum(r["compiled"] for r in rows)
    worst = max(max(r["value_diff"], r["grad_diff"]) for r in rows)
    print(f"\n{compiled} of {len(rows)} idioms compiled; largest relative difference "
          f"from eager {worst:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
