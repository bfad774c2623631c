"""The broker's settings and its consumer groups' settings, as ``mqadmin`` reads and
changes them: GET_BROKER_CONFIG (26, ``getBrokerConfig``), UPDATE_BROKER_CONFIG (25,
``updateBrokerConfig``), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, ``updateSubGroup``) and
DELETE_SUBSCRIPTIONGROUP (207, ``deleteSubGroup``).

The settings are the broker core's (:mod:`rmq_spark.broker.core.settings`: which ones a
running broker changes, and the checks); the subscription groups are the membership
service's table (``config/subscriptionGroup.json``), written before the answer. All four
are a super user's with ACL on (the endpoints' default rule).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

from rmq_spark.broker.core import settings
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.membership.subscription_groups import check_group_entry
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.namesrv import required
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.workers import Workers
from rmq_spark.clock import now_ms
from rmq_spark.names import validate_group
from rmq_spark.wire.remoting import bodies, config_text, headers
from rmq_spark.wire.remoting.codes import RequestCode
from rmq_spark.wire.remoting.frame import Command

log = logging.getLogger("rmq_spark.broker.remoting")


@dataclass(frozen=True)
class GroupDeletion:
    group: str
    #: the group's committed offsets go too (RocketMQ's removeOffset)
    remove_offsets: bool


class Configs:
    def __init__(self, broker: Broker, workers: Workers, address: str) -> None:
        self._broker = broker
        self._workers = workers
        #: the remoting port bound (the address clients are told ends with it)
        self._remoting_port = int(address.rsplit(":", 1)[1])
        #: counts the changes of the settings (GET_BROKER_CONFIG's data version)
        self._changes = itertools.count()
        self._version = next(self._changes)

    def endpoints(self) -> dict[int, Endpoint]:
        code = RequestCode
        return {
            code.GET_BROKER_CONFIG: Endpoint(self.get_config),
            code.UPDATE_BROKER_CONFIG: Endpoint(
                self.update_config, decode=lambda r: config_text.read_properties(r.body)
            ),
            code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Endpoint(
                self.update_group,
                decode=lambda r: check_group_entry(
                    bodies.json_object(r.body, "SubscriptionGroupConfig")
                ),
            ),
            code.DELETE_SUBSCRIPTIONGROUP: Endpoint(self.delete_group, decode=_group_deletion),
        }

    async def get_config(self, connection: Connection, request: Command, _: None) -> Command:
        broker = self._broker
        current = settings.settings(
            broker.config,
            broker.messaging.store_config,
            grpc_port=broker.port,
            remoting_port=self._remoting_port,
        )
        version = bodies.dumps({"counter": self._version, "timestamp": now_ms()})
        response = request.reply(version=version)
        response.body = config_text.write_properties(current)
        return response

    async def update_config(
        self, connection: Connection, request: Command, changes: dict[str, str]
    ) -> Command:
        """Every setting named is changed, or none (the refusal names the first setting
        refused and why)."""
        applied = settings.update(self._broker.config, self._broker.messaging.store_config, changes)
        self._version = next(self._changes)
        log.info("broker settings changed by %s: %s", connection.peer, applied)
        return request.reply()

    async def update_group(
        self, connection: Connection, request: Command, entry: dict[str, Any]
    ) -> Command:
        stored = await self._workers.run(self._broker.subscription_groups.update, entry)
        log.info(
            "subscription group %s set by %s: %s", stored["groupName"], connection.peer, stored
        )
        return request.reply()

    async def delete_group(
        self, connection: Connection, request: Command, deletion: GroupDeletion
    ) -> Command:
        broker = self._broker

        def delete() -> None:
            broker.subscription_groups.delete(deletion.group)
            if deletion.remove_offsets:
                broker.messaging.offsets.remove_group(deletion.group)

        await self._workers.run(delete)
        log.info(
            "subscription group %s deleted by %s%s",
            deletion.group,
            connection.peer,
            " with its offsets" if deletion.remove_offsets else "",
        )
        return request.reply()


def _group_deletion(request: Command) -> GroupDeletion:
    group = validate_group(required(request, "groupName"))
    return GroupDeletion(group, headers.flag(request.ext, "removeOffset"))
