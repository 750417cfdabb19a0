"""Plain-autograd references for metafuse's fused optimizer ops.

Each function takes the op's arguments (states and param may be None) and
returns the same tuple, computed with ordinary differentiable torch ops, so
torch.autograd gives the true derivatives to compare against.
"""

import math

import torch


def _effective(g, p, weight_decay, maximize, decoupled=False):
    ge = -g if maximize else g
    if weight_decay and not decoupled:
        ge = ge + weight_decay * p
    return ge


def adam(g, mu, nu, p, *, count, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8,
         eps_root=0.0, weight_decay=0.0, decoupled_weight_decay=False,
         maximize=False):
    ge = _effective(g, p, weight_decay, maximize, decoupled_weight_decay)
    m = b1 * mu + (1 - b1) * ge
    v = b2 * nu + (1 - b2) * ge * ge
    bc1, bc2 = 1 - b1 ** count, 1 - b2 ** count
    u = -lr * (m / bc1) / (torch.sqrt(v / bc2 + eps_root) + eps)
    if weight_decay and decoupled_weight_decay:
        u = u - lr * weight_decay * p
    return u, m, v


def sgd(g, buf, p, *, count, lr, momentum=0.0, dampening=0.0, nesterov=False,
        weight_decay=0.0, maximize=False):
    ge = _effective(g, p, weight_decay, maximize)
    if momentum == 0:
        return -lr * ge, None
    b = ge if count == 1 else momentum * buf + (1 - dampening) * ge
    d = ge + momentum * b if nesterov else b
    return -lr * d, b


def rmsprop(g, sq, ga, buf, p, *, lr=0.01, alpha=0.99, eps=1e-8, eps_root=0.0,
            weight_decay=0.0, momentum=0.0, centered=False, maximize=False):
    ge = _effective(g, p, weight_decay, maximize)
    s = alpha * sq + (1 - alpha) * ge * ge
    a = alpha * ga + (1 - alpha) * ge if centered else None
    v = s - a * a if centered else s
    q = ge / (torch.sqrt(v + eps_root) + eps)
    b = momentum * buf + q if momentum else None
    return -lr * (b if momentum else q), s, a, b


def adagrad(g, ss, p, *, count, lr=0.01, lr_decay=0.0, weight_decay=0.0,
            eps=1e-10, eps_root=0.0, maximize=False):
    ge = _effective(g, p, weight_decay, maximize)
    s = ss + ge * ge
    clr = lr / (1 + (count - 1) * lr_decay)
    return -clr * ge / (torch.sqrt(s + eps_root) + eps), s


def adamax(g, mu, inf, p, *, count, lr=0.002, b1=0.9, b2=0.999, eps=1e-8,
           weight_decay=0.0, maximize=False):
    ge = _effective(g, p, weight_decay, maximize)
    m = b1 * mu + (1 - b1) * ge
    n = torch.maximum(b2 * inf, ge.abs() + eps)
    return -lr / (1 - b1 ** count) * m / n, m, n


def adadelta(g, sq, acc, p, *, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0,
             maximize=False):
    ge = _effective(g, p, weight_decay, maximize)
    s = rho * sq + (1 - rho) * ge * ge
    delta = torch.sqrt(acc + eps) / torch.sqrt(s + eps) * ge
    return -lr * delta, s, rho * acc + (1 - rho) * delta * delta


def radam(g, mu, nu, p, *, count, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8,
          eps_root=0.0, weight_decay=0.0, decoupled_weight_decay=False,
          maximize=False):
    ge = _effective(g, p, weight_decay, maximize, decoupled_weight_decay)
    m = b1 * mu + (1 - b1) * ge
    v = b2 * nu + (1 - b2) * ge * ge
    bc1, bc2 = 1 - b1 ** count, 1 - b2 ** count
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * count * b2 ** count / bc2
    if rho_t > 5:
        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                         ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        u = -lr * rect * math.sqrt(bc2) / bc1 * m / (torch.sqrt(v + eps_root) + eps)
    else:
        u = -lr / bc1 * m
    if weight_decay and decoupled_weight_decay:
        u = u - lr * weight_decay * p
    return u, m, v
