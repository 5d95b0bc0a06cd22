"""labgrid resources, an exporter and a driver for Vigil (needs `pip install labgrid`).

A gateway runs vigild with serial accessories; its labgrid exporter publishes
each accessory by identity (USB serial number and protocol, not device node),
available while the gateway's vigild lists it. A test anywhere in the farm
acquires the place and gets a console onto the device through the gateway's
vigild, a session opened with `reopen`, so it survives the device's unplug
and replug (docs/testing-with-vigil.md, "labgrid").

Exporter config (run `python -m vigil.labgrid exporter CONFIG`, which is
labgrid-exporter with the Vigil export added):

    sensor-bench:
      VigilAccessory:
        serial_number: VGL123
        protocol: org.example.sensor
        socket: /run/vigil/vigild.sock

Environment (imports `vigil.labgrid` so the classes are known):

    targets:
      main:
        resources:
          RemotePlace: {name: sensor-bench}
        drivers:
          VigilSessionDriver: {}
    imports: [vigil.labgrid]

The driver is a labgrid ConsoleProtocol (read, write, sendline, expect).
From another machine it reaches the gateway's vigild socket through an SSH
forward of the Unix socket (`ssh -L`, labgrid's usual SSH access to the
exporter's host).
"""

from __future__ import annotations

import os
import shutil
import socket as _socket
import subprocess
import sys
import tempfile
import time
from typing import Any

try:
    import attr
    from labgrid.driver.common import Driver
    from labgrid.driver.consoleexpectmixin import ConsoleExpectMixin
    from labgrid.factory import target_factory
    from labgrid.protocol import ConsoleProtocol
    from labgrid.resource.common import ManagedResource, NetworkResource, Resource
    from labgrid.resource.remote import RemotePlaceManager
except ImportError as missing:  # pragma: no cover - depends on the installation
    raise ImportError(f"vigil.labgrid needs labgrid ({missing}): pip install 'vigil[labgrid]'") from missing

from ._frames import VigilError, socket_path
from .sync import ControlClient
from .testing import ByteStream, ControlSession


def _matches(accessory: dict[str, Any], serial_number: str, protocol: str, vendor_id: str | None,
             product_id: str | None) -> bool:
    return (accessory.get("serialNumber") == serial_number and protocol in (accessory.get("protocolStrings") or [])
            and (vendor_id is None or accessory.get("vendorID") == vendor_id)
            and (product_id is None or accessory.get("productID") == product_id))


def find_accessory(control: ControlClient, serial_number: str, protocol: str, vendor_id: str | None = None,
                   product_id: str | None = None) -> dict[str, Any] | None:
    """The connected accessory with this identity that speaks `protocol`, or None."""
    for accessory in control.accessories()["accessories"]:
        if _matches(accessory, serial_number, protocol, vendor_id, product_id):
            return dict(accessory)
    return None


def _optional_str() -> Any:
    return attr.ib(default=None, validator=attr.validators.optional(attr.validators.instance_of(str)))


@target_factory.reg_resource
@attr.s(eq=False)
class VigilAccessory(Resource):  # type: ignore[misc]
    """A serial accessory behind this machine's vigild, named by identity;
    available while vigild lists it."""

    serial_number: str = attr.ib(validator=attr.validators.instance_of(str))
    protocol: str = attr.ib(validator=attr.validators.instance_of(str))
    socket: str | None = _optional_str()
    vendor_id: str | None = _optional_str()
    product_id: str | None = _optional_str()

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.avail = False

    @property
    def socket_path(self) -> str:
        return socket_path(self.socket)

    def poll(self) -> None:
        try:
            with ControlClient(self.socket_path, timeout=5.0) as control:
                self.avail = find_accessory(control, self.serial_number, self.protocol, self.vendor_id,
                                            self.product_id) is not None
        except (VigilError, OSError):
            self.avail = False


@target_factory.reg_resource
@attr.s(eq=False)
class NetworkVigilAccessory(NetworkResource, ManagedResource):  # type: ignore[misc]
    """A VigilAccessory as a remote place sees it: on `host`, behind the vigild at `socket` there."""

    manager_cls = RemotePlaceManager

    serial_number: str = attr.ib(validator=attr.validators.instance_of(str))
    protocol: str = attr.ib(validator=attr.validators.instance_of(str))
    socket: str | None = _optional_str()
    vendor_id: str | None = _optional_str()
    product_id: str | None = _optional_str()

    def __attrs_post_init__(self) -> None:
        self.timeout = 10.0
        super().__attrs_post_init__()


