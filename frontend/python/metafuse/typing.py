"""Type aliases of TorchOpt's ``torchopt.typing`` (for annotations)."""

from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import torch
from torch import Tensor
from torch.distributions import Distribution
from torch.futures import Future

from metafuse.base import ChainedGradientTransformation, GradientTransformation
from metafuse.pytree import PyTree
from metafuse.states import EmptyState, UninitializedState

try:  # pragma: no cover - depends on the torch build
    from torch.distributed.rpc import RRef
except ImportError:  # pragma: no cover
    RRef = None

T = TypeVar("T")
Scalar = Union[float, int, bool]
Numeric = Union[Tensor, Scalar]
Schedule = Callable[[Numeric], Numeric]
ScalarOrSchedule = Union[float, Schedule]
OptionalTensor = Optional[Tensor]
ListOfTensors = List[Tensor]
TupleOfTensors = Tuple[Tensor, ...]
SequenceOfTensors = Sequence[Tensor]
TensorOrTensors = Union[Tensor, SequenceOfTensors]
TensorTree = PyTree[Tensor]
ListOfOptionalTensors = List[OptionalTensor]
TupleOfOptionalTensors = Tuple[OptionalTensor, ...]
SequenceOfOptionalTensors = Sequence[OptionalTensor]
OptionalTensorOrOptionalTensors = Union[OptionalTensor, SequenceOfOptionalTensors]
OptionalTensorTree = PyTree[OptionalTensor]
TensorContainer = Dict[str, Optional[Tensor]]
ModuleTensorContainers = Tuple[TensorContainer, ...]
Params = TensorTree
Updates = Params
OptState = TensorTree
LinearSolver = Callable[[Callable[[TensorTree], TensorTree], TensorTree], TensorTree]
Device = Union[torch.device, str, int]
Size = torch.Size
SampleFunc = Callable[[Size], Union[Tensor, Sequence[Numeric]]]


class Samplable:
    """Anything with ``sample(sample_shape) -> Tensor`` (e.g. a
    torch.distributions object)."""

    def sample(self, sample_shape=torch.Size()):  # noqa: B008
        raise NotImplementedError

    @classmethod
    def __subclasshook__(cls, other):
        return True if callable(getattr(other, "sample", None)) else NotImplemented


__all__ = [
    "GradientTransformation", "ChainedGradientTransformation", "EmptyState",
    "UninitializedState", "Params", "Updates", "OptState", "Scalar", "Numeric",
    "Schedule", "ScalarOrSchedule", "PyTree", "Tensor", "OptionalTensor",
    "ListOfTensors", "TupleOfTensors", "SequenceOfTensors", "TensorOrTensors",
    "TensorTree", "ListOfOptionalTensors", "TupleOfOptionalTensors",
    "SequenceOfOptionalTensors", "OptionalTensorOrOptionalTensors",
    "OptionalTensorTree", "TensorContainer", "ModuleTensorContainers", "Future",
    "LinearSolver", "Device", "Size", "Distribution", "SampleFunc", "Samplable",
    "RRef",
]
