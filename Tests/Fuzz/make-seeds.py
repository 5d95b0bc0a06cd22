#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (scripts/fuzz, docs/reliability.md "Fuzzing").

    python3 Tests/Fuzz/make-seeds.py

Seeds are small valid inputs of every shape plus edge cases; libFuzzer grows
from them. Files are named seed-*; inputs merged in from a fuzzing run (sha1
names) and crash reproducers (crash-*) sit beside them and are kept.
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def frame(header, body=b""):
    if isinstance(header, (dict, list)):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    return struct.pack("<II", len(header), len(body)) + header + body


# One frame of every message type, as VigilProtocol encodes them (from the
# protocol tests' MessageSamples): name, header, body as hex.
SAMPLES = [
    ('00-hello', '{"app":"org.example.logger","client":"tests/1","role":"app","type":"hello","versions":[1]}', '000102ff'),
    ('01-hello', '{"id":1,"role":"control","type":"hello","versions":[1,2]}', ''),
    ('02-welcome', '{"app":"org.example.logger","daemon":"vigild/0.1.0","deadline":123456789000,"id":2,"launch":{"eventKind":"test","reason":"event","restoreIdentifiers":[]},"limits":{"maxBodyBytes":1048576,"maxHeaderBytes":65536},"role":"app","state":"background","type":"welcome","version":1}', ''),
    ('03-welcome', '{"daemon":"vigild/0.1.0","limits":{"maxBodyBytes":1048576,"maxHeaderBytes":65536},"role":"control","type":"welcome","version":1}', ''),
    ('04-reply', '{"id":4,"type":"reply"}', ''),
    ('05-error', '{"code":"invalidArgument","id":5,"message":"beginBackgroundTask: missing field \'name\'","type":"error"}', '000102ff'),
    ('06-error', '{"code":"malformedFrame","message":"header is not JSON","type":"error"}', ''),
    ('07-beginBackgroundTask', '{"id":7,"name":"upload","type":"beginBackgroundTask"}', ''),
    ('08-reply', '{"id":8,"task":0,"type":"reply"}', ''),
    ('09-endBackgroundTask', '{"task":3,"type":"endBackgroundTask"}', ''),
    ('10-finishedProcessing', '{"id":10,"type":"finishedProcessing"}', '000102ff'),
    ('11-backgroundTimeRemaining', '{"id":11,"type":"backgroundTimeRemaining"}', ''),
    ('12-reply', '{"seconds":42.5,"type":"reply"}', ''),
    ('13-reply', '{"id":13,"type":"reply"}', ''),
    ('14-ack', '{"id":14,"seq":18446744073709551615,"type":"ack"}', ''),
    ('15-lifecycle', '{"event":"didEnterBackground","state":"background","type":"lifecycle"}', '000102ff'),
    ('16-event', '{"attributes":{"n":1,"nested":{"a":[null]},"ok":true},"id":16,"kind":"test","redelivered":false,"seq":9,"type":"event"}', ''),
    ('17-event', '{"attributes":{"dropped":4,"firstDroppedKind":"test"},"id":17,"kind":"overflow","redelivered":true,"seq":10,"type":"event"}', ''),
    ('18-backgroundTaskExpiring', '{"name":"upload","task":2,"type":"backgroundTaskExpiring"}', ''),
    ('19-deadline', '{"deadline":99,"id":19,"type":"deadline"}', ''),
    ('20-deadline', '{"id":20,"type":"deadline"}', '000102ff'),
    ('21-status', '{"type":"status"}', ''),
    ('22-reply', '{"apps":2,"cgroupRoot":"/sys/fs/cgroup/vigil","daemon":"vigild/0.1.0","id":22,"manifestProblems":[{"field":"exec","file":"/etc/vigil/apps/bad.toml","message":"must not be empty"}],"pid":1,"protocolVersion":1,"socket":"/run/vigil/vigild.sock","suspension":"cgroup","suspensionDetail":"cgroup v2 freezer at /sys/fs/cgroup/vigil","timings":{"suspend-grace":5,"wake-budget":10},"type":"reply","uptime":3.25}', ''),
    ('23-apps', '{"id":23,"type":"apps"}', ''),
    ('24-reply', '{"apps":[{"backgroundModes":["external-accessory"],"backgroundTimeRemaining":167.5,"backgroundTimeUsed":12.5,"droppedEvents":0,"exitsOnSuspend":false,"forceQuit":false,"id":"org.example.logger","lastDecision":"wake","lastReason":"event 7 (test)","launchReason":"event","launches":1,"logPath":"/var/log/vigil/org.example.logger.log","manifestPath":"/etc/vigil/apps/logger.toml","pid":4242,"queuedEvents":2,"state":"background","tasks":[{"id":1,"name":"upload"}],"unacknowledgedEvents":1,"wakes":3},{"backgroundModes":[],"backgroundTimeRemaining":null,"backgroundTimeUsed":0,"droppedEvents":0,"exitsOnSuspend":true,"forceQuit":true,"id":"org.example.idle","lastDecision":null,"lastReason":null,"launchReason":null,"launches":0,"logPath":null,"manifestPath":"/etc/vigil/apps/idle.toml","pid":null,"queuedEvents":0,"state":"notRunning","tasks":[],"unacknowledgedEvents":0,"wakes":0}],"type":"reply"}', ''),
    ('25-appAction', '{"action":"terminate","app":"org.example.logger","id":25,"type":"appAction"}', '000102ff'),
    ('26-reply', '{"app":{"backgroundModes":["external-accessory"],"backgroundTimeRemaining":167.5,"backgroundTimeUsed":12.5,"droppedEvents":0,"exitsOnSuspend":false,"forceQuit":false,"id":"org.example.logger","lastDecision":"wake","lastReason":"event 7 (test)","launchReason":"event","launches":1,"logPath":"/var/log/vigil/org.example.logger.log","manifestPath":"/etc/vigil/apps/logger.toml","pid":4242,"queuedEvents":2,"state":"background","tasks":[{"id":1,"name":"upload"}],"unacknowledgedEvents":1,"wakes":3},"id":26,"type":"reply"}', ''),
    ('27-wake', '{"app":"org.example.logger","attributes":{"sent":123},"kind":"test","type":"wake"}', ''),
    ('28-wake', '{"app":"org.example.logger","id":28,"type":"wake"}', ''),
    ('29-reply', '{"disposition":"woke","id":29,"seq":11,"type":"reply"}', ''),
    ('30-log', '{"app":"org.example.logger","limit":20,"type":"log"}', '000102ff'),
    ('31-log', '{"id":31,"type":"log"}', ''),
    ('32-reply', '{"decisions":[{"action":"suspend","app":"org.example.logger","reason":"grace period over","state":"suspended","time":1700000000}],"id":32,"type":"reply"}', ''),
    ('33-reload', '{"type":"reload"}', ''),
    ('34-reply', '{"apps":["org.example.logger"],"id":34,"problems":[{"file":"x.toml","message":"not TOML"}],"type":"reply"}', ''),
    ('35-accessories', '{"id":35,"type":"accessories"}', '000102ff'),
    ('36-reply', '{"accessories":[{"connectionID":7,"deviceNode":"/dev/ttyACM0","firmwareRevision":"1.02","hardwareRevision":"","lineSettings":"115200 8N1","manufacturer":"Vigil Lab","modelNumber":"VS-1","name":"Vigil Sensor","productID":"0001","protocolStrings":["org.example.sensor"],"serialNumber":"SN0001","sysPath":"/sys/devices/usb1/1-1/1-1:1.0/tty/ttyACM0","vendorID":"1209"}],"sessions":[{"bufferedBytes":512,"bytesIn":4096,"bytesOut":12,"connectionID":7,"frameErrors":1,"holder":"app org.example.logger","lineSettings":"115200 8N1","overruns":2,"parityErrors":0,"protocol":"org.example.sensor","readingPaused":true,"session":3}],"type":"reply"}', ''),
    ('37-reply', '{"accessories":[],"id":37,"type":"reply"}', ''),
    ('38-registerForAccessoryNotifications', '{"enabled":false,"id":38,"type":"registerForAccessoryNotifications"}', ''),
    ('39-openSession', '{"connectionID":7,"lineSettings":"9600 7E1 xonxoff","protocol":"org.example.sensor","reopen":true,"type":"openSession"}', ''),
    ('40-openSession', '{"connectionID":7,"id":40,"protocol":"org.example.sensor","type":"openSession"}', '000102ff'),
    ('41-reply', '{"accessory":{"connectionID":7,"deviceNode":"/dev/ttyACM0","firmwareRevision":"1.02","hardwareRevision":"","lineSettings":"115200 8N1","manufacturer":"Vigil Lab","modelNumber":"VS-1","name":"Vigil Sensor","productID":"0001","protocolStrings":["org.example.sensor"],"serialNumber":"SN0001","sysPath":"/sys/devices/usb1/1-1/1-1:1.0/tty/ttyACM0","vendorID":"1209"},"id":41,"session":3,"type":"reply"}', ''),
    ('42-write', '{"session":3,"type":"write"}', ''),
    ('43-reply', '{"id":43,"type":"reply","written":65536}', ''),
    ('44-closeSession', '{"id":44,"session":3,"type":"closeSession"}', ''),
    ('45-sessionData', '{"session":3,"type":"sessionData"}', '000102ff'),
    ('46-sessionClosed', '{"id":46,"reason":"the accessory was unplugged","session":3,"type":"sessionClosed"}', ''),
    ('47-watchAccessories', '{"id":47,"type":"watchAccessories"}', ''),
    ('48-accessoryEvent', '{"accessory":{"connectionID":7,"deviceNode":"/dev/ttyACM0","firmwareRevision":"1.02","hardwareRevision":"","lineSettings":"115200 8N1","manufacturer":"Vigil Lab","modelNumber":"VS-1","name":"Vigil Sensor","productID":"0001","protocolStrings":["org.example.sensor"],"serialNumber":"SN0001","sysPath":"/sys/devices/usb1/1-1/1-1:1.0/tty/ttyACM0","vendorID":"1209"},"change":"disconnected","type":"accessoryEvent"}', ''),
    # MQTT export and push (docs/fleet.md): the payload is the frame's body.
    ('49-mqtt.publish', '{"id":49,"topic":"fleet/gw1/org.example.logger/data","type":"mqtt.publish"}', '7b2274223a32312e357d'),
    ('50-mqtt.publish', '{"id":50,"qos":1,"topic":"fleet/gw1/a","type":"mqtt.publish"}', ''),
    ('51-mqtt.publish', '{"id":51,"qos":2,"topic":"fleet/+/bad/#","type":"mqtt.publish"}', '000102ff'),
    ('52-reply', '{"connected":false,"id":52,"queued":3,"seq":1764100000000001,"type":"reply"}', ''),
    ('53-event', '{"attributes":{"duplicate":false,"retained":false,"topic":"fleet/gw1/org.example.logger/cmd"},"id":53,"kind":"mqtt.message","redelivered":false,"seq":12,"type":"event"}', '7374617274'),
]

