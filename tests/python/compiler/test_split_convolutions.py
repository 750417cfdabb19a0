"""Grouped convolutions (metafuse.vmap's batched convolutions and their
derivatives) split into one convolution per group: the batched meta-batch
gives the per-task losses and meta-gradients whichever form runs (float64,
1e-10), the split happens when forced or measured faster, never for
depthwise-like groups, and a bad setting is named."""

import os

import pytest
import torch

import metafuse as mf

from conv_tasks import F64, ConvTasks, cnn_strided


def run(policy, monkeypatch):
    if policy is None:
        monkeypatch.delenv("METAFUSE_SPLIT_CONVOLUTIONS", raising=False)
    else:
        monkeypatch.setenv("METAFUSE_SPLIT_CONVOLUTIONS", policy)
    # The batched program itself, whatever metafuse.vmap's cost check picks.
    monkeypatch.setenv("METAFUSE_VMAP_STRATEGY", "batched")
    tasks = ConvTasks(cnn_strided())
    tasks.check(tasks.losses())
    report = tasks.fusion_report()
    return {k: (report[k]["grouped_convolutions"], report[k]["split_convolutions"])
            for k in ("forward", "backward")}


def test_always_splits_every_grouped_convolution_and_agrees(monkeypatch):
    counts = run("always", monkeypatch)
    # The inner loop's convolutions and their derivatives are grouped (tasks).
    assert counts["forward"][0] > 0 and counts["backward"][0] > 0, counts
    assert all(grouped == split for grouped, split in counts.values()), counts


def test_never_keeps_them_grouped_and_agrees(monkeypatch):
    counts = run("never", monkeypatch)
    assert counts["forward"][0] > 0 and all(split == 0 for _, split in counts.values())


def test_measured_choice_agrees(monkeypatch):
    counts = run(None, monkeypatch)
    assert all(0 <= split <= grouped for grouped, split in counts.values()), counts


def test_depthwise_groups_are_never_split(monkeypatch):
    monkeypatch.setenv("METAFUSE_SPLIT_CONVOLUTIONS", "always")
    w = torch.randn(6, 1, 3, 3, dtype=F64, requires_grad=True)

    @mf.compile
    def depthwise(w, x):
        return torch.nn.functional.conv2d(x, w, padding=1, groups=6).square().sum()

    x = torch.randn(2, 6, 5, 5, dtype=F64)
    out = depthwise(w, x)
    torch.testing.assert_close(
        out, torch.nn.functional.conv2d(x, w, padding=1, groups=6).square().sum())
    report = depthwise.programs()[0].fusion_report()
    assert report["forward"]["grouped_convolutions"] == 0  # one input channel per group


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv("METAFUSE_SPLIT_CONVOLUTIONS", "sometimes")
    w = torch.randn(8, 4, 3, 3, dtype=F64, requires_grad=True)

    @mf.compile
    def grouped(w, x):
        return torch.nn.functional.conv2d(x, w, groups=2).sum()

    with pytest.raises(RuntimeError, match="METAFUSE_SPLIT_CONVOLUTIONS='sometimes'"):
        grouped(w, torch.randn(1, 8, 5, 5, dtype=F64))


def test_measuring_leaves_the_random_generator_alone(monkeypatch):
    monkeypatch.delenv("METAFUSE_SPLIT_CONVOLUTIONS", raising=False)
    w = torch.randn(12, 5, 3, 3, dtype=F64, requires_grad=True)  # a shape no test measured

    @mf.compile
    def grouped(w, x):
        return torch.nn.functional.conv2d(x, w, groups=3).square().sum()

    x = torch.randn(2, 15, 6, 6, dtype=F64)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    out = grouped(w, x)  # specializes: times the grouped convolution both ways
    assert torch.equal(torch.rand(4), expected)
    torch.testing.assert_close(
        out, torch.nn.functional.conv2d(x, w, groups=3).square().sum())
    report = grouped.programs()[0].fusion_report()
    assert report["forward"]["grouped_convolutions"] == 1
