"""functorch.vmap over the functional optimizers (TorchOpt's FuncTorch
examples: an ensemble trained with a vmapped ``init`` and ``update``, and
MAML with a vmapped inner loop). Every batched result must equal the same
program run one member at a time."""

import functorch
import pytest
import torch
import torch.nn.functional as F

import metafuse as torchopt

F64 = torch.float64
MEMBERS = 3

OPTIMIZERS = {
    "sgd": lambda: torchopt.sgd(0.1),
    "sgd_nesterov": lambda: torchopt.sgd(0.1, momentum=0.9, nesterov=True,
                                         weight_decay=0.01),
    "adam": lambda: torchopt.adam(0.05),
    "adam_amsgrad": lambda: torchopt.adam(0.05, amsgrad=True),
    "adamw": lambda: torchopt.adamw(0.05),
    "adamax": lambda: torchopt.adamax(0.05),
    "radam": lambda: torchopt.radam(0.05),
    "rmsprop": lambda: torchopt.rmsprop(0.05, momentum=0.5, centered=True),
    "adagrad": lambda: torchopt.adagrad(0.05),
    "adadelta": lambda: torchopt.adadelta(0.5),
    "adam_schedule": lambda: torchopt.adam(
        torchopt.schedule.linear_schedule(0.1, 0.01, 3)),
    "clip_then_adam": lambda: torchopt.chain(torchopt.clip_grad_norm(1.0),
                                             torchopt.adam(0.05)),
}
# Their running maxima are written with out= operators, which vmap refuses.
OUT_OPS = {"adam_amsgrad", "adamax"}
STEPS = 4


def member_params(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(MEMBERS, 4, 3, generator=gen, dtype=F64),
            "b": torch.randn(MEMBERS, 3, generator=gen, dtype=F64)}


def fake_grads(params, step):
    # Different for every member and step; a function of the parameters.
    return {k: torch.sin(v * (step + 1)) + v * v for k, v in params.items()}


def loop_reference(tx, batched):
    out = []
    for m in range(MEMBERS):
        params = {k: v[m].clone() for k, v in batched.items()}
        state = tx.init(params)
        for step in range(STEPS):
            updates, state = tx.update(fake_grads(params, step), state,
                                       params=params, inplace=False)
            params = torchopt.apply_updates(params, updates, inplace=False)
        out.append(params)
    return out


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_vmapped_init_and_update_equal_a_loop(name, inplace):
    if inplace and name in OUT_OPS:
        pytest.skip("tested by test_out_operators_name_inplace")
    tx = OPTIMIZERS[name]()
    params = member_params()
    expected = loop_reference(tx, params)
    state = functorch.vmap(tx.init)(params)
    step_fn = functorch.vmap(
        lambda p, s, step: tx.update(fake_grads(p, step), s, params=p,
                                     inplace=inplace),
        in_dims=(0, 0, None))
    for step in range(STEPS):
        updates, state = step_fn(params, state, step)
        params = torchopt.apply_updates(params, updates, inplace=False)
    for m in range(MEMBERS):
        for k in params:
            torch.testing.assert_close(params[k][m], expected[m][k],
                                       rtol=1e-12, atol=1e-12)


def counts(state):
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        return [c for part in state for c in counts(part)]
    return [state.count] if "count" in getattr(state, "_fields", ()) else []


@pytest.mark.parametrize("inplace", [False, True])
def test_the_batched_count_advances_and_stays_an_int64_tensor(inplace):
    tx = torchopt.adam(0.05)
    params = member_params()
    state = functorch.vmap(tx.init)(params)
    (count,) = counts(state)
    assert count.dtype == torch.int64 and count.tolist() == [0] * MEMBERS
    step_fn = functorch.vmap(
        lambda p, s: tx.update(fake_grads(p, 0), s, inplace=inplace))
    for _ in range(3):
        _, state = step_fn(params, state)
    (count,) = counts(state)
    assert count.dtype == torch.int64 and count.tolist() == [3] * MEMBERS


