"""Topologies and hosts, with the exact messages of behaviour.md B1 and B2."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.tpuslice.shape import ShapeError, Topology, hosts, parse_topology


@pytest.mark.parametrize(
    ("text", "chips"),
    [("2x2x1", 4), ("2x2x2", 8), ("2x2x4", 16), ("2x4x4", 32), ("4x4x4", 64), ("2x4", 8)],
)
def test_valid_topologies_count_their_chips(text: str, chips: int) -> None:
    topo = parse_topology(text)
    assert topo.chips == chips and str(topo) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2", "topology \"2\": want 2 or 3 dimensions separated by 'x'"),
        ("2x2x2x2", "topology \"2x2x2x2\": want 2 or 3 dimensions separated by 'x'"),
        ("2X2", "topology \"2X2\": want 2 or 3 dimensions separated by 'x'"),
        ("2x02", 'topology "2x02": dimension "02" is not a positive integer without leading zeros'),
        ("2x0", 'topology "2x0": dimension "0" is not a positive integer without leading zeros'),
        ("2x-1", 'topology "2x-1": dimension "-1" is not a positive integer without leading zeros'),
        ("2xx2", 'topology "2xx2": dimension "" is not a positive integer without leading zeros'),
    ],
)
def test_bad_topologies_say_why(text: str, message: str) -> None:
    with pytest.raises(ShapeError) as e:
        parse_topology(text)
    assert str(e.value) == message


def test_hosts_divide_chips_exactly() -> None:
    assert hosts(parse_topology("2x2x1"), 4) == 1
    assert hosts(parse_topology("4x4x4"), 4) == 16
    with pytest.raises(ShapeError) as e:
        hosts(parse_topology("1x3"), 4)
    assert str(e.value) == "topology 1x3 is 3 chips, not a whole number of 4-chip hosts"


@given(st.lists(st.integers(min_value=1, max_value=64), min_size=2, max_size=3))
def test_parse_round_trips_and_chips_are_the_product(dims: list[int]) -> None:
    text = "x".join(map(str, dims))
    topo = parse_topology(text)
    assert topo == Topology(tuple(dims)) and str(topo) == text
    product = 1
    for d in dims:
        product *= d
    assert topo.chips == product
