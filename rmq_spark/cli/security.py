"""Users and ACL entries of brokers run with ``--acl`` (super users only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq_spark.cli.output import emit
from rmq_spark.cli.settings import client_config, read_secret
from rmq_spark.errors import RocketliteError

if TYPE_CHECKING:
    import argparse


def cmd_user(args: argparse.Namespace) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, client_config(args)) as admin:
        if args.action == "create":
            if not args.name:
                raise RocketliteError("user create needs a NAME")
            brokers = admin.create_user(args.name, read_secret(args), super_user=args.super)
            kind = "super user" if args.super else "user"
            print(f"created {kind} {args.name} on {', '.join(brokers)}")
        elif args.action == "delete":
            if not args.name:
                raise RocketliteError("user delete needs a NAME")
            brokers = admin.delete_user(args.name)
            print(f"deleted user {args.name} on {', '.join(brokers)}")
        else:
            rows = [
                {
                    "user": u.username,
                    "broker": u.broker_name,
                    "type": u.user_type,
                    "status": "enabled" if u.enabled else "disabled",
                    "secretSource": u.secret_source,
                }
                for u in admin.list_users()
            ]
            emit(args, rows, ["user", "broker", "type", "status", "secretSource"])
    return 0


def cmd_acl(args: argparse.Namespace) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, client_config(args)) as admin:
        if args.action in ("grant", "revoke") and not (args.user and args.resource):
            raise RocketliteError(f"acl {args.action} needs USER and RESOURCE")
        if args.action == "grant":
            if not args.actions:
                raise RocketliteError("acl grant needs --actions, e.g. --actions Pub,Sub")
            actions = [a for a in args.actions.split(",") if a.strip()]
            brokers = admin.grant(
                args.user, args.resource, actions, deny=args.deny, source_ips=args.source_ip
            )
            verb = "denied" if args.deny else "granted"
            print(
                f"{verb} {','.join(actions)} on {args.resource} to {args.user} "
                f"on {', '.join(brokers)}"
            )
        elif args.action == "revoke":
            brokers = admin.revoke(args.user, args.resource)
            print(f"revoked {args.resource} from {args.user} on {', '.join(brokers)}")
        else:
            rows = [
                {
                    "user": e.username,
                    "broker": e.broker_name,
                    "resource": e.resource,
                    "actions": ",".join(e.actions) if not args.json else list(e.actions),
                    "decision": e.decision,
                    "sourceIps": (",".join(e.source_ips) or None)
                    if not args.json
                    else list(e.source_ips),
                }
                for e in admin.list_acls(args.user)
            ]
            emit(args, rows, ["user", "broker", "resource", "actions", "decision", "sourceIps"])
    return 0
