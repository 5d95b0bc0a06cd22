"""Advertisement monitors: broadcast sensors whose readings are in their
advertisements (docs/protocol.md, "Advertisement monitors").

`AdvertisementData` has Bleak's shape (local_name, manufacturer_data,
service_data, service_uuids, tx_power, rssi) plus the address and the time
vigild received it.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid as _uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from ._frames import VigilError
from ._mailbox import Mailbox

if TYPE_CHECKING:
    from .central import Central

_BASE = "-0000-1000-8000-00805f9b34fb"
_RECORD_HEAD = struct.Struct("<HQ6sBb")  # length, time, address, address type, rssi


@dataclasses.dataclass(frozen=True)
class AdvertisementData:
    """One advertisement of a found device (Bleak's AdvertisementData, plus
    `address`, `time` (seconds since 1970 when vigild received it) and `raw`,
    the AD structures)."""

    address: str
    time: float
    rssi: int | None
    local_name: str | None
    manufacturer_data: dict[int, bytes]
    service_data: dict[str, bytes]
    service_uuids: list[str]
    tx_power: int | None
    raw: bytes
    random_address: bool = False


@dataclasses.dataclass(frozen=True)
class Found:
    peripheral: str
    rssi: int | None
    name: str | None


@dataclasses.dataclass(frozen=True)
class Lost:
    peripheral: str


@dataclasses.dataclass(frozen=True)
class Dropped:
    """vigild dropped `count` advertisements because this client fell behind."""

    count: int


MonitorItem = Union[AdvertisementData, Found, Lost, Dropped]


def _uuid16(value: int) -> str:
    return f"0000{value:04x}{_BASE}"


def parse_ad_structures(address: str, time: float, rssi: int | None, raw: bytes,
                        random_address: bool = False) -> AdvertisementData:
    """Reads AD structures (length, type, data) into an AdvertisementData."""
    name: str | None = None
    manufacturer: dict[int, bytes] = {}
    service_data: dict[str, bytes] = {}
    uuids: list[str] = []
    tx_power: int | None = None
    offset = 0
    while offset < len(raw):
        length = raw[offset]
        if length == 0 or offset + 1 + length > len(raw):
            break
        kind, data = raw[offset + 1], raw[offset + 2:offset + 1 + length]
        offset += 1 + length
        if kind in (0x08, 0x09):
            name = data.decode("utf-8", "replace")
        elif kind == 0xFF and len(data) >= 2:
            manufacturer[data[0] | data[1] << 8] = bytes(data[2:])
        elif kind == 0x16 and len(data) >= 2:
            service_data[_uuid16(data[0] | data[1] << 8)] = bytes(data[2:])
        elif kind == 0x21 and len(data) >= 16:
            service_data[str(_uuid.UUID(bytes=bytes(reversed(data[:16]))))] = bytes(data[16:])
        elif kind in (0x02, 0x03):
            uuids += [_uuid16(data[i] | data[i + 1] << 8) for i in range(0, len(data) - 1, 2)]
        elif kind in (0x06, 0x07):
            uuids += [str(_uuid.UUID(bytes=bytes(reversed(data[i:i + 16])))) for i in range(0, len(data) - 15, 16)]
        elif kind == 0x0A and len(data) == 1:
            tx_power = struct.unpack("b", data)[0]
    return AdvertisementData(address, time, rssi, name, manufacturer, service_data, uuids, tx_power, bytes(raw),
                             random_address)


def advertisement_records(attributes: Mapping[str, Any], body: bytes) -> list[AdvertisementData]:
    """The advertisements of a `ble.monitor.advertisements` event, in order
    (framing "adv1": per record u16 LE n, u64 LE ns since 1970, 6 address
    bytes, u8 address type, i8 RSSI (127: none), n - 16 bytes of AD structures)."""
    if attributes.get("framing") != "adv1":
        raise VigilError("invalidArgument", f"ble.monitor.advertisements: unknown framing {attributes.get('framing')!r}")
    records = []
    offset = 0
    while offset < len(body):
        if len(body) - offset < _RECORD_HEAD.size:
            raise VigilError("invalidArgument", f"ble.monitor.advertisements: a record is cut short at byte {offset}")
        length, time, address, address_type, rssi = _RECORD_HEAD.unpack_from(body, offset)
        end = offset + 2 + length
        if length < 16 or end > len(body):
            raise VigilError("invalidArgument", f"ble.monitor.advertisements: a malformed record at byte {offset}")
        records.append(parse_ad_structures(
            ":".join(f"{b:02X}" for b in address), time / 1e9, None if rssi == 127 else rssi,
            bytes(body[offset + _RECORD_HEAD.size:end]), address_type == 1))
        offset = end
    return records


def pattern(kind: str, *, company: int | None = None, uuid: str | None = None, prefix: bytes = b"",
            name: str | None = None) -> dict[str, Any]:
    """One monitor pattern: `pattern("manufacturer", company=0x0499, prefix=b"\\x05")`,
    `pattern("service", uuid="fcd2")`, `pattern("name", name="Ruuvi")`, `pattern("uuid", uuid="181a")`."""
    members: dict[str, Any] = {"type": kind}
    if company is not None:
        members["company"] = company
    if uuid is not None:
        members["uuid"] = uuid
    if prefix:
        members["prefix"] = prefix.hex()
    if name is not None:
        members["name"] = name
    return members


class AdvertisementMonitor:
    """A monitor through the daemon: `async with central.monitor("ruuvi", [pattern(...)]) as m:
    async for item in m.items()` gives `Found`, `Lost`, `Dropped` and one
    `AdvertisementData` per advertisement, in order."""

    def __init__(self, central: Central, name: str, patterns: Iterable[Mapping[str, Any]], *,
                 rssi_found: int | None = None, rssi_lost: int | None = None,
                 lost_timeout: float | None = None, advertisements: bool = True) -> None:
        self._central = central
        self.name = name
        self.patterns = [dict(p) for p in patterns]
        self.rssi_found, self.rssi_lost, self.lost_timeout = rssi_found, rssi_lost, lost_timeout
        self.advertisements = advertisements
        self.found: set[str] = set()
        self._items: Mailbox[MonitorItem] = Mailbox()

    async def start(self) -> None:
        members: dict[str, Any] = {"monitor": self.name, "patterns": self.patterns}
        for key, value in (("rssiFound", self.rssi_found), ("rssiLost", self.rssi_lost),
                           ("lostTimeout", self.lost_timeout)):
            if value is not None:
                members[key] = value
        if not self.advertisements:
            members["advertisements"] = False
        self._central._monitors[self.name] = self
        self._central._start()
        await self._central._client.request("ble.monitor.start", **members)

    async def stop(self) -> None:
        if self._central._monitors.get(self.name) is self:
            del self._central._monitors[self.name]
            try:
                await self._central._client.request("ble.monitor.stop", monitor=self.name)
            except VigilError:
                pass
        self._items.close()

    def _put(self, item: MonitorItem) -> None:
        if isinstance(item, Found):
            self.found.add(item.peripheral)
        elif isinstance(item, Lost):
            self.found.discard(item.peripheral)
        self._items.put(item)

    async def items(self) -> AsyncIterator[MonitorItem]:
        while True:
            try:
                item = await self._items.get()
            except VigilError:
                return
            if item is not None:
                yield item

    async def __aenter__(self) -> AdvertisementMonitor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
