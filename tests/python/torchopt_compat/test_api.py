"""TorchOpt 0.7.3's API under `import metafuse as torchopt`: the names that
were missing (issue item 6), each checked against TorchOpt's documented
behaviour."""

import copy

import pytest
import torch

import metafuse as torchopt

F64 = torch.float64


def test_gradient_transformation_from_user_functions():
    def init_fn(params):
        return torchopt.base.EmptyState()

    def update_fn(updates, state, *, params=None, inplace=True):
        return torchopt.pytree.tree_map(lambda g: 2 * g, updates), state

    tx = torchopt.base.GradientTransformation(init_fn, update_fn)
    init, update = tx  # unpacks like TorchOpt's NamedTuple
    assert callable(init) and callable(update)
    assert isinstance(init({"w": torch.ones(2)}), torchopt.base.EmptyState)
    g = {"w": torch.ones(2)}
    doubled, state = update(g, init(g))
    torch.testing.assert_close(doubled["w"], torch.full((2,), 2.0))
    # chained with C++ transformations, run by the generic Optimizer
    chained = torchopt.chain(tx, torchopt.sgd(0.5))
    assert isinstance(chained, torchopt.base.ChainedGradientTransformation)
    assert len(chained.transformations) == 2
    w = torch.ones(2, requires_grad=True)
    opt = torchopt.Optimizer([w], chained)
    w.sum().backward()
    opt.step()
    torch.testing.assert_close(w.detach(), torch.zeros(2))


def test_chain_identity_flattening_and_stateless_update():
    assert isinstance(torchopt.chain(), type(torchopt.base.identity()))
    sgd = torchopt.sgd(0.1)
    assert torchopt.chain(sgd) is sgd
    nested = torchopt.chain(torchopt.clip_grad_norm(1.0),
                            torchopt.chain(torchopt.transform.scale(2.0), torchopt.base.identity()))
    assert len(nested.transformations) == 2
    flat = torchopt.combine.chain_flat(torchopt.clip_grad_norm(1.0), sgd)
    assert len(flat.init(torch.zeros(2))) == 2
    (u,), _ = torchopt.transform.scale(3.0).update((torch.ones(1),), None)
    assert float(u) == 3.0


def test_meta_optimizer_generic_impl_param_groups_and_state_dict():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    opt = torchopt.MetaOptimizer(a, torchopt.chain(torchopt.clip_grad_norm(10.0),
                                                   torchopt.adam(0.1)))
    opt.add_param_group(b)
    x = torch.randn(4, 2)
    w_b = b.weight
    opt.step((a(x) + b(x)).pow(2).mean())
    assert a.weight.grad_fn is not None and b.weight is not w_b
    state = opt.state_dict()
    assert isinstance(state, tuple) and len(state) == 2
    snapshot = torchopt.extract_state_dict(opt, by="deepcopy")
    opt.step((a(x) + b(x)).pow(2).mean())
    torchopt.recover_state_dict(opt, snapshot)
    assert int(opt.state_dict()[0][1][0].count) == 1
    with pytest.raises(ValueError, match="tuple of 2"):
        opt.load_state_dict(state[:1])


def test_use_accelerated_op_matches_the_plain_update():
    assert torchopt.accelerated_op_available(torch.device("cpu"))
    assert torchopt.accelerated_op_available(["cpu"])
    # TorchOpt's default asks for CUDA and the CPU.
    assert torchopt.accelerated_op_available() == torch.cuda.is_available()
    assert not torchopt.accelerated_op_available("meta")
    torch.manual_seed(0)
    w = torch.randn(5, dtype=F64)
    g = torch.randn(5, dtype=F64)
    fast, plain = torchopt.adam(0.1, use_accelerated_op=True), torchopt.adam(0.1)
    assert fast._config[1]["fused"] is True
    u1, _ = fast.update(g, fast.init(w), params=w, inplace=False)
    u2, _ = plain.update(g, plain.init(w), params=w, inplace=False)
    torch.testing.assert_close(u1, u2)
    a = torchopt.transform.scale_by_accelerated_adam()
    b = torchopt.transform.scale_by_adam()
    torch.testing.assert_close(a.update(g, a.init(w))[0], b.update(g, b.init(w))[0])


