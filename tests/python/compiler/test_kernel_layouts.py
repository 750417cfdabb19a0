"""Fused kernels follow the layout of their inputs: when every
element-indexed input has the same dense, non-contiguous layout (the
task-major views of metafuse.vmap's batched convolutions), the kernel runs
in memory order and its outputs take that layout, as eager's do; mixed
layouts are made contiguous first. Values always equal eager's."""

import torch

import metafuse as mf

F64 = torch.float64


def fused(a, b):
    return torch.tanh(a * b + 1.0) * a, (a - b).exp()


def test_same_permuted_layout_is_kept_without_copies(monkeypatch):
    # The fused kernels' layouts are under test: the first call's timing
    # check must not keep the generic (ATen) program instead.
    monkeypatch.setenv("METAFUSE_FUSION_CHECK", "0")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, 5, dtype=F64, generator=g).permute(2, 0, 1)
    b = torch.randn(3, 4, 5, dtype=F64, generator=g).permute(2, 0, 1)
    compiled = mf.compile(fused)
    got, want = compiled(a, b), fused(a, b)
    assert compiled.compile_count == 1
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=1e-14, atol=0)
        assert x.stride() == y.stride() == a.stride()


def test_mixed_layouts_are_made_contiguous(monkeypatch):
    # As above: on a loaded machine the timing check may keep the generic
    # program, whose ATen ops follow the transposed input's layout.
    monkeypatch.setenv("METAFUSE_FUSION_CHECK", "0")
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 6, dtype=F64, generator=g).t()
    b = torch.randn(6, 4, dtype=F64, generator=g)
    compiled = mf.compile(fused)
    for x, y in zip(compiled(a, b), fused(a, b)):
        torch.testing.assert_close(x, y, rtol=1e-14, atol=0)
        assert x.is_contiguous()
