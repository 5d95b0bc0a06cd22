"""Bluetooth LE peripheral through vigild: publish services, advertise, answer requests, update values."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._frames import VigilError
from ._gatt import normalize_uuid
from ._ledger import Token
from ._mailbox import Mailbox

if TYPE_CHECKING:
    from ._client import Client

@dataclasses.dataclass(frozen=True)
class PeripheralRequest:
    """Something a central did to the app's services (docs/protocol.md,
    "Bluetooth LE: peripheral"): `kind` is `read`, `write`, `subscribed`,
    `unsubscribed` or `readyToUpdate`. Reads and writes with response must be
    answered with `respond` (or `fail`) within the daemon's request timeout."""

    kind: str
    service: str | None
    characteristic: str | None
    request: int | None
    offset: int
    central: str | None
    value: bytes
    _manager: PeripheralManager = dataclasses.field(repr=False, compare=False)

    @property
    def needs_response(self) -> bool:
        return self.request is not None

    async def respond(self, value: bytes = b"") -> None:
        if self.request is None:
            raise VigilError("invalidState", f"a {self.kind} without response needs no answer")
        await self._manager.respond(self.request, value)

    async def fail(self, error: str = "unlikelyError") -> None:
        if self.request is None:
            raise VigilError("invalidState", f"a {self.kind} without response needs no answer")
        await self._manager.respond(self.request, error=error)


@dataclasses.dataclass(frozen=True)
class UpdateResult:
    #: False: the daemon's queue to bluetoothd is full: wait for `readyToUpdate`, then send again.
    sent: bool
    #: False: no central listens (nothing was sent).
    subscribed: bool


def characteristic_definition(uuid: str, properties: Iterable[str], value: bytes | None = None,
                              descriptors: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """A characteristic for `add_service` (`value`: a fixed value, answered by the daemon)."""
    definition: dict[str, Any] = {"uuid": uuid, "properties": list(properties)}
    if value is not None:
        definition["value"] = bytes(value).hex()
    if descriptors:
        definition["descriptors"] = [{"uuid": u, "value": bytes(v).hex()} for u, v in descriptors.items()]
    return definition


def service_definition(uuid: str, characteristics: Iterable[Mapping[str, Any]], primary: bool = True
                       ) -> dict[str, Any]:
    """A service for `add_service`: `characteristic_definition`s under one UUID."""
    return {"uuid": uuid, "primary": primary, "characteristics": [dict(c) for c in characteristics]}


class PeripheralManager:
    """The peripheral role: publish services, advertise, answer requests,
    update values. Create it with `await app.peripheral()`."""

    KINDS = {"ble.peripheral.read": "read", "ble.peripheral.write": "write",
             "ble.peripheral.subscribed": "subscribed", "ble.peripheral.unsubscribed": "unsubscribed",
             "ble.peripheral.readyToUpdate": "readyToUpdate"}

    def __init__(self, client: Client, restore_identifier: str | None) -> None:
        self._client = client
        self.restore_identifier = restore_identifier
        self.state = "unknown"
        self.restored: Mapping[str, Any] | None = None
        self.services: dict[str, dict[str, Any]] = {}
        self.advertisement: dict[str, Any] | None = None
        self._requests: Mailbox[tuple[PeripheralRequest, Token | None]] = Mailbox()
        self._current: Token | None = None

    async def _register(self) -> None:
        members: dict[str, Any] = {}
        if self.restore_identifier is not None:
            members["restoreIdentifier"] = self.restore_identifier
        reply = await self._client.request("ble.registerPeripheral", **members)
        self.state = str(reply.get("state", "unknown"))
        self.restored = reply.get("restored")

    def _feed(self, kind: str, attributes: Mapping[str, Any], body: bytes, token: Token | None) -> None:
        if kind == "ble.state":
            self.state = str(attributes.get("state", "unknown"))
            if token is not None:
                token.finish()
            return
        request = attributes.get("request")
        self._requests.put((PeripheralRequest(
            kind=self.KINDS.get(kind, kind), service=attributes.get("service"),
            characteristic=attributes.get("characteristic"),
            request=int(request) if request is not None else None, offset=int(attributes.get("offset") or 0),
            central=attributes.get("central"), value=body, _manager=self), token))

    def _close(self) -> None:
        self._requests.close()

    async def add_service(self, service: Mapping[str, Any], adapter: str | None = None) -> None:
        """Publishes a service (`service_definition`); returns once BlueZ registered it.
        `adapter`: "hci1" or an adapter's address; None: the daemon's default."""
        members: dict[str, Any] = {} if adapter is None else {"adapter": adapter}
        await self._client.request("ble.addService", service=dict(service), timeout=30.0, **members)
        self.services[normalize_uuid(str(service["uuid"]))] = dict(service)

    async def remove_service(self, uuid: str | None = None) -> None:
        members: dict[str, Any] = {} if uuid is None else {"uuid": uuid}
        await self._client.request("ble.removeService", **members)
        if uuid is None:
            self.services.clear()
        else:
            self.services.pop(normalize_uuid(uuid), None)

    async def start_advertising(self, local_name: str | None = None, service_uuids: Iterable[str] = (),
                                manufacturer_data: Mapping[int, bytes] | None = None,
                                service_data: Mapping[str, bytes] | None = None,
                                appearance: int | None = None, adapter: str | None = None) -> None:
        advertisement: dict[str, Any] = {}
        if local_name is not None:
            advertisement["localName"] = local_name
        if service_uuids:
            advertisement["serviceUUIDs"] = list(service_uuids)
        if manufacturer_data:
            advertisement["manufacturerData"] = {str(k): bytes(v).hex() for k, v in manufacturer_data.items()}
        if service_data:
            advertisement["serviceData"] = {k: bytes(v).hex() for k, v in service_data.items()}
        if appearance is not None:
            advertisement["appearance"] = appearance
        members: dict[str, Any] = {} if adapter is None else {"adapter": adapter}
        await self._client.request("ble.startAdvertising", advertisement=advertisement, timeout=30.0, **members)
        self.advertisement = advertisement

    async def stop_advertising(self) -> None:
        await self._client.request("ble.stopAdvertising")
        self.advertisement = None

    async def respond(self, request: int, value: bytes = b"", error: str | None = None) -> None:
        members: dict[str, Any] = {"request": request}
        if error is not None:
            members["error"] = error
        await self._client.request("ble.respond", body=bytes(value), **members)

    async def update_value(self, service: str, characteristic: str, value: bytes) -> UpdateResult:
        reply = await self._client.request("ble.updateValue", body=bytes(value), service=service,
                                           characteristic=characteristic)
        return UpdateResult(bool(reply.get("sent")), bool(reply.get("subscribed")))

    def acknowledge(self) -> None:
        """Done with the request read last: acknowledge it now rather than at the next one."""
        if self._current is not None:
            self._current.finish()
            self._current = None

    async def next_request(self, timeout: float | None = None) -> PeripheralRequest | None:
        """The next request; the one before is acknowledged now (answer it first)."""
        self.acknowledge()
        try:
            entry = await self._requests.get(timeout=timeout)
        except VigilError:
            return None
        if entry is None:
            return None
        request, self._current = entry
        return request

    async def requests(self) -> AsyncIterator[PeripheralRequest]:
        while (request := await self.next_request()) is not None:
            yield request
