#!/usr/bin/python3
"""A Vigil app with an L2CAP channel, for 58-vigild-l2cap (not a test: the
runner only runs files named NN-name). Launched by vigild from a manifest.

Central role (--peripheral ADDR --psm N): connects, and opens a channel to
PSM N as soon as the link is up (with --reopen: again after a link loss).
Peripheral role (--publish NAME): publishes a dynamic PSM and advertises NAME;
channels centrals open arrive as `ble.l2cap.incoming`.

Every byte a channel delivers (`session.data`, read from the session log) is
appended to --data; JSON lines in --record say what happened (launch,
channelOpened, published, incoming, data {session, offset, length}, closed,
reopened, sent). A `l2cap.send` event (sent with `vigilctl wake`/control
`wake`, attribute `bytes`) makes it write that many bytes of the pattern
byte[i] = (i + 7) % 253 to its channel, under a background task. Each event is
acknowledged and, in the background, followed by finishedProcessing, so the
app is suspended between events.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import AppClient, Event, Lifecycle, VigilError, monotonic_ns  # noqa: E402

FOREGROUND = ("active", "inactive")


def pattern(start, n):
    return bytes((i + 7) % 253 for i in range(start, start + n))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--peripheral")
    parser.add_argument("--psm", type=lambda s: int(s, 0))
    parser.add_argument("--reopen", action="store_true")
    parser.add_argument("--publish", metavar="NAME")
    options = parser.parse_args()

    def record(**fields):
        line = json.dumps(dict(fields, t=monotonic_ns(), pid=os.getpid()), sort_keys=True) + "\n"
        fd = os.open(options.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    with AppClient() as app:
        record(kind="launch", state=app.state, launch=app.launch)
        session = None
        sent = 0
        if options.peripheral:
            app.request("ble.registerCentral")
            app.request("ble.connect", peripheral=options.peripheral)
        if options.publish:
            app.request("ble.registerPeripheral")
            psm = app.request("ble.publishL2CAPChannel")["psm"]
            app.request("ble.startAdvertising", advertisement={"localName": options.publish})
            record(kind="published", psm=psm)
        for item in app.events():
            if isinstance(item, Lifecycle):
                record(kind="lifecycle", event=item.event, state=item.state)
                if item.event == "willTerminate":
                    return 0
                continue
            if not isinstance(item, Event):
                continue
            kind, attributes = item.kind, item.attributes
            try:
                if kind == "ble.connected" and options.psm and session is None:
                    reply = app.request("ble.openL2CAPChannel", peripheral=options.peripheral, psm=options.psm,
                                        reopen=options.reopen)
                    session = reply["channel"]["session"]
                    record(kind="channelOpened", channel=reply["channel"])
                elif kind == "ble.l2cap.incoming":
                    session = attributes["session"]
                    record(kind="incoming", channel=attributes)
                elif kind == "ble.l2cap.reopened":
                    record(kind="reopened", channel=attributes)
                elif kind == "session.data":
                    fd = os.open(options.data, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    try:
                        os.write(fd, item.payload)
                    finally:
                        os.close(fd)
                    record(kind="data", session=attributes["session"], offset=attributes["offset"],
                           length=attributes["length"], seq=item.seq, redelivered=item.redelivered)
                elif kind == "session.closed":
                    record(kind="closed", session=attributes["session"], reason=attributes.get("reason"),
                           willReopen=attributes.get("willReopen"))
                    if not attributes.get("willReopen") and attributes["session"] == session:
                        session = None
                elif kind == "session.loss":
                    record(kind="loss", attributes=attributes)
                elif kind == "l2cap.send" and session is not None:
                    count = int(attributes["bytes"])
                    task = app.begin_background_task("l2cap.send")
                    for start in range(sent, sent + count, 16384):
                        app.write(session, pattern(start, min(16384, sent + count - start)))
                    sent += count
                    record(kind="sent", bytes=sent)
                    app.end_background_task(task)
                else:
                    record(kind="event", eventKind=kind, attributes=attributes)
            except VigilError as error:
                record(kind="failed", eventKind=kind, code=error.code, error=error.message)
            app.ack(item.seq)
            if app.state not in FOREGROUND:
                app.finished_processing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
