"""The functional API: transforms, chains, masks, hooks, schedules, states as
pytrees, saving and loading, and the errors users hit."""

import io
import math

import pytest
import torch

import metafuse
from metafuse import hook, schedule, transform


def params_tree():
    return {"a": torch.tensor([1.0, -2.0], dtype=torch.float64),
            "b": (torch.tensor([[0.5]], dtype=torch.float64),
                  torch.tensor(3.0, dtype=torch.float64))}


def grads_tree(scale=1.0):
    return {"a": torch.tensor([0.1, 0.2], dtype=torch.float64) * scale,
            "b": (torch.tensor([[-0.3]], dtype=torch.float64) * scale,
                  torch.tensor(0.4, dtype=torch.float64) * scale)}


def leaves(tree):
    return metafuse.tree.leaves(tree)


def test_scale_and_chain_compose_in_order():
    tx = metafuse.chain(transform.scale(2.0), transform.scale(-0.5))
    updates, state = tx.update(grads_tree(), tx.init(params_tree()))
    for u, g in zip(leaves(updates), leaves(grads_tree())):
        torch.testing.assert_close(u, -g)
    assert isinstance(state, tuple) and len(state) == 2


def test_adam_state_is_a_pytree_with_the_params_structure():
    tx = metafuse.adam(1e-3)
    state = tx.init(params_tree())
    chain_parts = state
    adam_state = [s for s in chain_parts if type(s).__name__ == "ScaleByAdamState"][0]
    assert metafuse.tree.structure(adam_state.mu) == metafuse.tree.structure(params_tree())
    assert adam_state.count.dtype == torch.int64 and adam_state.count.device.type == "cpu"
    doubled = metafuse.tree.map(lambda t: t * 2, state)
    assert type(doubled) is type(state)


def test_state_saves_and_loads_with_torch_save():
    tx = metafuse.adam(0.1)
    p = params_tree()
    state = tx.init(p)
    _, state = tx.update(grads_tree(), state, params=p, inplace=False)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    u1, _ = tx.update(grads_tree(), state, params=p, inplace=False)
    u2, _ = tx.update(grads_tree(), loaded, params=p, inplace=False)
    for a, b in zip(leaves(u1), leaves(u2)):
        torch.testing.assert_close(a, b)


def test_masked_applies_only_where_true():
    mask = {"a": True, "b": (False, True)}
    tx = transform.masked(transform.scale(10.0), mask)
    updates, _ = tx.update(grads_tree(), tx.init(params_tree()))
    g = grads_tree()
    torch.testing.assert_close(updates["a"], g["a"] * 10)
    torch.testing.assert_close(updates["b"][0], g["b"][0])
    torch.testing.assert_close(updates["b"][1], g["b"][1] * 10)


def test_adamw_mask_callable_excludes_leaves_from_decay():
    p = params_tree()
    no_mask = metafuse.adamw(0.1, weight_decay=0.5)
    masked = metafuse.adamw(0.1, weight_decay=0.5,
                            mask=lambda params: metafuse.tree.map(
                                lambda t: t.dim() > 0, params))
    u_all, _ = no_mask.update(grads_tree(), no_mask.init(p), params=p)
    u_masked, _ = masked.update(grads_tree(), masked.init(p), params=p)
    torch.testing.assert_close(u_all["a"], u_masked["a"])  # decayed in both
    assert not torch.allclose(u_all["b"][1], u_masked["b"][1])  # scalar: not


def test_nan_to_num_and_clip_grad_norm():
    g = {"x": torch.tensor([float("nan"), float("inf"), 3.0, 4.0])}
    u, _ = transform.nan_to_num(0.0, 1.0, -1.0).update(g, ())
    torch.testing.assert_close(u["x"], torch.tensor([0.0, 1.0, 3.0, 4.0]))
    params = [torch.ones(3), torch.ones(4)]
    grads = [torch.full((3,), 3.0), torch.full((4,), 4.0)]
    tx = transform.clip_grad_norm(1.0)
    clipped, _ = tx.update(grads, tx.init(params))
    total = math.sqrt(sum(float((c ** 2).sum()) for c in clipped))
    assert abs(total - 1.0) < 1e-5


