"""optree's structural helpers that TorchOpt re-exports from ``torchopt.pytree``
(one-level flattening, transposition, common-structure broadcasting, prefix
errors, ``Partial``, the legacy key-path classes), written over
metafuse.tree. Same names and calling conventions as optree."""

import functools as _functools
import typing as _typing

from metafuse import tree as _tree


def is_namedtuple_class(cls):
    """True when ``cls`` is a namedtuple class."""
    return (isinstance(cls, type) and issubclass(cls, tuple)
            and isinstance(getattr(cls, "_fields", None), tuple))


def is_namedtuple(obj):
    """True when ``obj`` is a namedtuple or a namedtuple class."""
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def treespec_entries(treespec):
    """The keys (dict), field names (namedtuple) or indices of the children."""
    if treespec.is_leaf():
        return []
    node = _tree.unflatten(treespec, [0] * treespec.num_leaves)
    if isinstance(node, dict):
        keys = list(node)
        if type(node) is dict:  # visited in sorted key order
            return sorted(keys, key=lambda k: (str(type(k)), k))
        return keys
    if is_namedtuple(node):
        return list(node._fields)
    return list(range(treespec.num_children))

def _flatten(tree, is_leaf, none_is_leaf, namespace):
    return _tree.flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_flatten_one_level(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The root node's direct children: ``(children, metadata, entries,
    unflatten_func)``, ``unflatten_func(metadata, children)`` rebuilding a
    node of the same type. Raises ValueError for a leaf."""
    spec = _tree.structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if spec.is_leaf():
        raise ValueError(f"tree_flatten_one_level: cannot flatten a leaf "
                         f"({type(tree).__name__}: {tree!r})")

    # Everything below the root is a leaf: the root's children, one level.
    def below_root(node):
        return node is not tree or (is_leaf is not None and is_leaf(node))

    children, one_level = _tree.flatten(tree, below_root, none_is_leaf=none_is_leaf,
                                        namespace=namespace)
    entries = tuple(treespec_entries(spec))

    def unflatten_func(metadata, new_children):
        new_children = list(new_children)
        if len(new_children) != one_level.num_leaves:
            raise ValueError(f"tree_flatten_one_level: expected {one_level.num_leaves} "
                             f"children, got {len(new_children)}")
        return _tree.unflatten(metadata, new_children)
    return children, one_level, entries, unflatten_func


def tree_transpose(outer_treespec, inner_treespec, tree):
    """A tree of structure ``outer(inner)`` as one of structure
    ``inner(outer)``: ``tree_transpose(structure([0, 0]), structure((0, 0)),
    [(1, 2), (3, 4)])`` is ``([1, 3], [2, 4])``."""
    leaves = _tree.leaves(tree)
    n_outer, n_inner = outer_treespec.num_leaves, inner_treespec.num_leaves
    if len(leaves) != n_outer * n_inner:
        raise ValueError(f"tree_transpose: the tree has {len(leaves)} leaves, expected "
                         f"{n_outer} (outer) x {n_inner} (inner)")
    inner_trees = _tree.leaves(tree, lambda node: _tree.structure(node) == inner_treespec)
    if len(inner_trees) != n_outer:
        raise ValueError(f"tree_transpose: the tree is not {outer_treespec} of "
                         f"{inner_treespec}")
    if _tree.structure(_tree.unflatten(outer_treespec, [0] * n_outer)) != outer_treespec:
        raise ValueError("tree_transpose: `outer_treespec` is not a tree structure")
    chunks = [leaves[i * n_inner:(i + 1) * n_inner] for i in range(n_outer)]
    return _tree.unflatten(inner_treespec, [
        _tree.unflatten(outer_treespec, [chunk[j] for chunk in chunks])
        for j in range(n_inner)])


def _common(tree, other, is_leaf, none_is_leaf, namespace, path=()):
    """(tree, other) broadcast to their common structure: a leaf facing a
    subtree is repeated over that subtree's leaves."""
    spec = _tree.structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    other_spec = _tree.structure(other, is_leaf, none_is_leaf=none_is_leaf,
                                 namespace=namespace)
    if spec.is_leaf() and other_spec.is_leaf():
        return tree, other
    if spec.is_leaf():
        return _tree.unflatten(other_spec, [tree] * other_spec.num_leaves), other
    if other_spec.is_leaf():
        return tree, _tree.unflatten(spec, [other] * spec.num_leaves)
    children, one, entries, rebuild = tree_flatten_one_level(
        tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    other_children, other_one, other_entries, _ = tree_flatten_one_level(
        other, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if one != other_one or entries != other_entries:
        raise ValueError(f"tree_broadcast_common: the trees differ at {path or 'the root'}: "
                         f"{one} versus {other_one}; they have no common structure")
    pairs = [_common(a, b, is_leaf, none_is_leaf, namespace, path + (e,))
             for a, b, e in zip(children, other_children, entries)]
    return rebuild(one, [a for a, _ in pairs]), rebuild(one, [b for _, b in pairs])


def tree_broadcast_common(tree, other_tree, is_leaf=None, *, none_is_leaf=False,
                          namespace=""):
    """Both trees broadcast to their common (finer) structure."""
    return _common(tree, other_tree, is_leaf, none_is_leaf, namespace)


def broadcast_common(tree, other_tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The leaves of ``tree_broadcast_common``'s two trees."""
    a, b = _common(tree, other_tree, is_leaf, none_is_leaf, namespace)
    return (_tree.leaves(a, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace),
            _tree.leaves(b, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def _broadcast_all(trees, is_leaf, none_is_leaf, namespace):
    common = trees[0]
    for other in trees[1:]:
        common, _ = _common(common, other, is_leaf, none_is_leaf, namespace)
    return [_common(common, t, is_leaf, none_is_leaf, namespace)[1] for t in trees]


def tree_broadcast_map(func, tree, *rests, is_leaf=None, none_is_leaf=False, namespace=""):
    """``tree_map`` after broadcasting every tree to their common structure."""
    trees = _broadcast_all([tree, *rests], is_leaf, none_is_leaf, namespace)
    return _tree.map(func, *trees, is_leaf=is_leaf, none_is_leaf=none_is_leaf,
                     namespace=namespace)


def tree_broadcast_map_with_path(func, tree, *rests, is_leaf=None, none_is_leaf=False,
                                 namespace=""):
    """``tree_broadcast_map`` whose ``func`` also receives each leaf's path."""
    trees = _broadcast_all([tree, *rests], is_leaf, none_is_leaf, namespace)
    paths, leaves, spec = _tree.flatten_with_path(trees[0], is_leaf,
                                                  none_is_leaf=none_is_leaf,
                                                  namespace=namespace)
    others = [_tree.flatten_as(spec, t, is_leaf) for t in trees[1:]]
    return _tree.unflatten(spec, [func(p, x, *xs) for p, x, *xs in zip(paths, leaves,
                                                                       *others)])


def prefix_errors(prefix_tree, full_tree, is_leaf=None, *, none_is_leaf=False,
                  namespace=""):
    """The reasons ``prefix_tree`` is not a prefix of ``full_tree``, as a list
    of ``lambda name: ValueError(...)`` (empty when it is one)."""
    errors = []

    def walk(prefix, full, path):
        prefix_spec = _tree.structure(prefix, is_leaf, none_is_leaf=none_is_leaf,
                                      namespace=namespace)
        if prefix_spec.is_leaf():
            return
        full_spec = _tree.structure(full, is_leaf, none_is_leaf=none_is_leaf,
                                    namespace=namespace)
        where = "".join(f"[{p!r}]" for p in path)
        if full_spec.is_leaf():
            errors.append(lambda name, w=where, t=type(prefix).__name__:
                          ValueError(f"pytree structure error: {name}{w} is a leaf where "
                                     f"the prefix has a {t} node"))
            return
        children, one, entries, _ = tree_flatten_one_level(
            prefix, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
        full_children, full_one, full_entries, _ = tree_flatten_one_level(
            full, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
        if type(prefix) is not type(full) or entries != full_entries or \
                len(children) != len(full_children):
            errors.append(lambda name, w=where, a=one, b=full_one:
                          ValueError(f"pytree structure error: {name}{w} is {b}, the prefix "
                                     f"has {a}"))
            return
        for c, f, e in zip(children, full_children, entries):
            walk(c, f, path + (e,))
    walk(prefix_tree, full_tree, ())
    return errors


class Partial(_functools.partial):
    """``functools.partial`` that is a pytree node: its positional and keyword
    arguments are the children, the function is static (as in optree and
    JAX), so trees of partially applied functions map and flatten."""

    def __new__(cls, func, *args, **kwargs):
        if isinstance(func, _functools.partial):
            args = func.args + args
            kwargs = {**func.keywords, **kwargs}
            func = func.func
        return super().__new__(cls, func, *args, **kwargs)


def _partial_flatten(p):
    keys = tuple(sorted(p.keywords))
    return (p.args, tuple(p.keywords[k] for k in keys)), (p.func, keys)


def _partial_unflatten(metadata, children):
    func, keys = metadata
    args, values = children
    return Partial(func, *args, **dict(zip(keys, values)))


_tree.register_node(Partial, _partial_flatten, _partial_unflatten, "")


class KeyPathEntry(_typing.NamedTuple):
    key: _typing.Any

    def __add__(self, other):
        if isinstance(other, KeyPathEntry):
            return KeyPath((self, other))
        if isinstance(other, KeyPath):
            return KeyPath((self, *other.keys))
        return NotImplemented

    def pprint(self):
        raise NotImplementedError


class KeyPath(_typing.NamedTuple):
    keys: _typing.Tuple[KeyPathEntry, ...] = ()

    def pprint(self):
        return "".join(k.pprint() for k in self.keys) or " tree root"


class AttributeKeyPathEntry(KeyPathEntry):
    """optree's legacy key path entry for an attribute: prints ``.name``."""

    def pprint(self):
        """The entry as it prints in a key path: ``.name``."""
        return f".{self.key}"


class GetitemKeyPathEntry(KeyPathEntry):
    """optree's legacy key path entry for an item: prints ``[key]``."""

    def pprint(self):
        """The entry as it prints in a key path: ``[key]``."""
        return f"[{self.key!r}]"


_KEYPATH_HANDLERS = {}


def register_keypaths(cls, handler):
    """Registers ``handler(node) -> tuple of KeyPathEntry`` for ``cls``
    (optree's legacy key paths); returns the handler. Registering a class
    twice is an error."""
    if not isinstance(cls, type):
        raise TypeError(f"register_keypaths: `cls` must be a class, got {cls!r}")
    if not callable(handler):
        raise TypeError("register_keypaths: `handler` must be callable")
    if cls in _KEYPATH_HANDLERS:
        raise ValueError(f"register_keypaths: key paths of {cls.__name__} are already "
                         "registered")
    _KEYPATH_HANDLERS[cls] = handler
    return handler
