"""Zero-order gradients: evolution-strategies estimates for functions that are
not differentiable (or whose second-order terms are too expensive), as in
ES-MAML.

    @metafuse.diff.zero_order(torch.distributions.Normal(0.0, 1.0),
                              method="antithetic", num_samples=64, sigma=0.1)
    def objective(theta, batch):
        return non_differentiable_loss(theta, batch)   # a scalar tensor

    objective(theta, batch).backward()   # theta.grad = estimate of grad f_sigma

The backward pass draws ``num_samples`` noise tensors z_i (for each
differentiated argument, shaped like it) and combines f at the perturbed
points in C++ (metafuse._C._diff):

- "naive":      mean_i f(theta + sigma z_i) z_i / sigma
- "forward":    mean_i (f(theta + sigma z_i) - f(theta)) z_i / sigma
- "antithetic": mean_i (f(theta + sigma z_i) - f(theta - sigma z_i)) z_i / (2 sigma)
  (2 * num_samples evaluations)

Evaluation: with ``batched=True`` the function is called once with a leading
sample dimension on each differentiated argument and must return one value
per sample; a TorchScript function (torch.jit.script) is evaluated in C++ with
the samples spread over OpenMP threads; any other function is called once per
sample. Noise comes from the torch random generator, so results are
reproducible under torch.manual_seed.

torch.func transforms (vmap, grad, jacrev, ...) do not apply: the estimate
is drawn in the backward from fresh noise and combined in C++, with no
batching rule and nothing to differentiate again. Called under one, a
zero-order function raises a clear error (TorchFuncUnsupportedError, a
RuntimeError); call it outside the transform and use ``.backward()`` or
torch.autograd.grad, in a loop over the batch in place of vmap.
"""

import functools
import numbers

import torch

from metafuse import _C
from metafuse import _torch_func
from metafuse import tree as _tree

_core = _C._diff

__all__ = ["zero_order", "ZeroOrderGradientModule"]


def _make_sampler(distribution):
    if isinstance(distribution, torch.distributions.Distribution):
        if distribution.event_shape != torch.Size() or distribution.batch_shape != torch.Size():
            raise ValueError("zero_order: `distribution` must be a scalar "
                             "distribution (it is sampled elementwise), got "
                             f"batch shape {tuple(distribution.batch_shape)} "
                             f"and event shape {tuple(distribution.event_shape)}")
        return lambda shape: distribution.sample(shape)
    if callable(distribution):
        return distribution
    raise TypeError("zero_order: `distribution` must be a torch.distributions "
                    "object or a callable sample(shape) -> tensor, got "
                    f"{type(distribution).__name__}")


def _check_config(method, num_samples, sigma):
    if not isinstance(method, str):
        raise TypeError(f"zero_order: `method` must be a string, got "
                        f"{type(method).__name__}")
    try:
        _core.check_method(method)
    except RuntimeError as exc:
        raise ValueError(f"zero_order: {str(exc).splitlines()[0]}") from None
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) \
            or num_samples < 1:
        raise ValueError(f"zero_order: `num_samples` must be an integer >= 1, "
                         f"got {num_samples!r}")
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) or not sigma > 0:
        raise ValueError(f"zero_order: `sigma` must be a number > 0, got {sigma!r}")


def _refuse_transforms(what):
    if _torch_func.transforms_active():
        _torch_func.refuse(
            what, "a zero-order gradient is a random estimate drawn in the backward and "
            "combined in C++ (no batching rule, not differentiable again); call it outside "
            "the transform and use .backward() or torch.autograd.grad, in a loop over the "
            "batch in place of vmap")


def _as_scalar(value, what):
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        got = (f"a tensor of shape {tuple(value.shape)}"
               if isinstance(value, torch.Tensor) else type(value).__name__)
        raise ValueError(f"zero_order: {what} must return a scalar tensor, got {got}")
    return value.reshape(())


