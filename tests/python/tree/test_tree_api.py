"""metafuse.tree: node types, TreeSpec, paths, flatten_as, registration with
namespaces, the structure cache, reduce/all_leaves/map_."""

import collections
import pickle

import pytest
import torch

import metafuse
from metafuse import tree as mt

Point = collections.namedtuple("Point", ["x", "y"])


class Box:
    """A user class made a node by register_node (module level: serializable)."""

    def __init__(self, label, items):
        self.label, self.items = label, list(items)


def box_flatten(box):
    return box.items, box.label


def box_unflatten(label, children):
    return Box(label, children)


@pytest.fixture
def box_registered():
    mt.register_node(Box, box_flatten, box_unflatten)
    yield
    mt.unregister_node(Box)


def test_reachable_from_the_package():
    assert metafuse.tree is mt
    assert metafuse.tree.flatten([1, 2])[0] == [1, 2]


def test_spec_printing_and_properties():
    spec = mt.structure({"b": [1, 2], "a": 0})
    assert repr(spec) == "TreeSpec({'a': *, 'b': [*, *]})"
    assert (spec.num_leaves, spec.num_nodes, spec.num_children) == (3, 5, 2)
    assert spec.kind == "dict" and not spec.is_leaf()
    assert [repr(c) for c in spec.children()] == ["TreeSpec(*)", "TreeSpec([*, *])"]
    assert repr(mt.structure((1,))) == "TreeSpec((*,))"
    assert repr(mt.structure(Point(1, None))) == "TreeSpec(Point(x=*, y=None))"
    assert repr(mt.structure(None, none_is_leaf=True)) == "TreeSpec(*, NoneIsLeaf)"
    assert "namespace='ns'" in repr(mt.structure([1], namespace="ns"))


def test_spec_is_hashable_comparable_and_picklable():
    a, b = mt.structure({"x": (1, 2)}), mt.structure({"x": (3, 4)})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != mt.structure({"x": [1, 2]})
    assert a != mt.structure({"y": (1, 2)})
    assert mt.structure(None) != mt.structure(None, none_is_leaf=True)
    assert (a == "not a spec") is False
    assert pickle.loads(pickle.dumps(a)) == a


def test_dicts_flatten_sorted_and_ordered_dicts_keep_order():
    leaves, spec = mt.flatten({"b": 1, "a": 2, "c": 3})
    assert leaves == [2, 1, 3]
    assert list(mt.unflatten(spec, leaves)) == ["a", "b", "c"]
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    leaves, spec = mt.flatten(od)
    assert leaves == [1, 2]
    back = mt.unflatten(spec, leaves)
    assert type(back) is collections.OrderedDict and list(back) == ["b", "a"]
    od.move_to_end("b")  # the OrderedDict's order, not its dict's
    assert mt.leaves(od) == [2, 1]
    dd = collections.defaultdict(int, {"z": 1, "y": 2})
    back = mt.unflatten(*reversed(mt.flatten(dd)))
    assert type(back) is collections.defaultdict and back.default_factory is int
    assert list(back) == ["z", "y"] and back["missing"] == 0


def test_none_is_a_node_unless_none_is_leaf():
    assert mt.leaves([None, 1]) == [1]
    assert mt.leaves([None, 1], none_is_leaf=True) == [None, 1]
    assert mt.map(lambda x: x * 2, [None, 1]) == [None, 2]


def test_tensors_and_unregistered_objects_are_leaves():
    t, o = torch.ones(2), object()
    assert mt.leaves([t, o, "str", b"bytes", 3.0]) == [t, o, "str", b"bytes", 3.0]
    assert mt.structure(t).is_leaf()


def test_is_leaf_predicate_stops_descent():
    tree = {"a": [1, 2], "b": (3, [4])}
    leaves = mt.leaves(tree, is_leaf=lambda x: isinstance(x, list))
    assert leaves == [[1, 2], 3, [4]]
    assert mt.all_leaves([[1], 2], is_leaf=lambda x: isinstance(x, list))
    assert not mt.all_leaves([[1], 2])
    assert mt.all_leaves([1, torch.ones(1), None], none_is_leaf=True)


def test_flatten_with_path():
    paths, leaves, spec = mt.flatten_with_path({"b": [1, (2, 3)], "a": Point(4, 5)})
    assert paths == [("a", 0), ("a", 1), ("b", 0), ("b", 1, 0), ("b", 1, 1)]
    assert leaves == [4, 5, 1, 2, 3]
    assert spec == mt.structure({"b": [1, (2, 3)], "a": Point(4, 5)})
    assert mt.flatten_with_path(7)[0] == [()]


