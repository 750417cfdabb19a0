"""Object-oriented optimizers on top of the functional core.

- ``Optimizer`` subclasses (SGD, Adam, ...): drop-in torch.optim optimizers.
- ``MetaOptimizer`` subclasses (MetaSGD, MetaAdam, ...): differentiable
  updates of an nn.Module's parameters for meta-learning.
- ``FuncOptimizer``: ``step(loss, params) -> new params`` for functional
  models.
"""

from metafuse.optim.optimizer import (SGD, AdaDelta, Adadelta, AdaGrad,
                                      Adagrad, Adam, AdaMax, Adamax, AdamW,
                                      Optimizer, RAdam, RMSProp, RMSprop)
from metafuse.optim.meta import (MetaAdaDelta, MetaAdadelta, MetaAdaGrad,
                                 MetaAdagrad, MetaAdam, MetaAdaMax,
                                 MetaAdamax, MetaAdamW, MetaOptimizer,
                                 MetaRAdam, MetaRMSProp, MetaRMSprop, MetaSGD)
from metafuse.optim.func import FuncOptimizer
from metafuse.optim import meta, func  # noqa: F401  (TorchOpt's submodules)

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad",
    "RAdam", "RMSProp", "MetaOptimizer", "MetaSGD", "MetaAdam", "MetaAdamW",
    "MetaAdamax", "MetaAdadelta", "MetaAdagrad", "MetaRAdam", "MetaRMSProp",
    "FuncOptimizer", "AdaMax", "AdaDelta", "AdaGrad", "RMSprop",
    "MetaAdaMax", "MetaAdaDelta", "MetaAdaGrad", "MetaRMSprop", "meta", "func",
]