def test_plain_path_count_is_still_a_host_tensor_updated_in_place():
    # Outside functorch nothing changes: one CPU int64 count, written in
    # place by inplace=True.
    tx = torchopt.adam(0.05)
    params = {k: v[0] for k, v in member_params().items()}
    state = tx.init(params)
    (count,) = counts(state)
    _, new_state = tx.update(fake_grads(params, 0), state)
    (new_count,) = counts(new_state)
    assert new_count is count and int(count) == 1 and count.device.type == "cpu"


def test_members_with_different_counts_are_an_error():
    tx = torchopt.adam(0.05)
    params = member_params()
    state = functorch.vmap(tx.init)(params)
    # Member 0 has taken one step more than the others.
    state = tuple(s._replace(count=torch.tensor([1, 0, 0])) if "count" in s._fields
                  else s for s in state)
    step_fn = functorch.vmap(
        lambda p, s: tx.update(fake_grads(p, 0), s, inplace=False))
    with pytest.raises(ValueError, match=r"ScaleByAdamState\.count differs"):
        step_fn(params, state)


@pytest.mark.parametrize("make", [
    lambda: torchopt.adam(0.05, use_accelerated_op=True),
    lambda: torchopt.sgd(0.05, momentum=0.9, fused=True),
])
def test_fused_kernels_under_vmap_name_the_option(make):
    tx = make()
    params = member_params()
    state = functorch.vmap(tx.init)(params)
    step_fn = functorch.vmap(
        lambda p, s: tx.update(fake_grads(p, 0), s, params=p, inplace=False))
    with pytest.raises(RuntimeError, match="fused=False"):
        step_fn(params, state)


@pytest.mark.parametrize("name", sorted(OUT_OPS))
def test_out_operators_name_inplace(name):
    tx = OPTIMIZERS[name]()
    params = member_params()
    state = functorch.vmap(tx.init)(params)
    step_fn = functorch.vmap(
        lambda p, s: tx.update(fake_grads(p, 0), s, inplace=True))
    with pytest.raises(RuntimeError, match="inplace=False"):
        step_fn(params, state)


# -- TorchOpt's examples/FuncTorch, as programs written for this project ----

class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(2, 8)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        return F.log_softmax(self.out(torch.relu(self.hidden(x))), -1)


def two_class_data(n=24, seed=0):
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(n, 2, generator=gen)
    labels = (points[:, 0] * points[:, 1] > 0).long()
    return points, labels


def test_ensemble_training_with_vmapped_init_and_step():
    """parallel_train_torchopt.py: init vmapped (randomness='same'), then
    vmapped train steps with Adam, update(..., inplace=False). Each member
    sees its own data, so the members' trajectories differ."""
    torch.manual_seed(0)
    model, _ = functorch.make_functional(TwoLayer())
    tx = torchopt.adam(lr=0.05)
    data = [two_class_data(seed=m) for m in range(MEMBERS)]
    points = torch.stack([x for x, _ in data])
    labels = torch.stack([y for _, y in data])

    def init(_):
        _, weights = functorch.make_functional(TwoLayer())
        return weights, tx.init(weights)

    def train_step(train_state, x, y):
        weights, opt_state = train_state
        grads, loss = functorch.grad_and_value(
            lambda w: F.nll_loss(model(w, x), y))(weights)
        updates, opt_state = tx.update(grads, opt_state, inplace=False)
        weights = torchopt.apply_updates(weights, updates, inplace=False)
        return loss, (weights, opt_state)

    torch.manual_seed(1)
    weights, opt_state = functorch.vmap(init, randomness="same")(
        torch.ones(MEMBERS, 1))
    start = (weights, opt_state)
    step_fn = functorch.vmap(train_step)
    losses = []
    for _ in range(5):
        loss, (weights, opt_state) = step_fn((weights, opt_state), points,
                                             labels)
        losses.append(loss)
    assert losses[-1].shape == (MEMBERS,)
    assert all(int(c) == 5 for c in counts(opt_state)[0])
    assert (losses[-1] < losses[0]).all(), "every member must train"

    # The same members trained one at a time.
    for m in range(MEMBERS):
        w = tuple(t[m] for t in start[0])
        s = tx.init(w)
        for step in range(5):
            loss, (w, s) = train_step((w, s), points[m], labels[m])
            torch.testing.assert_close(loss, losses[step][m], rtol=1e-5,
                                       atol=1e-6)
        for got, want in zip(weights, w):
            torch.testing.assert_close(got[m], want, rtol=1e-5, atol=1e-6)


