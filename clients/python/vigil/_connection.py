"""One asyncio connection to vigild: frames in and out, requests matched to replies."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from typing import Any

from ._frames import (
    CLIENT_NAME, FATAL_CODES, MAX_HEADER_BYTES_FROM_DAEMON, PROTOCOL_VERSIONS, JSON, ConnectionClosed, FrameDecoder, Message, VigilError,
    encode_frame, socket_path,
)
from ._mailbox import Mailbox

#: Seconds a request waits for its reply unless told otherwise (None: no limit).
DEFAULT_TIMEOUT = 10.0

#: Requests the daemon may answer later than any default: waited for this long
#: unless the caller says otherwise. `ble.pair` ends by vigild's own deadline,
#: at most bluetoothd's 120 s bound on a pairing, then a CancelPairing of up
#: to 10 s (docs/bluetooth.md, "When pair returns").
REQUEST_TIMEOUTS = {"ble.pair": 135.0}


class RequestTimeout(VigilError):
    """No reply within the time the caller allowed (code `timedOut`); the connection stays open."""

    def __init__(self, message: str) -> None:
        super().__init__("timedOut", message)


class Connection:
    """A connection in one role (`app` or `control`).

    A reader task decodes frames as they come. Replies and errors with the id
    of a waiting `request` complete it; every other frame is offered to
    `on_message` (roles route events there) and, unless it returns True, kept
    in order for `receive`. Use from one event loop."""

    def __init__(self, path: str, role: str, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.path = path
        self.role = role
        self.timeout = timeout
        self.welcome: JSON | None = None
        self.on_message: Callable[[Message], bool] | None = None
        self.on_close: Callable[[VigilError], None] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._reply_hooks: dict[int, Callable[[Message], None]] = {}
        self._inbox: Mailbox[Message] = Mailbox()
        self._next_id = 1
        self._closed: VigilError | None = None
        self._fatal: VigilError | None = None

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str] | None = None, *, role: str = "control", app: str | None = None,
        versions: Iterable[int] | None = None, client: str = CLIENT_NAME, handshake: bool = True,
        timeout: float | None = DEFAULT_TIMEOUT, on_message: Callable[[Message], bool] | None = None,
    ) -> Connection:
        """Connects and, unless `handshake=False` (tests that speak raw frames),
        says hello. A refusal raises VigilError; no daemon raises ConnectionClosed."""
        connection = cls(socket_path(path), role, timeout)
        connection.on_message = on_message
        await connection.connect()
        if handshake:
            try:
                await connection.hello(versions=versions, app=app, client=client)
            except BaseException:
                connection.close()
                raise
        return connection

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(self.path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise ConnectionClosed(f"no daemon listening at {self.path} (is vigild running?)") from None
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    async def hello(self, versions: Iterable[int] | None = None, app: str | None = None,
                    client: str = CLIENT_NAME) -> JSON:
        """Sends `hello` and returns the `welcome` header; a refusal raises VigilError."""
        header: JSON = {"type": "hello", "versions": list(versions or PROTOCOL_VERSIONS), "role": self.role,
                        "client": client}
        if app is not None:
            header["app"] = app
        self.send_frame(header)
        answer = await self.receive(self.timeout, types=("welcome", "error"))
        if answer is None:
            raise VigilError("disconnected", "no answer to hello")
        if answer.type == "error":
            raise answer.error()
        self.welcome = answer.header
        return answer.header

    # -- frames

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def send_frame(self, header: JSON, body: bytes = b"") -> None:
        self.send_raw(encode_frame(header, body))

    def send_raw(self, data: bytes) -> None:
        if self._closed is not None or self._writer is None:
            raise self._closed or ConnectionClosed()
        try:
            self._writer.write(data)
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as error:
            self._close(ConnectionClosed(f"cannot write to vigild: {error}"))
            raise ConnectionClosed(f"cannot write to vigild: {error}") from None

    async def drain(self) -> None:
        if self._writer is not None and self._closed is None:
            try:
                await self._writer.drain()
            except (BrokenPipeError, ConnectionResetError) as error:
                self._close(ConnectionClosed(f"cannot write to vigild: {error}"))

    async def receive(self, timeout: float | None = None, types: Iterable[str] | None = None) -> Message | None:
        """The next kept frame (of one of `types`, if given; others stay kept, in
        order), or None when none came within `timeout` seconds (None: forever).
        Raises ConnectionClosed once the connection is closed and nothing is left."""
        wanted = None if types is None else frozenset(types)
        return await self._inbox.get(None if wanted is None else (lambda m: m.type in wanted), timeout)

    # -- requests

    async def request(self, type: str, body: bytes = b"", timeout: float | None | bool = True,
                      on_reply: Callable[[Message], None] | None = None, **members: Any) -> Message:
        """Sends a request with a fresh `id` and returns its reply. An `error`
        answer raises VigilError; `timeout` seconds (default: the connection's,
        or longer for the requests in REQUEST_TIMEOUTS; None waits forever)
        without a reply raise RequestTimeout. `on_reply` is
        called with a `reply` as it is read, before any frame that follows it
        (so a session can be registered before its first event is routed)."""
        seconds = self.timeout if timeout is True else (None if timeout is False else timeout)
        if timeout is True and seconds is not None and type in REQUEST_TIMEOUTS:
            seconds = max(seconds, REQUEST_TIMEOUTS[type])
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        if on_reply is not None:
            self._reply_hooks[request_id] = on_reply
        try:
            self.send_frame({"type": type, "id": request_id, **members}, body)
            await self.drain()
            try:
                reply = await asyncio.wait_for(asyncio.shield(future), seconds)
            except asyncio.TimeoutError:
                raise RequestTimeout(f"no reply to {type} (id {request_id}) within {seconds} s") from None
        finally:
            self._pending.pop(request_id, None)
            self._reply_hooks.pop(request_id, None)
        if reply.type == "error":
            raise reply.error()
        return reply

    def send_without_reply(self, type: str, body: bytes = b"", **members: Any) -> None:
        """A request without `id`: the daemon acts on it and answers nothing."""
        self.send_frame({"type": type, **members}, body)

    # -- closing

    def close(self) -> None:
        self._close(ConnectionClosed("the client closed the connection"))

    async def aclose(self) -> None:
        task = self._task
        self.close()
        if task is not None and task is not asyncio.current_task():
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled or failed: it is over either way
                pass

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _close(self, error: VigilError) -> None:
        if self._closed is not None:
            return
        self._closed = self._fatal or error
        if self._writer is not None:
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self._closed)
                future.exception()  # retrieved: nobody may be waiting any more
        self._pending.clear()
        # Readers of kept frames see the end of the stream; a fatal error frame was kept before it.
        self._inbox.close(error if isinstance(error, ConnectionClosed) else ConnectionClosed(str(error)))
        if self.on_close is not None:
            self.on_close(self._closed)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        decoder = FrameDecoder(max_header=MAX_HEADER_BYTES_FROM_DAEMON)
        error: VigilError = ConnectionClosed()
        try:
            while True:
                try:
                    data = await self._reader.read(262144)
                except (ConnectionResetError, BrokenPipeError):
                    data = b""
                if not data:
                    break
                decoder.feed(data)
                while (message := decoder.next_message()) is not None:
                    self._deliver(message)
        except VigilError as problem:
            error = problem
        except asyncio.CancelledError:
            return
        self._close(error)

    def _deliver(self, message: Message) -> None:
        if message.type in ("reply", "error") and message.id is not None:
            future = self._pending.get(message.id)
            if future is not None and not future.done():
                hook = self._reply_hooks.pop(message.id, None)
                if hook is not None and message.type == "reply":
                    hook(message)
                future.set_result(message)
                return
        if message.type == "error" and message.get("code") in FATAL_CODES:
            self._fatal = message.error()
        if self.on_message is not None and self.on_message(message):
            return
        self._inbox.put(message)
