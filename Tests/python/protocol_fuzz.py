"""Random frames for vigild, and an app that sends them from inside an app's cgroup.

test_protocol.py uses `FrameFuzzer` as a control client and launches this file
as an app (vigild launches it; it connects with the app role):

    protocol_fuzz.py fuzz   --out FILE --count N --seed S   random app-role frames
    protocol_fuzz.py script --out FILE --frames FILE        the given headers, one by one,
                                                            each followed by a probe request
    protocol_fuzz.py takeover --out FILE                    a second connection of the app
                                                            while the first holds an event

Both write one JSON object to FILE when done. Only the standard library and
clients/python/vigil_client.py are used.
"""

import argparse
import json
import os
import random
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from vigil_client import FrameDecoder, VigilError  # noqa: E402

# Known request types and their members, per role (docs/protocol.md).
COMMON = {
    "accessories": [],
    "openSession": ["connectionID", "protocol", "lineSettings", "reopen"],
    "write": ["session"],
    "closeSession": ["session"],
    "ble.registerCentral": ["restoreIdentifier"],
    "ble.state": [],
    "ble.scan": ["services", "allowDuplicates"],
    "ble.stopScan": [],
    "ble.peripherals": [],
    "ble.connect": ["peripheral"],
    "ble.disconnect": ["peripheral"],
    "ble.discover": ["peripheral"],
    "ble.read": ["peripheral", "service", "characteristic", "descriptor"],
    "ble.write": ["peripheral", "service", "characteristic", "withResponse"],
    "ble.notify": ["peripheral", "service", "characteristic", "enabled", "acquire"],
    "ble.registerPeripheral": ["restoreIdentifier"],
    "ble.addService": ["service"],
    "ble.removeService": ["uuid"],
    "ble.startAdvertising": ["advertisement"],
    "ble.stopAdvertising": [],
    "ble.respond": ["request", "error"],
    "ble.updateValue": ["service", "characteristic"],
    "ble.openL2CAPChannel": ["peripheral", "psm", "reopen", "security", "receiveMTU", "coalesceMilliseconds"],
    "ble.publishL2CAPChannel": ["psm", "security", "receiveMTU", "coalesceMilliseconds"],
    "ble.unpublishL2CAPChannel": ["psm"],
    "ble.l2cap": [],
    "bluetooth.openRFCOMMChannel": ["device", "channel", "uuid", "reopen", "security", "coalesceMilliseconds"],
}
APP_TYPES = dict(COMMON, **{
    "beginBackgroundTask": ["name"],
    "endBackgroundTask": ["task"],
    "backgroundTimeRemaining": [],
    "ack": ["seq"],
    "registerForAccessoryNotifications": ["enabled"],
    "mqtt.publish": ["topic", "qos"],
    # finishedProcessing is left out: it could freeze this very process mid-run.
})
CONTROL_TYPES = dict(COMMON, **{
    "status": [],
    "apps": [],
    "appAction": ["action", "app"],
    "wake": ["app", "kind", "attributes"],
    "log": ["app", "limit"],
    "reload": [],
    "watchAccessories": [],
})
HELLO_MEMBERS = ["versions", "role", "app", "client"]

INTERESTING_INTS = [0, 1, -1, 2, 7, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32, 2**53, 2**53 + 1,
                    2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64 - 1, 2**64, 10**30]
INTERESTING_STRINGS = ["", "a", "test", "launch", "quit", "terminate", "background", "foreground", "app", "control",
                       "180d", "0x2A37", "C0:DE:00:00:00:01", "org.example.x", "\u202e", "\x00", "é" * 3,
                       "x" * 300, "9600 7E1 xonxoff", "accessory.connected", "ble.notification"]


def frame(header_bytes, body=b""):
    return struct.pack("<II", len(header_bytes), len(body)) + header_bytes + body


