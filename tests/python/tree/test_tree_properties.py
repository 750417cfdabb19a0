"""Property tests over random nests (fixed seeds): flatten/unflatten round
trips, map against a plain Python reference, agreement with
torch.utils._pytree on the node types both know, serialization round trips."""

import collections
import random

import pytest
import torch
import torch.utils._pytree as torch_pytree

from metafuse import tree as mt

Point = collections.namedtuple("Point", ["x", "y"])
Triple = collections.namedtuple("Triple", ["a", "b", "c"])

KEYS = ["a", "b", "c", "dd", "e", "weight", "bias", "z"]


def random_leaf(rng):
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randrange(-100, 100)
    if kind == 1:
        return rng.random()
    if kind == 2:
        return torch.randn(rng.randrange(1, 4))
    if kind == 3:
        return "s%d" % rng.randrange(10)
    return object()


def random_tree(rng, depth, kinds, with_none=True):
    """A random nest of the node types in `kinds` (dicts keyed from KEYS)."""
    if depth == 0 or rng.random() < 0.25:
        if with_none and rng.random() < 0.1:
            return None
        return random_leaf(rng)
    kind = rng.choice(kinds)
    n = rng.randrange(0, 4)
    children = [random_tree(rng, depth - 1, kinds, with_none) for _ in range(n)]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "namedtuple":
        cls = rng.choice([Point, Triple])
        return cls(*[random_tree(rng, depth - 1, kinds, with_none) for _ in cls._fields])
    keys = rng.sample(KEYS, n)
    if kind == "sorted_dict":  # insertion order == sorted order
        keys.sort()
    if kind in ("dict", "sorted_dict"):
        return dict(zip(keys, children))
    if kind == "odict":
        return collections.OrderedDict(zip(keys, children))
    if kind == "ddict":
        return collections.defaultdict(list, zip(keys, children))
    raise AssertionError(kind)


ALL_KINDS = ["tuple", "list", "namedtuple", "dict", "odict", "ddict"]
TORCH_KINDS = ["tuple", "list", "namedtuple", "sorted_dict", "odict"]


def reference_flatten(t, none_is_leaf=False):
    """Plain recursive reference for leaf order."""
    if t is None:
        return [None] if none_is_leaf else []
    if isinstance(t, dict) and type(t) in (dict, collections.OrderedDict,
                                           collections.defaultdict):
        keys = sorted(t) if type(t) is dict else list(t)
        return [x for k in keys for x in reference_flatten(t[k], none_is_leaf)]
    if type(t) in (tuple, list) or isinstance(t, (Point, Triple)):
        return [x for c in t for x in reference_flatten(c, none_is_leaf)]
    return [t]


def reference_map(f, t, none_is_leaf=False):
    if t is None:
        return f(None) if none_is_leaf else None
    if type(t) is dict:
        return {k: reference_map(f, v, none_is_leaf) for k, v in t.items()}
    if type(t) is collections.OrderedDict:
        return collections.OrderedDict((k, reference_map(f, v, none_is_leaf))
                                       for k, v in t.items())
    if type(t) is collections.defaultdict:
        return collections.defaultdict(t.default_factory,
                                       {k: reference_map(f, v, none_is_leaf)
                                        for k, v in t.items()})
    if isinstance(t, (Point, Triple)):
        return type(t)(*[reference_map(f, c, none_is_leaf) for c in t])
    if type(t) in (tuple, list):
        return type(t)(reference_map(f, c, none_is_leaf) for c in t)
    return f(t)


def same_objects(a, b):
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def same_tree(a, b):
    """Structural equality with leaves compared by identity, types exact."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if list(a) != list(b) and type(a) is not dict:
            return False
        if type(a) is collections.defaultdict and a.default_factory is not b.default_factory:
            return False
        return set(a) == set(b) and all(same_tree(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b))
    return a is b


SEEDS = range(300)


@pytest.mark.parametrize("none_is_leaf", [False, True])
def test_flatten_unflatten_round_trip(none_is_leaf):
    rng = random.Random(1234 + none_is_leaf)
    for _ in SEEDS:
        t = random_tree(rng, 4, ALL_KINDS)
        leaves, spec = mt.flatten(t, none_is_leaf=none_is_leaf)
        assert same_objects(leaves, reference_flatten(t, none_is_leaf))
        assert spec.num_leaves == len(leaves)
        back = mt.unflatten(spec, leaves)
        assert same_tree(back, t)
        assert mt.structure(back, none_is_leaf=none_is_leaf) == spec
        assert same_objects(mt.flatten_as(spec, t), leaves)


def test_map_agrees_with_python_reference():
    rng = random.Random(99)
    for _ in SEEDS:
        t = random_tree(rng, 4, ALL_KINDS)
        f = lambda x: ("leaf", id(x))  # noqa: E731
        assert mt.map(f, t) == reference_map(f, t)
        assert mt.map(f, t, none_is_leaf=True) == reference_map(f, t, True)


def test_nary_map_pairs_leaves_by_position():
    rng = random.Random(7)
    for _ in range(100):
        t = random_tree(rng, 4, ALL_KINDS)
        ids = mt.map(id, t)
        zipped = mt.map(lambda a, b: [a, b], t, ids)
        # The pairs are lists, hence nodes: flattening yields leaf, id, leaf, id...
        flat = mt.leaves(zipped)
        assert same_objects(flat[0::2], mt.leaves(t))
        assert flat[1::2] == [id(x) for x in mt.leaves(t)]


def test_agrees_with_torch_pytree():
    rng = random.Random(2024)
    for _ in SEEDS:
        t = random_tree(rng, 4, TORCH_KINDS)
        # torch 1.13 treats None as a leaf: compare with none_is_leaf=True.
        ours, spec = mt.flatten(t, none_is_leaf=True)
        theirs, torch_spec = torch_pytree.tree_flatten(t)
        assert same_objects(ours, theirs)
        assert spec.num_leaves == torch_spec.num_leaves
        f = lambda x: ("mapped", id(x))  # noqa: E731
        assert mt.map(f, t, none_is_leaf=True) == torch_pytree.tree_map(f, t)
        assert same_tree(mt.unflatten(spec, theirs),
                         torch_pytree.tree_unflatten(theirs, torch_spec))


def test_serialization_round_trips():
    rng = random.Random(5)
    for _ in range(200):
        t = random_tree(rng, 4, ALL_KINDS)
        spec = mt.structure(t)
        text = spec.serialize()
        back = mt.spec_from_string(text)
        assert back == spec and hash(back) == hash(spec)
        assert back.serialize() == text
        assert repr(back) == repr(spec)
        leaves = mt.leaves(t)
        assert same_tree(mt.unflatten(back, leaves), mt.unflatten(spec, leaves))


def test_cache_gives_the_same_answers_as_a_fresh_flatten():
    rng = random.Random(11)
    trees = [random_tree(rng, 3, ALL_KINDS) for _ in range(100)]
    mt.clear_cache()
    cached = [mt.flatten(t) for t in trees + trees]
    mt.set_cache_enabled(False)
    try:
        fresh = [mt.flatten(t) for t in trees + trees]
    finally:
        mt.set_cache_enabled(True)
    for (l1, s1), (l2, s2) in zip(cached, fresh):
        assert same_objects(l1, l2) and s1 == s2 and repr(s1) == repr(s2)
