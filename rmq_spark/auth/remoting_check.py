"""Access control on the remoting port: each request's signature checked against the ACL
in force (:mod:`.remoting_signature`), then its needs (:mod:`.remoting_rules`) authorized
as the gRPC interceptor authorizes calls, with the same users, policies and refusals."""

from __future__ import annotations

from collections.abc import Mapping

from rmq_spark.auth.interceptor import Authorizer, NotAuthenticated, enabled_user
from rmq_spark.auth.remoting_rules import rule_for
from rmq_spark.auth.remoting_signature import Buffer, verify_request
from rmq_spark.auth.signature import AuthenticationError


def check_request(
    authorizer: Authorizer,
    code: int,
    ext: Mapping[str, str],
    body: Buffer,
    *,
    version: int = 0,
    peer: str = "",
) -> str:
    """The name of the user a request is allowed for; Refused (NotAuthenticated or
    AccessDenied) otherwise. ``peer`` is the client's ``host:port`` (for policies with
    source addresses)."""
    access = authorizer.acl()
    try:
        name = verify_request(ext, body, access.secret_of, version)
    except AuthenticationError as exc:
        raise NotAuthenticated(str(exc)) from None
    user = enabled_user(access, name)
    rule = rule_for(code)
    grpc_peer = f"ipv6:{peer}" if peer.startswith("[") else f"ipv4:{peer}"
    authorizer.authorize(user, rule, rule.needs(ext, body) if rule.needs else (), grpc_peer)
    if rule.client_ids is not None:
        authorizer.claim(user, rule.client_ids(ext, body))
    return name
