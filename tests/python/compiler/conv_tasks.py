"""A conv-net MAML meta-batch for the metafuse.vmap tests: each task adapts
with two SGD steps of a compiled inner loop on its support set, and its
query loss is the output. ConvTasks holds the problem and checks a batched
result against the per-task eager loop (float64, 1e-10)."""

import torch

import metafuse as mf

F64 = torch.float64
TASKS = 4


def cnn_pooled():
    """conv - BatchNorm - ReLU - max-pool - linear, 1x8x8 inputs."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4, track_running_stats=False),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 3)).double()


def cnn_strided():
    """Two convolutions (the second strided, 8 channels: its tasks' groups
    are wide enough to split), BatchNorm, linear; 1x8x8 inputs."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, stride=2),
        torch.nn.BatchNorm2d(8, track_running_stats=False), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 3)).double()


class ConvTasks:
    def __init__(self, net, **vmap_options):
        self.net = net
        self.params = {k: v.detach().clone().requires_grad_()
                       for k, v in net.named_parameters()}
        self.adapt = mf.compile_inner_loop(self.loss_fn, mf.sgd(0.1), steps=2)
        self.task_loss = mf.vmap(
            lambda p, xs, ys, xq, yq: self.loss_fn(self.adapt(p, xs, ys), xq, yq),
            in_dims=(None, 0, 0, 0, 0), **vmap_options)
        g = torch.Generator().manual_seed(2)
        xs, xq = (torch.randn(TASKS, n, 1, 8, 8, generator=g, dtype=F64) for n in (3, 6))
        ys, yq = torch.arange(3).repeat(TASKS, 1), torch.arange(3).repeat(TASKS, 2)
        self.data = (xs, ys, xq, yq)

    def loss_fn(self, p, x, y):
        return torch.nn.functional.cross_entropy(mf.functional_call(self.net, p, x), y)

    def losses(self):
        """The vmap's per-task query losses."""
        return self.task_loss(self.params, *self.data)

    def check(self, losses):
        """``losses`` and their meta-gradient equal the per-task eager loop's."""
        xs, ys, xq, yq = self.data
        expected = torch.stack([
            self.loss_fn(self.adapt._eager(self.params, (xs[t], ys[t])), xq[t], yq[t])
            for t in range(TASKS)])
        torch.testing.assert_close(losses, expected, rtol=1e-10, atol=1e-12)
        params = list(self.params.values())
        got = torch.autograd.grad(losses.sum(), params)
        want = torch.autograd.grad(expected.sum(), params)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

    def fusion_report(self):
        """The batched program's fusion report ({'forward': ..., 'backward': ...})."""
        compiled = self.task_loss.compiled_function(self.params, *self.data)
        return compiled.programs()[0].fusion_report()
