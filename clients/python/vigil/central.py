"""Bluetooth LE central through vigild: scan, connect, GATT, notifications.

The same objects work for an app (events come queued, and are acknowledged)
and for a control client (events come as `blePush` frames). Names follow
Bleak where the concepts match (BleakScanner, BleakClient).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from ._frames import VigilError
from ._gatt import Characteristic, CharacteristicSpecifier, Device, Services, normalize_uuid
from ._ledger import Token
from ._mailbox import Mailbox
from ._payloads import NotificationValue, notification_values
from .monitor import AdvertisementMonitor, Dropped, Found, Lost, advertisement_records

if TYPE_CHECKING:
    from ._client import Client

NotifyCallback = Callable[[Characteristic, bytearray], Union[None, Awaitable[None]]]


@dataclasses.dataclass
class _Subscription:
    characteristic: Characteristic
    callback: NotifyCallback | None
    values: Mailbox[NotificationValue]


async def _call(callback: Callable[..., Any], *arguments: Any) -> None:
    result = callback(*arguments)
    if inspect.isawaitable(result):
        await result


class Central:
    """The central role: one per client. Create it with `await app.central()`
    (or `await control.central()`). With a `restore_identifier` an app's
    links, subscriptions and scan outlive its process (docs/protocol.md);
    `restored` then says what the daemon kept."""

    def __init__(self, client: Client, restore_identifier: str | None) -> None:
        self._client = client
        self.restore_identifier = restore_identifier
        self.state = "unknown"
        self.restored: Mapping[str, Any] | None = None
        self._events: Mailbox[tuple[str, Mapping[str, Any], bytes, Token | None]] = Mailbox()
        self._scanners: list[Scanner] = []
        self._clients: dict[str, BLEClient] = {}
        self._monitors: dict[str, AdvertisementMonitor] = {}
        self._state_changed = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self.state_callback: Callable[[str], Any] | None = None
        #: `(adapter, state)` when an adapter chosen by name or address (not
        #: the default, which `state` follows) is powered off or on, vanishes
        #: (`unsupported`) or comes back (`ble.adapterState`).
        self.adapter_state_callback: Callable[[str, str], Any] | None = None
        self.adapter_states: dict[str, str] = {}
        #: Called with each pairing prompt (`ble.pairingRequest`'s attributes:
        #: request, peripheral, kind, passkey, timeout, ...); answer it with
        #: `respond_pairing` before `timeout` seconds pass.
        self.pairing_callback: Callable[[Mapping[str, Any]], Any] | None = None
        #: Called with `ble.pairingEnded`'s attributes (peripheral, paired,
        #: bonded, trusted, error if it failed): a pairing this app asked for
        #: whose `pair` the daemon's restart cut, done by the restarted daemon.
        self.pairing_ended_callback: Callable[[Mapping[str, Any]], Any] | None = None

    async def _register(self) -> None:
        members: dict[str, Any] = {}
        if self.restore_identifier is not None:
            members["restoreIdentifier"] = self.restore_identifier
        reply = await self._client.request("ble.registerCentral", **members)
        self.state = str(reply.get("state", "unknown"))
        self.restored = reply.get("restored")
        self._start()

    def _start(self) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run())

    def _feed(self, kind: str, attributes: Mapping[str, Any], body: bytes, token: Token | None) -> None:
        self._events.put((kind, attributes, body, token))

    def _close(self) -> None:
        self._events.close()
        for scanner in self._scanners:
            scanner._found.close()
        for monitor in self._monitors.values():
            monitor._items.close()
        for client in self._clients.values():
            client._lost("the connection to vigild was lost")

    async def _run(self) -> None:
        while True:
            try:
                entry = await self._events.get()
            except VigilError:
                return
            if entry is None:
                continue
            kind, attributes, body, token = entry
            try:
                await self._handle(kind, attributes, body)
            except Exception as error:  # noqa: BLE001 - a callback's failure must not stop the pump
                asyncio.get_running_loop().call_exception_handler(
                    {"message": f"vigil: handling {kind} failed", "exception": error})
            finally:
                if token is not None:
                    token.finish()

    async def _handle(self, kind: str, attributes: Mapping[str, Any], body: bytes) -> None:
        if kind == "ble.state":
            self.state = str(attributes.get("state", "unknown"))
            self._state_changed.set()
            if self.state_callback is not None:
                await _call(self.state_callback, self.state)
        elif kind == "ble.adapterState":
            adapter, state = str(attributes.get("adapter", "")), str(attributes.get("state", "unknown"))
            self.adapter_states[adapter] = state
            if self.adapter_state_callback is not None:
                await _call(self.adapter_state_callback, adapter, state)
        elif kind == "ble.discovered":
            device = Device.from_json(attributes)
            for scanner in list(self._scanners):
                await scanner._seen(device)
        elif kind in ("ble.connected", "ble.disconnected"):
            client = self._clients.get(str(attributes.get("peripheral", "")).upper())
            if client is not None:
                if attributes.get("adapter") is not None:
                    client.adapter = str(attributes["adapter"])
                if kind == "ble.connected":
                    client._connected()
                else:
                    await client._disconnected(str(attributes.get("reason", "")),
                                               bool(attributes.get("willReconnect", False)))
        elif kind == "ble.pairingRequest":
            if self.pairing_callback is not None:
                await _call(self.pairing_callback, attributes)
        elif kind == "ble.pairingEnded":
            if self.pairing_ended_callback is not None:
                await _call(self.pairing_ended_callback, attributes)
        elif kind.startswith("ble.monitor."):
            monitor = self._monitors.get(str(attributes.get("monitor", "")))
            if monitor is None:
                return
            if kind == "ble.monitor.found":
                rssi, name = attributes.get("rssi"), attributes.get("name")
                monitor._put(Found(str(attributes.get("peripheral", "")), None if rssi is None else int(rssi),
                                   None if name is None else str(name)))
            elif kind == "ble.monitor.lost":
                monitor._put(Lost(str(attributes.get("peripheral", ""))))
            elif kind == "ble.monitor.advertisements":
                if attributes.get("lost"):
                    monitor._put(Dropped(int(attributes["lost"])))
                for record in advertisement_records(attributes, body):
                    monitor._put(record)
        elif kind == "ble.notification":
            for value in notification_values(attributes, body):
                client = self._clients.get(value.peripheral.upper())
                if client is not None:
                    await client._notified(value)

    async def get_state(self) -> str:
        """The adapter's state as the daemon sees it now (`poweredOn`, ...)."""
        reply = await self._client.request("ble.state")
        self.state = str(reply.get("state", "unknown"))
        return self.state

    async def wait_powered_on(self, timeout: float | None = None) -> None:
        async def wait() -> None:
            while await self.get_state() != "poweredOn":
                self._state_changed.clear()
                try:
                    await asyncio.wait_for(self._state_changed.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass
        await asyncio.wait_for(wait(), timeout)

    async def pair(self, address: str) -> Mapping[str, Any]:
        """Pairs (bonds) with a peripheral BlueZ knows; prompts go to
        `pairing_callback`. Returns {peripheral, paired, bonded, trusted}.
        Waits as long as the daemon's pairing deadline can take (135 s), not
        the connection's request timeout."""
        reply = await self._client.request("ble.pair", peripheral=address)
        return {k: v for k, v in reply.header.items() if k not in ("type", "id")}

    async def cancel_pairing(self, address: str) -> None:
        await self._client.request("ble.cancelPairing", peripheral=address)

    async def forget(self, address: str) -> None:
        """Removes the peripheral's bond and BlueZ's record of it."""
        await self._client.request("ble.forget", peripheral=address)

    async def set_trusted(self, address: str, trusted: bool = True) -> Mapping[str, Any]:
        reply = await self._client.request("ble.setTrusted", peripheral=address, trusted=trusted)
        return {k: v for k, v in reply.header.items() if k not in ("type", "id")}

    async def respond_pairing(self, request: int, accept: bool, passkey: int | None = None,
                              pin: str | None = None) -> None:
        """Answers a pairing prompt (`pairing_callback`)."""
        members: dict[str, Any] = {"request": request, "accept": accept}
        if passkey is not None:
            members["passkey"] = passkey
        if pin is not None:
            members["pin"] = pin
        await self._client.request("ble.pairingResponse", **members)

    async def peripherals(self) -> list[Device]:
        """Peripherals the daemon knows: seen, connected or pending."""
        reply = await self._client.request("ble.peripherals")
        return [Device.from_json(p) for p in reply.get("peripherals") or ()]

    def scanner(self, services: Iterable[str] | None = None, allow_duplicates: bool = False,
                detection_callback: Callable[[Device], Any] | None = None, adapter: str | None = None) -> Scanner:
        """A scanner (Bleak: BleakScanner): `async with central.scanner() as s: async for d in s.advertisements()`.
        `adapter`: "hci1" or an adapter's address (Bleak's `adapter=`); None: the daemon's default."""
        return Scanner(self, services, allow_duplicates, detection_callback, adapter)

    async def discover(self, timeout: float = 5.0, services: Iterable[str] | None = None) -> list[Device]:
        """Scans for `timeout` seconds; every device seen (Bleak: BleakScanner.discover)."""
        async with self.scanner(services) as scanner:
            await asyncio.sleep(timeout)
            return list(scanner.discovered_devices.values())

    async def find_device_by_address(self, address: str, timeout: float = 10.0,
                                     services: Iterable[str] | None = None) -> Device | None:
        wanted = address.upper()
        async with self.scanner(services) as scanner:
            try:
                async with asyncio.timeout(timeout):
                    async for device in scanner.advertisements():
                        if device.address.upper() == wanted:
                            return device
            except TimeoutError:
                return None
        return None

    def monitor(self, name: str, patterns: Iterable[Mapping[str, Any]], *, rssi_found: int | None = None,
                rssi_lost: int | None = None, lost_timeout: float | None = None,
                advertisements: bool = True) -> AdvertisementMonitor:
        """An advertisement monitor (`vigil.monitor.pattern` makes patterns):
        `async with central.monitor("ruuvi", [pattern("manufacturer", company=0x0499)]) as m:`.
        Allowed in the background; an app is woken for its events."""
        return AdvertisementMonitor(self, name, patterns, rssi_found=rssi_found, rssi_lost=rssi_lost,
                                    lost_timeout=lost_timeout, advertisements=advertisements)

    async def monitors(self) -> list[Mapping[str, Any]]:
        """This client's monitors as the daemon runs them (found devices, delivered and lost counts)."""
        reply = await self._client.request("ble.monitors")
        return list(reply.get("monitors") or ())

    def client(self, address: str | Device, disconnected_callback: Callable[[BLEClient], Any] | None = None,
               adapter: str | None = None) -> BLEClient:
        """A client for one peripheral (Bleak: BleakClient); `connect()` or `async with` it.
        `adapter`: the adapter to connect through ("hci1" or its address); None: the daemon's default."""
        key = (address.address if isinstance(address, Device) else address).upper()
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = BLEClient(self, key, disconnected_callback)
        elif disconnected_callback is not None:
            client.disconnected_callback = disconnected_callback
        if adapter is not None:
            client.adapter = adapter
        return client

    def connect(self, address: str | Device, timeout: float | None = None, adapter: str | None = None) -> BLEClient:
        """`async with central.connect(address) as client:` connects on entry, disconnects on exit."""
        client = self.client(address, adapter=adapter)
        client._enter_timeout = timeout
        return client


class Scanner:
    """A scan through the daemon (Bleak: BleakScanner). One scan per client:
    starting another replaces it."""

    def __init__(self, central: Central, services: Iterable[str] | None, allow_duplicates: bool,
                 detection_callback: Callable[[Device], Any] | None, adapter: str | None = None) -> None:
        self._central = central
        self.adapter = adapter
        self.services = None if services is None else [normalize_uuid(s) for s in services]
        self.allow_duplicates = allow_duplicates
        self.detection_callback = detection_callback
        self.discovered_devices: dict[str, Device] = {}
        self._found: Mailbox[Device] = Mailbox()

    async def start(self) -> None:
        members: dict[str, Any] = {"allowDuplicates": self.allow_duplicates}
        if self.services is not None:
            members["services"] = self.services
        if self.adapter is not None:
            members["adapter"] = self.adapter
        self._central._scanners.append(self)
        self._central._start()
        await self._central._client.request("ble.scan", **members)

    async def stop(self) -> None:
        if self in self._central._scanners:
            self._central._scanners.remove(self)
            try:
                await self._central._client.request("ble.stopScan")
            except VigilError:
                pass
        self._found.close()

    async def _seen(self, device: Device) -> None:
        self.discovered_devices[device.address.upper()] = device
        self._found.put(device)
        if self.detection_callback is not None:
            await _call(self.detection_callback, device)

    async def advertisements(self) -> AsyncIterator[Device]:
        while True:
            try:
                device = await self._found.get()
            except VigilError:
                return
            if device is not None:
                yield device

    async def __aenter__(self) -> Scanner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class BLEClient:
    """One peripheral, through the daemon (Bleak: BleakClient). The daemon
    keeps the link: while the client wants it, it reconnects after every loss
    and renews subscriptions; `disconnected_callback` hears of each loss."""

    def __init__(self, central: Central, address: str,
                 disconnected_callback: Callable[[BLEClient], Any] | None) -> None:
        self._central = central
        self.address = address
        self.disconnected_callback = disconnected_callback
        self.services: Services | None = None
        self.disconnect_reason: str | None = None
        #: After a loss: whether the daemon keeps trying (the connect request stays pending).
        self.will_reconnect = False
        #: How many times the link came up for this client (`ble.connected` events).
        self.connections = 0
        self._is_connected = False
        self._connected_event = asyncio.Event()
        self._subscriptions: dict[tuple[str, str, int], _Subscription] = {}
        #: The adapter to connect through (None: the daemon's default); the
        #: adapter of the link, as `ble.connected` said, once connected.
        self.adapter: str | None = None
        self._values: Mailbox[NotificationValue] = Mailbox()
        self._enter_timeout: float | None = None

    @property
    def is_connected(self) -> bool:
        return self._is_connected

    def _connected(self) -> None:
        self.connections += 1
        self._is_connected = True
        self.disconnect_reason = None
        self._connected_event.set()

    async def _disconnected(self, reason: str, will_reconnect: bool) -> None:
        self._is_connected = False
        self._connected_event.clear()
        self.disconnect_reason = reason
        self.will_reconnect = will_reconnect
        if self.disconnected_callback is not None:
            await _call(self.disconnected_callback, self)

    def _lost(self, reason: str) -> None:
        self._is_connected = False
        self.disconnect_reason = reason
        for subscription in self._subscriptions.values():
            subscription.values.close()
        self._values.close()

    async def _notified(self, value: NotificationValue) -> None:
        subscription = self._subscriptions.get((value.service, value.characteristic, value.instance))
        if subscription is None:
            return
        self._values.put(value)
        subscription.values.put(value)
        if subscription.callback is not None:
            await _call(subscription.callback, subscription.characteristic, bytearray(value.value))

    async def connect(self, timeout: float | None = None) -> BLEClient:
        """Asks the daemon for the link and waits until it is up (it never
        gives up by itself: `timeout` seconds raise TimeoutError and cancel the request)."""
        self._central._start()
        members: dict[str, Any] = {} if self.adapter is None else {"adapter": self.adapter}
        await self._central._client.request("ble.connect", peripheral=self.address, **members)
        try:
            await asyncio.wait_for(self._connected_event.wait(), timeout)
        except asyncio.TimeoutError:
            await self.disconnect()
            raise
        return self

    async def wait_until_connected(self, timeout: float | None = None) -> None:
        """Until the link is up (again: the daemon reconnects by itself while the client wants it)."""
        await asyncio.wait_for(self._connected_event.wait(), timeout)

    async def disconnect(self) -> None:
        """Ends this client's use of the link (it goes down when no client uses it)."""
        self._is_connected = False
        self._connected_event.clear()
        try:
            await self._central._client.request("ble.disconnect", peripheral=self.address)
        except VigilError as error:
            if error.code not in ("notConnected", "notFound", "disconnected"):
                raise

    async def __aenter__(self) -> BLEClient:
        return await self.connect(self._enter_timeout)

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()

    async def get_services(self) -> Services:
        """The GATT tree (waits, up to 30 s in the daemon, for BlueZ to resolve it)."""
        reply = await self._central._client.request("ble.discover", peripheral=self.address, timeout=40.0)
        self.services = Services.from_json(reply.get("services") or ())
        return self.services

    async def _resolve(self, specifier: CharacteristicSpecifier) -> Characteristic:
        if isinstance(specifier, Characteristic):
            return specifier
        if isinstance(specifier, tuple):
            service, uuid = normalize_uuid(specifier[0]), normalize_uuid(specifier[1])
            instance = int(specifier[2]) if len(specifier) > 2 else 0
            found = None if self.services is None else self.services.get_service(service)
            known = None if found is None else found.get_characteristic(uuid, instance)
            return known or Characteristic(uuid, service, (), instance=instance)
        services = self.services or await self.get_services()
        characteristic = services.get_characteristic(specifier)
        if characteristic is None:
            raise VigilError("notFound", f"{self.address} has no characteristic {specifier}")
        return characteristic

    @staticmethod
    def _path(char: Characteristic) -> dict[str, Any]:
        members: dict[str, Any] = {"service": char.service_uuid, "characteristic": char.uuid}
        if char.instance:
            members["instance"] = char.instance
        return members

    async def read_gatt_char(self, specifier: CharacteristicSpecifier) -> bytearray:
        char = await self._resolve(specifier)
        reply = await self._central._client.request("ble.read", peripheral=self.address, **self._path(char))
        return bytearray(reply.body)

    async def read_gatt_descriptor(self, specifier: CharacteristicSpecifier, descriptor: str) -> bytearray:
        char = await self._resolve(specifier)
        reply = await self._central._client.request(
            "ble.read", peripheral=self.address, descriptor=normalize_uuid(descriptor), **self._path(char))
        return bytearray(reply.body)

    async def write_gatt_char(self, specifier: CharacteristicSpecifier, data: bytes | bytearray,
                              response: bool = True) -> None:
        char = await self._resolve(specifier)
        await self._central._client.request(
            "ble.write", body=bytes(data), peripheral=self.address, withResponse=response, **self._path(char))

    async def write_gatt_descriptor(self, specifier: CharacteristicSpecifier, descriptor: str,
                                    data: bytes | bytearray) -> None:
        """Writes a descriptor of the characteristic (with response). The CCCD
        (2902) is BlueZ's: use start_notify."""
        char = await self._resolve(specifier)
        await self._central._client.request(
            "ble.write", body=bytes(data), peripheral=self.address, descriptor=normalize_uuid(descriptor),
            withResponse=True, **self._path(char))

    async def start_notify(self, specifier: CharacteristicSpecifier, callback: NotifyCallback | None = None,
                           *, acquire: bool | None = None) -> Characteristic:
        """Subscribes; `callback(characteristic, data)` (plain or async) gets every
        value, and `notifications()` yields them too. The daemon keeps the
        subscription across reconnects. `acquire`: docs/protocol.md, `ble.notify`."""
        char = await self._resolve(specifier)
        key = (char.service_uuid, char.uuid, char.instance)
        self._subscriptions[key] = _Subscription(char, callback, Mailbox())
        members: dict[str, Any] = self._path(char)
        if acquire is not None:
            members["acquire"] = acquire
        await self._central._client.request("ble.notify", peripheral=self.address, enabled=True, **members)
        return char

    async def stop_notify(self, specifier: CharacteristicSpecifier) -> None:
        char = await self._resolve(specifier)
        subscription = self._subscriptions.pop((char.service_uuid, char.uuid, char.instance), None)
        if subscription is not None:
            subscription.values.close()
        await self._central._client.request("ble.notify", peripheral=self.address, enabled=False, **self._path(char))

    async def notifications(self, specifier: CharacteristicSpecifier | None = None) -> AsyncIterator[NotificationValue]:
        """Values of subscribed characteristics (of one, if named), in order, as they come."""
        if specifier is None:
            mailbox = self._values
        else:
            char = await self._resolve(specifier)
            subscription = self._subscriptions.get((char.service_uuid, char.uuid, char.instance))
            if subscription is None:
                raise VigilError("invalidState", f"not subscribed to {char.uuid}: call start_notify first")
            mailbox = subscription.values
        while True:
            try:
                value = await mailbox.get()
            except VigilError:
                return
            if value is not None:
                yield value
