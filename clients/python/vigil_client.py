"""A client for vigild's local protocol, version 1, using only the standard library.

Written from docs/protocol.md alone, as a check that the document is enough.

    with ControlClient() as control:
        for app in control.apps():
            print(app["id"], app["state"])

    with AppClient() as app:              # only inside a process vigild launched
        for item in app.events():
            if isinstance(item, Event):
                handle(item)
                app.ack(item.seq)
                app.finished_processing()

A connection is used from one thread. Replies are matched to requests by `id`;
events and lifecycle notifications that arrive meanwhile are kept, in order,
for `next_event`.
"""

import collections
import dataclasses
import json
import mmap
import os
import socket
import struct
import time

PROTOCOL_VERSIONS = [1]
CLIENT_NAME = "vigil_client.py/1"
MAX_HEADER_BYTES = 65536
MAX_BODY_BYTES = 1048576
SYSTEM_SOCKET = "/run/vigil/vigild.sock"

# The daemon sends these, then closes the connection.
FATAL_CODES = frozenset(
    {"malformedFrame", "frameTooLarge", "handshakeRequired", "unsupportedVersion", "unauthorized"}
)

_PREFIX = struct.Struct("<II")

# The largest body `_Sessions.write` sends in one request.
WRITE_CHUNK = 65536

# Event kinds about accessories (docs/protocol.md, "Accessories").
ACCESSORY_EVENT_KINDS = frozenset({
    "accessory.connected", "accessory.disconnected",
    "session.data", "session.loss", "session.closed", "session.reopened",
})


