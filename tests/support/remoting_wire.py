"""A raw TCP connection to a broker's remoting port, for tests that send frames by hand
(hostile ones included), and the checks on the broker's log that go with it."""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from dataclasses import dataclass

import pytest

from rmq_spark.wire.remoting.frame import Command, decode, encode
from tests.support.broker_harness import BrokerProcess

WAIT_S = 5.0  # for an answer, or for the broker to hang up
MIB = 1 << 20


class Closed(Exception):
    """The broker closed the connection."""


class Wire:
    """One raw TCP connection to the remoting port."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.buffer = bytearray()
        #: opaques of calls: far above the fuzz loop's, so an answer to one of those
        #: cannot pass for an answer to a call
        self.next_opaque = 1_000_000

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:  # reset or broken pipe: the broker hung up already
            raise Closed(str(exc)) from None

    def read_frame(self, deadline: float) -> Command:
        """The next frame from the broker; Closed at its end, TimeoutError at ``deadline``."""
        while True:
            if len(self.buffer) >= 4:
                (length,) = struct.unpack_from(">i", self.buffer)
                assert 4 <= length < 64 * MIB, f"the broker sent a frame length of {length}"
                if len(self.buffer) >= 4 + length:
                    frame = bytes(self.buffer[4 : 4 + length])
                    del self.buffer[: 4 + length]
                    return decode(frame)  # the broker wrote a frame it cannot read: a bug
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise TimeoutError("no frame from the broker in time") from None
            except ConnectionResetError:
                data = b""
            if not data:
                raise Closed("the broker closed the connection")
            self.buffer += data

    def response(self, opaque: int, timeout_s: float = WAIT_S) -> Command:
        """The response with ``opaque``; fails on a response to anything else. Requests the
        broker sends (NOTIFY_CONSUMER_IDS_CHANGED) are skipped."""
        deadline = time.monotonic() + timeout_s
        while True:
            command = self.read_frame(deadline)
            if not command.is_response:
                continue
            assert command.opaque == opaque, (
                f"a response to opaque {command.opaque} (code {command.code}, remark "
                f"{command.remark!r}) came while waiting for opaque {opaque}"
            )
            return command

    def call(self, code: int, ext: dict | None = None, body: bytes = b"", **fields) -> Command:
        opaque = self.next_opaque
        self.next_opaque += 1
        self.send_bytes(
            encode(Command(code=code, ext=ext or {}, body=body, opaque=opaque, **fields))
        )
        response = self.response(opaque)
        assert response.is_response and response.opaque == opaque
        return response

    def hang_up_seen(self, timeout_s: float = WAIT_S) -> list[Command]:
        """Wait for the broker to close the connection; the responses it sent before (its
        own requests, such as NOTIFY_CONSUMER_IDS_CHANGED to a member of a group, are not
        answers). Fails if it is still open after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        got = []
        while True:
            try:
                command = self.read_frame(deadline)
            except Closed:
                return got
            except TimeoutError:
                raise AssertionError(
                    f"the broker kept the connection open for {timeout_s} s"
                ) from None
            if command.is_response:
                got.append(command)


# -- requests ---------------------------------------------------------------------------------


@dataclass
class Remoting:
    process: BrokerProcess
    address: str

    def wire(self) -> Wire:
        return Wire(self.address)

    def log_mark(self) -> int:
        return self.process.log_path.stat().st_size

    def log_since(self, mark: int) -> str:
        with open(self.process.log_path, "rb") as log:
            log.seek(mark)
            return log.read().decode(errors="replace")

    def assert_no_traceback_since(self, mark: int) -> None:
        text = self.log_since(mark)
        if "Traceback" in text:
            # the log records that tell what failed: ERROR lines and exception lines
            shown = [
                line
                for line in text.splitlines()
                if " ERROR " in line or re.match(r"[\w.]+(Error|Exception)\b", line)
            ]
            pytest.fail(
                "the broker logged a Python traceback (an error that should have been a "
                "deliberate answer or a closed connection):\n" + "\n".join(shown[-20:])
            )


def offset_table(body) -> dict[int, int]:
    """{queueId: offset} of a ResetOffsetBody (fastjson's object keys, read by hand)."""
    text = bytes(body).decode()
    table = {}
    for key_end in [i for i, c in enumerate(text) if c == "}" and text[i + 1 : i + 2] == ":"]:
        key_start = text.rindex("{", 0, key_end)
        queue = json.loads(text[key_start : key_end + 1])
        value = text[key_end + 2 :].split(",", 1)[0].split("}", 1)[0]
        table[queue["queueId"]] = int(value)
    return table