class Generator:
    def __init__(self, rng, app_ids=()):
        self.rng = rng
        self.app_ids = list(app_ids)

    def value(self, depth=0):
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            kind = rng.random()
            if kind < 0.3:
                return rng.randint(-3, 9)  # small counts and ids, the negative ones included
            return rng.choice(INTERESTING_INTS) if kind < 0.8 else rng.randint(-2**70, 2**70)
        if roll < 0.4:
            return rng.choice([0.5, -0.5, 1.0, 1e300, -1e300, 3.25, 1e-300, 2.0**63])
        if roll < 0.6:
            if self.app_ids and rng.random() < 0.2:
                return rng.choice(self.app_ids)
            return rng.choice(INTERESTING_STRINGS)
        if roll < 0.7:
            return rng.choice([True, False, None])
        if roll < 0.85 and depth < 3:
            return [self.value(depth + 1) for _ in range(rng.randint(0, 4))]
        if depth < 3:
            keys = ["uuid", "characteristics", "properties", "value", "descriptors", "appearance", "localName",
                    "serviceUUIDs", "manufacturerData", "serviceData", "primary", "n", ""]
            return {rng.choice(keys): self.value(depth + 1) for _ in range(rng.randint(0, 4))}
        return rng.choice(INTERESTING_INTS)

    def header(self, types):
        """A JSON header (bytes), mostly a known type with its members given
        random values; and whether the daemon must refuse it as a malformed frame."""
        rng = self.rng
        if rng.random() < 0.05:
            type_name = rng.choice(["hello", "noSuchType", "", "reply", "event", "error"])
            members = HELLO_MEMBERS if type_name == "hello" else []
        else:
            type_name = rng.choice(sorted(types))
            members = types[type_name]
        header = {"type": type_name}
        if rng.random() < 0.9:
            header["id"] = rng.randint(1, 10**6) if rng.random() < 0.9 else self.value()
        for member in members:
            if rng.random() < 0.85:
                header[member] = self.value()
        if rng.random() < 0.1:
            header["future"] = self.value()
        text = json.dumps(header, ensure_ascii=rng.random() < 0.5)  # floats like 1e300, ints beyond 64 bits
        malformed = "id" in header and not (
            header["id"] is None or (type(header["id"]) is int and -2**63 <= header["id"] < 2**63)
            or (type(header["id"]) is float and header["id"].is_integer() and abs(header["id"]) <= 2**53))
        if rng.random() < 0.02:
            changed = text.replace("0.5", "NaN")  # not JSON at all
            malformed = malformed or changed != text
            text = changed.replace("1e+300", "1e400")
        return text.encode(), malformed

    def frame(self, types):
        """One frame's bytes, and what becomes of the connection: None (it goes
        on, or the daemon ends it), "answered" (a fatal error comes at once),
        "cut" (the frame is incomplete: the client ends the connection)."""
        rng = self.rng
        roll = rng.random()
        body = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 0, 0, 1, 17, 300]))) if rng.random() < 0.3 else b""
        if roll < 0.80:
            header, malformed = self.header(types)
            return frame(header, body), "answered" if malformed else None
        if roll < 0.86:  # invalid UTF-8 somewhere in an otherwise fine header
            header = bytearray(self.header(types)[0])
            position = rng.randrange(len(header))
            header[position:position] = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"])
            return frame(bytes(header), body), "answered"
        if roll < 0.90:  # random bytes as the header (not a JSON object)
            return frame(b"\x01" + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 63))), body), "answered"
        if roll < 0.93:  # a header cut short (still a complete frame by its prefix)
            header = self.header(types)[0]
            return frame(header[:rng.randrange(len(header) - 1)] or b"{", body), "answered"
        if roll < 0.96:  # a prefix over the limits, or H = 0
            return struct.pack("<II", rng.choice([0, 65537, 2**32 - 1]), rng.choice([0, 1048577, 2**32 - 1])), "answered"
        # A truncated frame: the prefix promises more than comes; the connection then ends.
        whole = frame(self.header(types)[0], body)
        return whole[:rng.randrange(1, len(whole))], "cut"


