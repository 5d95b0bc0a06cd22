"""What the app and control roles share: requests, accessory sessions, Bluetooth managers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._connection import DEFAULT_TIMEOUT, Connection
from ._frames import ConnectionClosed, Message, VigilError, socket_path
from ._gatt import normalize_uuid
from ._ledger import Token
from .accessories import Accessory, AccessorySession
from .ble import Central, PeripheralManager
from .l2cap import L2CAPChannel, l2cap_options
from .rfcomm import RFCOMMChannel


class Client:
    """A connection to vigild in one role; see `App` and `Control`."""

    role = "control"

    def __init__(self, socket: str | os.PathLike[str] | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path(socket)
        self.timeout = timeout
        self._connection: Connection | None = None
        self._sessions: dict[int, AccessorySession] = {}
        #: PSMs published through `publish_l2cap_channel`: their incoming channels become `L2CAPChannel`s.
        self._l2cap_psms: set[int] = set()
        #: Services published through `publish_rfcomm_service` (128-bit UUIDs): their incoming channels become `RFCOMMChannel`s.
        self._rfcomm_services: set[str] = set()
        self._central: Central | None = None
        self._peripheral: PeripheralManager | None = None

    @property
    def connection(self) -> Connection:
        """The current connection; ConnectionClosed while there is none."""
        if self._connection is None or self._connection.closed:
            raise ConnectionClosed("not connected to vigild")
        return self._connection

    @property
    def welcome(self) -> Mapping[str, Any]:
        return self.connection.welcome or {}

    async def request(self, type: str, body: bytes = b"", timeout: float | None | bool = True, **members: Any
                      ) -> Message:
        """Any request by name (docs/protocol.md): the reply, or VigilError."""
        return await self.connection.request(type, body, timeout, **members)

    # -- accessories

    async def accessories(self) -> list[Accessory]:
        """Connected accessories (an app sees those speaking a protocol of its manifest)."""
        reply = await self.request("accessories")
        return [Accessory.from_json(a) for a in reply.get("accessories") or ()]

    async def open_session(self, accessory: Accessory | int, protocol: str, *, line_settings: str | None = None,
                           reopen: bool | None = None) -> AccessorySession:
        """Opens a byte stream with `accessory` (or its connection id) for `protocol`.
        `line_settings` overrides the accessory's (e.g. "9600 8N1"); with `reopen`
        the session waits for the accessory when it goes and goes on when it returns."""
        connection_id = accessory.connection_id if isinstance(accessory, Accessory) else int(accessory)
        members: dict[str, Any] = {"connectionID": connection_id, "protocol": protocol}
        if line_settings is not None:
            members["lineSettings"] = line_settings
        if reopen is not None:
            members["reopen"] = bool(reopen)
        opened: list[AccessorySession] = []

        def register(reply: Message) -> None:
            # On the reader, before any frame that follows the reply: the session's first data.
            session_id = int(reply["session"])
            existing = self._sessions.get(session_id)
            session = existing or AccessorySession(self, session_id, protocol, Accessory.from_json(reply["accessory"]))
            session.reopen = bool(reopen)
            self._sessions[session_id] = session
            opened.append(session)

        await self.connection.request("openSession", on_reply=register, **members)
        return opened[0]

    # -- L2CAP channels

    async def open_l2cap_channel(self, peripheral: str, psm: int, *, reopen: bool | None = None,
                                 security: str | None = None, receive_mtu: int | None = None,
                                 coalesce_ms: int | None = None) -> L2CAPChannel:
        """Opens a channel to `psm` on a peripheral this client is connected to
        (`ble.connect`, link up); returns once the peripheral accepted it. With
        `reopen` the channel opens again (same session) when the link comes back.
        `coalesce_ms` (0-1000, default 100): how long an app's channel bytes may
        wait to share a `session.data` event; 0 announces every read at once."""
        members: dict[str, Any] = {"peripheral": peripheral, "psm": int(psm),
                                   **l2cap_options(security, receive_mtu, coalesce_ms)}
        if reopen is not None:
            members["reopen"] = bool(reopen)
        opened: list[L2CAPChannel] = []

        def register(reply: Message) -> None:
            # On the reader, before any frame that follows the reply: the channel's first data.
            channel = L2CAPChannel(self, reply["channel"])
            channel.reopen = bool(reopen)
            self._sessions[channel.id] = channel
            opened.append(channel)

        await self.connection.request("ble.openL2CAPChannel", on_reply=register, timeout=None, **members)
        return opened[0]

    async def publish_l2cap_channel(self, psm: int | None = None, *, security: str | None = None,
                                    receive_mtu: int | None = None, coalesce_ms: int | None = None) -> int:
        """Listens on `psm` (None: a free dynamic one); returns the PSM. Each channel a
        central opens arrives as a `ble.l2cap.incoming` event; `l2cap_channel(event)` is it.
        `coalesce_ms`: as `open_l2cap_channel`'s, for every channel to this PSM."""
        members: dict[str, Any] = l2cap_options(security, receive_mtu, coalesce_ms)
        if psm is not None:
            members["psm"] = int(psm)
        published = int((await self.request("ble.publishL2CAPChannel", **members))["psm"])
        self._l2cap_psms.add(published)
        return published

    async def unpublish_l2cap_channel(self, psm: int) -> None:
        await self.request("ble.unpublishL2CAPChannel", psm=int(psm))
        self._l2cap_psms.discard(int(psm))

    def _adopt_incoming_channel(self, attributes: Mapping[str, Any], kind: type[L2CAPChannel] | type[RFCOMMChannel] = L2CAPChannel
                                ) -> L2CAPChannel | RFCOMMChannel:
        """An incoming channel's event's channel (`ble.l2cap.incoming`,
        `bluetooth.rfcomm.incoming`), registered before its data is routed (for
        PSMs and services published through this client; raw requests get raw events)."""
        session_id = int(attributes["session"])
        existing = self._sessions.get(session_id)
        if isinstance(existing, kind):
            return existing
        channel = kind(self, attributes)
        self._sessions[session_id] = channel
        return channel

    def l2cap_channel(self, event: Any) -> L2CAPChannel | None:
        """The channel a `ble.l2cap.incoming` or `ble.l2cap.reopened` event (or a session id) names."""
        attributes = getattr(event, "attributes", None)
        session_id = attributes.get("session") if isinstance(attributes, Mapping) else event
        channel = self._sessions.get(session_id) if isinstance(session_id, int) else None
        return channel if isinstance(channel, L2CAPChannel) else None

    def _forget_session(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    # -- RFCOMM channels

    async def open_rfcomm_channel(self, device: str, channel: int | None = None, *, uuid: str | None = None,
                                  reopen: bool | None = None, security: str | None = None,
                                  coalesce_ms: int | None = None) -> RFCOMMChannel:
        """Opens an RFCOMM channel to server `channel` (1-30), or to the service
        `uuid`, on a BR/EDR device BlueZ knows; returns once the device accepted.
        With `reopen` the channel connects again (same session) whenever it closes
        by itself, until closed."""
        members: dict[str, Any] = {"device": device}
        if channel is not None:
            members["channel"] = int(channel)
        if uuid is not None:
            members["uuid"] = str(uuid)
        if reopen is not None:
            members["reopen"] = bool(reopen)
        if security is not None:
            members["security"] = security
        if coalesce_ms is not None:
            members["coalesceMilliseconds"] = int(coalesce_ms)
        opened: list[RFCOMMChannel] = []

        def register(reply: Message) -> None:
            # On the reader, before any frame that follows the reply: the channel's first data.
            rfcomm = RFCOMMChannel(self, reply["channel"])
            rfcomm.reopen = bool(reopen)
            self._sessions[rfcomm.id] = rfcomm
            opened.append(rfcomm)

        await self.connection.request("bluetooth.openRFCOMMChannel", on_reply=register, timeout=None, **members)
        return opened[0]

    async def publish_rfcomm_service(self, uuid: str | None = None, *, channel: int | None = None, name: str | None = None,
                                     require_authentication: bool | None = None, coalesce_ms: int | None = None) -> str:
        """Publishes a serial port service (SPP server role; `uuid` default 0x1101):
        bluetoothd adds its SDP record and listens on `channel` (None: one it picks).
        Each device that connects arrives as a `bluetooth.rfcomm.incoming` event;
        `rfcomm_channel(event)` is its channel. Returns the UUID as registered (128-bit).
        An app needs the `bluetooth-peripheral` background mode (it is woken or
        relaunched by the event)."""
        members: dict[str, Any] = {}
        if uuid is not None:
            members["uuid"] = str(uuid)
        if channel is not None:
            members["channel"] = int(channel)
        if name is not None:
            members["name"] = str(name)
        if require_authentication is not None:
            members["requireAuthentication"] = bool(require_authentication)
        if coalesce_ms is not None:
            members["coalesceMilliseconds"] = int(coalesce_ms)
        published = str((await self.request("bluetooth.publishRFCOMMService", **members))["uuid"])
        self._rfcomm_services.add(published)
        return published

    async def unpublish_rfcomm_service(self, uuid: str) -> None:
        await self.request("bluetooth.unpublishRFCOMMService", uuid=str(uuid))
        self._rfcomm_services.discard(normalize_uuid(str(uuid)))

    def rfcomm_channel(self, event: Any) -> RFCOMMChannel | None:
        """The channel a `bluetooth.rfcomm.incoming` or `.reopened` event (or a session id) names."""
        attributes = getattr(event, "attributes", None)
        session_id = attributes.get("session") if isinstance(attributes, Mapping) else event
        channel = self._sessions.get(session_id) if isinstance(session_id, int) else None
        return channel if isinstance(channel, RFCOMMChannel) else None

    # -- Bluetooth

    async def central(self, restore_identifier: str | None = None) -> Central:
        """The central manager (created and registered on first use)."""
        if self._central is None or self._central.restore_identifier != restore_identifier:
            central = Central(self, restore_identifier)
            await central._register()
            self._central = central
        return self._central

    async def peripheral(self, restore_identifier: str | None = None) -> PeripheralManager:
        """The peripheral manager (created and registered on first use)."""
        if self._peripheral is None or self._peripheral.restore_identifier != restore_identifier:
            manager = PeripheralManager(self, restore_identifier)
            await manager._register()
            self._peripheral = manager
        return self._peripheral

    def _bluetooth_target(self, kind: str) -> Central | PeripheralManager | None:
        """The manager a `ble.*` event is for, if this client has it."""
        if kind.startswith("ble.peripheral."):
            return self._peripheral
        if kind == "ble.state":
            return self._central or self._peripheral
        return self._central

    def _route_bluetooth(self, kind: str, attributes: Mapping[str, Any], body: bytes,
                         token: Token | None) -> bool:
        """Hands a `ble.*` event to the manager it is for; False if there is none."""
        target = self._bluetooth_target(kind)
        if target is None:
            return False
        target._feed(kind, attributes, body, token)
        return True

    # -- closing

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()
        self._ended("the client closed the connection")

    def _ended(self, reason: str) -> None:
        for session in list(self._sessions.values()):
            session._lost(reason)
        self._sessions.clear()
        if self._central is not None:
            self._central._close()
        if self._peripheral is not None:
            self._peripheral._close()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _check_app_error(error: VigilError) -> bool:
    """Whether a failed request only means the daemon is out of reach."""
    return error.code == "disconnected"
