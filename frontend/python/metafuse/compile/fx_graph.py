"""The one converter from a captured FX graph to the compiler's IR.

The compiler's IR is a TorchScript ``torch._C.Graph`` of ``aten::`` nodes
(docs/architecture.md, "Capture"): every pass after capture reads it. On
torch 2.x a step function is recorded (capture.py, recorder.py) into an
ATen-level FX graph, and this module builds that IR from it, node by node,
the way TorchScript's tracer would have: Python numbers in tensor arguments
become 0-dimensional tensor constants (the tracer's wrapped numbers), lists
become ``prim::ListConstruct`` of constants, every tensor value carries its
complete type (sizes, dtype, device), and a function returning a tuple
returns one ``prim::TupleConstruct``.

The recording (recorder.py) is below autograd, after PyTorch's composite
decompositions, so a few operators arrive in forms the compiler names
otherwise; ``_SAME_AS`` and ``_FIRST_OUTPUT_AS`` name them back (an alias is
the value itself; nll_loss_forward's loss is nll_loss). An operator with no
schema, or an output the compiler has no form for, raises ``Unconvertible``
naming it, which the compile front turns into its usual fallback warning.

If LibTorch drops TorchScript's C++ graph, this module and the compiler's
entry points are the places that change: the FX graph would then be
serialized to the compiler's own IR here instead.
"""

import operator

import torch

__all__ = ["TensorMeta", "Unconvertible", "to_graph"]

_aten = torch.ops.aten


class Unconvertible(Exception):
    """A node of the FX graph the compiler's IR has no form for; the message
    names the operator."""


# Operators whose output is their first input, unchanged.
_IDENTITY = {
    _aten.alias.default,
    _aten.lift_fresh.default,
    _aten.lift_fresh_copy.default,  # a constant made in the function: fresh already
}

# Same arguments, same result; the compiler knows the operator by this name.
_SAME_AS = {
    _aten._unsafe_view.default: "aten::reshape",
    _aten.view.default: "aten::reshape",
}

# Operators with auxiliary outputs whose first output is another operator
# with the same leading arguments; only valid while the auxiliary outputs
# are unused (checked).
_FIRST_OUTPUT_AS = {
    _aten.nll_loss_forward.default: ("aten::nll_loss", 5),
    _aten.nll_loss2d_forward.default: ("aten::nll_loss_nd", 5),
}

# Operators recorded in a form the compiler knows under another operator
# with rearranged arguments: (args, kwargs) -> (that operator, its args).
_aten_bn = _aten.native_batch_norm.default
_EQUIVALENT = {
    _aten._native_batch_norm_legit.default:
        lambda a, k: (_aten_bn, (*a[:8],)),
    _aten._native_batch_norm_legit.no_stats:
        lambda a, k: (_aten_bn, (a[0], a[1], a[2], None, None, *a[3:6])),
    _aten._native_batch_norm_legit_no_training.default:
        lambda a, k: (_aten_bn, (*a[:5], False, *a[5:7])),
}

_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1,
                   torch.channels_last: 2, torch.channels_last_3d: 3}


class TensorMeta:
    """What the IR's types need of a traced tensor value (capture.py records
    it as each FX node's ``meta["val"]``): sizes, strides, dtype, device and
    requires_grad, without keeping the tensor."""

    __slots__ = ("shape", "_stride", "dtype", "device", "requires_grad")

    def __init__(self, tensor):
        self.shape, self._stride = tuple(tensor.shape), tuple(tensor.stride())
        self.dtype, self.device = tensor.dtype, tensor.device
        self.requires_grad = tensor.requires_grad

    def stride(self):
        return self._stride

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def is_complex(self):
        return self.dtype.is_complex


def _is_tensor_value(value):
    return isinstance(value, (TensorMeta, torch.Tensor))


def _tensor_type(value):
    """The complete TorchScript type of a tensor value (sizes, strides,
    dtype, device, requires_grad), as the tracer records it; made from a
    storage-less tensor of that layout (``value``: a TensorMeta or a
    tensor)."""
    like = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if value.requires_grad and (value.is_floating_point() or value.is_complex()):
        like.requires_grad_(True)
    return torch._C.TensorType.create_from_tensor(like).with_device(value.device)


