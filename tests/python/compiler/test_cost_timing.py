"""metafuse's cost-check timing (_cost_timing): an untimed call that
compiles, then 2 or 3 timed calls, and only one timed call for a candidate
that is clearly slower than what it must beat."""

import time

from metafuse import _cost_timing


def counting_sleeper(seconds):
    calls = []

    def run():
        calls.append(1)
        time.sleep(seconds)
        return []
    return run, calls


def test_a_fast_call_is_timed_until_the_budget_and_the_fastest_returned():
    run, calls = counting_sleeper(0.002)
    s = _cost_timing.seconds_of_call_and_backward(run, [])
    assert len(calls) == 1 + 3  # untimed, then 3 timed within the 50 ms budget
    assert 0.002 <= s < 0.05


def test_a_slow_call_is_timed_twice():
    run, calls = counting_sleeper(0.03)
    _cost_timing.seconds_of_call_and_backward(run, [])
    assert len(calls) == 1 + 2  # the budget is spent, but never fewer than 2


def test_a_clearly_slower_candidate_is_timed_once():
    run, calls = counting_sleeper(0.02)
    s = _cost_timing.seconds_of_call_and_backward(run, [], give_up_above=0.005)
    assert len(calls) == 1 + 1 and s >= 0.02
    # Control: a rival it could still beat keeps the full timing.
    run, calls = counting_sleeper(0.002)
    _cost_timing.seconds_of_call_and_backward(run, [], give_up_above=1.0)
    assert len(calls) == 1 + 3