def _draw(sampler, leaves, n):
    noises = []
    for leaf in leaves:
        z = sampler(torch.Size((n,) + tuple(leaf.shape)))
        if not isinstance(z, torch.Tensor) or z.shape != (n,) + tuple(leaf.shape):
            raise ValueError(
                "zero_order: the distribution must return a tensor of the "
                f"requested shape {(n,) + tuple(leaf.shape)}, got "
                f"{tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__}")
        noises.append(z.to(dtype=leaf.dtype, device=leaf.device))
    return noises


class _Estimator:
    """Evaluates an objective at perturbed leaves, in one of three ways."""

    def __init__(self, evaluate_one, evaluate_batch=None, evaluate_scripted=None):
        self.evaluate_one = evaluate_one          # deltas -> scalar
        self.evaluate_batch = evaluate_batch      # batched deltas -> [n]
        self.evaluate_scripted = evaluate_scripted  # (noises, sigma, sign) -> [n]

    def values(self, noises, sigma, sign):
        n = noises[0].shape[0]
        if self.evaluate_scripted is not None:
            return self.evaluate_scripted(noises, sigma, sign)
        if self.evaluate_batch is not None:
            out = self.evaluate_batch([sign * sigma * z for z in noises])
            if not isinstance(out, torch.Tensor) or out.shape != (n,):
                raise ValueError("zero_order: a batched function must return one "
                                 f"value per sample, shape ({n},), got "
                                 f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
            return out.detach().to(torch.float64)
        return torch.stack([
            _as_scalar(self.evaluate_one([sign * sigma * z[i] for z in noises]),
                       "the function").detach().to(torch.float64)
            for i in range(n)])


class _ZeroOrderFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, config, *leaves):
        estimator, value, sampler, method, num_samples, sigma = config
        ctx.config = config
        ctx.leaves = [leaf.detach() for leaf in leaves]
        return value

    @staticmethod
    def backward(ctx, grad_output):
        estimator, value, sampler, method, num_samples, sigma = ctx.config
        with torch.no_grad():
            noises = _draw(sampler, ctx.leaves, num_samples)
            plus = estimator.values(noises, sigma, 1.0)
            if method == "antithetic":
                other = estimator.values(noises, sigma, -1.0)
            elif method == "forward":
                other = value.detach().to(torch.float64).reshape(1)
            else:
                other = None
            estimates = _core.combine_zero_order(method, plus, other, noises,
                                                 float(sigma))
        return (None,) + tuple(grad_output * g for g in estimates)


def zero_order(distribution, method="naive", argnums=(0,), num_samples=1,
               sigma=1.0, *, batched=False):
    """Decorator: the wrapped function's value back-propagates an
    evolution-strategies estimate of the gradient of its Gaussian-smoothed
    version to the arguments in ``argnums`` (tensors or pytrees of tensors).
    See the module docstring for the methods and evaluation modes."""
    _check_config(method, num_samples, sigma)
    sampler = _make_sampler(distribution)
    argnums = (argnums,) if isinstance(argnums, numbers.Integral) else tuple(argnums)
    if not argnums or not all(isinstance(a, numbers.Integral) and a >= 0 for a in argnums):
        raise ValueError(f"zero_order: `argnums` must be non-negative integers, "
                         f"got {argnums!r}")

    def decorator(fn):
        scripted = isinstance(fn, torch.jit.ScriptFunction)

        @functools.wraps(fn)
        def wrapped(*args):
            _refuse_transforms(
                f"metafuse.diff.zero_order ({getattr(fn, '__name__', 'function')})")
            if max(argnums) >= len(args):
                raise ValueError(f"zero_order: argnums {argnums} out of range "
                                 f"for {len(args)} positional argument(s)")
            specs, leaves = [], []
            for a in argnums:
                arg_leaves, spec = _tree.flatten(args[a])
                if not arg_leaves or not all(isinstance(t, torch.Tensor)
                                             for t in arg_leaves):
                    raise TypeError(f"zero_order: argument {a} must be a tensor "
                                    "or a pytree of tensors")
                specs.append((a, spec, len(arg_leaves)))
                leaves.extend(arg_leaves)

            def rebuild(deltas):
                new_args = list(args)
                k = 0
                for a, spec, count in specs:
                    base = leaves[k:k + count]
                    new_args[a] = _tree.unflatten(
                        spec, [b.detach() + d for b, d in zip(base, deltas[k:k + count])])
                    k += count
                return new_args

            def evaluate_batch(deltas):
                new_args = list(args)
                k = 0
                for a, spec, count in specs:
                    base = leaves[k:k + count]
                    new_args[a] = _tree.unflatten(
                        spec, [b.detach().unsqueeze(0) + d
                               for b, d in zip(base, deltas[k:k + count])])
                    k += count
                return fn(*new_args)

            evaluate_scripted = None
            if scripted and all(isinstance(args[a], torch.Tensor) for a in argnums):
                def evaluate_scripted(noises, s, sign):
                    return _core.evaluate_scripted(
                        fn, tuple(x.detach() if isinstance(x, torch.Tensor) else x
                                  for x in args),
                        list(argnums), noises, s, sign)

            with torch.no_grad():
                value = _as_scalar(fn(*args), "the function")
            estimator = _Estimator(lambda deltas: fn(*rebuild(deltas)),
                                   evaluate_batch if batched else None,
                                   evaluate_scripted)
            config = (estimator, value, sampler, method, int(num_samples),
                      float(sigma))
            return _ZeroOrderFunction.apply(config, *leaves)

        return wrapped

    return decorator