class _Builder:
    """Builds one torch._C.Graph from one FX graph."""

    def __init__(self, constants):
        self.constants = constants
        self.graph = torch._C.Graph()
        self.values = {}   # FX node -> jit Value, or list of jit Values (multi-output)
        self.lists = {}    # FX node -> the prim::ListUnpack outputs of its list

    # -- constants --------------------------------------------------------
    def constant(self, value):
        if isinstance(value, torch.dtype):
            return self.graph.insertConstant(_dtype_number(value))
        if isinstance(value, torch.memory_format):
            return self.graph.insertConstant(_MEMORY_FORMATS[value])
        if isinstance(value, torch.layout):
            return self.graph.insertConstant(0 if value == torch.strided else 1)
        if isinstance(value, torch.Tensor):
            v = self.graph.insertConstant(value)
            v.setType(_tensor_type(value))
            return v
        return self.graph.insertConstant(value)

    def wrapped_number(self, number):
        """A Python number in a tensor argument: a 0-dim tensor constant, as
        the tracer records it (double for floats, long for integers)."""
        dtype = (torch.bool if isinstance(number, bool) else
                 torch.int64 if isinstance(number, int) else torch.float64)
        return self.constant(torch.tensor(number, dtype=dtype))

    def list_of(self, items, element_type):
        inputs = [self.argument(item, element_type) for item in items]
        node = self.graph.create("prim::ListConstruct", inputs, 1)
        self.graph.insertNode(node)
        node.output().setType(torch._C.ListType(element_type))
        return node.output()

    # -- arguments --------------------------------------------------------
    def argument(self, value, schema_type):
        kind = schema_type.kind()
        if kind == "OptionalType":
            if value is None:
                return self.constant(None)
            return self.argument(value, schema_type.getElementType())
        if isinstance(value, torch.fx.Node):
            return self.value(value)
        if kind == "TensorType" and not isinstance(value, torch.Tensor):
            return self.wrapped_number(value)
        if kind == "ListType" and isinstance(value, (list, tuple)):
            element = schema_type.getElementType()
            if any(isinstance(item, torch.fx.Node) for item in value) or \
                    element.kind() in ("TensorType", "OptionalType"):
                return self.list_of(value, element)
            if element.kind() == "IntType" or element.kind() == "SymIntType":
                return self.list_of(value, torch._C.IntType.get())
            return self.constant(list(value))
        if kind in ("IntType", "SymIntType") and isinstance(value, bool) is False \
                and isinstance(value, int):
            return self.constant(int(value))
        return self.constant(value)

    def value(self, node):
        found = self.values.get(node)
        if found is None or isinstance(found, list):
            raise Unconvertible(f"value {node.name} ({node.target}) is used as one tensor")
        return found

    # -- nodes ------------------------------------------------------------
    def placeholder(self, node):
        v = self.graph.addInput()
        v.setType(_tensor_type(node.meta["val"]))
        self.values[node] = v

    def get_attr(self, node):
        self.values[node] = self.constant(self.constants[node.target])

    def getitem(self, node):
        source, index = node.args
        produced = self.values[source]
        if isinstance(produced, list):  # a multi-output operator
            self.values[node] = produced[index]
            return
        if source not in self.lists:  # an operator returning Tensor[]
            count = len(source.meta["val"])
            unpack = self.graph.create("prim::ListUnpack", [produced], count)
            self.graph.insertNode(unpack)
            outs = list(unpack.outputs())
            for out, val in zip(outs, source.meta["val"]):
                out.setType(_tensor_type(val))
            self.lists[source] = outs
        self.values[node] = self.lists[source][index]

    def call(self, node):
        op = node.target
        if op is operator.getitem:
            return self.getitem(node)
        if not isinstance(op, torch._ops.OpOverload):
            raise Unconvertible(f"{getattr(op, '__name__', op)} (not an ATen operator)")
        if op in _IDENTITY:
            self.values[node] = self.value(node.args[0])
            return
        args, kwargs = node.args, node.kwargs
        if op in _EQUIVALENT:
            op, args = _EQUIVALENT[op](args, kwargs)
            kwargs = {}
        op = _scalar_overload(op, args)
        schema = op._schema
        name, arity = schema.name, len(schema.arguments)
        if op in _SAME_AS:
            name = _SAME_AS[op]
        elif op in _FIRST_OUTPUT_AS:
            name, arity = _FIRST_OUTPUT_AS[op]
            for user in node.users:
                if not (user.target is operator.getitem and user.args[1] == 0):
                    raise Unconvertible(f"{schema.name}.{schema.overload_name} with its "
                                        "auxiliary outputs used")
        inputs = []
        for i, arg in enumerate(schema.arguments[:arity]):
            if arg.kwarg_only and arg.name in kwargs:
                value = kwargs[arg.name]
            elif not arg.kwarg_only and i < len(args):
                value = args[i]
            elif arg.name in kwargs:
                value = kwargs[arg.name]
            elif arg.has_default_value():
                value = arg.default_value
            else:
                raise Unconvertible(f"{schema.name}: argument {arg.name} missing")
            inputs.append(self.argument(value, arg.type))
        first_only = op in _FIRST_OUTPUT_AS
        returns = 1 if first_only else len(schema.returns)
        jit_node = self.graph.create(name, inputs, returns)
        self.graph.insertNode(jit_node)
        outs = list(jit_node.outputs())
        vals = node.meta.get("val")
        if first_only:
            vals = [vals[0]]
        elif returns == 1:
            vals = [vals]
        for out, ret, val in zip(outs, schema.returns, vals):
            out.setType(_tensor_type(val) if _is_tensor_value(val) else ret.type)
        if first_only or returns > 1:
            self.values[node] = outs  # read through operator.getitem
        elif returns == 1:
            self.values[node] = outs[0]

    def output(self, node, returns_tuple):
        results = node.args[0]
        if not returns_tuple:
            self.graph.registerOutput(self.value(results))
            return
        values = [self.value(r) for r in results]
        pack = self.graph.create("prim::TupleConstruct", values, 1)
        self.graph.insertNode(pack)
        pack.output().setType(torch._C.TupleType([v.type() for v in values]))
        self.graph.registerOutput(pack.output())


