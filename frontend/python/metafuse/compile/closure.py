"""The tensors a function closes over (closure cells and the module globals
its code names) become inputs of its compiled program: found here, and
swapped for the capture's inputs while it is recorded."""

import torch

__all__ = ["closed_over_tensors", "Rebind"]


def closed_over_tensors(fn):
    """(kind, key) and tensor for each tensor the function closes over
    directly: closure cells and the module globals its code names."""
    found = []
    code = getattr(fn, "__code__", None)
    for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, torch.Tensor):
            found.append((("cell", i), value))
    if code is not None:
        namespace = getattr(fn, "__globals__", {})
        for name in code.co_names:
            value = namespace.get(name)
            if isinstance(value, torch.Tensor):
                found.append((("global", name), value))
    return found


class Rebind:
    """Temporarily points a function's closure cells / globals at tensors."""

    def __init__(self, fn, keys, tensors):
        self.fn, self.keys, self.tensors, self.saved = fn, keys, tensors, []

    def __enter__(self):
        for key, tensor in zip(self.keys, self.tensors):
            kind, name = key
            if kind == "cell":
                cell = self.fn.__closure__[name]
                self.saved.append((key, cell.cell_contents))
                cell.cell_contents = tensor
            else:
                self.saved.append((key, self.fn.__globals__[name]))
                self.fn.__globals__[name] = tensor

    def __exit__(self, *exc):
        for (kind, name), value in reversed(self.saved):
            if kind == "cell":
                self.fn.__closure__[name].cell_contents = value
            else:
                self.fn.__globals__[name] = value
        return False
