"""Serial accessories and byte-stream sessions with them (docs/protocol.md, "Accessories")."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Union

from ._frames import WRITE_CHUNK, VigilError
from ._ledger import Token
from ._mailbox import Mailbox

if TYPE_CHECKING:
    from ._client import Client


@dataclasses.dataclass(frozen=True)
class Accessory:
    """A connected accessory (docs/protocol.md, "The accessory object").
    `connection_id` is new for every connection: a replugged accessory gets a new one."""

    connection_id: int
    protocol_strings: tuple[str, ...]
    name: str = ""
    manufacturer: str = ""
    model_number: str = ""
    serial_number: str = ""
    firmware_revision: str = ""
    hardware_revision: str = ""
    device_node: str = ""
    vendor_id: str = ""
    product_id: str = ""
    sys_path: str = ""
    line_settings: str = ""
    #: "serial" (a tty) or "hid" (a hidraw node: its sessions carry whole reports).
    kind: str = "serial"
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Accessory:
        def text(key: str) -> str:
            return str(obj.get(key) or "")

        return cls(
            connection_id=int(obj["connectionID"]), protocol_strings=tuple(obj.get("protocolStrings") or ()),
            name=text("name"), manufacturer=text("manufacturer"), model_number=text("modelNumber"),
            serial_number=text("serialNumber"), firmware_revision=text("firmwareRevision"),
            hardware_revision=text("hardwareRevision"), device_node=text("deviceNode"), vendor_id=text("vendorID"),
            product_id=text("productID"), sys_path=text("sysPath"), line_settings=text("lineSettings"),
            kind=text("kind") or "serial", raw=dict(obj))

    def speaks(self, protocol: str) -> bool:
        return protocol in self.protocol_strings

    @property
    def is_hid(self) -> bool:
        return self.kind == "hid"


def split_records(data: bytes) -> list[bytes]:
    """The records of a record session's bytes (a HID session's input
    reports; docs/protocol.md, "HID accessories"): each is a u16 LE length
    and that many bytes. Bytes that end inside a record raise VigilError."""
    records: list[bytes] = []
    index = 0
    while index < len(data):
        if len(data) - index < 2:
            raise VigilError("invalidArgument", "session records: bytes left shorter than a record's length")
        length = data[index] | data[index + 1] << 8
        index += 2
        if len(data) - index < length:
            raise VigilError("invalidArgument", f"session records: a record of {length} bytes with {len(data) - index} left")
        records.append(bytes(data[index:index + length]))
        index += length
    return records


@dataclasses.dataclass(frozen=True)
class AccessoryChange:
    """An accessory came (`connected`) or went (`disconnected`)."""

    change: str
    accessory: Accessory


@dataclasses.dataclass(frozen=True)
class Data:
    """Bytes from the device, in device order (one chunk may merge several reads)."""

    data: bytes
    #: Set when the bytes could not be read from the session log (then `data` is empty).
    log_error: str | None = None


@dataclasses.dataclass(frozen=True)
class Loss:
    """Bytes lost before the daemon could read them, as the kernel counted them since the last report."""

    overruns: int = 0
    parity_errors: int = 0
    frame_errors: int = 0
    interrupted_reads: int = 0
    lost_ranges: int = 0


@dataclasses.dataclass(frozen=True)
class Reopened:
    """The accessory came back and the session goes on, on its new connection."""

    accessory: Accessory


@dataclasses.dataclass(frozen=True)
class Closed:
    """The session ended (`will_reopen`: it waits for the accessory to come back)."""

    reason: str
    will_reopen: bool = False


@dataclasses.dataclass(frozen=True)
class Lines:
    """Modem lines of a serial session (docs/protocol.md, "Serial line control"):
    the state now and, in a `session.lines` item, the input lines that changed."""

    dtr: bool = False
    rts: bool = False
    cts: bool = False
    dsr: bool = False
    dcd: bool = False
    ri: bool = False
    changed: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], changed: Any = ()) -> Lines:
        def up(name: str) -> bool:
            return obj.get(name) is True

        return cls(dtr=up("dtr"), rts=up("rts"), cts=up("cts"), dsr=up("dsr"), dcd=up("dcd"), ri=up("ri"),
                   changed=tuple(str(name) for name in changed or ()))


SessionItem = Union[Data, Loss, Reopened, Closed, Lines]


def session_item(kind: str, attributes: Mapping[str, Any], payload: bytes) -> SessionItem | None:
    """A `session.*` event (app role) as a session item; None for other kinds."""
    if kind == "session.data":
        error = attributes.get("logError")
        return Data(payload, None if error is None else str(error))
    if kind == "session.loss":
        def count(key: str) -> int:
            return int(attributes.get(key) or 0)

        lost = attributes.get("lostRanges")
        return Loss(count("overruns"), count("parityErrors"), count("frameErrors"), count("interruptedReads"),
                    len(lost) if isinstance(lost, list) else int(lost or 0))
    if kind == "session.reopened":
        return Reopened(Accessory.from_json(attributes))
    if kind == "session.closed":
        return Closed(str(attributes.get("reason", "")), bool(attributes.get("willReopen", False)))
    if kind == "session.lines":
        return Lines.from_json(attributes, attributes.get("changed"))
    return None


class AccessorySession:
    """A byte stream with an accessory for one of its protocols, as `EASession`.

        async with await app.open_session(accessory, "org.example.sensor") as session:
            await session.write(b"start\\n")
            async for chunk in session:          # bytes, until the session ends
                store(chunk)

    Each chunk is acknowledged when the consumer asks for the next one (or
    closes the session), so a chunk the app had not finished when it died
    comes again to the next process. Until then it counts against the
    session's buffer in the daemon, whose flow control holds the device back
    when it is full. `write` returns once the device has taken every byte."""

    def __init__(self, owner: Client, session_id: int, protocol: str, accessory: Accessory) -> None:
        self._owner = owner
        self.id = session_id
        self.protocol = protocol
        self.accessory = accessory
        self.close_reason: str | None = None
        #: Opened with `reopen`: it waits for the accessory across unplugs.
        self.reopen = False
        self.loss = Loss()
        self._items: Mailbox[tuple[SessionItem, Token | None]] = Mailbox()
        self._current: Token | None = None
        self._ended = False
        #: Reports of the chunk `read_report` is in (reversed: the next is last).
        self._reports: list[bytes] = []

    # -- fed by the client

    def _feed(self, item: SessionItem, token: Token | None) -> None:
        if isinstance(item, Loss):
            self.loss = Loss(*(a + b for a, b in zip(dataclasses.astuple(self.loss), dataclasses.astuple(item))))
        elif isinstance(item, Reopened):
            self.accessory = item.accessory
        elif isinstance(item, Closed) and not item.will_reopen:
            self.close_reason = item.reason
        self._items.put((item, token))
        if isinstance(item, Closed) and not item.will_reopen:
            self._items.close()

    def _lost(self, reason: str) -> None:
        """The connection is gone: the session ended with it."""
        if self.close_reason is None:
            self._feed(Closed(reason), None)

    # -- the app's side

    @property
    def is_open(self) -> bool:
        return self.close_reason is None

    async def next_item(self, timeout: float | None = None) -> SessionItem | None:
        """The next item (data, loss, reopening, the closing); None once the
        session has ended and everything was read, or after `timeout`."""
        self._finish_current()
        try:
            entry = await self._items.get(timeout=timeout)
        except VigilError:
            return None
        if entry is None:
            return None
        item, self._current = entry
        return item

    async def items(self) -> AsyncIterator[SessionItem]:
        while (item := await self.next_item()) is not None:
            yield item

    async def read(self, timeout: float | None = None) -> bytes:
        """The next chunk of bytes; b"" when the session has ended (or after `timeout`)."""
        while True:
            item = await self.next_item(timeout)
            if item is None or (isinstance(item, Closed) and not item.will_reopen):
                return b""
            if isinstance(item, Data):
                return item.data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read():
            yield chunk

    # -- HID accessories (docs/protocol.md, "HID accessories")

    async def read_report(self, timeout: float | None = None) -> bytes:
        """The next input report of a HID session, whole (report id first when
        the device numbers its reports); b"" when the session has ended (or
        after `timeout`). A chunk's reports are acknowledged together, when
        the read after its last one asks for the next chunk."""
        while not self._reports:
            chunk = await self.read(timeout)
            if not chunk:
                return b""
            self._reports = split_records(chunk)[::-1]
        return self._reports.pop()

    async def reports(self) -> AsyncIterator[bytes]:
        while report := await self.read_report():
            yield report

    async def send_output_report(self, report: bytes) -> None:
        """Sends one output report (report id first, 0 when the device has none)."""
        await self._owner.request("write", body=bytes(report), session=self.id, timeout=None)

    async def feature_report(self, report_id: int, length: int) -> bytes:
        """Reads feature report `report_id` with room for `length` bytes (the id included)."""
        reply = await self._owner.request("hidGetFeature", session=self.id, reportID=int(report_id), length=int(length))
        return bytes(reply.body)

    async def set_feature_report(self, report: bytes) -> None:
        """Sends a feature report (report id first)."""
        await self._owner.request("hidSetFeature", body=bytes(report), session=self.id)

    async def report_descriptor(self) -> bytes:
        """The device's HID report descriptor."""
        return bytes((await self._owner.request("hidReportDescriptor", session=self.id)).body)

    def acknowledge(self) -> None:
        """Done with the item read last: acknowledge it now rather than at the next read
        (before `finished_processing`, say, so the daemon can suspend the app with nothing pending)."""
        self._finish_current()

    async def write(self, data: bytes) -> int:
        """Writes `data`; returns (the count) once the device has taken every byte."""
        view = bytes(data)
        for start in range(0, len(view), WRITE_CHUNK):
            await self._owner.request("write", body=view[start:start + WRITE_CHUNK], session=self.id, timeout=None)
        return len(view)

    # -- serial line control (VigilError `notSupported` where the driver has no such control)

    async def lines(self) -> Lines:
        """The modem lines now."""
        return Lines.from_json((await self._owner.request("sessionLines", session=self.id))["lines"])

    async def set_lines(self, *, dtr: bool | None = None, rts: bool | None = None) -> Lines:
        """Raises (True) or drops (False) DTR and/or RTS; None leaves a line as it is."""
        members: dict[str, Any] = {name: bool(value) for name, value in (("dtr", dtr), ("rts", rts))
                                   if value is not None}
        return Lines.from_json((await self._owner.request("sessionLines", session=self.id, **members))["lines"])

    async def reset_pulse(self, milliseconds: int = 100) -> Lines:
        """Drops DTR and RTS for `milliseconds`, then raises them (an Arduino's or ESP32's reset)."""
        await self.set_lines(dtr=False, rts=False)
        await asyncio.sleep(milliseconds / 1000)
        return await self.set_lines(dtr=True, rts=True)

    async def send_break(self, milliseconds: int) -> None:
        """Holds the line at space for `milliseconds`; returns when the break is over."""
        await self._owner.request("sendBreak", session=self.id, milliseconds=int(milliseconds), timeout=None)

    async def watch_lines(self, *, wake: bool = False, interval_ms: int | None = None,
                          enabled: bool = True) -> Lines:
        """CTS, DSR, DCD and RI changes come as `Lines` items; with `wake` they wake a suspended app."""
        members: dict[str, Any] = {"enabled": enabled, "wake": wake}
        if interval_ms is not None:
            members["intervalMilliseconds"] = int(interval_ms)
        return Lines.from_json((await self._owner.request("watchSessionLines", session=self.id, **members))["lines"])

    async def set_rs485(self, enabled: bool = True, **settings: Any) -> dict[str, Any]:
        """RS-485 (rtsOnSend, rtsAfterSend, delayBeforeSend, delayAfterSend ms,
        receiveDuringSend); returns what the driver took."""
        reply = await self._owner.request("sessionRS485", session=self.id, rs485={"enabled": enabled, **settings})
        return dict(reply["rs485"])

    async def close(self) -> None:
        """Closes the session; its items not read yet are dropped (and acknowledged)."""
        if self.close_reason is None:
            self.close_reason = "closed by the client"
            try:
                await self._owner.request("closeSession", session=self.id)
            except VigilError:
                pass
        self._owner._forget_session(self.id)
        self._finish_current()
        while (entry := self._items.take()) is not None:
            if entry[1] is not None:
                entry[1].finish()
        self._items.close()

    def _finish_current(self) -> None:
        if self._current is not None:
            self._current.finish()
            self._current = None

    async def __aenter__(self) -> AccessorySession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