class ZeroOrderGradientModule(torch.nn.Module):
    """A module whose parameters get zero-order gradients.

    Subclass it, write ``forward(*args)`` (returning a scalar tensor) and
    ``sample(sample_shape)`` (returning noise of that shape), and choose the
    estimator in the class statement::

        class Policy(ZeroOrderGradientModule, method="antithetic",
                     num_samples=32, sigma=0.05):
            ...

    Calling the module returns forward's value; backward gives every
    trainable parameter the estimate of the smoothed objective's gradient.
    """

    _zero_order = ("naive", 1, 1.0)

    def __new__(cls, *args, **kwargs):
        missing = [name for name, base in (("forward", torch.nn.Module.forward),
                                           ("sample", ZeroOrderGradientModule.sample))
                   if getattr(cls, name) is base]
        if missing:
            raise TypeError(f"Can't instantiate abstract class {cls.__name__} with "
                            f"abstract methods {', '.join(missing)}")
        return super().__new__(cls)

    def __init_subclass__(cls, method=None, num_samples=None, sigma=None, **kwargs):
        super().__init_subclass__(**kwargs)
        base_method, base_n, base_sigma = cls._zero_order
        config = (base_method if method is None else method,
                  base_n if num_samples is None else num_samples,
                  base_sigma if sigma is None else sigma)
        _check_config(*config)
        cls._zero_order = config
        if "forward" in cls.__dict__:
            user_forward = cls.__dict__["forward"]

            @functools.wraps(user_forward)
            def forward(self, *args, **kw):
                return _module_call(self, user_forward, args, kw)

            cls.forward = forward

    def sample(self, sample_shape):
        """Noise of shape ``sample_shape`` for the zero-order estimate; subclasses define it."""
        raise NotImplementedError(
            f"{type(self).__name__} must define sample(sample_shape) returning "
            "noise of that shape")


def _module_call(module, user_forward, args, kwargs):
    _refuse_transforms(f"metafuse.diff.zero_order.ZeroOrderGradientModule "
                       f"({type(module).__name__})")
    method, num_samples, sigma = type(module)._zero_order
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise RuntimeError(f"{type(module).__name__}: The module has no parameters.")

    def evaluate_one(deltas):
        # Perturbs the parameters in place for one call, then restores them.
        saved = [p.detach().clone() for p in params]
        try:
            with torch.no_grad():
                for p, d in zip(params, deltas):
                    p.add_(d)
                return user_forward(module, *args, **kwargs)
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved):
                    p.copy_(s)

    with torch.no_grad():
        value = _as_scalar(user_forward(module, *args, **kwargs), "forward")
    config = (_Estimator(evaluate_one), value, module.sample, method,
              int(num_samples), float(sigma))
    return _ZeroOrderFunction.apply(config, *params)
