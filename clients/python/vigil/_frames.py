"""Frames, messages and errors of the local protocol, version 1 (docs/protocol.md).

Pure functions and small types with no I/O: the asyncio connection, the
synchronous wrapper and the tests all use these.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import time
from collections.abc import Mapping
from typing import Any

PROTOCOL_VERSIONS = [1]
CLIENT_NAME = "vigil-python/1"
MAX_HEADER_BYTES = 65536
# What a client accepts from the daemon (docs/protocol.md, "Frames"): an
# `apps` reply of a daemon with a thousand apps is half a megabyte of header.
MAX_HEADER_BYTES_FROM_DAEMON = 16 << 20
MAX_BODY_BYTES = 1048576
SYSTEM_SOCKET = "/run/vigil/vigild.sock"

#: The daemon sends an error with one of these codes, then closes the connection.
FATAL_CODES = frozenset(
    {"malformedFrame", "frameTooLarge", "handshakeRequired", "unsupportedVersion", "unauthorized"}
)

#: The largest body one `write` request carries: bigger writes go in pieces,
#: each awaited, so the daemon's back-pressure works at this grain.
WRITE_CHUNK = 65536

_PREFIX = struct.Struct("<II")

JSON = dict[str, Any]


class VigilError(Exception):
    """An `error` frame from the daemon, or a client-side failure with a protocol code
    (`disconnected` when the connection dropped)."""

    def __init__(self, code: str, message: str, id: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.id = id

    @property
    def closes_connection(self) -> bool:
        """Whether the daemon closed the connection after this error."""
        return self.code in FATAL_CODES or self.code == "disconnected"


class ConnectionClosed(VigilError):
    """The connection to vigild is gone (code `disconnected`)."""

    def __init__(self, message: str = "vigild closed the connection") -> None:
        super().__init__("disconnected", message)


def socket_path(explicit: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The daemon's socket: the explicit path, $VIGIL_SOCKET,
    $XDG_RUNTIME_DIR/vigil/vigild.sock, then the system daemon's path."""
    env = os.environ if environ is None else environ
    if explicit:
        return os.fspath(explicit)
    if env.get("VIGIL_SOCKET"):
        return env["VIGIL_SOCKET"]
    if env.get("XDG_RUNTIME_DIR"):
        return os.path.join(env["XDG_RUNTIME_DIR"], "vigil", "vigild.sock")
    return SYSTEM_SOCKET


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds: the clock of the daemon's deadlines."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def encode_frame(header: Mapping[str, Any], body: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame: the 8-byte prefix (header and body lengths, u32 little-endian),
    the header as compact UTF-8 JSON, then the raw body."""
    header_bytes = json.dumps(dict(header), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    data = bytes(body)
    return _PREFIX.pack(len(header_bytes), len(data)) + header_bytes + data


@dataclasses.dataclass
class Message:
    """A received frame: its JSON header (a dict with `type`) and its body."""

    header: JSON
    body: bytes = b""

    @property
    def type(self) -> str:
        value = self.header["type"]
        assert isinstance(value, str)
        return value

    @property
    def id(self) -> int | None:
        value = self.header.get("id")
        return value if isinstance(value, int) else None

    def __getitem__(self, key: str) -> Any:
        return self.header[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.header.get(key, default)

    def error(self) -> VigilError:
        """This `error` frame as a VigilError."""
        return VigilError(str(self.header.get("code", "internalError")), str(self.header.get("message", "")), self.id)

    @property
    def is_fatal_error(self) -> bool:
        return self.type == "error" and self.header.get("code") in FATAL_CODES


class FrameDecoder:
    """Splits a byte stream into Messages. Limits are checked on the 8-byte
    prefix, before waiting for the rest of the frame."""

    def __init__(self, max_header: int = MAX_HEADER_BYTES, max_body: int = MAX_BODY_BYTES) -> None:
        self.max_header = max_header
        self.max_body = max_body
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_message(self) -> Message | None:
        """The next complete Message, or None until more bytes are fed."""
        if len(self._buffer) < _PREFIX.size:
            return None
        header_len, body_len = _PREFIX.unpack_from(self._buffer)
        if header_len == 0:
            raise VigilError("malformedFrame", "frame has an empty header")
        if header_len > self.max_header:
            raise VigilError("frameTooLarge", f"header of {header_len} bytes exceeds {self.max_header}")
        if body_len > self.max_body:
            raise VigilError("frameTooLarge", f"body of {body_len} bytes exceeds {self.max_body}")
        end = _PREFIX.size + header_len + body_len
        if len(self._buffer) < end:
            return None
        header_bytes = bytes(self._buffer[_PREFIX.size:_PREFIX.size + header_len])
        body = bytes(self._buffer[_PREFIX.size + header_len:end])
        del self._buffer[:end]
        try:
            header = json.loads(header_bytes.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise VigilError("malformedFrame", f"header is not JSON: {error}") from None
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise VigilError("malformedFrame", 'header is not a JSON object with a string "type"')
        return Message(header, body)