def _is_local(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1", _socket.gethostname(), _socket.getfqdn())


@target_factory.reg_driver
@attr.s(eq=False)
class VigilSessionDriver(ConsoleExpectMixin, Driver, ConsoleProtocol):  # type: ignore[misc]
    """A console onto a Vigil accessory: a control-role session through the
    accessory's vigild, opened with `reopen` (it waits across unplug and replug)."""

    bindings = {"accessory": {"VigilAccessory", "NetworkVigilAccessory"}}

    line_settings: str | None = _optional_str()
    #: Seconds to wait for the accessory at activation.
    wait: float = attr.ib(default=30.0, converter=float)
    #: ConsoleExpectMixin's pacing (as SerialDriver's): 0 writes all at once.
    txdelay: float = attr.ib(default=0.0, converter=float)
    txchunk: int = attr.ib(default=1, converter=int)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._control: ControlClient | None = None
        self._session: int | None = None
        self._buffer = bytearray()
        self._forward: subprocess.Popen[bytes] | None = None
        self._forward_dir: str | None = None

    def _socket(self) -> str:
        path = socket_path(self.accessory.socket)
        host = getattr(self.accessory, "host", None)
        if host is None or _is_local(host):
            return path
        # Another machine: forward the gateway's Unix socket over SSH.
        self._forward_dir = tempfile.mkdtemp(prefix="vigil-labgrid-")
        local = os.path.join(self._forward_dir, "vigild.sock")
        self._forward = subprocess.Popen(
            ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes",
             "-L", f"{local}:{path}", host], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(local):
            if self._forward.poll() is not None or time.monotonic() > deadline:
                raise VigilError("disconnected", f"no SSH forward of {host}:{path}")
            time.sleep(0.05)
        return local

    def on_activate(self) -> None:
        self._control = ControlClient(self._socket())
        deadline = time.monotonic() + self.wait
        accessory = None
        while accessory is None:
            accessory = find_accessory(self._control, self.accessory.serial_number, self.accessory.protocol,
                                       self.accessory.vendor_id, self.accessory.product_id)
            if accessory is None:
                if time.monotonic() > deadline:
                    raise VigilError("notFound", f"no accessory {self.accessory.serial_number} speaking "
                                                 f"{self.accessory.protocol} within {self.wait} s")
                time.sleep(0.1)
        reply = self._control.open_session(accessory["connectionID"], self.accessory.protocol,
                                           line_settings=self.line_settings, reopen=True)
        self._session = int(reply["session"])

    def on_deactivate(self) -> None:
        if self._control is not None:
            self._control.close()
        self._control = self._session = None
        if self._forward is not None:
            self._forward.terminate()
            self._forward.wait()
            self._forward = None
        if self._forward_dir is not None:
            shutil.rmtree(self._forward_dir, ignore_errors=True)
            self._forward_dir = None

    @Driver.check_active  # type: ignore[untyped-decorator]
    def _read(self, size: int = 1, timeout: float = 0.0, max_size: int | None = None) -> bytes:
        assert self._control is not None
        deadline = time.monotonic() + timeout
        while len(self._buffer) < size:
            message = self._control.next_session_output(max(0.0, deadline - time.monotonic()))
            if message is None:
                break
            if message.type == "sessionClosed":
                # Opened with `reopen`: the session waits for the accessory and goes on
                # when it returns (the push does not say so: docs/protocol.md, "Pushed to control clients").
                continue
            self._buffer += message.body
        if not self._buffer:
            raise TimeoutError(f"no data from the accessory within {timeout} s")
        count = len(self._buffer) if max_size is None else min(len(self._buffer), max_size)
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    @Driver.check_active  # type: ignore[untyped-decorator]
    def _write(self, data: bytes) -> int:
        assert self._control is not None and self._session is not None
        return self._control.write(self._session, data)

    def open(self) -> None:
        """Nothing: the session opens at activation."""

    def close(self) -> None:
        """Nothing: the session closes at deactivation."""


def exporter_main(argv: list[str] | None = None) -> None:
    """labgrid-exporter, with `VigilAccessory` exportable."""
    from labgrid.remote import exporter
    from labgrid.remote.exporter import ResourceExport

    @attr.s(eq=False)
    class VigilAccessoryExport(ResourceExport):  # type: ignore[misc]
        def __attrs_post_init__(self) -> None:
            super().__attrs_post_init__()
            self.data["cls"] = "NetworkVigilAccessory"
            self.local = VigilAccessory(target=None, name=None, **self.local_params)  # type: ignore[call-arg]

        def _get_params(self) -> dict[str, Any]:
            return {"host": self.host, "serial_number": self.local.serial_number, "protocol": self.local.protocol,
                    "socket": self.local.socket_path, "vendor_id": self.local.vendor_id,
                    "product_id": self.local.product_id}

    exporter.exports["VigilAccessory"] = VigilAccessoryExport
    sys.argv = [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]
    exporter.main()


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "exporter":
        sys.exit("usage: python -m vigil.labgrid exporter [labgrid-exporter options] CONFIG")
    exporter_main(sys.argv[2:])


class PlaceSession(ControlSession):
    """The pytest plugin's `accessory_session` through a labgrid place (--vigil-place):
    write, read(n, timeout=), expect(pattern, timeout=) on a VigilSessionDriver's session,
    which waits across the accessory's unplug and replug."""

    def __init__(self, driver: VigilSessionDriver) -> None:
        ByteStream.__init__(self)
        self.driver = driver
        assert driver._control is not None and driver._session is not None
        self.control = driver._control
        self.id = driver._session
        self.close_reason = None

    def write(self, data: bytes) -> int:
        return int(self.driver.write(bytes(data)))

    def _more(self, timeout: float) -> bytes:
        try:
            return bytes(self.driver.read(size=1, timeout=max(timeout, 0.0), max_size=65536))
        except TimeoutError:
            return b""