def test_rmsprop_nesterov_and_initial_scale():
    alpha, eps, m, lr, s0 = 0.9, 1e-8, 0.5, 0.1, 0.3
    w = torch.tensor([1.0, -2.0], dtype=F64)
    tx = torchopt.rmsprop(lr, alpha, eps, momentum=m, initial_scale=s0, nesterov=True)
    state = tx.init(w)
    nu, buf = torch.full_like(w, s0), None
    for _ in range(3):
        g = 2 * w
        u, state = tx.update(g, state, params=w, inplace=False)
        nu = alpha * nu + (1 - alpha) * g * g
        step = g / (nu.sqrt() + eps)
        buf = step if buf is None else m * buf + step
        torch.testing.assert_close(u, -lr * (step + m * buf))
        w = w + u
    with pytest.raises(RuntimeError, match="fused=True"):
        torchopt.rmsprop(0.1, nesterov=True, momentum=0.9, fused=True)


def test_spellings_and_submodules():
    assert torchopt.AdaMax is torchopt.Adamax and torchopt.RMSprop is torchopt.RMSProp
    assert torchopt.MetaAdaGrad is torchopt.MetaAdagrad
    assert torchopt.diff.zero_order.nn.ZeroOrderGradientModule is \
        torchopt.diff.zero_order.ZeroOrderGradientModule
    assert torchopt.diff.implicit.nn.ImplicitMetaGradientModule is \
        torchopt.nn.ImplicitMetaGradientModule
    assert torchopt.update.apply_updates is torchopt.apply_updates
    assert torchopt.clip.clip_grad_norm is torchopt.clip_grad_norm
    assert callable(torchopt.diff.zero_order)  # the module is the decorator
    import metafuse.typing
    assert torchopt.typing.TensorTree is metafuse.typing.TensorTree


def test_extract_state_dict_layout_and_copy_modes():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3),
                              torch.nn.Linear(3, 1, bias=False))
    state = torchopt.extract_state_dict(net, by="deepclone")
    assert len(state.params) == 3 and list(state.params[0]) == ["weight", "bias"]
    assert len(state.buffers) == 1 and "running_mean" in state.buffers[0]
    assert all(isinstance(p, torch.nn.Parameter) for d in state.params for p in d.values())
    assert state.params[0]["weight"] is not net[0].weight
    ref = torchopt.extract_state_dict(net, by="ref", with_buffers=False)
    assert ref.params[0]["weight"] is net[0].weight and ref.buffers == ()
    clone = torchopt.extract_state_dict(net, by="clone")
    (through_clone,) = torch.autograd.grad(clone.params[0]["weight"].sum(), net[0].weight)
    torch.testing.assert_close(through_clone, torch.ones_like(net[0].weight))
    with torch.no_grad():
        net[0].weight.add_(1.0)
    torchopt.recover_state_dict(net, state)
    torch.testing.assert_close(net[0].weight, state.params[0]["weight"])
    visual = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="net.")
    assert "net.0.weight" in visual.visual_contents.values()
    with pytest.raises(ValueError, match="`by` must be one of"):
        torchopt.extract_state_dict(net, by="shallow")


def test_module_clone_of_trees_and_devices():
    tree = {"a": torch.ones(2, requires_grad=True)}
    copied = torchopt.module_clone(tree, by="clone")
    (through_copy,) = torch.autograd.grad((3 * copied["a"]).sum(), tree["a"])
    torch.testing.assert_close(through_copy, torch.full((2,), 3.0))
    deep = torchopt.module_clone(tree, by="deepcopy", device="cpu")
    assert deep["a"].grad_fn is None and deep["a"].requires_grad
    assert torchopt.module_clone(tree)["a"] is tree["a"]


