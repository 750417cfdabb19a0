"""METAFUSE_CONV_ALGORITHM, read by the compiled programs' convolutions
(runtime/compute/convolution.h): `measure` (the default) times the algorithms that
apply at each shape's first call and keeps the fastest in the kernel cache
directory; `rules` takes the fixed rules. Both give eager's meta-gradient;
anything else is an error that names the variable. Each case runs in a fresh
process (the setting is read once per process) with its own cache."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import torch, metafuse as mf
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.BatchNorm2d(32, track_running_stats=False),
        torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(32 * 9 * 9, 3)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 1, 9, 9, dtype=torch.float64, generator=g)
    y = torch.randint(0, 3, (6,), generator=g)
    loss = lambda p, x, y: torch.nn.functional.cross_entropy(mf.functional_call(net, p, x), y)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    adapt = mf.compile_inner_loop(loss, mf.sgd(0.1), steps=2)
    for dtype in (torch.float64, torch.float32):
        p = {k: v.detach().to(dtype).requires_grad_() for k, v in params.items()}
        xs = x.to(dtype)
        net.to(dtype)
        fast = torch.autograd.grad(loss(adapt(p, xs, y), xs, y), list(p.values()))
        slow = torch.autograd.grad(loss(adapt._eager(p, (xs, y)), xs, y), list(p.values()))
        tol = 1e-10 if dtype == torch.float64 else 1e-3
        # (relative to the largest entry: a conv bias before BatchNorm has a zero gradient)
        scale = max(float(b.abs().max()) for b in slow)
        err = max(float((a - b).abs().max()) for a, b in zip(fast, slow)) / scale
        assert err < tol, (dtype, err)
    print("ok")
""")


def run(setting, tmp_path):
    env = dict(os.environ, METAFUSE_CONV_ALGORITHM=setting, METAFUSE_CACHE_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("setting", ["measure", "rules"])
def test_both_settings_give_eagers_meta_gradient(setting, tmp_path):
    result = run(setting, tmp_path)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]
    choices = [f for f in os.listdir(tmp_path) if f.startswith("convolution_choices-")]
    if setting == "measure":
        assert choices, "no convolution was measured"
        text = (tmp_path / choices[0]).read_text()
        assert "conv2d Double" in text and "conv2d Float" in text, text
    else:
        assert not choices, "the fixed rules timed convolutions"


def test_a_bad_setting_is_named(tmp_path):
    result = run("fastest", tmp_path)
    assert result.returncode != 0
    assert "METAFUSE_CONV_ALGORITHM must be measure or rules, got 'fastest'" in result.stderr, (
        result.stderr[-3000:])
