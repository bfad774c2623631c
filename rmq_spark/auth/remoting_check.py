"""Access control on the remoting port, in the two steps the broker takes around decoding a
request: :func:`authenticate` its signature against the ACL in force
(:mod:`.remoting_signature`) before anything else is read, then :func:`authorize` the rule
of its endpoint over the values decoded from it, as the gRPC interceptor authorizes calls,
with the same users, policies and refusals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rmq_spark.auth.acl import User
from rmq_spark.auth.interceptor import AccessDenied, Authorizer, NotAuthenticated, enabled_user
from rmq_spark.auth.remoting_rules import RemotingRule
from rmq_spark.auth.remoting_signature import Buffer, verify_request
from rmq_spark.auth.signature import AuthenticationError


def authenticate(
    authorizer: Authorizer, ext: Mapping[str, str], body: Buffer, *, version: int = 0
) -> User:
    """The user who signed the request; NotAuthenticated otherwise."""
    access = authorizer.acl()
    try:
        name = verify_request(ext, body, access.secret_of, version)
    except AuthenticationError as exc:
        raise NotAuthenticated(str(exc)) from None
    return enabled_user(access, name)


def authorize(
    authorizer: Authorizer, user: User, rule: RemotingRule, value: Any, *, peer: str = ""
) -> None:
    """Refused (AccessDenied) unless ``user`` may do what the decoded request ``value``
    does under ``rule``. ``peer`` is the client's ``host:port`` (for policies with source
    addresses)."""
    grpc_peer = f"ipv6:{peer}" if peer.startswith("[") else f"ipv4:{peer}"
    if rule.super_only_if is not None and rule.super_only_if(value) and not user.is_super:
        raise AccessDenied(f"user {user.name} is not a super user")
    needs = rule.needs(value) if rule.needs is not None else ()
    authorizer.authorize(user, rule, needs, grpc_peer)
    if rule.client_ids is not None:
        authorizer.claim(user, rule.client_ids(value))