def test_hooks_act_on_the_meta_gradient():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    tx = metafuse.chain(hook.register_hook(hook.zero_nan_hook),
                        transform.scale(-1.0))
    g = w * 1.0
    updates, _ = tx.update(g, tx.init(w), inplace=False)
    # A NaN flowing back through the update is zeroed by the hook.
    (grad,) = torch.autograd.grad(updates, w,
                                  grad_outputs=torch.tensor([float("nan"), 1.0]))
    torch.testing.assert_close(grad, torch.tensor([0.0, -1.0]))


@pytest.mark.parametrize("fn, expected", [
    (schedule.linear_schedule(1.0, 0.0, 4), [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]),
    (schedule.polynomial_schedule(1.0, 0.0, 2.0, 2), [1.0, 0.25, 0.0, 0.0, 0.0, 0.0]),
    (schedule.exponential_decay(1.0, 0.5, transition_steps=1), [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125]),
    (schedule.exponential_decay(1.0, 0.5, transition_steps=2, staircase=True, end_value=0.3),
     [1.0, 1.0, 0.5, 0.5, 0.3, 0.3]),
    (schedule.linear_schedule(1.0, 0.0, 2, transition_begin=2),
     [1.0, 1.0, 1.0, 0.5, 0.0, 0.0]),
])
def test_schedules(fn, expected):
    assert [float(fn(i)) for i in range(6)] == pytest.approx(expected)


def test_schedule_drives_the_learning_rate():
    tx = metafuse.sgd(schedule.linear_schedule(1.0, 0.0, 2))
    w = torch.zeros(1)
    state = tx.init(w)
    seen = []
    for _ in range(3):
        u, state = tx.update(torch.ones(1), state)
        seen.append(float(u))
    assert seen == pytest.approx([-1.0, -0.5, 0.0])


def test_tensor_learning_rate_is_differentiable():
    lr = torch.tensor(0.1, requires_grad=True)
    tx = metafuse.sgd(lr)
    w = torch.tensor([1.0, 2.0])
    u, _ = tx.update(torch.tensor([3.0, 4.0]), tx.init(w), inplace=False)
    new_w = metafuse.apply_updates(w, u, inplace=False)
    (g,) = torch.autograd.grad(new_w.sum(), lr)
    assert float(g) == pytest.approx(-7.0)


def test_errors_name_the_problem():
    tx = metafuse.adam(0.1)
    state = tx.init(params_tree())
    wrong = {"a": torch.zeros(2), "c": torch.zeros(1)}
    with pytest.raises(ValueError, match="structure"):
        tx.update(wrong, state)
    with pytest.raises(ValueError, match="`params` must have the same tree structure"):
        tx.update(grads_tree(), state, params={"a": torch.zeros(2)})
    with pytest.raises(ValueError, match="`lr` must be >= 0"):
        metafuse.sgd(-1.0)
    with pytest.raises(ValueError, match=r"betas\[1\]"):
        metafuse.adam(betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"betas\[0\]"):
        metafuse.adam(betas=(-0.1, 0.9))
    with pytest.raises(TypeError, match="pytree of tensors"):
        tx.init({"a": 1.0})
    with pytest.raises(ValueError, match="nesterov"):
        metafuse.sgd(0.1, nesterov=True)
    with pytest.raises(RuntimeError, match="needs `params`"):
        wd = metafuse.sgd(0.1, weight_decay=0.1)
        wd.update(grads_tree(), wd.init(params_tree()))
    with pytest.raises(ValueError, match="`mask` must have the tree structure"):
        transform.masked(transform.scale(1.0), {"a": True}).init(params_tree())
    with pytest.raises(RuntimeError, match="constant number `lr`"):
        metafuse.adam(schedule.linear_schedule(1.0, 0.0, 3), fused=True)


def test_fused_and_unfused_give_the_same_update_and_state():
    p = params_tree()
    for fused_tx, plain_tx in [(metafuse.adam(0.1, fused=True), metafuse.adam(0.1)),
                               (metafuse.rmsprop(0.1, momentum=0.5, centered=True, fused=True),
                                metafuse.rmsprop(0.1, momentum=0.5, centered=True))]:
        fs, ps = fused_tx.init(p), plain_tx.init(p)
        for step in range(3):
            fu, fs = fused_tx.update(grads_tree(step + 1), fs, params=p, inplace=False)
            pu, ps = plain_tx.update(grads_tree(step + 1), ps, params=p, inplace=False)
            for a, b in zip(leaves(fu), leaves(pu)):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
