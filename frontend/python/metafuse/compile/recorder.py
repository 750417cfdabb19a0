"""The fx front's recording: a dispatch mode that runs a function on real
tensors and writes every ATen operator it dispatches into a torch.fx graph.

It is what make_fx does in real-tensor mode, without make_fx's proxy
machinery, which a metafuse capture does not need (no fake tensors, no
symbolic shapes, no decompositions) and which costs: make_fx imports
torch._inductor on its first use in a process, and snapshots every value
as a fake tensor made by a new FakeTensorMode. Nor does it import Dynamo
(``_should_skip_dynamo``), which torch imports on a dispatch mode's first
dispatch to keep Dynamo out of it.

Tensors are tracked by identity: each tensor an operator returns is mapped
to the node (or the ``operator.getitem`` of the node) that made it, an
in-place operator's result to its own node, as the TorchScript tracer and
make_fx do; a tensor the recording has not seen (one the function closes
over and the capture does not pass as an input) becomes a constant of the
graph. The graph is in execution order, so the aliasing of views and
in-place operators means what it meant in the function.
"""

import operator

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

from metafuse.compile.fx_graph import TensorMeta

__all__ = ["Recorder"]

_tree_map_only = torch.utils._pytree.tree_map_only
_READ = torch.ops.aten._local_scalar_dense.default


class Recorder(TorchDispatchMode):
    """Records the operators dispatched inside ``with recorder:``.

    ``graph`` (torch.fx.Graph) and ``constants`` (name -> tensor) are the
    result; ``on_read(recorder, tensor)`` is called for every read of a
    tensor's value into Python."""

    @classmethod
    def _should_skip_dynamo(cls):
        # torch wraps a mode's __torch_dispatch__ to keep Dynamo out of it,
        # which imports Dynamo, and with it torch._inductor, on the first
        # dispatch: 0.7 s of a process's first compile. A metafuse capture
        # never runs under torch.compile, so nothing is wrapped.
        return False

    def __init__(self, on_read=None):
        super().__init__()
        self.graph = torch.fx.Graph()
        self.constants = {}
        self._nodes = WeakTensorKeyDictionary()  # tensor -> the node that made it
        self._on_read = on_read

    def add_input(self, tensor):
        """The next placeholder, standing for ``tensor``."""
        node = self.graph.placeholder(f"input_{len(self.graph.nodes)}")
        node.meta["val"] = TensorMeta(tensor)
        self._nodes[tensor] = node

    def node_of(self, tensor):
        """The node that made ``tensor``; a constant where none did."""
        node = self._nodes.get(tensor)
        if node is None:
            name = f"constant_{len(self.constants)}"
            self.constants[name] = tensor
            node = self.graph.get_attr(name)
            node.meta["val"] = TensorMeta(tensor)
            self._nodes[tensor] = node
        return node

    def computed_from_inputs(self, tensor):
        """Whether ``tensor`` is computed (through recorded operators) from
        a placeholder."""
        node = self._nodes.get(tensor)
        pending, seen = ([node] if node is not None else []), set()
        while pending:
            node = pending.pop()
            if node.op == "placeholder":
                return True
            if node not in seen:
                seen.add(node)
                pending.extend(node.all_input_nodes)
        return False

    def record(self, op, compute, args, kwargs):
        """Runs ``compute(*args, **kwargs)`` unrecorded (autograd still
        records it) and records it as one ``op`` node."""
        with torch._C._DisableTorchDispatch(), torch._C._DisablePythonDispatcher():
            result = compute(*args, **kwargs)
        self._add(op, args, kwargs, result)
        return result

    def output(self, result):
        self.graph.output(_tree_map_only(torch.Tensor, self.node_of, result))

    def _add(self, op, args, kwargs, result):
        node_args, node_kwargs = _tree_map_only(torch.Tensor, self.node_of, (args, kwargs))
        node = self.graph.call_function(op, tuple(node_args), dict(node_kwargs))
        if isinstance(result, torch.Tensor):
            node.meta["val"] = TensorMeta(result)
            self._nodes[result] = node
        elif isinstance(result, (tuple, list)):
            node.meta["val"] = [TensorMeta(r) if isinstance(r, torch.Tensor) else r
                                for r in result]
            for i, r in enumerate(result):
                if isinstance(r, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    item.meta["val"] = node.meta["val"][i]
                    self._nodes[r] = item
        else:
            node.meta["val"] = result

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _READ and self._on_read is not None:
            self._on_read(self, args[0])
        result = func(*args, **kwargs)
        self._add(func, args, kwargs, result)
        return result
