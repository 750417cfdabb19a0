"""Calls of a compiled function that record no gradient (grad mode off, or
no input requiring grad) run a forward-only program: the function compiled
with nothing to differentiate, which keeps no values for a backward. Here
its outputs equal the recording program's bit for bit."""

import warnings

import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

F64 = torch.float64


def inner_loop_problem():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(),
                              torch.nn.Linear(16, 1)).to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def task_loss(p, x, y):
        for _ in range(3):  # an inner loop: metafuse.grad inside the program
            loss = torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
            grads = mf.grad(loss, p)
            p = {k: p[k] - 0.1 * grads[k] for k in p}
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    g = torch.Generator().manual_seed(1)
    x = torch.rand(12, 1, generator=g, dtype=F64)
    return mf.compile(task_loss), params, x, torch.sin(3 * x)


def test_no_grad_runs_a_forward_only_program_with_the_same_bits():
    compiled, params, x, y = inner_loop_problem()
    recorded = compiled(params, x, y)
    assert recorded.requires_grad and compiled.compile_count == 1
    with torch.no_grad():
        assert not compiled.has_program(params, x, y)  # not yet for this mode
        first = compiled(params, x, y)
        again = compiled(params, x, y)
        assert compiled.has_program(params, x, y)
    assert compiled.compile_count == 2  # the forward-only program, once
    assert not first.requires_grad
    assert torch.equal(first, recorded.detach()) and torch.equal(again, first)
    # No input requiring grad, grad mode on: the same forward-only program.
    detached = {k: v.detach() for k, v in params.items()}
    assert torch.equal(compiled(detached, x, y), first)
    assert compiled.compile_count == 2


def test_forward_only_program_keeps_no_values_for_a_backward():
    # Exact live-bytes accounting (the allocator meter of the memory
    # benchmarks): the recording call's peak includes every saved value of
    # its 3 inner steps; the forward-only call's does not.
    from metafuse._C import _compiler as core
    core.install_memory_meter()
    compiled, params, x, y = inner_loop_problem()

    def peak(record):
        with torch.set_grad_enabled(record):
            compiled(params, x, y)  # compiles
            start = core.memory_stats()["live_bytes"]
            core.reset_peak_memory()
            out = compiled(params, x, y)
            return core.memory_stats()["peak_bytes"] - start, out

    (recording, _), (forward_only, _) = peak(True), peak(False)
    assert forward_only < 0.7 * recording, (forward_only, recording)


def test_a_function_that_falls_back_warns_once_under_no_grad():
    def data_dependent(w, x):
        if float(x.sum()) > 0:  # the trace cannot be trusted
            return (w * x).sum()
        return (w * x).prod()

    compiled = mf.compile(data_dependent)
    w = torch.tensor([0.5, -1.0], dtype=F64, requires_grad=True)
    x = torch.tensor([1.0, 2.0], dtype=F64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out = compiled(w, x)
            compiled(w, x)
    fallbacks = [c for c in caught if issubclass(c.category, CompilationFallbackWarning)]
    assert len(fallbacks) == 1, [str(c.message) for c in fallbacks]
    assert torch.equal(out, data_dependent(w, x))


def test_recording_programs_runs_the_saved_program_under_no_grad():
    # What metafuse.aot saves and checks its round trip against.
    compiled, params, x, y = inner_loop_problem()
    recorded = compiled(params, x, y)
    with torch.no_grad(), compiled.recording_programs():
        assert compiled.has_program(params, x, y)
        out = compiled(params, x, y)
    assert compiled.compile_count == 1 and torch.equal(out, recorded.detach())


def test_program_value_of_a_call_recording_no_gradient_is_the_recording_one():
    compiled, params, x, y = inner_loop_problem()
    detached = {k: v.detach() for k, v in params.items()}
    with torch.no_grad():
        compiled(detached, x, y)  # the forward-only program only, so far
        value = compiled.program(detached, x, y)  # compiles the recording one
    assert value.num_outputs == 1 and "backward" in value.dump()
    assert compiled.compile_count == 2