def test_maml_with_vmapped_inner_loop_meta_gradient_equals_a_loop():
    """maml_omniglot_vmap.py: the inner loop (functorch.grad + update inside
    vmap over tasks, here with Adam so that the count is read under both
    transforms), the query losses' backward to the meta-parameters."""
    torch.manual_seed(0)
    net = TwoLayer().double()
    model, meta_params = functorch.make_functional(net)
    gen = torch.Generator().manual_seed(3)
    tasks = 4
    x_s = torch.randn(tasks, 6, 2, generator=gen, dtype=F64)
    y_s = torch.randint(0, 2, (tasks, 6), generator=gen)
    x_q = torch.randn(tasks, 6, 2, generator=gen, dtype=F64)
    y_q = torch.randint(0, 2, (tasks, 6), generator=gen)

    def task_loss(xs, ys, xq, yq):
        tx = torchopt.adam(lr=0.1, eps_root=1e-8)
        params = meta_params
        state = tx.init(params)
        for _ in range(3):
            grads = functorch.grad(
                lambda p: F.nll_loss(model(p, xs), ys))(params)
            updates, state = tx.update(grads, state, inplace=False)
            params = torchopt.apply_updates(params, updates, inplace=False)
        return F.nll_loss(model(params, xq), yq)

    batched = functorch.vmap(task_loss)(x_s, y_s, x_q, y_q).mean()
    got = torch.autograd.grad(batched, meta_params)
    looped = torch.stack([task_loss(x_s[t], y_s[t], x_q[t], y_q[t])
                          for t in range(tasks)]).mean()
    want = torch.autograd.grad(looped, meta_params)
    torch.testing.assert_close(batched, looped, rtol=1e-10, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)


def test_nested_vmap_equals_a_double_loop():
    tx = torchopt.adam(0.1)
    start = torch.randn(2, 3, 4, dtype=F64)
    state = functorch.vmap(functorch.vmap(tx.init))(start)
    step_fn = functorch.vmap(functorch.vmap(
        lambda p, s: tx.update(torch.cos(p) * p, s, inplace=False)))
    params = start
    for _ in range(3):
        updates, state = step_fn(params, state)
        params = params + updates
    assert counts(state)[0].tolist() == [[3] * 3] * 2
    for i in range(2):
        for j in range(3):
            p = start[i, j].clone()
            s = tx.init(p)
            for _ in range(3):
                u, s = tx.update(torch.cos(p) * p, s, inplace=False)
                p = p + u
            torch.testing.assert_close(params[i, j], p, rtol=1e-12, atol=1e-12)


def test_inplace_writes_a_stacked_count_in_place():
    # States stacked by hand (not vmap's expanded output) can be written in
    # place, as outside vmap.
    tx = torchopt.sgd(0.1, momentum=0.9)
    params = torch.randn(MEMBERS, 4, dtype=F64)
    trace_state = tx.init(params[0])[0]
    stacked = (type(trace_state)(trace=torch.zeros(MEMBERS, 4, dtype=F64),
                                 count=torch.zeros(MEMBERS, dtype=torch.int64)),
               ) + tuple(tx.init(params[0])[1:])
    (count,) = counts(stacked)
    _, new_state = functorch.vmap(
        lambda p, s: tx.update(p * 2, s, inplace=True))(params, stacked)
    assert counts(new_state)[0] is count and count.tolist() == [1] * MEMBERS