# Bluetooth LE messages and protocol edge cases: name -> stream bytes.
FRAMES = {
    "ble-registerCentral": frame({"type": "ble.registerCentral", "id": 1, "restoreIdentifier": "hrm"}),
    "ble-state": frame({"type": "ble.state", "id": 2}),
    "ble-scan": frame({"type": "ble.scan", "id": 3, "services": ["180d", "0x180F"], "allowDuplicates": True}),
    "ble-connect": frame({"type": "ble.connect", "id": 4, "peripheral": "AA:BB:CC:DD:EE:FF"}),
    "ble-read": frame({"type": "ble.read", "id": 5, "peripheral": "AA:BB:CC:DD:EE:FF", "service": "180d",
                       "characteristic": "2a38", "descriptor": "2901"}),
    "ble-write": frame({"type": "ble.write", "id": 6, "peripheral": "AA:BB:CC:DD:EE:FF", "service": "180d",
                        "characteristic": "2a39", "withResponse": True}, b"\x01"),
    "ble-notify": frame({"type": "ble.notify", "id": 7, "peripheral": "AA:BB:CC:DD:EE:FF", "service": "180d",
                         "characteristic": "2a37", "enabled": True, "acquire": False}),
    "ble-addService": frame({"type": "ble.addService", "id": 8, "service": {
        "uuid": "180d", "primary": True, "characteristics": [
            {"uuid": "2a37", "properties": ["notify"]},
            {"uuid": "2a38", "properties": ["read"], "value": "01",
             "descriptors": [{"uuid": "2901", "value": "626f6479"}]}]}}),
    "ble-startAdvertising": frame({"type": "ble.startAdvertising", "id": 9, "advertisement": {
        "localName": "Vigil HRM", "serviceUUIDs": ["180d"], "manufacturerData": {"65535": "0102"},
        "serviceData": {"180d": "00"}, "appearance": 833}}),
    "ble-respond": frame({"type": "ble.respond", "id": 10, "request": 3, "error": "notPermitted"}, b"\x00\x3c"),
    "ble-updateValue": frame({"type": "ble.updateValue", "id": 11, "service": "180d", "characteristic": "2a37"},
                             b"\x00\x48"),
    "ble-removeService": frame({"type": "ble.removeService", "id": 12, "uuid": "180d"}),
    # Several frames in one read, and a frame split at its end.
    "stream-three-frames": frame({"type": "hello", "versions": [1], "role": "app"})
        + frame({"type": "ack", "seq": 1}) + frame({"type": "finishedProcessing", "id": 2}),
    "stream-truncated": frame({"type": "ack", "seq": 3}, b"xyz")[:-2],
    "stream-prefix-only": struct.pack("<II", 12, 0),
    # Framing errors: empty header, limits (64 KiB header, 1 MiB body).
    "edge-empty-header": struct.pack("<II", 0, 0),
    "edge-header-too-large": struct.pack("<II", 64 * 1024 + 1, 0) + b"{",
    "edge-body-too-large": struct.pack("<II", 2, 1024 * 1024 + 1) + b"{}",
    "edge-max-lengths": struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF),
    # Headers that are not what they should be.
    "edge-not-json": frame("hello"),
    "edge-json-array": frame([1, 2]),
    "edge-no-type": frame({"id": 1}),
    "edge-type-number": frame({"type": 7}),
    "edge-unknown-type": frame({"type": "reboot", "id": 1}),
    "edge-id-fraction": frame({"type": "status", "id": 1.5}),
    "edge-id-huge": frame({"type": "status", "id": 99999999999999999999}),
    "edge-hello-no-versions": frame({"type": "hello", "role": "control"}),
    "edge-hello-bad-role": frame({"type": "hello", "versions": [1], "role": "root", "app": 7}),
    "edge-log-negative-limit": frame({"type": "log", "id": 1, "limit": -1}),
    "edge-ack-negative": frame({"type": "ack", "seq": -1}),
    "edge-ack-too-big": frame('{"type":"ack","seq":18446744073709551616}'),
    "edge-wake-big-numbers": frame('{"type":"wake","app":"a","attributes":{"x":1e308,"y":-1e-320,"z":1e999}}'),
    "edge-wake-deep": frame('{"type":"wake","app":"a","attributes":{"x":' + "[" * 64 + "]" * 64 + "}}"),
    "edge-invalid-utf8": frame(b'{"type":"wake","app":"\xff\xc0\xaf"}'),
    "edge-escaped-surrogate": frame('{"type":"wake","app":"\\ud800","kind":"\\u0000"}'),
    "edge-duplicate-keys": frame('{"type":"ack","type":"status","seq":1}'),
    "edge-open-session-negative": frame({"type": "openSession", "connectionID": -1, "protocol": ""}),
}

