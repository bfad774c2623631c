"""ACL evaluation: table tests of matching, precedence and source networks."""

from __future__ import annotations

import ipaddress

import pytest

from rmq_spark.auth.acl import (
    AccessControl,
    Action,
    Decision,
    Entry,
    Pattern,
    Resource,
    User,
    UserType,
    evaluate,
    parse_networks,
)

A, D = Decision.ALLOW, Decision.DENY
PUB, SUB = Action.PUB, Action.SUB


def entry(pattern: str, actions=("Pub",), decision=A, ips=()):
    return Entry(
        Pattern.parse(pattern),
        frozenset(Action.parse(a) for a in actions),
        decision,
        parse_networks(ips),
    )


T = Resource.topic
G = Resource.group


@pytest.mark.parametrize(
    "entries, resource, actions, allowed",
    [
        # nothing matched: denied
        ([], T("orders"), {PUB}, False),
        ([entry("Topic:other")], T("orders"), {PUB}, False),
        # literal, prefix, any-of-type, any
        ([entry("Topic:orders")], T("orders"), {PUB}, True),
        ([entry("Topic:ord*")], T("orders"), {PUB}, True),
        ([entry("Topic:ord*")], T("ordinal"), {PUB}, True),
        ([entry("Topic:ord*")], T("xorders"), {PUB}, False),
        ([entry("Topic:*")], T("orders"), {PUB}, True),
        ([entry("*")], T("orders"), {PUB}, True),
        ([entry("*")], G("billing"), {SUB}, False),  # action Pub only
        ([entry("Group:*", ["Sub"])], T("orders"), {SUB}, False),  # wrong type
        # actions: All covers everything; a request for any of several
        ([entry("Topic:orders", ["All"])], T("orders"), {Action.DELETE}, True),
        ([entry("Topic:orders", ["Sub"])], T("orders"), {PUB}, False),
        ([entry("Topic:orders", ["Sub"])], T("orders"), {PUB, SUB}, True),
        ([entry("Topic:orders", ["Get"])], T("orders"), {Action.ANY}, True),
        # more specific wins, whatever its decision
        ([entry("Topic:*", decision=D), entry("Topic:orders")], T("orders"), {PUB}, True),
        ([entry("Topic:*"), entry("Topic:orders", decision=D)], T("orders"), {PUB}, False),
        ([entry("Topic:ord*", decision=D), entry("Topic:orders")], T("orders"), {PUB}, True),
        ([entry("Topic:ord*"), entry("Topic:orders", decision=D)], T("orders"), {PUB}, False),
        ([entry("Topic:o*", decision=D), entry("Topic:ord*")], T("orders"), {PUB}, True),
        ([entry("Topic:o*"), entry("Topic:ord*", decision=D)], T("orders"), {PUB}, False),
        ([entry("*", decision=D), entry("Topic:*")], T("orders"), {PUB}, True),
        ([entry("*"), entry("Topic:*", decision=D)], T("orders"), {PUB}, False),
        ([entry("Topic:*", decision=D), entry("*")], T("orders"), {PUB}, False),
        # equal specificity: Deny wins, in either order
        ([entry("Topic:orders"), entry("Topic:orders", decision=D)], T("orders"), {PUB}, False),
        ([entry("Topic:orders", decision=D), entry("Topic:orders")], T("orders"), {PUB}, False),
        # a deny for another action does not apply
        (
            [entry("Topic:orders", ["Sub"], D), entry("Topic:orders", ["Pub"])],
            T("orders"),
            {PUB},
            True,
        ),
        # retry and DLQ names are their group's
        ([entry("Group:billing", ["Sub"])], T("%RETRY%billing"), {SUB}, True),
        ([entry("Group:billing", ["Sub"])], T("%DLQ%billing"), {SUB}, True),
        ([entry("Group:%RETRY%billing", ["Sub"])], G("billing"), {SUB}, True),
        ([entry("Topic:%RETRY%billing", ["Sub"])], T("%RETRY%billing"), {SUB}, False),
        # a request about every topic (ListTopics) needs Topic:* or *
        ([entry("Topic:*", ["List"])], Resource("Topic", "*"), {Action.LIST}, True),
        ([entry("*", ["List"])], Resource("Topic", "*"), {Action.LIST}, True),
        ([entry("Topic:o*", ["List"])], Resource("Topic", "*"), {Action.LIST}, False),
        ([entry("Topic:orders", ["All"])], Resource("Topic", "*"), {Action.LIST}, False),
    ],
)
def test_evaluate(entries, resource, actions, allowed):
    assert evaluate(entries, resource, actions).allowed is allowed


IP = ipaddress.ip_address


@pytest.mark.parametrize(
    "ips, source, allowed",
    [
        ((), None, True),
        (("10.0.0.0/8",), IP("10.1.2.3"), True),
        (("10.0.0.0/8",), IP("11.1.2.3"), False),
        (("10.0.0.0/8",), None, False),
        (("10.0.0.0/8",), IP("::ffff:10.1.2.3"), True),
        (("127.0.0.1", "::1"), IP("::1"), True),
        (("fd00::/8",), IP("10.0.0.1"), False),
    ],
)
def test_source_ips(ips, source, allowed):
    assert evaluate([entry("Topic:orders", ips=ips)], T("orders"), {PUB}, source).allowed is allowed


def test_deny_from_a_network_only():
    entries = [entry("Topic:orders"), entry("Topic:orders", decision=D, ips=["192.168.0.0/16"])]
    assert evaluate(entries, T("orders"), {PUB}, IP("10.0.0.1")).allowed
    assert not evaluate(entries, T("orders"), {PUB}, IP("192.168.1.1")).allowed


@pytest.mark.parametrize("text", ["", "Topic", "Topic:", "Queue:x", "Topic:a*b", "Topic:**", "**"])
def test_bad_patterns(text):
    with pytest.raises(ValueError):
        Pattern.parse(text)


def test_super_user_skips_and_secret_not_in_repr():
    root = User("root", "s3cr3t", UserType.SUPER)
    plain = User("app", "s3cr3t")
    access = AccessControl({"root": root, "app": plain}, {})
    assert access.authorize(root, T("x"), {Action.DELETE}).allowed
    assert not access.authorize(plain, T("x"), {PUB}).allowed
    assert "s3cr3t" not in repr(root) + repr(access)


def test_reasons_name_the_resource():
    verdict = evaluate([entry("Topic:*", decision=D)], T("orders"), {PUB})
    assert "Topic:orders" in verdict.reason and "Topic:*" in verdict.reason
