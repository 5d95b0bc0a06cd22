"""Payloads that need decoding: batched BLE notifications and session-log ranges."""

from __future__ import annotations

import dataclasses
import mmap
import struct
from collections.abc import Mapping
from typing import Any

from ._frames import VigilError

# A ble.notification record naming another characteristic than the event's.
_OTHER_CHARACTERISTIC = 0xFFFF


@dataclasses.dataclass(frozen=True)
class NotificationValue:
    """One value of a subscribed characteristic (UUIDs in the daemon's full lowercase form)."""

    peripheral: str
    service: str
    characteristic: str
    value: bytes
    #: Which characteristic of that UUID in its service (0: the first by handle).
    instance: int = 0


def notification_values(attributes: Mapping[str, Any], body: bytes) -> list[NotificationValue]:
    """The values of a `ble.notification` event, in order (docs/protocol.md,
    "Notification batches"). Without `framing` the body is one value; with
    `framing: "u16le"` it is records: u16 LE length n (< 0xFFFF) and n bytes, a
    value of the event's characteristic; or 0xFFFF, u16 m, m bytes of UTF-8
    "peripheral service characteristic" (and " instance" when not 0), then a
    value record of that one."""
    instance = attributes.get("instance", 0)
    if not isinstance(instance, int) or isinstance(instance, bool) or not 0 <= instance < 65536:
        raise VigilError("invalidArgument", f"ble.notification: instance {instance!r} is not a characteristic instance")
    own = (str(attributes.get("peripheral", "")), str(attributes.get("service", "")),
           str(attributes.get("characteristic", "")))
    framing = attributes.get("framing")
    if framing is None:
        return [NotificationValue(*own, bytes(body), instance)]
    if framing != "u16le":
        raise VigilError("invalidArgument", f"ble.notification: unknown framing {framing!r}")
    view = memoryview(body)
    values: list[NotificationValue] = []
    offset = 0

    def take(count: int) -> memoryview:
        nonlocal offset
        if len(view) - offset < count:
            raise VigilError("invalidArgument", f"ble.notification: a record is cut short at byte {offset} of {len(view)}")
        offset += count
        return view[offset - count:offset]

    while offset < len(view):
        path, path_instance = own, instance
        length = int.from_bytes(take(2), "little")
        if length == _OTHER_CHARACTERISTIC:
            parts = bytes(take(int.from_bytes(take(2), "little"))).decode().split(" ")
            if len(parts) not in (3, 4) or not all(parts) or (len(parts) == 4 and not parts[3].isdigit()):
                raise VigilError("invalidArgument", f"ble.notification: {' '.join(parts)!r} does not name a characteristic")
            path = (parts[0], parts[1], parts[2])
            path_instance = int(parts[3]) if len(parts) == 4 else 0
            length = int.from_bytes(take(2), "little")
            if length == _OTHER_CHARACTERISTIC:
                raise VigilError("invalidArgument", "ble.notification: two characteristic records in a row")
        values.append(NotificationValue(*path, bytes(take(length)), path_instance))
    return values


class SessionLogs:
    """Reads `session.data` bytes out of session logs (docs/protocol.md,
    "Session logs"): the event names a file (`log`) and a stream range
    (`offset`, `length`); stream byte n is at file offset 4096 + n % capacity.
    Each log is mapped read-only once and dropped when its session ends."""

    HEADER_SIZE = 4096
    MAGIC = b"VIGILLOG"
    VERSION = 1

    def __init__(self) -> None:
        self._maps: dict[int, tuple[str, mmap.mmap]] = {}

    def resolve(self, kind: str, attributes: Mapping[str, Any], body: bytes) -> bytes:
        """The event's payload: from its log where it names one, else its body.
        Raises VigilError when the range cannot be read."""
        session = attributes.get("session")
        if kind == "session.closed" and not attributes.get("willReopen"):
            self.forget(session)
            return body
        path = attributes.get("log")
        if kind != "session.data" or not isinstance(path, str) or not isinstance(session, int):
            return body
        offset, length = int(attributes["offset"]), int(attributes["length"])
        entry = self._maps.get(session)
        if entry is None or entry[0] != path:
            try:
                with open(path, "rb") as file:
                    mapped = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
            except (OSError, ValueError) as error:
                raise VigilError("invalidState", f"cannot map session log {path}: {error}") from None
            if mapped[:8] != self.MAGIC or struct.unpack_from("<I", mapped, 8)[0] != self.VERSION:
                mapped.close()
                raise VigilError("invalidState", f"{path} is not a version {self.VERSION} session log")
            self.forget(session)
            entry = self._maps[session] = (path, mapped)
        mapped = entry[1]
        capacity = int(struct.unpack_from("<Q", mapped, 16)[0])
        if length > capacity:
            raise VigilError("invalidArgument", f"session.data length {length} exceeds the log's capacity {capacity}")
        start = offset % capacity
        first = min(length, capacity - start)
        data = mapped[self.HEADER_SIZE + start:self.HEADER_SIZE + start + first]
        if first < length:
            data += mapped[self.HEADER_SIZE:self.HEADER_SIZE + length - first]
        return data

    def forget(self, session: object) -> None:
        if isinstance(session, int):
            entry = self._maps.pop(session, None)
            if entry:
                entry[1].close()

    def close(self) -> None:
        for _, mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
