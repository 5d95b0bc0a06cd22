"""What the app and control roles share: requests, accessory sessions, Bluetooth managers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._connection import DEFAULT_TIMEOUT, Connection
from ._frames import ConnectionClosed, Message, VigilError, socket_path
from ._ledger import Token
from .accessories import Accessory, AccessorySession
from .ble import Central, PeripheralManager


class Client:
    """A connection to vigild in one role; see `App` and `Control`."""

    role = "control"

    def __init__(self, socket: str | os.PathLike[str] | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path(socket)
        self.timeout = timeout
        self._connection: Connection | None = None
        self._sessions: dict[int, AccessorySession] = {}
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

    def _forget_session(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

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
