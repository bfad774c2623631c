"""Frames of RocketMQ's remoting protocol, as pure functions over bytes.

A frame is ``[int32 length][int32 type<<24 | header length][header][body]``; the length
counts everything after itself. The header is JSON (type 0) or RocketMQ's binary layout
(type 1). Both are read; only JSON is written, because some clients (C++, ali-ons) read the
header-length word without masking the type byte.

Header values in ``extFields`` are strings on the wire as Java writes them; other clients
send numbers and booleans, which are read as the strings Java would have made of them.

>>> frame = encode(Command(code=105, ext={"topic": "T"}, opaque=7))
>>> frames, used = split_frames(frame, max_frame_bytes=1 << 20)
>>> decode(frames[0]).ext
{'topic': 'T'}
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field

from rmq_spark.wire.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LANGUAGES,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
)

#: RocketMQ's default com.rocketmq.remoting.frameMaxLength
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
_LENGTH = struct.Struct(">i")
_HEAD = struct.Struct(">ii")
#: strings JSON writes as they are (no quote, backslash or control character to escape),
#: but for RocketMQ's two property separators (\x01, \x02), written as \u0001 and \u0002
_PLAIN = re.compile(r"[\x01\x02 !#-\[\]-~]*")
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag: 13 bytes


#: a frame's body: bytes, or a view of the buffer a large frame was received into
Buffer = bytes | bytearray | memoryview


class FrameError(ValueError):
    """A frame that cannot be read; the connection it came on must be closed."""


@dataclass(slots=True)
class Command:
    """One request or response. ``ext`` is the custom header, every value a string."""

    code: int
    ext: dict[str, str] = field(default_factory=dict)
    #: a memoryview of the received frame where the reader asked for no copy
    body: Buffer = b""
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    language: str = "JAVA"
    version: int = 0
    serialize_type: int = SERIALIZE_JSON
    #: the first header field whose text is not valid Unicode (invalid UTF-8, or a lone
    #: surrogate written as a JSON escape), or None; such a request is refused naming it
    bad_text: str | None = None
    #: bookkeeping, never on the wire: when the request was taken up (``perf_counter``), and
    #: in a response, the request's code and that time (so its answer can be timed)
    received_s: float = 0.0
    request_code: int = 0

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def reply(self, code: int = 0, remark: str | None = None, **ext: str) -> Command:
        """A response to this request: same opaque, the response flag, our version."""
        from rmq_spark.wire.remoting.codes import OUR_VERSION

        return Command(
            code=code, ext=ext, opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark,
            version=OUR_VERSION, received_s=self.received_s, request_code=self.code,
        )  # fmt: skip


def encode(command: Command) -> bytes:
    """The whole frame (length prefix included), header in JSON with keys in fastjson's
    order (alphabetical) and no null remark."""
    head, body = encode_parts(command)
    return head + body


def encode_parts(command: Command) -> tuple[bytes, Buffer]:
    """:func:`encode` as (everything before the body, the body), so a large body (a pull's
    records) is written as it is, never copied into a new frame."""
    ext = command.ext
    # The hot answers (sends, pulls) hold short plain strings: written by hand, three times
    # faster than json.dumps. Anything that needs escaping goes through json.dumps.
    texts = "".join((command.language, *ext.keys(), *ext.values()))
    if command.remark is None and _PLAIN.fullmatch(texts):  # one class: the whole checks each
        fields = ",".join(f'"{key}":"{value}"' for key, value in ext.items())
        if "\x01" in fields or "\x02" in fields:  # a message's properties text
            fields = fields.replace("\x01", "\\u0001").replace("\x02", "\\u0002")
        data = (
            f'{{"code":{command.code:d},"extFields":{{{fields}}},"flag":{command.flag:d},'
            f'"language":"{command.language}","opaque":{command.opaque:d},'
            f'"serializeTypeCurrentRPC":"JSON","version":{command.version:d}}}'
        ).encode()
    else:
        header: dict[str, object] = {"code": command.code}
        if ext:
            header["extFields"] = ext
        header["flag"] = command.flag
        header["language"] = command.language
        header["opaque"] = command.opaque
        if command.remark is not None:
            header["remark"] = command.remark
        header["serializeTypeCurrentRPC"] = "JSON"
        header["version"] = command.version
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: JSON's \u escape carries it
            data = json.dumps(header, separators=(",", ":")).encode()
    body = command.body
    return _HEAD.pack(4 + len(data) + len(body), len(data)) + data, body


def split_frames(buffer: bytes | bytearray, max_frame_bytes: int) -> tuple[list[bytes], int]:
    """The complete frames at the start of ``buffer`` (each without its length prefix) and
    how many bytes they took; a partial frame at the end is left for the next call.

    Raises FrameError for a length that is not positive or is over ``max_frame_bytes``
    (RocketMQ closes the connection then: nothing after it can be trusted).
    """
    frames = []
    pos = 0
    end = len(buffer)
    while end - pos >= 4:
        (length,) = _LENGTH.unpack_from(buffer, pos)
        if length < 4 or length > max_frame_bytes:
            raise FrameError(
                f"frame length {length} is outside 4..{max_frame_bytes} (the peer does not "
                "speak RocketMQ's remoting protocol, or sent a frame over the limit)"
            )
        if end - pos - 4 < length:
            break
        frames.append(bytes(buffer[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    return frames, pos


def decode(frame: bytes | bytearray, *, copy_body: bool = True) -> Command:
    """One frame (without its length prefix) as a Command; FrameError if malformed. With
    ``copy_body=False`` the body is a memoryview of ``frame`` (a large pull answer is not
    copied again)."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header length")
    (word,) = _LENGTH.unpack_from(frame, 0)
    kind = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(
            f"bad header length {header_len}: the frame holds {len(frame) - 4} bytes after it"
        )
    header = bytes(frame[4 : 4 + header_len])
    body: Buffer = frame[4 + header_len :] if copy_body else memoryview(frame)[4 + header_len :]
    if kind == SERIALIZE_JSON:
        command = _decode_json_header(header)
    elif kind == SERIALIZE_ROCKETMQ:
        command = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {kind} (0 is JSON, 1 is ROCKETMQ)")
    command.body = body
    return command


