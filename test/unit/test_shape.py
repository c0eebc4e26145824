"""Topologies and hosts, with the exact messages of B1 and B2."""

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


# -- B1: the chip count fits a signed 64-bit integer, as in Go's upstream -------------------

INT64_MAX = 2**63 - 1


def overflow_message(text: str) -> str:
    return f'topology "{text}": chip count overflows a 64-bit integer'


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9999999999x9999999999x9999999999", id="the Go upstream's example"),
        pytest.param("4294967296x2147483648", id="exactly 2**63"),
        pytest.param("3037000500x3037000500", id="a square just above"),
        pytest.param("2097152x2097152x2097152", id="three dimensions of 2**21"),
        pytest.param("9223372036854775808x1", id="one dimension of 2**63"),
        pytest.param("1x1x99999999999999999999", id="one dimension of 20 digits"),
        pytest.param("2x" + "9" * 5000, id="a dimension beyond int()'s digit limit"),
    ],
)
def test_a_topology_whose_chip_count_overflows_int64_is_refused(text: str) -> None:
    with pytest.raises(ShapeError) as e:
        parse_topology(text)
    assert str(e.value) == overflow_message(text)


@pytest.mark.parametrize(
    ("text", "chips"),
    [
        ("9223372036854775807x1", INT64_MAX),
        ("1x1x9223372036854775807", INT64_MAX),
        ("3037000499x3037000499", 3037000499**2),
        ("2097152x2097152x2097151", 2**63 - 2**42),
    ],
)
def test_a_topology_of_at_most_int64_max_chips_parses(text: str, chips: int) -> None:
    topo = parse_topology(text)
    assert topo.chips == chips and str(topo) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "99999999999999999999x02",
            'topology "99999999999999999999x02": dimension "02" is not a positive integer '
            "without leading zeros",
        ),
        (
            "9999999999x9999999999x9999999999x9999999999",
            'topology "9999999999x9999999999x9999999999x9999999999": want 2 or 3 dimensions '
            "separated by 'x'",
        ),
    ],
)
def test_the_chip_count_is_checked_after_each_dimension(text: str, message: str) -> None:
    with pytest.raises(ShapeError) as e:
        parse_topology(text)
    assert str(e.value) == message


dimensions = st.integers(min_value=1, max_value=2**22) | st.integers(min_value=1, max_value=2**64)


@given(st.lists(dimensions, min_size=2, max_size=3))
def test_a_topology_parses_exactly_when_its_chip_count_fits_int64(dims: list[int]) -> None:
    text = "x".join(map(str, dims))
    product = 1
    for d in dims:
        product *= d
    if product > INT64_MAX:
        with pytest.raises(ShapeError) as e:
            parse_topology(text)
        assert str(e.value) == overflow_message(text)
    else:
        topo = parse_topology(text)
        assert topo == Topology(tuple(dims)) and topo.chips == product


@given(st.integers(min_value=1, max_value=INT64_MAX))
def test_the_largest_topology_of_a_first_dimension_is_the_last_that_fits(first: int) -> None:
    most = INT64_MAX // first
    assert parse_topology(f"{first}x{most}").chips == first * most
    with pytest.raises(ShapeError) as e:
        parse_topology(f"{first}x{most + 1}")
    assert str(e.value) == overflow_message(f"{first}x{most + 1}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '2"x1',
            'topology "2\\"x1": dimension "2\\"" is not a positive integer without leading zeros',
        ),
        (
            "2\\x1",
            'topology "2\\\\x1": dimension "2\\\\" is not a positive integer without leading zeros',
        ),
        ('"', 'topology "\\"": want 2 or 3 dimensions separated by \'x\''),
        (
            "2x2\nx1",
            'topology "2x2\\nx1": dimension "2\\n" is not a positive integer without leading zeros',
        ),
    ],
)
def test_a_topology_is_quoted_with_json_escaping_in_its_error(text: str, message: str) -> None:
    """B1: ``"<s>"`` is the text in double quotes with JSON escaping, so a quote, a backslash
    or a newline in a configured topology cannot make the message ambiguous."""
    with pytest.raises(ShapeError) as e:
        parse_topology(text)
    assert str(e.value) == message
