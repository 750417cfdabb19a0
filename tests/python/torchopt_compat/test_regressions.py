"""Regression tests for the TorchOpt drop-in issue: the crashes (1-4) and
the silent differences (5), each against TorchOpt 0.7.3's documented
behaviour or torch.optim."""

import pytest
import torch

import metafuse as torchopt

F64 = torch.float64


def linear_grads(bias=True):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2, bias=bias).double()
    x = torch.randn(5, 3, dtype=F64)
    loss = (net(x) ** 2).mean()
    params = tuple(net.parameters())
    return params, torch.autograd.grad(loss, params)


# -- 1: weight decay + inplace update on a gradient that is a view ------------
@pytest.mark.parametrize("make", [
    lambda: torchopt.sgd(0.1, weight_decay=0.1),
    lambda: torchopt.sgd(0.1, 0.9, weight_decay=0.1),
    lambda: torchopt.adam(0.1, weight_decay=0.1),
    lambda: torchopt.adamax(0.1, weight_decay=0.1),
    lambda: torchopt.adadelta(0.1, weight_decay=0.1),
    lambda: torchopt.radam(0.1, weight_decay=0.1),
    lambda: torchopt.adagrad(0.1, weight_decay=0.1),
    lambda: torchopt.rmsprop(0.1, weight_decay=0.1),
])
def test_weight_decay_inplace_on_view_gradients(make):
    params, grads = linear_grads()
    assert grads[0]._is_view(), "the weight gradient of nn.Linear is a view"
    reference = tuple(g.clone() for g in grads)
    tx = make()
    expected, _ = tx.update(reference, tx.init(params), params=params, inplace=False)
    updates, _ = tx.update(grads, tx.init(params), params=params)  # inplace=True
    for u, e in zip(updates, expected):
        torch.testing.assert_close(u, e.detach())
        assert not u.requires_grad


# -- 2: None gradients pass through --------------------------------------------
def test_none_gradients_leave_their_parameter_and_state_alone():
    a = torch.ones(2, dtype=F64, requires_grad=True)
    b = torch.ones(3, dtype=F64, requires_grad=True)
    loss = (a * 2).sum()
    grads = torch.autograd.grad(loss, (a, b), allow_unused=True)
    assert grads[1] is None
    tx = torchopt.adam(0.1)
    state = tx.init((a, b))
    updates, state = tx.update(grads, state, params=(a, b), inplace=False)
    assert updates[1] is None
    torch.testing.assert_close(updates[0], torch.full((2,), -0.1, dtype=F64))
    assert torch.count_nonzero(state[0].mu[1]) == 0
    assert torch.count_nonzero(state[0].mu[0]) == 2
    new_a, new_b = torchopt.apply_updates((a, b), updates, inplace=False)
    assert new_b is b
    torch.testing.assert_close(new_a, a - 0.1)


def test_meta_optimizer_leaves_unused_parameters_alone():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    unused = net[1].weight
    opt = torchopt.MetaSGD(net, lr=0.1)
    opt.step(net[0](torch.ones(1, 2)).sum())
    assert net[1].weight is unused
    assert net[0].weight.grad_fn is not None


# -- 3: stop_gradient on a module without bias ----------------------------------
def test_stop_gradient_on_module_without_bias():
    net = torch.nn.Linear(3, 2, bias=False)
    opt = torchopt.MetaSGD(net, lr=0.1)
    opt.step(net(torch.ones(1, 3)).sum())
    assert net.weight.grad_fn is not None
    torchopt.stop_gradient(net)
    assert net.weight.grad_fn is None and net.weight.requires_grad
    assert torchopt.module_detach_(net) is net


# -- 4: clip_grad_norm computes the norm without a graph ------------------------
def test_clip_grad_norm_gradient_is_the_constant_scaling():
    u = torch.tensor([3.0, 4.0], dtype=F64, requires_grad=True)
    tx = torchopt.clip_grad_norm(max_norm=1.0)
    (clipped,), _ = tx.update((u * 1,), tx.init((u,)), inplace=False)
    torch.testing.assert_close(clipped, u.detach() / (5.0 + 1e-6))
    (grad,) = torch.autograd.grad(clipped.sum(), u)
    torch.testing.assert_close(grad, torch.full((2,), 1.0 / (5.0 + 1e-6), dtype=F64))


def test_clip_grad_norm_error_if_nonfinite():
    tx = torchopt.clip_grad_norm(1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError, match="non-finite"):
        tx.update((torch.tensor([float("inf"), 1.0]),), tx.init((torch.zeros(2),)))
    lenient = torchopt.clip_grad_norm(1.0)
    (out,), _ = lenient.update((torch.tensor([float("inf"), 1.0]),), None)
    assert out[1] == 0.0  # scaled by 1 / inf


# -- 5: silent differences -------------------------------------------------------
def torch_trajectory(make_torch, steps=5):
    torch.manual_seed(1)
    w = torch.randn(4, dtype=F64, requires_grad=True)
    opt = make_torch([w])
    out = []
    for _ in range(steps):
        opt.zero_grad()
        ((w ** 3).sum() + (w * 0.5).sum()).backward()
        opt.step()
        out.append(w.detach().clone())
    return out