# GATT service definitions (ble.addService's "service").
GATT = {
    "heart-rate": {"uuid": "180d", "characteristics": [
        {"uuid": "2a37", "properties": ["notify"]},
        {"uuid": "2a38", "properties": ["read"], "value": "01"},
        {"uuid": "2a39", "properties": ["write"]}]},
    "full-uuids": {"uuid": "0000180F-0000-1000-8000-00805F9B34FB", "primary": False, "characteristics": [
        {"uuid": "0x2A19", "properties": ["read", "notify", "encrypt-read"]}]},
    "custom-128": {"uuid": "12345678-1234-5678-1234-56789abcdef0", "characteristics": [
        {"uuid": "12345678123456781234567812345678", "properties": ["read", "write-without-response"]},
        {"uuid": "abcd1234", "properties": ["indicate", "authorize"]}]},
    "descriptors": {"uuid": "181a", "characteristics": [
        {"uuid": "2a6e", "properties": ["read"], "value": "0x0102",
         "descriptors": [{"uuid": "2901", "value": "74 65 6d 70"}, {"uuid": "2904", "value": "0e:fe:2f:27:01:00:00"}]}]},
    "empty-service": {"uuid": "1800", "characteristics": []},
    "bad-uuid": {"uuid": "xyz", "characteristics": []},
    "regression-fullwidth-uuid": {"uuid": "\uff11\uff18\uff10\uff44", "characteristics": []},
    "duplicate-characteristic": {"uuid": "180d", "characteristics": [
        {"uuid": "2a37", "properties": ["notify"]}, {"uuid": "0x2A37", "properties": ["read"]}]},
    "no-properties": {"uuid": "180d", "characteristics": [{"uuid": "2a37", "properties": []}]},
    "unknown-property": {"uuid": "180d", "characteristics": [{"uuid": "2a37", "properties": ["fly"]}]},
    "fixed-writable": {"uuid": "180d", "characteristics": [{"uuid": "2a38", "properties": ["read", "write"], "value": "01"}]},
    "fixed-not-readable": {"uuid": "180d", "characteristics": [{"uuid": "2a38", "properties": ["broadcast"], "value": "01"}]},
    "odd-hex": {"uuid": "180d", "characteristics": [{"uuid": "2a38", "properties": ["read"], "value": "123"}]},
    "cccd": {"uuid": "180d", "characteristics": [
        {"uuid": "2a37", "properties": ["notify"], "descriptors": [{"uuid": "2902", "value": "0100"}]}]},
    "bad-descriptor-value": {"uuid": "180d", "characteristics": [
        {"uuid": "2a37", "properties": ["notify"], "descriptors": [{"uuid": "2901", "value": "zz"}]}]},
    "dashes-in-short": {"uuid": "18-0d", "characteristics": []},
}

