"""One two-sided tolerance (harness.analysis.tolerance) for compare's and bisect's time and memory and the change
points' magnitude, read by one parser (harness.cli.tolerances.parse_two_sided)."""

from __future__ import annotations

import math

import pytest

from harness.analysis.changepoints import find_change_points
from harness.analysis.tolerance import DEFAULT_MEMORY_TOLERANCE, DEFAULT_TIME_TOLERANCE, Quantity, Tolerance
from harness.cli.tolerances import parse_memory_tolerance, parse_time_tolerance, parse_two_sided
from harness.errors import UsageError
from harness.units import GIB, MIB


def test_a_change_must_be_beyond_both_parts_and_exceeded_is_strict_where_reached_is_not():
    t = Tolerance.of_seconds(0.25, 30.0)
    assert t.exceeded(100.0, 140.0) and t.exceeded(140.0, 100.0)  # both ways
    assert not t.exceeded(1000.0, 1100.0)  # 100 s but 10 %: within the relative part
    assert not t.exceeded(2.0, 20.0)  # +900 % but 18 s: within the absolute part
    assert not t.exceeded(100.0, 130.0) and t.reached(100.0, 130.0)  # on the tolerance: reached, not exceeded
    assert t.ratio(100.0, 160.0) == pytest.approx(2.0) and t.ratio(200.0, 200.0) == 0.0
    assert Tolerance.of_seconds(0, 0).ratio(5.0, 6.0) == math.inf


def test_each_quantity_describes_its_absolute_part_as_its_flag_writes_it():
    assert DEFAULT_TIME_TOLERANCE.describe() == "25% and 30 s"
    assert DEFAULT_MEMORY_TOLERANCE.describe() == "10% and 256 MiB"
    assert Tolerance.of_bytes(0.05, int(1.5 * GIB)).describe() == "5% and 1.5 GiB"
    assert Tolerance.of_bytes(0.0, 0).describe() == "0% and 0 B"
    assert Tolerance.of_bytes(0.1, 1000).describe() == "10% and 1000 B"


@pytest.mark.parametrize(("text", "want"), [
    ("25%,30s", Tolerance.of_seconds(0.25, 30.0)), ("5 s", Tolerance.of_seconds(0.25, 5.0)),
    ("10%,256MiB", Tolerance.of_bytes(0.10, 256 * MIB)), ("2gib", Tolerance.of_bytes(0.10, 2 * GIB)),
])
def test_one_parser_reads_both_flags_keeping_the_defaults_other_part(text, want):
    default = DEFAULT_TIME_TOLERANCE if want.quantity == Quantity.seconds else DEFAULT_MEMORY_TOLERANCE
    got = parse_two_sided(text, default)
    assert got == want and isinstance(got.absolute, int) is (want.quantity == Quantity.bytes)


@pytest.mark.parametrize(("parse", "text", "line"), [
    (parse_time_tolerance, "30S", "--time-tolerance 30S: '30S' is not a percentage (25%) or seconds (30s)"),
    (parse_time_tolerance, "1,2,3", "--time-tolerance 1,2,3: write a percentage and seconds, e.g. 25%,30s"),
    (parse_time_tolerance, "9" * 400 + "s", "is beyond any duration"),
    (parse_memory_tolerance, "1s", "--memory-tolerance 1s: '1s' is not a percentage (10%) or a size (256MiB)"),
    (parse_memory_tolerance, "1,2,3", "--memory-tolerance 1,2,3: write a percentage and a size, e.g. 10%,256MiB"),
    (parse_memory_tolerance, "8TiB," + "9" * 30 + "%", "is beyond any memory"),
])
def test_each_flag_keeps_its_own_refusal(parse, text, line):
    with pytest.raises(UsageError) as e:
        parse(text)
    assert line in str(e.value)


def test_the_change_points_magnitude_is_the_same_tolerance_reached():
    """A step of exactly the minimum magnitude is news (reached), as it was before the type was shared."""
    series = [10.0] * 8 + [12.0] * 8  # +2 s = min_absolute exactly, +20 % < 25 %: the absolute part decides
    assert find_change_points(series, min_relative=0.2, min_absolute=2.0) != []
    assert find_change_points(series, min_relative=0.2, min_absolute=2.0001) == []