class VigilError(Exception):
    """An `error` frame from the daemon, or a client-side failure with a protocol code."""

    def __init__(self, code, message, id=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.id = id

    @property
    def closes_connection(self):
        return self.code in FATAL_CODES or self.code == "disconnected"


class ConnectionClosed(VigilError):
    """The daemon closed the connection (code `disconnected`)."""

    def __init__(self, message="vigild closed the connection"):
        super().__init__("disconnected", message)


def socket_path(explicit=None, environ=None):
    """Resolve the daemon's socket: explicit path, $VIGIL_SOCKET,
    $XDG_RUNTIME_DIR/vigil/vigild.sock, then the system daemon's path."""
    environ = os.environ if environ is None else environ
    if explicit:
        return explicit
    if environ.get("VIGIL_SOCKET"):
        return environ["VIGIL_SOCKET"]
    if environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(environ["XDG_RUNTIME_DIR"], "vigil", "vigild.sock")
    return SYSTEM_SOCKET


# ---------------------------------------------------------------------------
# Frames


def encode_frame(header, body=b""):
    """One frame: 8-byte prefix (header and body lengths, little-endian u32),
    the header as compact UTF-8 JSON, then the raw body."""
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body = bytes(body)
    return _PREFIX.pack(len(header_bytes), len(body)) + header_bytes + body


@dataclasses.dataclass
class Message:
    """A received frame: its JSON header (a dict with `type`) and its body."""

    header: dict
    body: bytes = b""

    @property
    def type(self):
        return self.header["type"]

    @property
    def id(self):
        return self.header.get("id")

    def __getitem__(self, key):
        return self.header[key]

    def get(self, key, default=None):
        return self.header.get(key, default)

    def error(self):
        """This `error` frame as a VigilError."""
        return VigilError(self.header.get("code", "internalError"), self.header.get("message", ""), self.id)


class FrameDecoder:
    """Incremental frame splitter. Limits are checked on the 8-byte prefix,
    before waiting for the rest of the frame."""

    def __init__(self, max_header=MAX_HEADER_BYTES, max_body=MAX_BODY_BYTES):
        self.max_header = max_header
        self.max_body = max_body
        self._buffer = bytearray()

    def feed(self, data):
        self._buffer += data

    def next_message(self):
        """The next complete Message, or None until more bytes are fed."""
        if len(self._buffer) < _PREFIX.size:
            return None
        header_len, body_len = _PREFIX.unpack_from(self._buffer)
        if header_len == 0:
            raise VigilError("malformedFrame", "frame has an empty header")
        if header_len > self.max_header:
            raise VigilError("frameTooLarge", f"header of {header_len} bytes exceeds {self.max_header}")
        if body_len > self.max_body:
            raise VigilError("frameTooLarge", f"body of {body_len} bytes exceeds {self.max_body}")
        end = _PREFIX.size + header_len + body_len
        if len(self._buffer) < end:
            return None
        header_bytes = bytes(self._buffer[_PREFIX.size:_PREFIX.size + header_len])
        body = bytes(self._buffer[_PREFIX.size + header_len:end])
        del self._buffer[:end]
        try:
            header = json.loads(header_bytes.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise VigilError("malformedFrame", f"header is not JSON: {error}") from None
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise VigilError("malformedFrame", 'header is not a JSON object with a string "type"')
        return Message(header, body)


# ---------------------------------------------------------------------------
# Connection


class Connection:
    """A connection to vigild in one role. Connects and says hello on creation
    unless `handshake=False` (for tests that speak raw frames)."""

    role = "control"

    def __init__(self, path=None, *, app=None, versions=None, timeout=10.0, handshake=True):
        self.path = socket_path(path)
        self.timeout = timeout
        self.welcome = None
        self._decoder = FrameDecoder()
        self._unsolicited = collections.deque()
        self._next_id = 1
        self._closed = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(self.path)
        except (FileNotFoundError, ConnectionRefusedError):
            self.sock.close()
            raise ConnectionClosed(f"no daemon listening at {self.path} (is vigild running?)") from None
        if handshake:
            try:
                self.hello(versions=versions, app=app)
            except BaseException:
                self.close()
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._closed = True
        self.sock.close()

    # -- handshake

    def hello(self, versions=None, app=None):
        """Send `hello` and return the `welcome` header; a refusal raises VigilError."""
        header = {"type": "hello", "versions": list(versions or PROTOCOL_VERSIONS), "role": self.role,
                  "client": CLIENT_NAME}
        if app is not None:
            header["app"] = app
        self.send_frame(header)
        answer = self.receive(self.timeout)
        if answer is None:
            raise VigilError("disconnected", "no answer to hello")
        if answer.type == "error":
            raise answer.error()
        if answer.type != "welcome":
            raise VigilError("handshakeRequired", f"expected welcome, got {answer.type!r}")
        self.welcome = answer.header
        self._welcomed(answer.header)
        return answer.header

    def _welcomed(self, welcome):
        """Hook for roles that keep state from the welcome."""

    # -- frames

    def send_frame(self, header, body=b""):
        self.send_raw(encode_frame(header, body))

    def send_raw(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as error:
            self._closed = True
            raise ConnectionClosed(f"cannot write to vigild: {error}") from None

    def receive(self, timeout=None):
        """The next frame from the daemon, or None if none came within `timeout`
        seconds (None waits forever). Raises ConnectionClosed at end of stream."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._decoder.next_message()
            if message is not None:
                return message
            if self._closed:
                raise ConnectionClosed()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining == 0.0:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            except ConnectionResetError:
                data = b""
            if not data:
                self._closed = True
                raise ConnectionClosed()
            self._decoder.feed(data)

    # -- requests

    def request(self, type, body=b"", timeout=None, **members):
        """Send a request with a fresh `id` and return its reply (a Message).
        An `error` answer raises VigilError; other frames that arrive first are
        kept for `next_unsolicited`."""
        request_id = self._next_id
        self._next_id += 1
        self.send_frame({"type": type, "id": request_id, **members}, body)
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            message = self.receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise VigilError("disconnected", f"no reply to {type} (id {request_id}) within {timeout}s")
            if message.id == request_id and message.type in ("reply", "error"):
                if message.type == "error":
                    raise message.error()
                return message
            self._unsolicited_message(message)

    def next_unsolicited(self, timeout=None):
        """The next frame that answers no request, or None after `timeout`."""
        if self._unsolicited:
            return self._unsolicited.popleft()
        return self.receive(timeout)

    def next_of(self, types, timeout=None):
        """The next frame that answers no request and whose type is in `types`,
        or None after `timeout`; other frames stay kept, in order."""
        for index, message in enumerate(self._unsolicited):
            if message.type in types:
                del self._unsolicited[index]
                return message
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            message = self.receive(remaining)
            if message is None:
                return None
            if message.type in types:
                return message
            self._unsolicited_message(message)

    def _unsolicited_message(self, message):
        if message.type == "error" and message.id is None and message.get("code") in FATAL_CODES:
            raise message.error()
        self._unsolicited.append(message)


class _Sessions:
    """Accessory sessions, the same for both roles (docs/protocol.md, "Accessories")."""

    def open_session(self, connection_id, protocol, line_settings=None, reopen=None):
        """Returns the reply: `session` (the id) and `accessory`. `line_settings`
        overrides the accessory's, e.g. "9600 8N1"."""
        members = {"connectionID": connection_id, "protocol": protocol}
        if line_settings is not None:
            members["lineSettings"] = line_settings
        if reopen is not None:
            members["reopen"] = bool(reopen)
        return self.request("openSession", **members).header

    def write(self, session, data):
        """Writes `data` and returns once the device has taken every byte (the
        daemon's back-pressure), in bodies of at most 64 KiB. Returns the count."""
        data = bytes(data)
        for start in range(0, len(data), WRITE_CHUNK):
            self.request("write", body=data[start:start + WRITE_CHUNK], session=session)
        return len(data)

    def close_session(self, session):
        self.request("closeSession", session=session)


# ---------------------------------------------------------------------------
# Control role


class ControlClient(_Sessions, Connection):
    """vigilctl's role: inspect the daemon and drive app lifecycles."""

    role = "control"

    def status(self):
        return self.request("status").header

    def apps(self):
        return self.request("apps")["apps"]

    def app_action(self, action, app):
        """`launch`, `background`, `foreground`, `quit` (user force-quit) or
        `terminate` (by the system). Returns the app object after the action."""
        return self.request("appAction", action=action, app=app)["app"]

    def wake(self, app, kind="test", attributes=None, payload=b""):
        """Deliver an event; returns the reply (`seq`, `disposition`)."""
        return self.request("wake", body=payload, app=app, kind=kind, attributes=attributes or {}).header

    def log(self, app=None, limit=None):
        members = {}
        if app is not None:
            members["app"] = app
        if limit is not None:
            members["limit"] = limit
        return self.request("log", **members)["decisions"]

    def reload(self):
        return self.request("reload").header

    def accessories(self):
        """The reply: `accessories`, and `sessions` with their traffic and loss counters."""
        return self.request("accessories").header

    def watch_accessories(self):
        """The reply (the accessories now); each change then comes from `next_accessory_event`."""
        return self.request("watchAccessories").header

    def next_accessory_event(self, timeout=None):
        """The next pushed change as a dict {change, accessory}, or None after `timeout`."""
        message = self.next_of(("accessoryEvent",), timeout)
        return None if message is None else message.header

    def next_session_output(self, timeout=None):
        """The next push about this client's sessions, or None after `timeout`:
        a `sessionData` Message (`["session"]`, the bytes in `.body`) or a
        `sessionClosed` one (`["session"]`, `["reason"]`)."""
        return self.next_of(("sessionData", "sessionClosed"), timeout)


# ---------------------------------------------------------------------------
# App role


@dataclasses.dataclass
class Event:
    """An event from the app's queue; acknowledge it after handling it.

    `values`: for `ble.notification`, the notifications it carries, in order
    (NotificationValue: peripheral, service, characteristic, value): one, or
    a batch of a fast notifier's values gathered while the app was busy or
    suspended (then `payload` is the framed body). Empty for other kinds."""

    seq: int
    kind: str
    attributes: dict
    payload: bytes
    redelivered: bool
    values: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class NotificationValue:
    """One value of a subscribed characteristic (UUIDs in the daemon's full lowercase form)."""

    peripheral: str
    service: str
    characteristic: str
    value: bytes


# A ble.notification record naming another characteristic than the event's.
_OTHER_CHARACTERISTIC = 0xFFFF


def notification_values(attributes, body):
    """The values of a `ble.notification` event, in order (docs/protocol.md,
    "Bluetooth LE: central"). Without `framing` the body is one value (events
    queued by an older daemon); with `framing: "u16le"` it is records: u16
    little-endian length n (< 0xFFFF) and n bytes, a value of the event's
    characteristic; or 0xFFFF, u16 m, m bytes of UTF-8 "peripheral service
    characteristic", then a value record of that characteristic."""
    own = (attributes.get("peripheral"), attributes.get("service"), attributes.get("characteristic"))
    framing = attributes.get("framing")
    if framing is None:
        return [NotificationValue(*own, bytes(body))]
    if framing != "u16le":
        raise VigilError("invalidArgument", f"ble.notification: unknown framing {framing!r}")
    body = memoryview(body)
    values, offset = [], 0

    def take(count):
        nonlocal offset
        if len(body) - offset < count:
            raise VigilError("invalidArgument", f"ble.notification: a record is cut short at byte {offset} of {len(body)}")
        offset += count
        return body[offset - count:offset]

    while offset < len(body):
        path = own
        length = int.from_bytes(take(2), "little")
        if length == _OTHER_CHARACTERISTIC:
            parts = bytes(take(int.from_bytes(take(2), "little"))).decode().split(" ")
            if len(parts) != 3 or not all(parts):
                raise VigilError("invalidArgument", f"ble.notification: {' '.join(parts)!r} does not name a characteristic")
            path = tuple(parts)
            length = int.from_bytes(take(2), "little")
            if length == _OTHER_CHARACTERISTIC:
                raise VigilError("invalidArgument", "ble.notification: two characteristic records in a row")
        values.append(NotificationValue(*path, bytes(take(length))))
    return values


class SessionLogs:
    """Reads `session.data` bytes out of session logs (docs/protocol.md,
    "Session logs"): the event names a file (`log`) and a stream range
    (`offset`, `length`); byte n of the stream is at file offset
    4096 + n % capacity. Maps each log read-only once, drops it when the
    session ends."""

    HEADER_SIZE = 4096
    MAGIC = b"VIGILLOG"
    VERSION = 1

    def __init__(self):
        self._maps = {}  # session -> (path, mmap)

    def resolve(self, kind, attributes, body):
        """The event's payload: from its log where it names one, else its body."""
        session = attributes.get("session")
        if kind == "session.closed" and not attributes.get("willReopen"):
            entry = self._maps.pop(session, None)
            if entry:
                entry[1].close()
            return body
        path = attributes.get("log")
        if kind != "session.data" or path is None:
            return body
        offset, length = int(attributes["offset"]), int(attributes["length"])
        entry = self._maps.get(session)
        if entry is None or entry[0] != path:
            with open(path, "rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
            if mapped[:8] != self.MAGIC or struct.unpack_from("<I", mapped, 8)[0] != self.VERSION:
                mapped.close()
                raise VigilError("invalidState", f"{path} is not a version {self.VERSION} session log")
            entry = self._maps[session] = (path, mapped)
        mapped = entry[1]
        capacity = struct.unpack_from("<Q", mapped, 16)[0]
        if length > capacity:
            raise VigilError("invalidArgument", f"session.data length {length} exceeds the log's capacity {capacity}")
        start = offset % capacity
        first = min(length, capacity - start)
        data = mapped[self.HEADER_SIZE + start:self.HEADER_SIZE + start + first]
        if first < length:
            data += mapped[self.HEADER_SIZE:self.HEADER_SIZE + length - first]
        return data


@dataclasses.dataclass
class Lifecycle:
    """A state transition (`didEnterBackground`, `willTerminate`, ...) and the state after it."""

    event: str
    state: str


def monotonic_ns():
    """CLOCK_MONOTONIC, the clock of the daemon's deadlines."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class AppClient(_Sessions, Connection):
    """The app role. Only a process that vigild launched (in its app's cgroup)
    is accepted; any other gets `unauthorized`.

    Accessory events arrive as Events like any other (`kind` in
    ACCESSORY_EVENT_KINDS; `session.data` has the bytes in `payload`, copied
    from the session log the event names) and are acknowledged the same way."""

    role = "app"

    def __init__(self, path=None, **options):
        self.app_id = None
        self.state = None
        self.launch = None
        self.deadline = None
        self._expiration_handlers = {}
        self._session_logs = SessionLogs()
        super().__init__(path, **options)

    def _welcomed(self, welcome):
        self.app_id = welcome.get("app")
        self.state = welcome.get("state")
        self.launch = welcome.get("launch")
        self.deadline = welcome.get("deadline")

    def background_time_remaining(self):
        """Seconds left, computed locally from the deadline; math.inf while unlimited."""
        if self.deadline is None:
            return float("inf")
        return max(0.0, (self.deadline - monotonic_ns()) / 1e9)

    def begin_background_task(self, name="", expiration_handler=None):
        """Returns the task id, 0 when no background time can be granted.
        `expiration_handler()` is called (while reading frames) when the
        daemon warns that the limit is near."""
        task = self.request("beginBackgroundTask", name=name)["task"]
        if task and expiration_handler is not None:
            self._expiration_handlers[task] = expiration_handler
        return task

    def end_background_task(self, task):
        self._expiration_handlers.pop(task, None)
        self.request("endBackgroundTask", task=task)

    def finished_processing(self):
        """Done with what woke the app: with no task held it is suspended right after the reply."""
        self.request("finishedProcessing")

    def accessories(self):
        """The connected accessories the app may see (their protocols are in its manifest)."""
        return self.request("accessories")["accessories"]

    def register_for_accessory_notifications(self, enabled=True):
        """Start (or stop) `accessory.connected` and `accessory.disconnected` events."""
        self.request("registerForAccessoryNotifications", enabled=bool(enabled))

    def ack(self, seq):
        """Every event up to and including `seq` has been handled."""
        self.send_frame({"type": "ack", "seq": seq})

    def next_event(self, timeout=None):
        """The next Event or Lifecycle, or None after `timeout` seconds.
        Deadline changes and expiration warnings are handled on the way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            message = self.next_unsolicited(remaining)
            if message is None:
                return None
            item = self._interpret(message)
            if item is not None:
                return item

    def events(self, timeout=None):
        """Iterate over events and lifecycle notifications until the connection
        closes or none arrives within `timeout` seconds."""
        while True:
            try:
                item = self.next_event(timeout)
            except ConnectionClosed:
                return
            if item is None:
                return
            yield item

    def _interpret(self, message):
        kind = message.type
        if kind == "lifecycle":
            self.state = message["state"]
            return Lifecycle(message["event"], message["state"])
        if kind == "event":
            attributes = message.get("attributes") or {}
            payload = self._session_logs.resolve(message["kind"], attributes, message.body)
            values = notification_values(attributes, payload) if message["kind"] == "ble.notification" else []
            return Event(message["seq"], message["kind"], attributes, payload,
                         bool(message.get("redelivered", False)), values)
        if kind == "deadline":
            self.deadline = message.get("deadline")
        elif kind == "backgroundTaskExpiring":
            handler = self._expiration_handlers.pop(message["task"], None)
            if handler is not None:
                handler()
        elif kind == "error" and message.get("code") in FATAL_CODES:
            raise message.error()
        return None
