"""A thin synchronous wrapper over the asyncio client, for scripts and tests
without an event loop (and for `clients/python/vigil_client.py`, which
re-exports it). Each object runs the async client on a private event loop,
only while one of its methods is running; use it from one thread at a time.
Called from async code, it blocks that code's loop as any blocking call does.

    from vigil.sync import ControlClient
    with ControlClient() as control:
        for app in control.app_list():
            print(app.id, app.state)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, Self, TypeVar

from . import _connection
from ._frames import (  # noqa: F401 - re-exported for vigil_client.py
    CLIENT_NAME, FATAL_CODES, MAX_BODY_BYTES, MAX_HEADER_BYTES, PROTOCOL_VERSIONS, SYSTEM_SOCKET, WRITE_CHUNK,
    ConnectionClosed, FrameDecoder, Message, VigilError, encode_frame, monotonic_ns, socket_path,
)
from ._payloads import NotificationValue, SessionLogs, notification_values  # noqa: F401
from .app import App, Event, Lifecycle
from .control import Control, _deprecated
from .records import AppInfo, Decision, DeviceChange

T = TypeVar("T")
JSON = dict[str, Any]

#: Event kinds about accessories (docs/protocol.md, "Accessories").
ACCESSORY_EVENT_KINDS = frozenset({
    "accessory.connected", "accessory.disconnected",
    "session.data", "session.loss", "session.closed", "session.reopened", "session.lines",
})


class Connection:
    """A connection in one role, driven synchronously. Connects and says hello
    on creation unless `handshake=False` (tests that speak raw frames)."""

    role = "control"

    def __init__(self, path: str | os.PathLike[str] | None = None, *, app: str | None = None,
                 versions: Iterable[int] | None = None, timeout: float | None = 10.0,
                 handshake: bool = True) -> None:
        self.path = socket_path(path)
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        try:
            self._connection = self._open(app, versions, handshake)
        except BaseException:
            self._loop.close()
            raise

    def _open(self, app: str | None, versions: Iterable[int] | None, handshake: bool) -> _connection.Connection:
        return self._run(_connection.Connection.open(
            self.path, role=self.role, app=app, versions=versions, handshake=handshake, timeout=self.timeout))

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coroutine)
        # Called from async code (a test, a callback): block it, as any sync call does, on a helper thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(self._loop.run_until_complete, coroutine).result()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._aclose())
            self._loop.close()

    async def _aclose(self) -> None:
        await self._connection.aclose()

    @property
    def welcome(self) -> JSON | None:
        return self._connection.welcome

    def hello(self, versions: Iterable[int] | None = None, app: str | None = None) -> JSON:
        return self._run(self._connection.hello(versions=versions, app=app))

    def send_frame(self, header: JSON, body: bytes = b"") -> None:
        self._connection.send_frame(header, body)

    def send_raw(self, data: bytes) -> None:
        self._connection.send_raw(data)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next frame that answers no pending request, or None after `timeout` seconds
        (None: forever). Raises ConnectionClosed at the end of the stream."""
        return self._run(self._connection.receive(timeout))

    def request(self, type: str, body: bytes = b"", timeout: float | None = None, **members: Any) -> Message:
        """Sends a request and returns its reply; an `error` raises VigilError."""
        return self._run(self._connection.request(type, body, True if timeout is None else timeout, **members))

    def next_unsolicited(self, timeout: float | None = None) -> Message | None:
        return self.receive(timeout)

    def next_of(self, types: Iterable[str], timeout: float | None = None) -> Message | None:
        """The next kept frame whose type is in `types` (others stay kept), or None after `timeout`."""
        return self._run(self._connection.receive(timeout, types=tuple(types)))

    # -- accessory sessions, both roles: the raw requests (events stay in the main stream)

    def open_session(self, connection_id: int, protocol: str, line_settings: str | None = None,
                     reopen: bool | None = None) -> JSON:
        """The reply: `session` (the id) and `accessory`."""
        members: JSON = {"connectionID": connection_id, "protocol": protocol}
        if line_settings is not None:
            members["lineSettings"] = line_settings
        if reopen is not None:
            members["reopen"] = bool(reopen)
        return self.request("openSession", **members).header

    def write(self, session: int, data: bytes) -> int:
        """Writes `data`; returns once the device has taken every byte."""
        view = bytes(data)
        for start in range(0, len(view), WRITE_CHUNK):
            self.request("write", body=view[start:start + WRITE_CHUNK], session=session)
        return len(view)

    def close_session(self, session: int) -> None:
        self.request("closeSession", session=session)


