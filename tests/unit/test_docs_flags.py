"""docs/broker.md's flag table stays true: every flag of the broker has a row and no row
names another, and each default it states is the one the broker applies (given
explicitly, the flag yields the same configuration as when it is left out)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rmq_spark.broker.__main__ import _Parser, add_arguments, config_from_args

DOC = Path(__file__).resolve().parents[2] / "docs" / "broker.md"
STORE = ["--store", "/tmp/rocketlite-docs-check"]


def parser() -> _Parser:
    made = _Parser(prog="broker")
    add_arguments(made)
    return made


def rows() -> dict[str, str]:
    """flag -> its default cell."""
    text = DOC.read_text()
    table = text[text.index("## Broker flags\n") :]
    found = {}
    for line in table.splitlines():
        match = re.match(r"\| `(--[a-z-]+)[^`]*` \| ([^|]+) \|", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
        elif found and not line.startswith("|"):
            break
    return found


def flags() -> set[str]:
    return {
        max(action.option_strings, key=len)
        for action in parser()._actions
        if action.option_strings and action.dest != "help"
    }


def configuration(*extra: str):
    """What the broker would run with: its config, with the store's part resolved. Without
    ``--remoting-port`` the port's default is RocketMQ's 9876 when it is free, else off: a
    broker of a test running beside this one makes that differ from call to call, so it is
    taken as off here, but where that flag is the one checked."""
    if "--remoting-port" not in extra:
        extra = ("--remoting-port", "off", *extra)
    config = config_from_args(parser().parse_args([*STORE, *extra]))
    return config.store_config(), dataclasses.replace(config, store_options={})


def test_the_table_names_every_flag_and_no_other():
    assert sorted(rows()) == sorted(flags())


@pytest.mark.parametrize("flag", sorted(flags()))
def test_each_stated_default_is_the_real_one(flag):
    cell = rows()[flag]
    value = re.fullmatch(r"`([^`]*)`", cell)
    if value is None:
        assert cell in ("none", "off"), f"{flag}: a default the test cannot read: {cell!r}"
        if cell == "off":  # a switch: left out, it is off; given, the configuration changes
            assert configuration(flag) != configuration(), flag
        return
    assert configuration(flag, value.group(1)) == configuration(), (flag, value.group(1))
