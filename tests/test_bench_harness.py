"""The benchmark harness' round orders: every round a permutation, the run repeatable, and each
implementation behind each other one about equally often (bench/harness.py)."""
import collections
import sys
from pathlib import Path

import pytest


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import harness

    yield harness
    sys.modules.pop("harness", None)


@pytest.mark.parametrize(("count", "rounds"), [(6, 21), (7, 21), (4, 11), (3, 5)])
def test_round_orders_balance_predecessors(harness, count, rounds):
    names = [f"impl{i}" for i in range(count)]
    orders = harness.round_orders(names, rounds)
    assert len(orders) == rounds
    assert all(sorted(order) == names for order in orders)
    assert orders == harness.round_orders(names, rounds)
    calls = [name for order in orders for name in order]
    follows = collections.Counter(zip(calls, calls[1:]))
    pairs = [(a, b) for a in names for b in names if a != b]
    # len(calls) - 1 successions over count**2 possible pairs (an implementation may follow itself
    # across a round's end): each pair of distinct implementations within one of the even share
    even = (len(calls) - 1) / count**2
    assert min(follows[pair] for pair in pairs) >= int(even) - 1
    assert max(follows[pair] for pair in pairs) <= int(even) + 2


def test_round_orders_single_implementation(harness):
    assert harness.round_orders(["only"], 3) == [["only"]] * 3