class RawPeer:
    """A socket that sends frames and drains whatever comes back, never blocking for long."""

    def __init__(self, path, hello=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.decoder = FrameDecoder()
        self.closed = False
        self.received = 0
        if hello is not None:
            self.sock.sendall(frame(json.dumps(hello).encode()))
            welcome = self.next(timeout=10)
            if welcome is None or welcome.type != "welcome":
                raise VigilError("handshake", f"hello answered with {welcome and welcome.header}")

    def send(self, data):
        """False if the daemon had already closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def drain(self, timeout=0.0):
        """Reads what has arrived (waiting up to `timeout` for the first bytes)."""
        self.sock.settimeout(timeout if timeout > 0 else 0.0)
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    self.closed = True
                    return
                self.decoder.feed(data)
                self.sock.settimeout(0.0)
        except (BlockingIOError, socket.timeout):
            return
        except OSError:
            self.closed = True

    def next(self, timeout=5.0):
        """The next frame, or None at end of stream or after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.decoder.next_message()
            except VigilError:
                return None
            if message is not None:
                self.received += 1
                return message
            if self.closed or time.monotonic() >= deadline:
                return None
            self.drain(max(0.001, deadline - time.monotonic()))

    def close(self):
        self.sock.close()


def fuzz(path, hello, types, count, rng, app_ids=(), log=None):
    """Sends `count` random frames as `hello` says (None: before any hello),
    reconnecting whenever the daemon ends the connection. Returns figures."""
    generator = Generator(rng, app_ids)
    figures = {"frames": 0, "connections": 0, "answers": 0}
    peer = None
    while figures["frames"] < count:
        if peer is None or peer.closed:
            if peer is not None:
                figures["answers"] += peer.received
                peer.close()
            peer = RawPeer(path, hello)
            figures["connections"] += 1
        data, ending = generator.frame(types)
        if not peer.send(data):
            continue  # the daemon closed it after an earlier frame: send this one on a new connection
        figures["frames"] += 1
        if log is not None:
            log.write(data.hex() + "\n")
        # A frame the daemon must refuse is answered at once (then the connection
        # ends): wait for that, so no later frame goes to a closing connection.
        # Before the handshake every connection carries one frame.
        if ending == "cut":
            pass
        elif ending == "answered" or hello is None:
            peer.drain(1.0)
        else:
            peer.drain()
        if ending is not None or hello is None:
            peer.closed = True
        while peer.decoder.next_message() is not None:
            peer.received += 1
    if peer is not None:
        peer.drain(0.2)
        figures["answers"] += peer.received
        peer.close()
    return figures


def run_script(path, headers):
    """Sends each header (text) on one app connection; records the answer to
    it and whether a probe request afterwards is still answered."""
    results = []
    peer = RawPeer(path, {"type": "hello", "versions": [1], "role": "app"})
    probe_id = 1_000_000
    for text in headers:
        if peer.closed:
            peer = RawPeer(path, {"type": "hello", "versions": [1], "role": "app"})
        peer.send(frame(text.encode()))
        probe_id += 1
        peer.send(frame(json.dumps({"type": "backgroundTimeRemaining", "id": probe_id}).encode()))
        answer, probe = None, None
        while probe is None:
            message = peer.next(timeout=10)
            if message is None:
                break
            if message.id == probe_id:
                probe = message.header
            elif message.type in ("reply", "error"):
                answer = message.header
        results.append({"sent": text, "answer": answer, "probe": probe})
    peer.close()
    return results


def run_takeover(path):
    """Connection A takes an event and does not acknowledge it; connection B of
    the same app says hello. Reports what A saw after that and what B got."""
    hello = {"type": "hello", "versions": [1], "role": "app"}
    first = RawPeer(path, hello)
    event = None
    while event is None:
        message = first.next(timeout=10)
        if message is None:
            return {"error": "no event on the first connection"}
        if message.type == "event":
            event = message.header
    second = RawPeer(path, hello)
    after = []
    while True:
        message = first.next(timeout=10)
        if message is None:
            break
        after.append(message.header)
    redelivered = None
    while redelivered is None:
        message = second.next(timeout=10)
        if message is None:
            break
        if message.type == "event":
            redelivered = message.header
    if redelivered is not None:
        second.send(frame(json.dumps({"type": "ack", "seq": redelivered["seq"]}).encode()))
    second.send(frame(json.dumps({"type": "backgroundTimeRemaining", "id": 1}).encode()))
    probe = None
    while probe is None:
        message = second.next(timeout=10)
        if message is None:
            break
        if message.id == 1:
            probe = message.header
    return {"first": event, "afterTakeover": after, "firstClosed": first.closed, "second": redelivered, "probe": probe}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["fuzz", "script", "takeover"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--frames")
    arguments = parser.parse_args()
    path = os.environ["VIGIL_SOCKET"]
    if arguments.mode == "fuzz":
        figures = fuzz(path, {"type": "hello", "versions": [1], "role": "app"}, APP_TYPES, arguments.count,
                       random.Random(arguments.seed))
        result = {"figures": figures}
    elif arguments.mode == "takeover":
        result = run_takeover(path)
    else:
        with open(arguments.frames) as frames:
            result = {"results": run_script(path, json.load(frames))}
    temporary = arguments.out + ".tmp"
    with open(temporary, "w") as out:
        json.dump(result, out)
    os.rename(temporary, arguments.out)
    # Stay until the daemon ends this app, as apps do.
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
