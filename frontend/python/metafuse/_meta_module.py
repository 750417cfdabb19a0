"""MetaGradientModule (TorchOpt's ``torchopt.nn.MetaGradientModule``): a
module that keeps the meta-parameters it is given apart from its own.

Tensors requiring grad and modules passed to the constructor are *meta*
inputs (TorchOpt counts only modules in training mode; here a frozen, eval-mode
meta network, e.g. with BatchNorm statistics, is meta too). Assigned to attributes, they are stored as
meta-parameters / meta-modules: ``parameters()`` and ``modules()`` list only
the module's own (inner) ones, ``meta_parameters()`` and ``meta_modules()``
the others. Everything else behaves as in nn.Module.
"""

from collections import OrderedDict

import torch

from metafuse import tree as _tree

__all__ = ["MetaGradientModule"]


class MetaGradientModule(torch.nn.Module):
    """Base class of modules holding meta-parameters and meta-modules."""

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls)
        flat = _tree.leaves((args, kwargs),
                            is_leaf=lambda x: isinstance(x, torch.nn.Module))
        meta_params = {id(x): x for x in flat
                       if isinstance(x, torch.Tensor) and x.requires_grad}
        meta_modules = {}
        for m in flat:
            if isinstance(m, torch.nn.Module):  # TorchOpt: training mode only
                for sub in m.modules():
                    meta_modules[id(sub)] = sub
                for p in m.parameters():
                    meta_params[id(p)] = p
        object.__setattr__(instance, "_meta_input_params", meta_params)
        object.__setattr__(instance, "_meta_input_modules", meta_modules)
        object.__setattr__(instance, "_meta_parameters", OrderedDict())
        object.__setattr__(instance, "_meta_modules", OrderedDict())
        return instance

    def __init__(self, *args, **kwargs):  # noqa: ARG002 - recorded in __new__
        super().__init__()

    def __getattr__(self, name):
        for slot in ("_meta_parameters", "_meta_modules"):
            container = self.__dict__.get(slot)
            if container is not None and name in container:
                return container[name]
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        meta_params = self.__dict__.get("_meta_parameters")
        meta_modules = self.__dict__.get("_meta_modules")
        is_meta_tensor = (isinstance(value, torch.Tensor)
                          and id(value) in self.__dict__.get("_meta_input_params", {}))
        is_meta_module = (isinstance(value, torch.nn.Module)
                          and id(value) in self.__dict__.get("_meta_input_modules", {}))
        needs_init = isinstance(value, torch.nn.Module) or (
            isinstance(value, torch.Tensor) and (value.requires_grad or is_meta_tensor))
        if needs_init and "_parameters" not in self.__dict__:
            kind = "parameters" if isinstance(value, torch.Tensor) else "module"
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if isinstance(value, torch.Tensor) and value.requires_grad and not is_meta_tensor:
            # A tensor requiring grad is a parameter, Parameter or not (TorchOpt).
            for container in (self.__dict__, self._buffers, self._modules,
                              meta_params, meta_modules):
                container.pop(name, None)
            self.register_parameter(name, value)
            return
        if is_meta_tensor or is_meta_module:
            for container in (self.__dict__, self._parameters, self._buffers,
                              self._modules, meta_params, meta_modules):
                container.pop(name, None)
            (meta_params if is_meta_tensor else meta_modules)[name] = value
            return
        if meta_params is not None and name in meta_params:
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as "
                                f"meta-parameter {name!r} (a Tensor or None expected)")
            meta_params[name] = value
            return
        if meta_modules is not None and name in meta_modules:
            meta_modules.pop(name)
        super().__setattr__(name, value)

    def __delattr__(self, name):
        for slot in ("_meta_parameters", "_meta_modules"):
            container = self.__dict__.get(slot)
            if container is not None and name in container:
                del container[name]
                return
        super().__delattr__(name)

    def _check_name(self, name, container, what="parameter"):
        if not isinstance(name, str):
            raise TypeError(f"{what} name should be a string. Got {torch.typename(name)}")
        if "." in name:
            raise KeyError(f"{what} name can't contain '.'")
        if name == "":
            raise KeyError(f"{what} name can't be empty string ''")
        if hasattr(self, name) and name not in container:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name, param):
        """Adds ``param`` (a tensor requiring grad, Parameter or not, or None)
        as the parameter ``name``; a meta-parameter is refused."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, self._parameters)
        if param is not None:
            if not isinstance(param, torch.Tensor):
                raise TypeError(f"cannot assign '{torch.typename(param)}' object to "
                                f"parameter '{name}' (torch.Tensor or None required)")
            if not param.requires_grad:
                raise ValueError("cannot assign Tensor that `requires_grad=False` to "
                                 f"parameter '{name}'")
            if id(param) in self.__dict__.get("_meta_input_params", {}):
                raise ValueError(f"cannot assign Tensor that is a meta-parameter to "
                                 f"parameter '{name}'. Use "
                                 "self.register_meta_parameter() instead.")
        self._parameters[name] = param

    def register_meta_parameter(self, name, param):
        """Adds ``param`` (a tensor requiring grad, or None) as the
        meta-parameter ``name``."""
        if "_meta_parameters" not in self.__dict__:
            raise AttributeError("cannot assign meta-parameter before "
                                 "MetaGradientModule.__init__() call")
        self._check_name(name, self._meta_parameters)
        if param is not None:
            if not isinstance(param, torch.Tensor):
                raise TypeError(f"meta-parameter {name!r} must be a Tensor or "
                                f"None, got {type(param).__name__}")
            if not param.requires_grad:
                raise ValueError(f"meta-parameter {name!r} must require grad")
        self._meta_parameters[name] = param

    def register_meta_module(self, name, meta_module):
        """Adds ``meta_module`` (an nn.Module or None) as the meta-module
        ``name``."""
        if meta_module is not None and not isinstance(meta_module, torch.nn.Module):
            raise TypeError(f"{torch.typename(meta_module)} is not a Module subclass")
        self._check_name(name, self._meta_modules, "module")
        self._modules.pop(name, None)
        self._meta_modules[name] = meta_module

    add_meta_module = register_meta_module

    def named_meta_parameters(self, prefix="", recurse=True):
        """(name, tensor) of the meta-parameters: this module's own, and with
        ``recurse`` those held by its submodules and all parameters of its
        meta-modules."""
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, module in modules:
            dot = mod_prefix + ("." if mod_prefix else "")
            for name, p in module.__dict__.get("_meta_parameters", {}).items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield dot + name, p
            if not recurse:
                continue
            for name, meta in module.__dict__.get("_meta_modules", {}).items():
                if meta is None:
                    continue
                for pname, p in meta.named_parameters(prefix=dot + name):
                    if id(p) not in seen:
                        seen.add(id(p))
                        yield pname, p

    def meta_parameters(self, recurse=True):
        """The meta-parameters (the tensors and modules' parameters passed to the constructor)."""
        for _, p in self.named_meta_parameters(recurse=recurse):
            yield p

    def named_meta_children(self):
        """(name, module) of every meta-module passed to the constructor."""
        seen = set()
        for name, m in self._meta_modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def meta_children(self):
        """The meta-modules passed to the constructor."""
        for _, m in self.named_meta_children():
            yield m

    def named_meta_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(name, module) of every meta-module and its submodules."""
        memo = set() if memo is None else memo
        for name, meta in self.named_meta_children():
            full = prefix + ("." if prefix else "") + name
            for sub_name, sub in meta.named_modules(memo=memo if remove_duplicate else None,
                                                    prefix=full) \
                    if remove_duplicate else meta.named_modules(prefix=full):
                yield sub_name, sub

    def meta_modules(self):
        """Every meta-module and its submodules."""
        for _, m in self.named_meta_modules():
            yield m
