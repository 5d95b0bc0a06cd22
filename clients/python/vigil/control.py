"""The control role: what vigilctl does (docs/protocol.md, "Control role")."""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ._client import Client
from ._connection import DEFAULT_TIMEOUT, Connection
from ._frames import CLIENT_NAME, SYSTEM_SOCKET, ConnectionClosed, Message
from ._mailbox import Mailbox
from .accessories import Accessory, AccessoryChange, Closed, Data, Lines
from .records import AppInfo, Decision, DeviceChange
from .rfcomm import INCOMING as RFCOMM_INCOMING
from .rfcomm import RFCOMMChannel

JSON = dict[str, Any]


class Control(Client):
    """Inspect the daemon and drive app lifecycles, as vigilctl does:

        async with vigil.Control() as control:
            for app in await control.app_list():
                print(app.id, app.state)
            await control.launch("org.example.logger")

    Open to the daemon's user and root (and with the system daemon its
    control-group; its monitor-group for read-only requests)."""

    role = "control"

    def __init__(self, socket: str | os.PathLike[str] | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        super().__init__(socket, timeout=timeout)
        self._changes: Mailbox[AccessoryChange] | None = None
        self._decisions: Mailbox[JSON] | None = None
        #: Channels devices opened to services published through `publish_rfcomm_service`.
        self._incoming_rfcomm: Mailbox[RFCOMMChannel] = Mailbox()
        # docs/protocol.md, "Transport": with neither a path nor $VIGIL_SOCKET, a control
        # client falls back to the system daemon when nothing listens at the per-user path.
        self._fallback = None if socket or os.environ.get("VIGIL_SOCKET") or self.socket_path == SYSTEM_SOCKET \
            else SYSTEM_SOCKET

    async def connect(self) -> Control:
        try:
            self._connection = await Connection.open(self.socket_path, role=self.role, client=CLIENT_NAME,
                                                     timeout=self.timeout, on_message=self._on_message)
        except ConnectionClosed:
            if self._fallback is None:
                raise
            self.socket_path, self._fallback = self._fallback, None
            return await self.connect()
        self._connection.on_close = lambda error: self._ended(str(error))
        return self

    async def __aenter__(self) -> Control:
        return await self.connect()

    def _on_message(self, message: Message) -> bool:
        kind = message.type
        if kind in ("sessionData", "sessionClosed"):
            session = self._sessions.get(int(message.get("session") or 0))
            if session is None:
                return False
            if kind == "sessionData":
                session._feed(Data(message.body), None)
            elif session.reopen or message.get("willReopen") is True:
                # A session opened with `reopen` waits for its accessory: the push says
                # closed, but the session goes on when the accessory returns.
                session._feed(Closed(str(message.get("reason", "")), will_reopen=True), None)
            else:
                session._feed(Closed(str(message.get("reason", ""))), None)
                self._sessions.pop(session.id, None)
            return True
        if kind == "sessionLinesChanged":
            session = self._sessions.get(int(message.get("session") or 0))
            if session is not None:
                session._feed(Lines.from_json(message.get("lines") or {}, message.get("changed")), None)
            return session is not None
        if kind == "decision" and self._decisions is not None:
            self._decisions.put(message["decision"])
            return True
        if kind == "accessoryEvent" and self._changes is not None:
            self._changes.put(AccessoryChange(str(message["change"]), Accessory.from_json(message["accessory"])))
            return True
        if kind == "blePush" and message["kind"] == RFCOMM_INCOMING \
                and (message.get("attributes") or {}).get("uuid") in self._rfcomm_services:
            channel = self._adopt_incoming_channel(message["attributes"], RFCOMMChannel)
            assert isinstance(channel, RFCOMMChannel)
            self._incoming_rfcomm.put(channel)
            return True
        if kind == "blePush":
            return self._route_bluetooth(str(message["kind"]), message.get("attributes") or {}, message.body, None)
        return False

    async def next_rfcomm_channel(self, timeout: float | None = None) -> RFCOMMChannel | None:
        """The next channel a device opened to a service this client published
        (`publish_rfcomm_service`); None after `timeout` seconds."""
        return await self._incoming_rfcomm.get(timeout=timeout)

    def _ended(self, reason: str) -> None:
        super()._ended(reason)
        self._incoming_rfcomm.close()
        if self._changes is not None:
            self._changes.close()
        if self._decisions is not None:
            self._decisions.close()

    # -- the daemon and its apps

    async def status(self) -> JSON:
        """The status reply's members (no frame envelope: `type`, `id`)."""
        return _members((await self.request("status")).header)

    async def app_list(self) -> list[AppInfo]:
        """The apps, typed (`raw`: the members as the daemon sent them)."""
        return [AppInfo.from_json(app) for app in await self._raw_apps()]

    async def app_info(self, app_id: str) -> AppInfo:
        """One app, typed (KeyError if the daemon has none of that id)."""
        for app in await self._raw_apps():
            if app["id"] == app_id:
                return AppInfo.from_json(app)
        raise KeyError(app_id)

    async def _raw_apps(self) -> list[JSON]:
        return list((await self.request("apps"))["apps"])

    async def apps(self) -> list[JSON]:
        """Deprecated: `app_list()` (typed; the members as sent are its items' `raw`)."""
        _deprecated("Control.apps()", "Control.app_list()")
        return await self._raw_apps()

    async def app(self, app_id: str) -> JSON:
        """Deprecated: `app_info(app_id)` (typed; `.raw` has the members as sent)."""
        _deprecated("Control.app(id)", "Control.app_info(id)")
        return dict((await self.app_info(app_id)).raw)

    async def app_action(self, action: str, app: str) -> AppInfo:
        """`launch`, `background`, `foreground`, `quit` (a user force-quit) or
        `terminate` (by the system); the app after the action."""
        return AppInfo.from_json((await self.request("appAction", action=action, app=app))["app"])

    async def launch(self, app: str) -> AppInfo:
        return await self.app_action("launch", app)

    async def background(self, app: str) -> AppInfo:
        return await self.app_action("background", app)

    async def foreground(self, app: str) -> AppInfo:
        return await self.app_action("foreground", app)

    async def quit(self, app: str) -> AppInfo:
        return await self.app_action("quit", app)

    async def terminate(self, app: str) -> AppInfo:
        return await self.app_action("terminate", app)

    async def wake(self, app: str, kind: str = "test", attributes: Mapping[str, Any] | None = None,
                   payload: bytes = b"") -> JSON:
        """Delivers an event as real sources do; the reply (`seq`, `disposition`)."""
        return _members((await self.request("wake", body=payload, app=app, kind=kind,
                                            attributes=dict(attributes or {}))).header)

    async def _raw_log(self, app: str | None, limit: int | None, since: float | None) -> list[JSON]:
        return list((await self.request("log", **self._log_members(app, limit, since)))["decisions"])

    async def _raw_devices(self, since: float | None) -> list[JSON]:
        return list((await self.request("log", **self._log_members(None, 0, since))).get("devices") or [])

    async def log(self, app: str | None = None, limit: int | None = None, since: float | None = None) -> list[JSON]:
        """Deprecated: `decisions()` (typed)."""
        _deprecated("Control.log()", "Control.decisions()")
        return await self._raw_log(app, limit, since)

    async def devices(self, since: float | None = None) -> list[JSON]:
        """Deprecated: `device_changes()` (typed)."""
        _deprecated("Control.devices()", "Control.device_changes()")
        return await self._raw_devices(since)

    async def decisions(self, app: str | None = None, limit: int | None = None,
                        since: float | None = None) -> list[Decision]:
        """The decision log, oldest first (`time`, `app`, `action`, `reason`, `state`);
        `since` in seconds since the epoch. It lasts across daemon restarts."""
        return [Decision.from_json(d) for d in await self._raw_log(app, limit, since)]

    async def device_changes(self, since: float | None = None) -> list[DeviceChange]:
        """Devices that came and went, oldest first (`time`, `kind`, `device`, `change`, `detail`)."""
        return [DeviceChange.from_json(d) for d in await self._raw_devices(since)]

    async def follow_log(self, app: str | None = None, limit: int | None = None,
                         since: float | None = None) -> AsyncIterator[Decision]:
        """The decision log so far, then each new decision as it is made, until the
        connection ends: `async for decision in control.follow_log(): ...`"""
        self._decisions = decisions = Mailbox[JSON]()
        reply = await self.request("log", follow=True, **self._log_members(app, limit, since))
        for decision in reply["decisions"]:
            yield Decision.from_json(decision)
        while True:
            try:
                pushed = await decisions.get()
            except Exception:  # noqa: BLE001 - the connection ended
                return
            if pushed is not None:
                yield Decision.from_json(pushed)

    @staticmethod
    def _log_members(app: str | None, limit: int | None, since: float | None) -> JSON:
        members: JSON = {}
        if app is not None:
            members["app"] = app
        if limit is not None:
            members["limit"] = limit
        if since is not None:
            members["since"] = since
        return members

    async def reload(self) -> JSON:
        """Reads the manifests again: `apps` (ids) and `problems`."""
        return _members((await self.request("reload")).header)

    # -- accessories

    async def accessory_status(self) -> JSON:
        """The whole `accessories` reply: `accessories`, `sessions` (traffic and loss counters), `problems`."""
        return _members((await self.request("accessories")).header)

    async def watch_accessories(self) -> AsyncIterator[AccessoryChange]:
        """The accessories now (as `connected` changes), then every change as it comes."""
        self._changes = Mailbox()
        reply = await self.request("watchAccessories")
        for accessory in reply.get("accessories") or ():
            self._changes.put(AccessoryChange("connected", Accessory.from_json(accessory)))
        return self._watch(self._changes)

    async def _watch(self, changes: Mailbox[AccessoryChange]) -> AsyncIterator[AccessoryChange]:
        while True:
            try:
                change = await changes.get()
            except Exception:  # noqa: BLE001 - the connection ended
                return
            if change is not None:
                yield change


def _deprecated(old: str, new: str) -> None:
    """The dict-returning calls of before the typed results: one way to do each thing."""
    warnings.warn(f"vigil: {old} is deprecated and will be removed: use {new}", DeprecationWarning, stacklevel=3)


def _members(header: JSON) -> JSON:
    """A reply's members without the frame's envelope (`type`, `id`)."""
    return {key: value for key, value in header.items() if key not in ("type", "id")}