def test_pytree_arithmetic():
    x = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor(3.0)}
    y = {"a": torch.tensor([0.5, 0.5]), "b": torch.tensor(1.0)}
    pt = torchopt.pytree
    torch.testing.assert_close(pt.tree_add(x, y, y)["a"], torch.tensor([2.0, 3.0]))
    torch.testing.assert_close(pt.tree_add_scalar_mul(x, y, 2.0)["b"], torch.tensor(5.0))
    torch.testing.assert_close(pt.tree_sub(x, y)["a"], torch.tensor([0.5, 1.5]))
    torch.testing.assert_close(pt.tree_sub_scalar_mul(x, y, 2.0)["b"], torch.tensor(1.0))
    torch.testing.assert_close(pt.tree_scalar_mul(2.0, x)["a"], torch.tensor([2.0, 4.0]))
    torch.testing.assert_close(pt.tree_mul(x, y)["a"], torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(pt.tree_truediv(x, y)["b"], torch.tensor(3.0))
    torch.testing.assert_close(pt.tree_neg(x)["b"], torch.tensor(-3.0))
    assert pt.tree_vdot_real(x, y) == pytest.approx(4.5)
    leaves, spec = pt.tree_flatten_as_tuple(x)
    assert isinstance(leaves, tuple) and spec.num_leaves == 2
    assert pt.tree_paths(x) == [("a",), ("b",)]
    assert pt.tree_map_with_path(lambda p, v: p[0], x) == {"a": "a", "b": "b"}
    assert pt.tree_replace_nones(0, [None, 1]) == [0, 1]
    assert pt.tree_sum([1, [2, 3]]) == 6 and pt.tree_max([1, [5, 3]]) == 5
    assert pt.is_namedtuple(torchopt.base.EmptyState())


def test_meta_gradient_module_separates_meta_parameters():
    lam = torch.tensor(0.5, requires_grad=True)
    meta_net = torch.nn.Linear(2, 2)

    class Inner(torchopt.nn.MetaGradientModule):
        def __init__(self, meta_net, lam):
            super().__init__()
            self.meta_net = meta_net
            self.lam = lam
            self.head = torch.nn.Linear(2, 1)

    inner = Inner(meta_net, lam)
    own = {id(p) for p in inner.parameters()}
    assert own == {id(p) for p in inner.head.parameters()}
    metas = dict(inner.named_meta_parameters())
    assert set(metas) == {"lam", "meta_net.weight", "meta_net.bias"}
    assert inner.lam is lam and inner.meta_net is meta_net
    assert list(inner.meta_children()) == [meta_net]


def test_reparametrize_and_swap_state():
    net = torch.nn.Linear(2, 1)
    w = torch.zeros(1, 2)
    with torchopt.nn.reparametrize(net, {"weight": w}) as same:
        assert same is net and net.weight is w
    assert isinstance(net.weight, torch.nn.Parameter)
    old = torchopt.nn.swap_state(net, [("bias", torch.ones(1))])
    assert isinstance(old["bias"], torch.nn.Parameter) and float(net.bias) == 1.0
    with pytest.raises(AttributeError, match="no tensor named"):
        torchopt.nn.swap_state(net, {"nothing": w})
    torchopt.nn.swap_state(net, {"extra": w}, allow_missing=True)
    assert net.extra is w


def test_custom_root_with_keyword_arguments():
    def optimality(x, lam, *, scale):
        return scale * (x - lam)

    @torchopt.diff.implicit.custom_root(optimality, argnums=1)
    def solve(x0, lam, *, scale):
        return lam.detach().clone()

    lam = torch.tensor(2.0, dtype=F64, requires_grad=True)
    x = solve(torch.zeros((), dtype=F64), lam, scale=3.0)
    (grad,) = torch.autograd.grad(x, lam)
    assert float(grad) == pytest.approx(1.0)


def test_func_optimizer_inplace_override():
    w = torch.ones(2, requires_grad=True)
    opt = torchopt.FuncOptimizer(torchopt.sgd(0.5))
    (new,) = opt.step(w.sum(), (w,), inplace=False)
    torch.testing.assert_close(new.detach(), torch.full((2,), 0.5))
    (through_step,) = torch.autograd.grad(new.sum(), w)  # new = w - 0.5 * 1
    torch.testing.assert_close(through_step, torch.ones(2))


def test_deepcopy_of_states_and_optimizers():
    w = torch.ones(2)
    tx = torchopt.adam(0.1)
    state = tx.init(w)
    copied = copy.deepcopy(state)
    assert copied[0].mu is not state[0].mu


def test_pytree_treespec_helpers_and_broadcast_prefix():
    pt = torchopt.pytree
    full = {"b": [1, 2], "a": (3, {"x": 4, "y": 5})}
    prefix = {"a": 0, "b": 9}
    assert pt.treespec_entries(pt.tree_structure(full)) == ["a", "b"]
    assert pt.treespec_entry(pt.tree_structure((1, 2)), 1) == 1
    assert len(pt.treespec_children(pt.tree_structure(full))) == 2
    assert pt.treespec_child(pt.tree_structure(full), 1).num_leaves == 2
    assert pt.treespec_is_prefix(pt.tree_structure(prefix), pt.tree_structure(full))
    assert not pt.treespec_is_prefix(pt.tree_structure(full), pt.tree_structure(prefix))
    assert pt.treespec_is_suffix(pt.tree_structure(full), pt.tree_structure(prefix),
                                 strict=True)
    assert pt.broadcast_prefix(prefix, full) == [0, 0, 0, 9, 9]
    assert pt.tree_broadcast_prefix(prefix, full) == {"a": (0, {"x": 0, "y": 0}),
                                                     "b": [9, 9]}
    with pytest.raises(ValueError, match="not a prefix"):
        pt.broadcast_prefix([1, 2], full)
