"""The duration syntax: exact shape, one set of limits, canonical text."""

from __future__ import annotations

import pytest

from edge_runtime.contract.durations import (
    MAX_DURATION_MS,
    MIN_DURATION_MS,
    InvalidDurationError,
    format_duration,
    parse_duration_ms,
)
from edge_runtime.contract.errors import EdgeRuntimeError


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("90s", 90_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1h30m", 5_400_000),
        ("1d2h3m4s", 93_784_000),
        ("90m", 5_400_000),
        ("1s", MIN_DURATION_MS),
        ("365d", MAX_DURATION_MS),
    ],
)
def test_accepted_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not valid"),
        ("5", "not valid"),
        ("m", "not valid"),
        ("1H", "not valid"),
        ("1h 30m", "not valid"),
        (" 5m", "not valid"),
        ("30m1h", "not valid"),
        ("1m1m", "not valid"),
        ("1.5h", "not valid"),
        ("-5m", "not valid"),
        ("+5m", "not valid"),
        ("500ms", "not valid"),
        ("\u0665s", "not valid"),  # an Arabic-Indic digit five: \d would take it, the syntax does not
        ("0s", "must be between 1s and 365d"),
        ("1h0m", "leave a zero part out"),
        ("05m", "without a leading zero"),
        ("366d", "out of range"),
        ("365d1s", "out of range"),
        ("9" * 31 + "s", "out of range"),
        ("1" * 33 + "s", "longer than 32"),
    ],
)
def test_refused_durations_say_why(text: str, reason: str) -> None:
    with pytest.raises(InvalidDurationError) as caught:
        parse_duration_ms(text)
    assert reason in str(caught.value)
    assert caught.value.code == "INVALID_DURATION"
    assert isinstance(caught.value, EdgeRuntimeError) and not caught.value.retryable


def test_a_non_string_is_refused() -> None:
    with pytest.raises(InvalidDurationError, match="must be a string"):
        parse_duration_ms(90)  # type: ignore[arg-type]


def test_canonical_text_uses_the_largest_units_and_parses_back() -> None:
    assert format_duration(90_000) == "1m30s"
    assert format_duration(86_400_000 + 1_000) == "1d1s"
    assert format_duration(MAX_DURATION_MS) == "365d"
    for text in ("90s", "1h30m", "25h", "1d2h3m4s"):
        assert parse_duration_ms(format_duration(parse_duration_ms(text))) == parse_duration_ms(text)


@pytest.mark.parametrize("bad", [0, 999, 1_500, -1_000, 1.0, True])
def test_format_refuses_what_is_not_a_whole_second_duration(bad: object) -> None:
    with pytest.raises(ValueError):
        format_duration(bad)  # type: ignore[arg-type]