def _decode_json_header(header: bytes) -> Command:
    try:
        # Bytes that are not UTF-8 become lone surrogates here, as \ud800 escapes do in
        # json.loads: both are caught below by field, so the refusal can name it.
        data = json.loads(header.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"header is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FrameError("header is JSON but not an object")
    code = _whole(data.get("code"), "code")
    ext = data.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    language = data.get("language", "JAVA")
    if isinstance(language, int) and 0 <= language < len(LANGUAGES):
        language = LANGUAGES[language]
    remark = data.get("remark")
    command = Command(
        code=code,
        ext={str(k): as_text(v) for k, v in ext.items() if v is not None},
        opaque=_whole(data.get("opaque", 0), "opaque"),
        flag=_whole(data.get("flag", 0), "flag"),
        remark=remark if isinstance(remark, str) and remark else None,
        language=language if isinstance(language, str) else "OTHER",
        version=_whole(data.get("version", 0), "version"),
        serialize_type=SERIALIZE_JSON,
    )
    command.bad_text = bad_text_field(command)
    return command


def is_text(value: str) -> bool:
    """True when ``value`` is valid Unicode text (no lone surrogate), as UTF-8 can carry.

    >>> is_text("caf\u00e9"), is_text("\ud800")
    (True, False)
    """
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def bad_text_field(command: Command) -> str | None:
    """The name of the first header field of ``command`` that is not valid text: an
    ``extFields`` key or value (named by its key, shown escaped when the key itself is
    bad), the remark or the language; None when all are text."""
    for key, value in command.ext.items():
        if not is_text(key):
            return ascii(key)
        if not is_text(value):
            return key
    if command.remark is not None and not is_text(command.remark):
        return "remark"
    if not is_text(command.language):
        return "language"
    return None


def _decode_binary_header(header: bytes) -> Command:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _LENGTH.unpack_from(header, pos)
        pos += 4
        remark = _text(header, pos, remark_len, "remark") if remark_len > 0 else None
        pos += max(remark_len, 0)
        (ext_len,) = _LENGTH.unpack_from(header, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > len(header):
            raise FrameError(f"extFields length {ext_len} runs past the header")
        ext = _binary_ext(header, pos, pos + ext_len)
    except struct.error:
        raise FrameError("binary header is cut short") from None
    command = Command(
        code=code,
        ext=ext,
        opaque=opaque,
        flag=flag,
        remark=remark,
        language=LANGUAGES[language] if language < len(LANGUAGES) else "OTHER",
        version=version,
        serialize_type=SERIALIZE_ROCKETMQ,
    )
    command.bad_text = bad_text_field(command)
    return command


def _binary_ext(header: bytes, pos: int, end: int) -> dict[str, str]:
    ext: dict[str, str] = {}
    while pos < end:
        (key_len,) = struct.unpack_from(">h", header, pos)
        pos += 2
        key = _text(header, pos, key_len, "extFields key")
        pos += key_len
        (value_len,) = _LENGTH.unpack_from(header, pos)
        pos += 4
        value = _text(header, pos, value_len, "extFields value")
        pos += value_len
        if pos > end:
            raise FrameError("an extFields entry runs past the header")
        if key and value:  # Java reads empty strings as null; repeated keys: the last wins
            ext[key] = value
    return ext


def _text(data: bytes, pos: int, length: int, what: str) -> str:
    if length < 0 or pos + length > len(data):
        raise FrameError(f"{what} length {length} runs past the header")
    # bytes that are not UTF-8 become lone surrogates: the request is refused naming the
    # field (see bad_text_field), the connection stays open
    return data[pos : pos + length].decode("utf-8", "surrogateescape")


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError(f"header field {name} is {value!r}, not a whole number")
    return value


def as_text(value: object) -> str:
    """A header value as Java's ``toString`` would write it: booleans ``true``/``false``,
    numbers as digits, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return json.dumps(value, separators=(",", ":"))