def functional_trajectory(tx, steps=5):
    torch.manual_seed(1)
    w = torch.randn(4, dtype=F64, requires_grad=True)
    state = tx.init(w)
    out = []
    for _ in range(steps):
        (g,) = torch.autograd.grad((w ** 3).sum() + (w * 0.5).sum(), w)
        u, state = tx.update(g, state, params=w)
        w = torchopt.apply_updates(w, u, inplace=False).detach().requires_grad_()
        out.append(w.detach().clone())
    return out


def test_sgd_positional_order_is_torchopts():
    # (lr, momentum, dampening, weight_decay, nesterov): 0.05 is weight decay.
    ours = functional_trajectory(torchopt.sgd(0.1, 0.9, 0.0, 0.05))
    ref = torch_trajectory(lambda p: torch.optim.SGD(p, 0.1, 0.9, weight_decay=0.05))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)


def test_sgd_class_positional_order_is_torchopts():
    # SGD(params, lr, momentum, weight_decay, dampening, nesterov, maximize)
    ours = torch_trajectory(lambda p: torchopt.SGD(p, 0.1, 0.9, 0.05))
    ref = torch_trajectory(lambda p: torch.optim.SGD(p, 0.1, 0.9, weight_decay=0.05))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("make, make_torch", [
    (lambda: torchopt.adamax(), lambda p: torch.optim.Adamax(p, lr=1e-3, eps=1e-6)),
    (lambda: torchopt.adadelta(), lambda p: torch.optim.Adadelta(p, lr=1e-3)),
    (lambda: torchopt.radam(), lambda p: torch.optim.RAdam(p, eps=1e-6)),
    (lambda: torchopt.rmsprop(), lambda p: torch.optim.RMSprop(p)),
])
def test_alias_defaults_are_torchopts(make, make_torch):
    for a, b in zip(functional_trajectory(make()), torch_trajectory(make_torch)):
        torch.testing.assert_close(a, b)


def test_class_defaults_are_torchopts():
    # TorchOpt's AdaMax class keeps torch.optim's defaults (lr=2e-3, eps=1e-8).
    for a, b in zip(torch_trajectory(lambda p: torchopt.AdaMax(p)),
                    torch_trajectory(lambda p: torch.optim.Adamax(p))):
        torch.testing.assert_close(a, b)
    net = torch.nn.Linear(1, 1)
    assert torchopt.MetaAdam(net).hyperparameters["moment_requires_grad"] is True
    assert torchopt.MetaAdamW(net).hyperparameters["moment_requires_grad"] is False


def test_exponential_decay_argument_order():
    # (init_value, decay_rate, transition_begin, transition_steps, ...)
    fn = torchopt.schedule.exponential_decay(1.0, 0.5, 2, 1)
    assert [float(fn(i)) for i in range(5)] == pytest.approx([1, 1, 1, 0.5, 0.25])


def test_schedules_return_tensors():
    value = torchopt.schedule.linear_schedule(1.0, 0.0, 4)(torch.tensor(1))
    assert isinstance(value, torch.Tensor) and float(value) == pytest.approx(0.75)


def test_cg_default_tolerance_and_preconditioner():
    A = torch.diag(torch.tensor([1.0, 10.0, 100.0, 1000.0], dtype=F64))
    b = torch.ones(4, dtype=F64)
    exact = 1.0 / torch.diag(A)
    # Jacobi preconditioner: exact after one iteration.
    x = torchopt.linalg.cg(A, b, maxiter=1, M=torch.diag(exact))
    torch.testing.assert_close(x, exact)
    x = torchopt.linalg.cg(lambda v: A @ v, b)
    assert torch.linalg.norm(A @ x - b) <= 1e-5 * torch.linalg.norm(b)
    with pytest.raises(ValueError, match="`rtol`"):
        torchopt.linalg.cg(A, b, rtol=-1.0)


def test_ns_fixed_number_of_terms():
    A = torch.tensor([[0.5, 0.1], [0.1, 0.4]], dtype=F64)
    b = torch.tensor([1.0, 2.0], dtype=F64)
    I = torch.eye(2, dtype=F64)  # noqa: E741
    expected = sum(torch.linalg.matrix_power(I - A, k) for k in range(11)) @ b
    torch.testing.assert_close(torchopt.linalg.ns(A, b), expected)
    alpha = 0.5
    expected = alpha * sum(torch.linalg.matrix_power(I - alpha * A, k)
                           for k in range(4)) @ b
    torch.testing.assert_close(torchopt.linalg.ns(A, b, 3, alpha=alpha), expected)
    inv = torchopt.linalg.ns_inv(A, 200)
    torch.testing.assert_close(inv, torch.linalg.inv(A))
    tree = torchopt.linalg.ns_inv({"a": A, "b": 2 * I}, 3, alpha=0.25)
    torch.testing.assert_close(
        tree["b"], 0.25 * sum(torch.linalg.matrix_power(0.5 * I, k) for k in range(3)))


def test_solve_factories_accept_ridge_none():
    op = lambda v: 2 * v  # noqa: E731
    b = torch.tensor([1.0, 4.0], dtype=F64)
    for solve in (torchopt.linear_solve.solve_cg(ridge=None),
                  torchopt.linear_solve.solve_normal_cg(ridge=None),
                  torchopt.linear_solve.solve_inv(ridge=None),
                  torchopt.linear_solve.solve_inv(ridge=None, ns=True, alpha=0.25,
                                                  maxiter=60)):
        torch.testing.assert_close(solve(op, b), b / 2)
    torch.testing.assert_close(torchopt.linear_solve.solve_cg(ridge=2.0)(op, b), b / 4)
