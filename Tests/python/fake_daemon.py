"""A scripted stand-in for vigild that speaks the "Accessories" part of
docs/protocol.md, so clients' accessory code (vigil_client.py, vigilctl) is
tested without udev or hardware. It behaves as the document says and records
what it was sent; it knows one accessory and answers every session the same:

- `openSession` (control): the reply, then `sessionData` "hello from the device\\n";
- `write`: the reply after a short delay (a slow device), then (control) the
  bytes back upper-cased as `sessionData`, or, if they contain UNPLUG,
  `sessionClosed` "the accessory was unplugged";
- `watchAccessories`: the reply, then a disconnect of the accessory and the
  connect of a new connection of it, then it closes the connection;
- (app) `registerForAccessoryNotifications`: `accessory.connected`;
  `openSession`: `session.data` "line 1\\n", `session.loss`, `session.closed`.
"""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from vigil_client import FrameDecoder, encode_frame  # noqa: E402

PROTOCOL = "org.example.sensor"
ACCESSORY = {
    "connectionID": 7, "name": "Vigil Sensor", "manufacturer": "Vigil Lab", "modelNumber": "VS-1",
    "serialNumber": "SN0001", "firmwareRevision": "1.02", "hardwareRevision": "", "protocolStrings": [PROTOCOL],
    "deviceNode": "/dev/ttyACM0", "vendorID": "1209", "productID": "0001",
    "sysPath": "/sys/devices/usb1/1-1/1-1:1.0/tty/ttyACM0", "lineSettings": "115200 8N1",
}
SESSION = {
    "session": 3, "connectionID": 7, "protocol": PROTOCOL, "holder": "app org.example.logger",
    "lineSettings": "115200 8N1", "bytesIn": 4096, "bytesOut": 12, "bufferedBytes": 512, "readingPaused": True,
    "overruns": 2, "parityErrors": 0, "frameErrors": 1,
}
LIMITS = {"maxHeaderBytes": 65536, "maxBodyBytes": 1048576}


class FakeDaemon:
    def __init__(self, path):
        self.path = path
        self.requests = []  # headers, in arrival order (all connections)
        self.bodies = []    # bodies of `write` requests
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self._listener.close()

    def requests_of(self, type):
        with self._lock:
            return [header for header in self.requests if header["type"] == type]

    def _accept(self):
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=_Peer(self, sock).run, daemon=True).start()

    def _record(self, message):
        with self._lock:
            self.requests.append(dict(message.header, receivedAt=time.monotonic()))
            if message.type == "write":
                self.bodies.append(message.body)


class _Peer:
    def __init__(self, daemon, sock):
        self.daemon = daemon
        self.sock = sock
        self.role = None
        self.seq = 0
        self._send_lock = threading.Lock()

    def send(self, header, body=b""):
        with self._send_lock:
            self.sock.sendall(encode_frame(header, body))

    def reply(self, message, **members):
        self.send({"type": "reply", **({"id": message.id} if message.id is not None else {}), **members})

    def event(self, kind, attributes, body=b""):
        self.seq += 1
        self.send({"type": "event", "seq": self.seq, "kind": kind, "attributes": attributes, "redelivered": False}, body)

    def run(self):
        decoder = FrameDecoder()
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                decoder.feed(data)
                while (message := decoder.next_message()) is not None:
                    self.daemon._record(message)
                    self.handle(message)
        except OSError:
            return
        finally:
            self.sock.close()

    def handle(self, message):
        kind = message.type
        if kind == "hello":
            self.role = message["role"]
            app = {"app": "org.example.logger", "state": "active", "launch": {"reason": "user"}} if self.role == "app" else {}
            self.send({"type": "welcome", "version": 1, "daemon": "fake-vigild/1", "role": self.role, "limits": LIMITS, **app})
        elif kind == "accessories":
            self.reply(message, accessories=[ACCESSORY], **({"sessions": [SESSION]} if self.role == "control" else {}))
        elif kind == "watchAccessories":
            self.reply(message, accessories=[ACCESSORY], sessions=[])
            self.send({"type": "accessoryEvent", "change": "disconnected", "accessory": ACCESSORY})
            self.send({"type": "accessoryEvent", "change": "connected",
                       "accessory": dict(ACCESSORY, connectionID=8, deviceNode="/dev/ttyACM1")})
            self.sock.shutdown(socket.SHUT_RDWR)
        elif kind == "openSession":
            if message["connectionID"] != 7 or message["protocol"] != PROTOCOL:
                self.send({"type": "error", "id": message.id, "code": "invalidArgument",
                           "message": f"accessory 7 (Vigil Sensor) does not speak '{message['protocol']}'"})
                return
            self.reply(message, session=3, accessory=ACCESSORY)
            if self.role == "control":
                self.send({"type": "sessionData", "session": 3}, b"hello from the device\n")
            else:
                self.event("session.data", {"session": 3}, b"line 1\n")
                self.event("session.loss", {"session": 3, "overruns": 2, "parityErrors": 0, "frameErrors": 1})
                self.event("session.closed", {"session": 3, "reason": "the device hung up", "willReopen": False})
        elif kind == "write":
            time.sleep(0.02)  # the device takes its time: the reply waits for it
            self.reply(message, written=len(message.body))
            if self.role != "control":
                return
            if b"UNPLUG" in message.body:
                self.send({"type": "sessionClosed", "session": 3, "reason": "the accessory was unplugged"})
            else:
                self.send({"type": "sessionData", "session": 3}, message.body.upper())
        elif kind == "sessionLines":
            # Serial line control (docs/protocol.md, "Serial line control"): the lines follow the requests.
            self.lines = dict(getattr(self, "lines", {"dtr": True, "rts": True, "cts": False, "dsr": True,
                                                      "dcd": True, "ri": False}))
            self.lines.update({name: message[name] for name in ("dtr", "rts") if name in message.header})
            self.reply(message, lines=self.lines)
        elif kind == "sendBreak":
            time.sleep(message["milliseconds"] / 1000)
            self.reply(message)
        elif kind == "registerForAccessoryNotifications":
            self.reply(message)
            if message.get("enabled"):
                self.event("accessory.connected", dict(ACCESSORY, connectionID=9))
        elif kind in ("closeSession", "finishedProcessing"):
            self.reply(message)
        elif kind != "ack" and message.id is not None:
            self.send({"type": "error", "id": message.id, "code": "unknownMessage", "message": kind})