# App manifests, daemon configs and TOML of every shape (the same bytes are
# read as a document, a manifest and a config): name -> text or bytes.
TOML = {
    "manifest-logger": """# A sensor logger
id = "org.example.logger"
exec = ["/usr/bin/logger-app", "--out", "/var/lib/logger"]
background-modes = ["external-accessory"]
accessory-protocols = ["org.example.sensor"]
exits-on-suspend = false
working-directory = "/var/lib/logger"

[environment]
LOG_LEVEL = "debug"
""",
    "manifest-bluetooth": """id = "org.vigil.example.hrm-bridge"
exec = ["/usr/local/bin/vigil-hrm-bridge", "--republish"]
background-modes = ["bluetooth-central", "bluetooth-peripheral"]
exits-on-suspend = true
""",
    "manifest-minimal": 'id = "a.b"\nexec = ["x"]\n',
    "manifest-inline-env": 'id = "org.example.x"\nexec = ["/bin/true"]\nenvironment = { A = "1", "B.C" = \'2\' }\n',
    "manifest-bad-mode": 'id = "org.example.x"\nexec = ["/bin/true"]\nbackground-modes = ["audio", 7]\n',
    "manifest-empty-exec": 'id = "org.example.x"\nexec = []\n',
    "manifest-unknown-key": 'id = "org.example.x"\nexec = ["/bin/true"]\nexecs = ["typo"]\n',
    "manifest-relative-dir": 'id = "org.example.x"\nexec = ["/bin/true"]\nworking-directory = "relative"\n',
    "config-full": """socket = "run/vigild.sock"
manifest-dirs = ["/etc/vigil/apps", "apps"]
state-dir = "/var/lib/vigil"
log-dir = "/var/log/vigil"
cgroup-root = "/sys/fs/cgroup/vigil"
suspension = "auto"
on-stop = "leave"
event-queue-limit = 1000
decision-log-size = 2000
session-buffer-limit = 1048576
bluetooth = true
bluetooth-request-timeout = 20.0

[timings]
suspend-grace = 5
wake-budget = 10.5
background-time-limit = 180
expiration-warning = 5
exit-grace = 5
relaunch-window = 60
relaunch-limit = 3

[[accessory]]
vendor-id = "1209"
product-id = "0001"
serial-number = "VGL123"
protocols = ["org.example.sensor"]
line-settings = "115200 8N1 rtscts"
name = "Example sensor"

[[accessory]]
by-id = "/dev/serial/by-id/usb-Example_Sensor_VGL123-if00"
protocols = ["org.example.other"]
""",
    "config-huge-duration": "[timings]\nsuspend-grace = 1e300\n",
    "config-zero-and-max": "event-queue-limit = 9223372036854775807\n[timings]\nsuspend-grace = 0\n",
    "config-negative": "decision-log-size = -1\n[timings]\nwake-budget = -5\n",
    "config-nan-inf": "[timings]\nwake-budget = nan\nexit-grace = inf\nrelaunch-window = -inf\n",
    "config-wrong-types": 'suspension = 3\nbluetooth = "yes"\ntimings = "fast"\n',
    "config-bad-accessory": '[[accessory]]\nvendor-id = "zz"\nprotocols = ["$(reboot)", ";rm"]\n',
    "toml-values": (
        'str = "a\\tb\\u00e9\\U0001F600"\n'
        "lit = 'C:\\path'\n"
        'ml = """\ntwo\nlines"""\n'
        "mll = '''raw\ntext'''\n"
        "int = +99\nhex = 0xDEAD_beef\noct = 0o755\nbin = 0b1101\nflt = 6.626e-34\nunder = 1_000.5\n"
        "odt = 1979-05-27T07:32:00.999999-07:00\nldt = 1979-05-27 07:32:00\nld = 1979-05-27\nlt = 00:32:00.5\n"
        'arr = [ 1, [2, 3], "x", { a = 1 }, ]\n'
        'a.b."c d" = true\n'
        "[t1.t2]\nx = 1\n[[arr2]]\n[[arr2]]\ny = 2\n"
    ),
    "toml-triple-bracket": "[[[",
    "toml-triple-bracket-closed": "[[[]]]",
    # toml++ (TOMLKit) aborted on these, found by fuzzing: parse_key and parse_value assertions.
    "regression-toml-parse-key": "[}",
    "regression-toml-parse-value": "a =[}",
    "toml-unterminated": 'a = "abc\nb = [1, 2\nc = { d = 1',
    "toml-redefined": "a = 1\na = 2\n[t]\n[t]\n",
    "toml-deep-arrays": "a = " + "[" * 200 + "]" * 200 + "\n",
    "toml-deep-inline": "a = " + "{b=" * 150 + "1" + "}" * 150 + "\n",
    "toml-big-integers": "a = 9223372036854775808\nb = -9223372036854775809\nc = 0xFFFFFFFFFFFFFFFFF\n",
    "toml-bad-dates": "a = 1979-02-30T25:61:61Z\nb = 0000-01-01\nc = 12:00\n",
    "toml-crlf": "a = 1\r\nb = \"x\"\r\n[t]\r\nc = 2\r\n",
}
TOML_BYTES = {
    "toml-bom": b"\xef\xbb\xbfa = 1\n",
    "toml-invalid-utf8": b'a = "\xff\xc0\xaf"\n',
    "toml-nul": b'a = "x\x00y"\n',
    "toml-control-chars": b'a = "\x1b[31m\x7f"\n\x0c',
}


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    frames = os.path.join(HERE, "Corpus", "FuzzFrames")
    for name, header, body in SAMPLES:
        write(frames, name, frame(header, bytes.fromhex(body)))
    for name, data in FRAMES.items():
        write(frames, name, data)
    gatt = os.path.join(HERE, "Corpus", "FuzzGATT")
    for name, definition in GATT.items():
        write(gatt, name, json.dumps(definition, ensure_ascii=False).encode())
    toml = os.path.join(HERE, "Corpus", "FuzzTOML")
    for name, text in TOML.items():
        write(toml, name, text.encode())
    for name, data in TOML_BYTES.items():
        write(toml, name, data)


if __name__ == "__main__":
    main()