def test_flatten_as_returns_leaves_of_a_matching_tree():
    spec = mt.structure({"w": [0, 0], "b": 0})
    assert mt.flatten_as(spec, {"b": 1, "w": [2, 3]}) == [1, 2, 3]


def test_map_and_map_inplace():
    a = {"w": torch.ones(2), "b": [torch.zeros(1)]}
    out = mt.map(lambda x, y: x + 2 * y, a, a)
    assert torch.equal(out["w"], torch.full((2,), 3.0))
    result = mt.map_(lambda x: x.add_(1), a)
    assert result is a and torch.equal(a["b"][0], torch.ones(1))


def test_reduce():
    assert mt.reduce(lambda x, y: x + y, {"a": 1, "b": [2, 3]}) == 6
    assert mt.reduce(lambda x, y: x + y, [], 10) == 10
    with pytest.raises(TypeError):
        mt.reduce(lambda x, y: x + y, [])


def test_registered_class_flattens_maps_and_serializes(box_registered):
    tree = [Box("lbl", [1, {"k": 2}])]
    leaves, spec = mt.flatten(tree)
    assert leaves == [1, 2]
    assert repr(spec) == "TreeSpec([CustomTreeNode(Box['lbl'], [*, {'k': *}])])"
    back = mt.map(lambda x: x * 10, tree)
    assert back[0].label == "lbl" and back[0].items == [10, {"k": 20}]
    again = mt.spec_from_string(spec.serialize())
    assert again == spec
    assert mt.unflatten(again, [5, 6])[0].items == [5, {"k": 6}]


def test_registered_entries_give_paths():
    class Pair:
        def __init__(self, first, second):
            self.first, self.second = first, second

    mt.register_node(Pair, lambda p: ((p.first, p.second), None, ("first", "second")),
                     lambda ctx, c: Pair(*c))
    try:
        paths, leaves, _ = mt.flatten_with_path({"p": Pair(1, [2])})
        assert paths == [("p", "first"), ("p", "second", 0)]
    finally:
        mt.unregister_node(Pair)


def test_namespaces_scope_registrations():
    class Vec:
        def __init__(self, *xs):
            self.xs = xs

    mt.register_node(Vec, lambda v: (v.xs, None), lambda ctx, c: Vec(*c), namespace="mine")
    try:
        v = Vec(1, 2)
        assert mt.leaves([v]) == [v]  # a leaf outside the namespace
        assert mt.leaves([v], namespace="mine") == [1, 2]
        spec = mt.structure([v], namespace="mine")
        assert spec.namespace == "mine" and "namespace='mine'" in repr(spec)
        assert mt.map(lambda x: x + 1, [v], namespace="mine")[0].xs == (2, 3)
    finally:
        mt.unregister_node(Vec, namespace="mine")


def test_structure_cache_returns_the_identical_spec():
    mt.clear_cache()
    a = mt.structure({"w": [1, 2], "b": 3})
    b = mt.structure({"b": 30, "w": [10, 20]})
    assert a is b
    info = mt.cache_info()
    assert info["hits"] == 1 and info["misses"] == 1
    c = mt.structure({"w": [1], "b": 3})  # a different shape: a miss
    assert c != a and mt.cache_info()["misses"] == 2


def test_flatten_fn_may_unregister_its_own_class():
    class Once:
        def __init__(self, x):
            self.x = x

    def flatten_fn(obj):
        mt.unregister_node(Once)
        return (obj.x,), None

    mt.register_node(Once, flatten_fn, lambda ctx, c: Once(*c))
    leaves, spec = mt.flatten([Once(1)])
    assert leaves == [1]
    assert mt.unflatten(spec, [2])[0].x == 2  # the spec keeps its unflatten_fn
    assert mt.leaves([Once(3)])[0].x == 3  # now a leaf


def test_uncomparable_contexts_are_unequal_not_errors():
    class Holder:
        def __init__(self, ctx, x):
            self.ctx, self.x = ctx, x

    mt.register_node(Holder, lambda h: ((h.x,), h.ctx), lambda ctx, c: Holder(ctx, *c))
    try:
        a, b = Holder(torch.ones(3), 1), Holder(torch.ones(3), 2)
        assert mt.leaves([a]) == [1] and mt.leaves([b]) == [2]  # cache miss, no error
        assert mt.structure([a]) != mt.structure([b])
        spec = mt.structure([a])
        assert spec == spec and mt.flatten_as(spec, [a]) == [1]
        with pytest.raises(ValueError, match="registered"):
            mt.flatten_as(spec, [b])
    finally:
        mt.unregister_node(Holder)
