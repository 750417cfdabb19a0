"""Every error path of metafuse.tree gives a clear Python exception naming
the path and what each side has there, never a crash."""

import collections

import pytest
import torch

from metafuse import tree as mt


def test_map_reports_path_and_both_sides():
    a = {"layer": [torch.ones(1), (torch.ones(1), torch.ones(1))]}
    b = {"layer": [torch.ones(1), [torch.ones(1), torch.ones(1)]]}
    with pytest.raises(ValueError) as err:
        mt.map(lambda x, y: x, a, b)
    msg = str(err.value)
    assert "2nd tree" in msg and "tree['layer'][1]" in msg
    assert "expected a tuple of 2 items" in msg and "got a list of 2 items" in msg


def test_mismatched_dict_keys_are_listed():
    with pytest.raises(ValueError, match=r"expected a dict with keys \['a', 'b'\], "
                                         r"got a dict with keys \['a', 'c'\]"):
        mt.map(lambda x, y: x, {"a": 1, "b": 2}, {"a": 1, "c": 2})


def test_leaf_versus_node_and_none():
    with pytest.raises(ValueError, match=r"at tree\[0\]: expected a leaf, got a list of 1 item"):
        mt.map(lambda x, y: x, [1], [[1]])
    with pytest.raises(ValueError, match=r"expected None, got a leaf of type int"):
        mt.map(lambda x, y: x, [None], [1])
    with pytest.raises(ValueError, match="3rd tree"):
        mt.map(lambda x, y, z: x, [1], [2], (3,))


def test_ordered_dict_order_and_default_factory_are_structure():
    spec = mt.structure(collections.OrderedDict([("a", 1), ("b", 2)]))
    with pytest.raises(ValueError, match="OrderedDict with keys"):
        mt.flatten_as(spec, collections.OrderedDict([("b", 1), ("a", 2)]))
    spec = mt.structure(collections.defaultdict(list, a=1))
    with pytest.raises(ValueError, match="defaultdict"):
        mt.flatten_as(spec, collections.defaultdict(int, a=1))


def test_unflatten_with_wrong_leaf_count():
    spec = mt.structure([1, 2])
    with pytest.raises(ValueError, match="has 2 leaves, but 3 were given"):
        mt.unflatten(spec, [1, 2, 3])
    with pytest.raises(TypeError, match="spec must be a metafuse.tree.TreeSpec"):
        mt.unflatten([1, 2], [1, 2])


def test_unsortable_dict_keys():
    with pytest.raises(TypeError, match=r"cannot sort the keys of the dict at tree\[0\]"):
        mt.flatten([{1: "x", "a": "y"}])


def test_cycles_are_reported_not_crashing():
    cyclic = [1]
    cyclic.append({"again": cyclic})
    with pytest.raises(RecursionError, match=r"cycle: the object at tree\[1\]\['again'\] "
                                             r"is the same list as its ancestor at tree;"):
        mt.flatten(cyclic)
    with pytest.raises(RecursionError, match="cycle"):
        mt.map(lambda x: x, cyclic)


def test_depth_limit():
    deep = 0
    for _ in range(mt.MAX_DEPTH + 10):
        deep = [deep]
    with pytest.raises(RecursionError, match="deeper than the limit"):
        mt.flatten(deep)
    ok = 0
    for _ in range(mt.MAX_DEPTH - 5):
        ok = [ok]
    assert mt.leaves(ok) == [0]


def test_registration_errors():
    with pytest.raises(ValueError, match="builtin node type"):
        mt.register_node(dict, lambda d: ([], None), lambda c, ch: {})
    with pytest.raises(TypeError, match="must be a class"):
        mt.register_node(3, lambda d: ([], None), lambda c, ch: {})

    class Thing:
        pass

    mt.register_node(Thing, lambda t: ([], None), lambda c, ch: Thing())
    try:
        with pytest.raises(ValueError, match="already registered"):
            mt.register_node(Thing, lambda t: ([], None), lambda c, ch: Thing())
    finally:
        mt.unregister_node(Thing)
    with pytest.raises(ValueError, match="not registered"):
        mt.unregister_node(Thing)


def test_bad_flatten_fn_results_and_exceptions_propagate():
    class Bad:
        pass

    mt.register_node(Bad, lambda b: 42, lambda c, ch: Bad())
    try:
        with pytest.raises(TypeError, match=r"expected \(children, context\)"):
            mt.flatten([Bad()])
    finally:
        mt.unregister_node(Bad)

    def boom(x):
        raise KeyError("from is_leaf")

    with pytest.raises(KeyError, match="from is_leaf"):
        mt.flatten([1], is_leaf=boom)
    with pytest.raises(ZeroDivisionError):
        mt.map(lambda x: 1 / 0, [1])


def test_argument_checks():
    with pytest.raises(TypeError, match="is_leaf must be a callable"):
        mt.flatten([1], is_leaf=3)
    with pytest.raises(TypeError, match="namespace must be a str"):
        mt.flatten([1], namespace=1)
    with pytest.raises(TypeError, match="func must be callable"):
        mt.map(3, [1])


def test_serialization_errors():
    with pytest.raises(ValueError, match="not a serialized metafuse TreeSpec"):
        mt.spec_from_string("nonsense")
    with pytest.raises(ValueError, match="cannot serialize"):
        mt.structure({object(): 1}).serialize()

    Local = collections.namedtuple("Local", "x")
    with pytest.raises(ValueError, match="only module-level"):
        mt.structure(Local(1)).serialize()


def test_arithmetic_rejects_non_tensor_leaves_and_mismatches():
    with pytest.raises(TypeError, match=r"leaf at \('a', 1\) of the first tree is 2"):
        mt.add({"a": [torch.ones(1), 2]}, {"a": [torch.ones(1), torch.ones(1)]})
    with pytest.raises(ValueError, match="second tree does not match"):
        mt.vdot([torch.ones(1)], [torch.ones(1), torch.ones(1)])
    with pytest.raises(TypeError, match="alpha must be a number or a torch.Tensor"):
        mt.add([torch.ones(1)], [torch.ones(1)], alpha="x")
