"""GATT shapes shared by the central and peripheral roles: UUIDs, the service tree, devices."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Union

from ._frames import VigilError

BASE_UUID_TAIL = "-0000-1000-8000-00805f9b34fb"


def normalize_uuid(uuid: str) -> str:
    """The daemon's form of a UUID: lowercase 128-bit (16- and 32-bit short forms expanded)."""
    text = uuid.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if len(text) <= 8 and all(c in "0123456789abcdef" for c in text) and text:
        return f"{int(text, 16):08x}{BASE_UUID_TAIL}"
    return text


# ---------------------------------------------------------------------------
# The GATT tree


@dataclasses.dataclass(frozen=True)
class Descriptor:
    uuid: str


@dataclasses.dataclass(frozen=True)
class Characteristic:
    """A characteristic of a connected peripheral (Bleak: BleakGATTCharacteristic)."""

    uuid: str
    service_uuid: str
    properties: tuple[str, ...]
    descriptors: tuple[Descriptor, ...] = ()
    notifying: bool = False
    #: Which characteristic of this UUID in its service: 0 the first by handle, 1 the second.
    instance: int = 0
    #: Its ATT handle as BlueZ reports it (None from older daemons).
    handle: int | None = None


@dataclasses.dataclass(frozen=True)
class Service:
    uuid: str
    primary: bool
    characteristics: tuple[Characteristic, ...]

    def get_characteristic(self, uuid: str, instance: int = 0) -> Characteristic | None:
        wanted = normalize_uuid(uuid)
        return next((c for c in self.characteristics if c.uuid == wanted and c.instance == instance), None)

    def get_characteristics(self, uuid: str) -> list[Characteristic]:
        """Every characteristic with this UUID, in handle order (instance 0, 1, ...)."""
        wanted = normalize_uuid(uuid)
        return [c for c in self.characteristics if c.uuid == wanted]


class Services:
    """The services `ble.discover` returned (Bleak: BleakGATTServiceCollection)."""

    def __init__(self, services: Iterable[Service]) -> None:
        self.services = tuple(services)

    @classmethod
    def from_json(cls, services: Iterable[Mapping[str, Any]]) -> Services:
        return cls(Service(
            uuid=str(s["uuid"]), primary=bool(s.get("primary", True)),
            characteristics=tuple(Characteristic(
                uuid=str(c["uuid"]), service_uuid=str(s["uuid"]), properties=tuple(c.get("properties") or ()),
                descriptors=tuple(Descriptor(str(d["uuid"])) for d in c.get("descriptors") or ()),
                notifying=bool(c.get("notifying", False)), instance=int(c.get("instance") or 0),
                handle=c.get("handle"))
                for c in s.get("characteristics") or ()))
            for s in services)

    def __iter__(self) -> Any:
        return iter(self.services)

    def __len__(self) -> int:
        return len(self.services)

    def get_service(self, uuid: str) -> Service | None:
        wanted = normalize_uuid(uuid)
        return next((s for s in self.services if s.uuid == wanted), None)

    def get_characteristic(self, uuid: str) -> Characteristic | None:
        """The characteristic with this UUID; VigilError if several services have one."""
        wanted = normalize_uuid(uuid)
        found = [c for s in self.services for c in s.characteristics if c.uuid == wanted]
        if len(found) > 1:
            raise VigilError("invalidArgument", f"{uuid} occurs {len(found)} times: name it as (service, characteristic, instance)"
                             " or pass the Characteristic")
        return found[0] if found else None


#: A UUID (unique on the peripheral), a `Characteristic` from `get_services()`,
#: `(service, characteristic)` or `(service, characteristic, instance)`.
CharacteristicSpecifier = Union[str, Characteristic, tuple[str, str], tuple[str, str, int]]


@dataclasses.dataclass(frozen=True)
class Device:
    """A peripheral the daemon has seen (docs/protocol.md, "The peripheral
    object"); it carries the advertisement, as Bleak's BLEDevice plus AdvertisementData."""

    address: str
    name: str | None
    rssi: int | None
    address_type: str = "public"
    state: str = "disconnected"
    service_uuids: tuple[str, ...] = ()
    manufacturer_data: Mapping[int, bytes] = dataclasses.field(default_factory=dict)
    service_data: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    tx_power: int | None = None
    mtu: int | None = None
    #: Pairing state as BlueZ reports it (None from a daemon without pairing support).
    paired: bool | None = None
    bonded: bool | None = None
    trusted: bool | None = None
    #: The adapter it is seen through ("hci0"; None from older daemons).
    adapter: str | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Device:
        return cls(
            address=str(obj.get("address", "")), name=obj.get("name"), rssi=obj.get("rssi"),
            address_type=str(obj.get("addressType", "public")), state=str(obj.get("state", "disconnected")),
            service_uuids=tuple(obj.get("serviceUUIDs") or ()),
            manufacturer_data={int(k): bytes.fromhex(v) for k, v in (obj.get("manufacturerData") or {}).items()},
            service_data={str(k): bytes.fromhex(v) for k, v in (obj.get("serviceData") or {}).items()},
            tx_power=obj.get("txPower"), mtu=obj.get("mtu"),
            paired=obj.get("paired"), bonded=obj.get("bonded"), trusted=obj.get("trusted"), adapter=obj.get("adapter"))
