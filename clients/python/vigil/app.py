"""The app role: lifecycle, queued events, background time (docs/protocol.md, "App role")."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Union

from ._client import Client
from ._connection import DEFAULT_TIMEOUT, Connection
from ._frames import CLIENT_NAME, ConnectionClosed, Message, VigilError, monotonic_ns
from ._ledger import Ledger
from ._mailbox import Mailbox
from ._payloads import NotificationValue, SessionLogs, notification_values
from .accessories import Accessory, session_item
from .l2cap import INCOMING as L2CAP_INCOMING
from .rfcomm import INCOMING as RFCOMM_INCOMING
from .rfcomm import RFCOMMChannel


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """Why this process was started: `reason` is `user`, `event`, `redelivery`
    or `adopted`; `event_kind` the kind of the event that launched it;
    `restore_identifiers` the Bluetooth managers whose events relaunched it."""

    reason: str = "user"
    event_kind: str | None = None
    restore_identifiers: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | None) -> LaunchOptions:
        obj = obj or {}
        return cls(str(obj.get("reason", "user")), obj.get("eventKind"), tuple(obj.get("restoreIdentifiers") or ()))


@dataclasses.dataclass
class Event:
    """An event from the app's queue. Acknowledge it once handled (`App.acknowledge`).

    `payload`: the body, or for `session.data` the bytes copied from the
    session log. `values`: for `ble.notification`, the values it carries."""

    seq: int
    kind: str
    attributes: dict[str, Any]
    payload: bytes
    redelivered: bool
    values: list[NotificationValue] = dataclasses.field(default_factory=list)

    @property
    def accessory(self) -> Accessory | None:
        """For `accessory.connected`/`disconnected`: the accessory."""
        if self.kind in ("accessory.connected", "accessory.disconnected", "session.reopened"):
            return Accessory.from_json(self.attributes)
        return None


@dataclasses.dataclass(frozen=True)
class Lifecycle:
    """A state transition (`didEnterBackground`, `willTerminate`, ...) and the state after it."""

    event: str
    state: str


@dataclasses.dataclass(frozen=True)
class ConnectionRestored:
    """The connection dropped while the app ran on (a daemon restart) and is back.
    Background tasks begun before are gone; unacknowledged events come again, redelivered."""

    generation: int


AppItem = Union[Event, Lifecycle, ConnectionRestored]

#: A background task; 0 is invalid (no time could be granted, or no daemon).
#: After a reconnection the bits above 32 count the connection (a new daemon
#: numbers tasks from 1 again), as VigilKit's BackgroundTaskIdentifier.
BackgroundTask = int
INVALID_TASK: BackgroundTask = 0

FINAL_CODES = frozenset({"unauthorized", "unsupportedVersion"})


# A welcome feature: `finishedProcessing` carries `ack` (docs/protocol.md, "Handshake").
FINISH_ACKNOWLEDGES = "finishedProcessing.ack"


class App(Client):
    """An app's link to vigild, asyncio-first:

        async with vigil.App() as app:
            async for item in app:
                if isinstance(item, vigil.Event):
                    handle(item)
                    await app.finished_processing(acknowledging=item)

    Only a process that vigild launched is accepted (`unauthorized` otherwise).

    Daemon restarts (as VigilKit's Application): when the connection drops
    while the process runs on, the app connects again after 50 ms, doubling
    up to 2 s between attempts, until greeted or refused (`unauthorized`,
    `unsupportedVersion`: then the events end). Requests meanwhile fail with
    `disconnected` (`begin_background_task` returns 0, `finished_processing`
    does nothing); `ConnectionRestored` marks the seam in the events, and every
    unacknowledged event comes again. Sessions end with the lost connection;
    the accessory registration and the Bluetooth managers (with their restore
    identifiers, services and advertisement) are renewed on the new one.

    Events go where the app waits for them: `session.*` of an open
    `AccessorySession` to it, `ble.*` to the `Central`/`PeripheralManager` once
    created; everything else (and those before a manager exists) to the events."""

    role = "app"
    FIRST_RETRY = 0.05
    MAX_RETRY = 2.0
    STABLE_CONNECTION = 2.0

    def __init__(self, socket: str | os.PathLike[str] | None = None, *, app_id: str | None = None,
                 reconnect: bool = True, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        super().__init__(socket, timeout=timeout)
        self.id: str | None = app_id
        self.launch = LaunchOptions()
        self.state: str | None = None
        self.deadline: int | None = None
        # The current daemon's welcome `features` (additions to protocol version 1 it handles).
        self._features: frozenset[str] = frozenset()
        self.reconnect = reconnect
        self.generation = 0
        self._items: Mailbox[AppItem] = Mailbox()
        self._ledger = Ledger(self._send_ack)
        self._session_logs = SessionLogs()
        self._expiration: dict[int, Callable[[], Any]] = {}
        self._closed_sessions: set[int] = set()
        self._stale_sessions: list[int] = []
        self._registered_for_accessories = False
        self._connected_at = 0.0
        self._retry = self.FIRST_RETRY
        self._reconnecting: asyncio.Task[None] | None = None
        self._ended_for_good = False
        self._background: set[asyncio.Future[Any]] = set()

    # -- connecting

    async def connect(self) -> App:
        """The first connection; its failure is raised (only a connection that once worked is retried)."""
        await self._attempt()
        return self

    async def __aenter__(self) -> App:
        return await self.connect()

    async def _attempt(self) -> None:
        connection = Connection(self.socket_path, self.role, self.timeout)
        connection.on_message = lambda message: self._on_message(connection, message)
        await connection.connect()
        try:
            await connection.hello(app=self.id, client=CLIENT_NAME)
        except BaseException:
            connection.close()
            raise
        connection.on_close = lambda error: self._on_close(connection, error)

    def _welcomed(self, connection: Connection, welcome: Mapping[str, Any]) -> None:
        """On the reader, at the welcome: before any frame that follows it."""
        first = self._connection is None and self.generation == 0 and not self._connected_at
        if not first:
            self.generation += 1
        self._connection = connection
        self._connected_at = asyncio.get_running_loop().time()
        self._ledger.reset()
        self.id = self.id or welcome.get("app")
        self.state = welcome.get("state")
        self.deadline = welcome.get("deadline")
        self._features = frozenset(welcome.get("features") or ())
        if first:
            self.launch = LaunchOptions.from_json(welcome.get("launch"))
            return
        self._resynchronize(connection)
        self._items.put(ConnectionRestored(self.generation))

    def _resynchronize(self, connection: Connection) -> None:
        """What this client still believes, told to the new connection before the
        app's requests reach it (no ids: the replies are not waited for)."""
        for session in self._stale_sessions:
            connection.send_without_reply("closeSession", session=session)
        self._stale_sessions.clear()
        if self._registered_for_accessories:
            connection.send_without_reply("registerForAccessoryNotifications", enabled=True)
        if self._central is not None:
            members: dict[str, Any] = {} if self._central.restore_identifier is None else {
                "restoreIdentifier": self._central.restore_identifier}
            connection.send_without_reply("ble.registerCentral", **members)
        if self._peripheral is not None:
            manager = self._peripheral
            members = {} if manager.restore_identifier is None else {"restoreIdentifier": manager.restore_identifier}
            connection.send_without_reply("ble.registerPeripheral", **members)
            for service in manager.services.values():
                connection.send_without_reply("ble.addService", service=service)
            if manager.advertisement is not None:
                connection.send_without_reply("ble.startAdvertising", advertisement=manager.advertisement)

    def _on_close(self, connection: Connection, error: VigilError) -> None:
        if connection is not self._connection or self._ended_for_good:
            return
        for session_id, session in list(self._sessions.items()):
            session._lost("the connection to vigild was lost")
            self._stale_sessions.append(session_id)
        self._sessions.clear()
        if not self.reconnect or error.code in FINAL_CODES:
            self._end(error)
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._connected_at >= self.STABLE_CONNECTION:
            self._retry = self.FIRST_RETRY
        self._reconnecting = loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        while not self._ended_for_good:
            await asyncio.sleep(self._retry)
            self._retry = min(self._retry * 2, self.MAX_RETRY)
            try:
                await self._attempt()
                return
            except VigilError as error:
                if error.code in FINAL_CODES:
                    self._end(error)
                    return
            except OSError:
                pass

    def _end(self, error: VigilError) -> None:
        self._ended_for_good = True
        self._items.close(error if isinstance(error, ConnectionClosed) else ConnectionClosed(str(error)))
        self._ended(str(error))

    async def close(self) -> None:
        """Closes for good: nothing reconnects, and the events end."""
        self._ended_for_good = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        await super().close()
        self._items.close()
        self._session_logs.close()

    # -- frames from the daemon

    def _on_message(self, connection: Connection, message: Message) -> bool:
        kind = message.type
        if kind == "welcome":
            self._welcomed(connection, message.header)
            return False  # for `hello`, which waits for it
        if connection is not self._connection:
            return False
        if kind == "lifecycle":
            self.state = message.get("state")
            self._items.put(Lifecycle(str(message["event"]), str(message["state"])))
        elif kind == "deadline":
            self.deadline = message.get("deadline")
        elif kind == "backgroundTaskExpiring":
            task = int(message["task"]) & 0xFFFFFFFF
            handler = self._expiration.pop(self.generation << 32 | task, None)
            if handler is not None:
                result = handler()
                if inspect.isawaitable(result):
                    self._keep(asyncio.ensure_future(result))
        elif kind == "event":
            self._route(message)
        else:
            return False
        return True

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _route(self, message: Message) -> None:
        seq, kind = int(message["seq"]), str(message["kind"])
        attributes: dict[str, Any] = dict(message.get("attributes") or {})
        redelivered = bool(message.get("redelivered", False))
        try:
            payload = self._session_logs.resolve(kind, attributes, message.body)
        except VigilError as error:
            payload, attributes["logError"] = b"", error.message
        session_id = attributes.get("session")
        if kind.startswith("session.") and isinstance(session_id, int):
            session = self._sessions.get(session_id)
            item = session_item(kind, attributes, payload)
            if session is not None and item is not None:
                session._feed(item, self._ledger.received(seq, f"session {session_id}"))
                if kind == "session.closed" and not attributes.get("willReopen"):
                    self._sessions.pop(session_id, None)
                return
            if session_id in self._closed_sessions and not redelivered:
                self._ledger.received(seq, "dropped").finish()  # closed here: dropped, acknowledged
                return
        if kind == L2CAP_INCOMING and isinstance(session_id, int) and attributes.get("psm") in self._l2cap_psms:
            self._adopt_incoming_channel(attributes)  # then to the app, as any event
        if kind == RFCOMM_INCOMING and isinstance(session_id, int) and attributes.get("uuid") in self._rfcomm_services:
            self._adopt_incoming_channel(attributes, RFCOMMChannel)
        if kind.startswith("ble.") and not kind.startswith("ble.l2cap.") and self._bluetooth_target(kind) is not None:
            self._route_bluetooth(kind, attributes, payload, self._ledger.received(seq, "bluetooth"))
            return
        values: list[NotificationValue] = []
        if kind == "ble.notification":
            try:
                values = notification_values(attributes, payload)
            except VigilError as error:
                attributes["valuesError"] = error.message
        self._ledger.received(seq, Ledger.MAIN)
        self._items.put(Event(seq, kind, attributes, payload, redelivered, values))

    def _send_ack(self, seq: int) -> None:
        try:
            self.connection.send_without_reply("ack", seq=seq)
        except VigilError:
            pass  # lost with the connection: the events only come again

    # -- the app's side

    @property
    def background_time_remaining(self) -> float:
        """Seconds of background time left, computed locally from the daemon's
        CLOCK_MONOTONIC deadline; math.inf while unlimited (foreground)."""
        if self.deadline is None:
            return math.inf
        return max(0.0, (self.deadline - monotonic_ns()) / 1e9)

    async def next_event(self, timeout: float | None = None) -> AppItem | None:
        """The next Event, Lifecycle or ConnectionRestored; None after `timeout`.
        Raises ConnectionClosed once the connection ended for good."""
        return await self._items.get(timeout=timeout)

    def __aiter__(self) -> AsyncIterator[AppItem]:
        return self.events()

    async def events(self) -> AsyncIterator[AppItem]:
        """Every item, in order, across reconnections; ends when the app is refused or closed."""
        while True:
            try:
                item = await self._items.get()
            except VigilError:
                return
            if item is not None:
                yield item

    def acknowledge(self, event: Event | int) -> None:
        """`event` (and every earlier one of the events) is handled. The `ack`
        goes out up to the oldest event another consumer still holds."""
        self._ledger.finish_main(event.seq if isinstance(event, Event) else int(event))

    async def begin_background_task(self, name: str = "unnamed",
                                    expiration_handler: Callable[[], Any] | None = None) -> BackgroundTask:
        """Time to finish work in the background, until `end_background_task`.
        Shortly before the limit `expiration_handler()` (plain or async) is
        called and should end the task. Returns 0 when no time can be granted
        or the daemon is out of reach."""
        generation = self.generation
        try:
            reply = await self.request("beginBackgroundTask", name=name)
        except VigilError as error:
            if error.code == "disconnected":
                return INVALID_TASK
            raise
        task = int(reply["task"])
        if task == 0 or generation != self.generation:
            return INVALID_TASK
        identifier = generation << 32 | task
        if expiration_handler is not None:
            self._expiration[identifier] = expiration_handler
        return identifier

    async def end_background_task(self, task: BackgroundTask) -> None:
        """Ends `task`; one of an earlier connection (or 0) is only forgotten."""
        self._expiration.pop(task, None)
        if task == INVALID_TASK or task >> 32 != self.generation:
            return
        try:
            # No time limit: the reply may be read only after a freeze (docs/protocol.md).
            await self.request("endBackgroundTask", task=task & 0xFFFFFFFF, timeout=None)
        except VigilError as error:
            if error.code != "disconnected":
                raise

    async def schedule_refresh(self, interval: float, earliest_begin: float | None = None) -> dict[str, Any]:
        """Background refresh (the manifest's `fetch` mode): be woken with an
        `app.refresh` event every `interval` seconds at the least, the first
        not before `earliest_begin` seconds from now. Returns {next, interval}
        as the daemon applies them (docs/lifecycle.md, "Background refresh")."""
        members: dict[str, Any] = {"interval": interval}
        if earliest_begin is not None:
            members["earliestBegin"] = earliest_begin
        return (await self.request("refresh.schedule", **members)).header

    async def cancel_refresh(self) -> None:
        """No more refresh wakes."""
        await self.request("refresh.cancel")

    async def complete_refresh(self, result: str) -> None:
        """How the refresh went: "newData", "noData" (again and again stretches
        the interval) or "failed". Ends the processing window, as
        `finished_processing` does."""
        if result not in ("newData", "noData", "failed"):
            raise ValueError(f"result {result!r}: newData, noData or failed")
        try:
            await self.request("refresh.complete", timeout=None, result=result)
        except VigilError as error:
            if error.code != "disconnected":
                raise

    async def mqtt_publish(self, topic: str, payload: bytes | bytearray | str) -> dict[str, Any]:
        """Store-and-forward export through vigild's broker connection
        (docs/fleet.md): returns once vigild holds the message durably in its
        outbox ({seq, queued, connected}); vigild publishes it with QoS 1, in
        order, whenever the broker is reachable. A full outbox raises
        VigilError "queueFull" (nothing was stored: hold the data and retry);
        no broker configured raises "unavailable"."""
        body = payload.encode() if isinstance(payload, str) else bytes(payload)
        return (await self.request("mqtt.publish", body=body, topic=topic)).header

    async def finished_processing(self, acknowledging: Event | int | None = None) -> None:
        """The app has handled what woke it: with no task held it is suspended
        right after the reply (which it may read only when it next runs).
        `acknowledging`: `acknowledge(event)` first, carried in the same
        message (vigild handles both in one pass); to a daemon that does not
        name the `finishedProcessing.ack` feature (an older vigild), as two."""
        members: dict[str, Any] = {}
        if acknowledging is not None and FINISH_ACKNOWLEDGES not in self._features:
            self.acknowledge(acknowledging)
        elif acknowledging is not None:
            seq = self._ledger.take_main(acknowledging.seq if isinstance(acknowledging, Event) else int(acknowledging))
            if seq is not None:
                members["ack"] = seq
        try:
            await self.request("finishedProcessing", timeout=None, **members)
        except VigilError as error:
            if error.code != "disconnected":
                raise

    async def register_for_accessory_notifications(self, enabled: bool = True) -> None:
        """Start (or stop) `accessory.connected`/`disconnected` events; renewed after a reconnection."""
        await self.request("registerForAccessoryNotifications", enabled=bool(enabled))
        self._registered_for_accessories = bool(enabled)

    def _forget_session(self, session_id: int) -> None:
        super()._forget_session(session_id)
        self._closed_sessions.add(session_id)