class ControlClient(Connection):
    """vigilctl's role, synchronously (see `vigil.Control`)."""

    role = "control"

    def _open(self, app: str | None, versions: Iterable[int] | None, handshake: bool) -> _connection.Connection:
        self.control = Control(self.path, timeout=self.timeout)
        self.control._connection = connection = super()._open(app, versions, handshake)
        return connection

    def status(self) -> JSON:
        return self._run(self.control.status())

    def apps(self) -> list[JSON]:
        """Deprecated: `app_list()` (typed)."""
        _deprecated("ControlClient.apps()", "ControlClient.app_list()")
        return self._run(self.control._raw_apps())

    def app_action(self, action: str, app: str) -> AppInfo:
        """The app after the action (launch, background, foreground, quit, terminate)."""
        return self._run(self.control.app_action(action, app))

    def wake(self, app: str, kind: str = "test", attributes: Mapping[str, Any] | None = None,
             payload: bytes = b"") -> JSON:
        return self._run(self.control.wake(app, kind, attributes, payload))

    def log(self, app: str | None = None, limit: int | None = None, since: float | None = None) -> list[JSON]:
        """Deprecated: `decisions()` (typed)."""
        _deprecated("ControlClient.log()", "ControlClient.decisions()")
        return self._run(self.control._raw_log(app, limit, since))

    def devices(self, since: float | None = None) -> list[JSON]:
        """Deprecated: `device_changes()` (typed)."""
        _deprecated("ControlClient.devices()", "ControlClient.device_changes()")
        return self._run(self.control._raw_devices(since))

    def app_list(self) -> list[AppInfo]:
        return self._run(self.control.app_list())

    def app_info(self, app_id: str) -> AppInfo:
        return self._run(self.control.app_info(app_id))

    def decisions(self, app: str | None = None, limit: int | None = None,
                  since: float | None = None) -> list[Decision]:
        return self._run(self.control.decisions(app, limit, since))

    def device_changes(self, since: float | None = None) -> list[DeviceChange]:
        return self._run(self.control.device_changes(since))

    def reload(self) -> JSON:
        return self._run(self.control.reload())

    def accessories(self) -> JSON:
        """The reply: `accessories`, and `sessions` with their traffic and loss counters."""
        return self._run(self.control.accessory_status())

    def watch_accessories(self) -> JSON:
        """The reply (the accessories now); each change then comes from `next_accessory_event`."""
        return self.request("watchAccessories").header

    def next_accessory_event(self, timeout: float | None = None) -> JSON | None:
        message = self.next_of(("accessoryEvent",), timeout)
        return None if message is None else message.header

    def next_session_output(self, timeout: float | None = None) -> Message | None:
        """A `sessionData` (bytes in `.body`) or `sessionClosed` push, or None after `timeout`."""
        return self.next_of(("sessionData", "sessionClosed"), timeout)


class AppClient(Connection):
    """The app role, synchronously (see `vigil.App`; here without reconnection,
    and accessory and Bluetooth events all come from `next_event`)."""

    role = "app"

    def _open(self, app: str | None, versions: Iterable[int] | None, handshake: bool) -> _connection.Connection:
        self.app = App(self.path, app_id=app, reconnect=False, timeout=self.timeout)
        self._run(self.app.connect())
        return self.app.connection

    async def _aclose(self) -> None:
        await self.app.close()

    @property
    def app_id(self) -> str | None:
        return self.app.id

    @property
    def state(self) -> str | None:
        return self.app.state

    @property
    def launch(self) -> JSON | None:
        return (self.welcome or {}).get("launch")

    @property
    def deadline(self) -> int | None:
        return self.app.deadline

    def background_time_remaining(self) -> float:
        """Seconds left, computed locally from the deadline; math.inf while unlimited."""
        return self.app.background_time_remaining

    def begin_background_task(self, name: str = "", expiration_handler: Callable[[], Any] | None = None) -> int:
        """The task id, 0 when no background time can be granted."""
        return self._run(self.app.begin_background_task(name, expiration_handler))

    def end_background_task(self, task: int) -> None:
        self._run(self.app.end_background_task(task))

    def finished_processing(self, acknowledging: int | None = None) -> None:
        """`acknowledging`: `ack(seq)` first, in the same message."""
        self._run(self.app.finished_processing(acknowledging))

    def schedule_refresh(self, interval: float, earliest_begin: float | None = None) -> JSON:
        return self._run(self.app.schedule_refresh(interval, earliest_begin))

    def cancel_refresh(self) -> None:
        self._run(self.app.cancel_refresh())

    def complete_refresh(self, result: str) -> None:
        self._run(self.app.complete_refresh(result))

    def mqtt_publish(self, topic: str, payload: bytes | bytearray | str) -> JSON:
        """See `vigil.App.mqtt_publish`: durable in vigild's outbox when it returns."""
        return self._run(self.app.mqtt_publish(topic, payload))

    def accessories(self) -> list[JSON]:
        return list(self.request("accessories")["accessories"])

    def register_for_accessory_notifications(self, enabled: bool = True) -> None:
        self._run(self.app.register_for_accessory_notifications(enabled))

    def ack(self, seq: int) -> None:
        """Every event up to and including `seq` has been handled."""
        self.app.acknowledge(seq)

    def next_event(self, timeout: float | None = None) -> Event | Lifecycle | None:
        """The next Event or Lifecycle, or None after `timeout` seconds."""
        item = self._run(self.app.next_event(timeout))
        assert item is None or isinstance(item, (Event, Lifecycle))
        return item

    def events(self, timeout: float | None = None) -> Iterator[Event | Lifecycle]:
        """Events and lifecycle notifications until the connection closes or
        none arrives within `timeout` seconds."""
        while True:
            try:
                item = self.next_event(timeout)
            except ConnectionClosed:
                return
            if item is None:
                return
            yield item
