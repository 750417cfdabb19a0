"""torch.optim compatibility of the Optimizer classes, FuncOptimizer, and the
state utilities (extract/recover_state_dict, stop_gradient, module_clone)."""

import io

import pytest
import torch

import metafuse


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 1)).double()


def data():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(8, 3, dtype=torch.float64, generator=g),
            torch.randn(8, 1, dtype=torch.float64, generator=g))


def train(model, opt, steps, scheduler=None):
    x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()


def test_param_groups_and_lr_scheduler_match_torch_optim():
    ours, theirs = net(), net()
    groups = lambda m: [{"params": m[0].parameters(), "lr": 0.05},  # noqa: E731
                        {"params": m[2].parameters()}]
    opt_ours = metafuse.Adam(groups(ours), lr=0.01)
    opt_theirs = torch.optim.Adam(groups(theirs), lr=0.01)
    train(ours, opt_ours, 10, torch.optim.lr_scheduler.StepLR(opt_ours, 3, 0.5))
    train(theirs, opt_theirs, 10, torch.optim.lr_scheduler.StepLR(opt_theirs, 3, 0.5))
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert isinstance(opt_ours, torch.optim.Optimizer)


def test_parameters_without_grad_are_skipped_like_torch_optim():
    ours, theirs = net(), net()
    ours[0].bias.requires_grad_(False)
    theirs[0].bias.requires_grad_(False)
    opt_ours = metafuse.SGD(ours.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9,
                                 weight_decay=0.1)
    train(ours, opt_ours, 5)
    train(theirs, opt_theirs, 5)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_state_dict_round_trip_continues_the_same_trajectory():
    a, b = net(), net()
    opt_a = metafuse.RMSProp(a.parameters(), lr=0.01, momentum=0.5)
    train(a, opt_a, 3)
    buffer = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    b.load_state_dict(saved["model"])
    opt_b = metafuse.RMSProp(b.parameters(), lr=0.01, momentum=0.5)
    opt_b.load_state_dict(saved["opt"])
    train(a, opt_a, 3)
    train(b, opt_b, 3)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    with pytest.raises(ValueError, match="param group"):
        metafuse.RMSProp(net()[0].parameters(), lr=0.1).load_state_dict(saved["opt"])


def test_func_optimizer_is_differentiable():
    w0 = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    opt = metafuse.FuncOptimizer(metafuse.sgd(0.1))
    params = {"w": w0}
    for _ in range(2):
        params = opt.step((params["w"] ** 2).sum(), params)
    # w2 = w0 * (1 - 0.2)^2, so d sum(w2) / d w0 = 0.64.
    (g,) = torch.autograd.grad(params["w"].sum(), w0)
    torch.testing.assert_close(g, torch.full((2,), 0.64, dtype=torch.float64))


def test_extract_recover_and_stop_gradient_in_a_meta_loop():
    model = net()
    x, y = data()
    initial = metafuse.extract_state_dict(model, by="deepcopy")
    inner = metafuse.MetaSGD(model, lr=0.1)
    optimizer_snapshot = metafuse.extract_state_dict(inner, by="copy")
    inner.step(((model(x) - y) ** 2).mean())
    adapted = metafuse.extract_state_dict(model)  # by reference: keeps graph
    assert all(p.grad_fn is not None for d in adapted.params for p in d.values())
    metafuse.stop_gradient(model)
    assert all(p.grad_fn is None for p in model.parameters())
    metafuse.recover_state_dict(model, initial)
    snapshot = [p for d in initial.params for p in d.values()]
    for p, saved in zip(model.parameters(), snapshot):
        torch.testing.assert_close(p, saved)
    metafuse.recover_state_dict(inner, optimizer_snapshot)
    with pytest.raises(ValueError, match="`by` must be one of"):
        metafuse.extract_state_dict(model, by="shallow")


def test_module_clone_of_an_adapted_module_keeps_or_cuts_the_graph():
    model = net()
    x, y = data()
    meta_params = list(model.parameters())
    metafuse.MetaSGD(model, lr=0.1).step(((model(x) - y) ** 2).mean())
    kept = metafuse.module_clone(model, by="copy")
    cut = metafuse.module_clone(model, by="deepcopy")
    loss_kept = ((kept(x) - y) ** 2).mean()
    grads = torch.autograd.grad(loss_kept, meta_params)
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(p.grad_fn is None for p in cut.parameters())
    torch.testing.assert_close(cut(x), kept(x))
