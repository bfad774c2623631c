"""Sizes and durations: one grammar for Spark options, broker flags and the CLI."""

from __future__ import annotations

import argparse

import pytest

from rmq_spark.broker.__main__ import add_arguments
from rmq_spark.broker.config import parse_delay_levels
from rmq_spark.cli.parser import build_parser
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.options import SourceOptions
from rmq_spark.units import duration_ms_flag, parse_duration_ms, parse_size, size_flag


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("1048576", 1_048_576),
        (" 42 ", 42),
        ("512b", 512),
        ("512B", 512),
        ("512k", 524_288),
        ("512kb", 524_288),
        ("512KiB", 524_288),
        ("64m", 67_108_864),
        ("64MB", 67_108_864),
        ("64MiB", 67_108_864),
        ("64mib", 67_108_864),
        ("64 MiB", 67_108_864),
        ("1g", 1_073_741_824),
        ("1GB", 1_073_741_824),
        ("1GiB", 1_073_741_824),
        ("2t", 2_199_023_255_552),
        ("2TB", 2_199_023_255_552),
        ("2TiB", 2_199_023_255_552),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text, what="--max-pull-bytes") == size


@pytest.mark.parametrize(
    "text",
    ["", "lots", "1.5m", "-1", "64 M iB", "64mi", "64ib", "1kk", "1e6", "64MiBs", "1p", "k"],
)
def test_bad_sizes_name_the_setting_the_value_and_good_forms(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_size(text, what="--max-pull-bytes")
    assert str(info.value) == (
        f"--max-pull-bytes={text!r} is invalid: expected a size in bytes, e.g. 1048576, 512k, "
        "64m or 64MiB (units k, m, g, t, optionally with b, or KiB, MiB, GiB, TiB; all powers "
        "of 1024)"
    )


@pytest.mark.parametrize(
    ("text", "minimum", "maximum", "expected"),
    [
        ("0", 1, None, "option x='0' is invalid: expected a positive size in bytes, e.g."),
        ("0k", 1, None, "option x='0k' is invalid: expected a positive size in bytes, e.g."),
        ("2k", 4096, None, "option x='2k' is invalid: expected a size of at least 4096 bytes"),
        ("2k", 1, 1024, "option x='2k' is invalid: expected at most 1024 bytes"),
    ],
)
def test_size_bounds(text: str, minimum: int, maximum: int | None, expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_size(text, what="option x", minimum=minimum, maximum=maximum)
    assert str(info.value).startswith(expected)


def test_size_bounds_are_inclusive() -> None:
    assert parse_size("4k", what="x", minimum=4096, maximum=4096) == 4096
    assert parse_size("1", what="x", minimum=1) == 1


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0ms", 0),
        ("500ms", 500),
        ("500MS", 500),
        ("30s", 30_000),
        ("30 s", 30_000),
        ("15m", 900_000),
        ("15M", 900_000),
        ("2min", 120_000),
        ("2 MIN", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        (" 7d ", 604_800_000),
    ],
)
def test_durations_with_a_unit_mean_the_same_with_or_without_a_default(text: str, ms: int) -> None:
    assert parse_duration_ms(text, what="x") == ms
    assert parse_duration_ms(text, what="x", default_unit="ms") == ms
    assert parse_duration_ms(text, what="x", default_unit="s") == ms


@pytest.mark.parametrize(
    ("text", "unit", "ms"),
    [("1500", "ms", 1500), ("0", "ms", 0), ("90", "s", 90_000), ("2", "min", 120_000)],
)
def test_a_bare_number_takes_the_default_unit(text: str, unit: str, ms: int) -> None:
    assert parse_duration_ms(text, what="x", default_unit=unit) == ms


@pytest.mark.parametrize("text", ["15", "1.5s", "15 minutes", "", "s", "-1s", "1sec", "1w"])
def test_bad_durations_without_a_default_unit(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_duration_ms(text, what="option maxTriggerDelay", minimum=1)
    assert str(info.value) == (
        f"option maxTriggerDelay={text!r} is invalid: expected a positive duration with a unit "
        "(ms, s, m or min, h, d), e.g. 15m, 30s or 500ms"
    )


@pytest.mark.parametrize("text", ["1.5", "-5", "5 sec", "ms", "+5"])
def test_bad_durations_with_milliseconds_by_default(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_duration_ms(text, what="--lock-lease-ms", default_unit="ms")
    assert str(info.value) == (
        f"--lock-lease-ms={text!r} is invalid: expected a duration: a whole number of "
        "milliseconds, or a whole number with a unit (ms, s, m or min, h, d), e.g. 500ms, 30s "
        "or 2min"
    )


def test_a_zero_duration_is_refused_below_the_minimum() -> None:
    with pytest.raises(InvalidArgumentError, match="x='0s' is invalid: expected a positive"):
        parse_duration_ms("0s", what="x", minimum=1)


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_size("x" * 500, what="s")
    assert "s='xxx" in str(info.value) and "x" * 200 not in str(info.value)


def test_argparse_types_let_argparse_name_the_flag() -> None:
    assert size_flag("4MiB") == 4 << 20
    assert duration_ms_flag("250") == 250 and duration_ms_flag("2min") == 120_000
    with pytest.raises(argparse.ArgumentTypeError) as info:
        size_flag("lots")
    assert str(info.value).startswith("'lots' is invalid: expected a size in bytes")


def broker_args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--store", "/nowhere", *flags])


@pytest.mark.parametrize(
    ("flag", "text", "attribute", "value"),
    [
        ("--max-message-bytes", "4MiB", "max_message_bytes", 4 << 20),
        ("--max-message-bytes", "4m", "max_message_bytes", 4 << 20),
        ("--max-message-bytes", "4194304", "max_message_bytes", 4 << 20),
        ("--commitlog-segment-bytes", "1g", "commitlog_segment_bytes", 1 << 30),
        ("--session-timeout-ms", "120000", "session_timeout_ms", 120_000),
        ("--session-timeout-ms", "2min", "session_timeout_ms", 120_000),
        ("--file-reserved-ms", "72h", "file_reserved_ms", 259_200_000),
        ("--flush-interval-ms", "500ms", "flush_interval_ms", 500),
    ],
)
def test_broker_flags(flag: str, text: str, attribute: str, value: int) -> None:
    assert getattr(broker_args(flag, text), attribute) == value


def test_a_bad_broker_flag_exits_2_naming_flag_and_value(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        broker_args("--max-pull-bytes", "32XB")
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert "argument --max-pull-bytes: '32XB' is invalid: expected a size in bytes" in error


def test_delay_levels_take_the_same_durations() -> None:
    assert parse_delay_levels("500ms 5S 1m 2min 1h 1d") == [
        500,
        5_000,
        60_000,
        120_000,
        3_600_000,
        86_400_000,
    ]
    with pytest.raises(InvalidArgumentError, match=r"^delay level 2='5' is invalid: expected a "):
        parse_delay_levels("1s 5 1m")


def test_cli_idle_exit_takes_a_duration() -> None:
    parser = build_parser()
    assert parser.parse_args(["consume", "T", "--idle-exit-ms", "300"]).idle_exit_ms == 300
    assert parser.parse_args(["consume", "T", "--idle-exit-ms", "2s"]).idle_exit_ms == 2_000


def test_spark_options_take_the_same_sizes_and_durations() -> None:
    options = SourceOptions.parse(
        {
            "endpoints": "127.0.0.1:10911",
            "topic": "orders",
            "maxBytesPerTrigger": "64MiB",
            "minMessagesPerTrigger": "1",
            "maxTriggerDelay": "2min",
        },
        True,
    )
    assert options.max_bytes_per_trigger == 64 << 20
    assert options.max_trigger_delay_ms == 120_000