def _is_number(value):
    return isinstance(value, (bool, int, float)) and not isinstance(value, torch.fx.Node)


def _scalar_overload(op, args):
    """The overload taking Scalars where ``args`` has Python numbers in
    Tensor arguments (the recording has ``mul.Tensor(x, 0.5)`` for a wrapped
    number): ``mul.Scalar``, whose type promotion is the wrapped number's
    (a float32 tensor times 0.5 stays float32). ``op`` itself where there
    is none; the number then becomes a 0-dim tensor constant."""
    schema = op._schema
    numbers = [i for i, (arg, value) in enumerate(zip(schema.arguments, args))
               if arg.type.kind() == "TensorType" and _is_number(value)]
    if not numbers:
        return op
    packet = op.overloadpacket
    for overload in packet.overloads():
        try:
            other = getattr(packet, overload)
        except (AttributeError, RuntimeError):
            continue
        candidate = other._schema.arguments
        if len(candidate) != len(schema.arguments) or other._schema.is_mutable != schema.is_mutable:
            continue
        if all(c.type.kind() == ("NumberType" if i in numbers else a.type.kind())
               for i, (c, a) in enumerate(zip(candidate, schema.arguments))):
            return other
    return op


def _dtype_number(dtype):
    """TorchScript represents a dtype as its c10::ScalarType number."""
    graph = torch._C.Graph()
    return graph.insertConstant(dtype).toIValue()


def to_graph(graph, constants, returns_tuple):
    """The compiler's IR of ``graph``, an FX graph of ATen operators
    (recorder.py's).

    Args:
        graph: the torch.fx.Graph; only nodes the outputs depend on (and
            in-place operators) are converted.
        constants: the tensors its ``get_attr`` nodes name.
        returns_tuple: the function returned a tuple of tensors (the graph
            then returns one prim::TupleConstruct, as a traced function
            returning a tuple does); otherwise one tensor.

    Raises:
        Unconvertible: a node has no form in the IR (the message names it)."""
    graph.eliminate_dead_code()
    builder = _Builder(constants)
    for node in graph.nodes:
        if node.op == "placeholder":
            builder.placeholder(node)
        elif node.op == "get_attr":
            builder.get_attr(node)
        elif node.op == "call_function":
            builder.call(node)
        elif node.op == "output":
            builder.output(node, returns_tuple)
        else:
            raise Unconvertible(f"FX node {node.op} {node.target}")
    return builder.graph
