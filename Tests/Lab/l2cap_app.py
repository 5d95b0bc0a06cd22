#!/usr/bin/python3
"""A Vigil app with an L2CAP channel, for 58-vigild-l2cap, or an RFCOMM
channel, for 65-vigild-rfcomm (not a test: the runner only runs files named
NN-name). Launched by vigild from a manifest.

RFCOMM (--rfcomm ADDR, --channel N or --uuid U): opens the channel at launch
(with --reopen: it connects again after it closed); `bluetooth.rfcomm.reopened`
is recorded as reopened.

Central role (--peripheral ADDR --psm N): connects, and opens a channel to
PSM N as soon as the link is up (with --reopen: again after a link loss).
Peripheral role (--publish NAME): publishes a dynamic PSM and advertises NAME;
channels centrals open arrive as `ble.l2cap.incoming`.

With --coalesce-ms N the channel is opened (or published) with
coalesceMilliseconds N. With --notify SERVICE/CHARACTERISTIC (and --peripheral)
it subscribes with ble.notify (vigild's default: AcquireNotify) and appends the
values of every `ble.notification` event to --notify-data, recording one
`notification` line per event {values, bytes} (lab/bench/92-bench-l2cap.py).

Every byte a channel delivers (`session.data`, read from the session log) is
appended to --data; JSON lines in --record say what happened (launch,
channelOpened, published, incoming, data {session, offset, length}, closed,
reopened, sent). A `l2cap.send` event (sent with `vigilctl wake`/control
`wake`, attribute `bytes`) makes it write that many bytes of the pattern
byte[i] = (i + 7) % 253 to its channel, under a background task. Each event is
acknowledged (in the background by finishedProcessing carrying the ack, one
frame), so the app is suspended between events.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import AppClient, ConnectionClosed, Event, Lifecycle, VigilError, monotonic_ns  # noqa: E402

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
    parser.add_argument("--rfcomm", metavar="ADDR")
    parser.add_argument("--channel", type=int)
    parser.add_argument("--uuid")
    parser.add_argument("--coalesce-ms", type=int)
    parser.add_argument("--notify", metavar="SERVICE/CHARACTERISTIC")
    parser.add_argument("--notify-data")
    options = parser.parse_args()

    def record(**fields):
        line = json.dumps(dict(fields, t=monotonic_ns(), pid=os.getpid()), sort_keys=True) + "\n"
        fd = os.open(options.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    state = {"session": None, "sent": 0}
    while True:  # connects again after vigild restarted (as VigilKit apps do)
        try:
            with connect(record) as app:
                if not serve(app, options, record, state):
                    return 0
        except ConnectionClosed as error:
            record(kind="dropped", error=error.message)
    return 0


def connect(record):
    """An AppClient, retrying while no vigild listens (it is restarting)."""
    pause, deadline = 0.05, time.monotonic() + 120
    while True:
        try:
            return AppClient()
        except (OSError, ConnectionClosed):
            if time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def serve(app, options, record, state):
    """One connection's life; False once told to terminate."""
    coalesce = {} if options.coalesce_ms is None else {"coalesceMilliseconds": options.coalesce_ms}
    record(kind="launch", state=app.state, launch=app.launch)
    session, sent = state["session"], state["sent"]
    # Woken in the background (a reconnection after vigild restarted), the
    # set-up must not be frozen halfway by the end of the wake's window.
    setup = app.begin_background_task("setup")
    if options.peripheral:
        app.request("ble.registerCentral", restoreIdentifier="l2capapp")
        app.request("ble.connect", peripheral=options.peripheral)
        if options.notify:
            service, characteristic = options.notify.split("/")
            app.request("ble.notify", peripheral=options.peripheral, service=service,
                        characteristic=characteristic, enabled=True)
            record(kind="subscribed", characteristic=characteristic)
    if options.publish:
        # With a restore identifier: after vigild restarted, its advertising
        # is restored (the app does not advertise again).
        registered = app.request("ble.registerPeripheral", restoreIdentifier="l2capserver")
        psm = app.request("ble.publishL2CAPChannel", **coalesce)["psm"]
        if not (registered.get("restored") or {}).get("advertisement"):
            app.request("ble.startAdvertising", advertisement={"localName": options.publish})
        record(kind="published", psm=psm)
    if options.rfcomm and session is None:
        target = {"channel": options.channel} if options.channel else {"uuid": options.uuid}
        reply = app.request("bluetooth.openRFCOMMChannel", device=options.rfcomm, reopen=options.reopen,
                            **target, **coalesce)
        session = state["session"] = reply["channel"]["session"]
        record(kind="channelOpened", channel=reply["channel"])
    app.end_background_task(setup)
    for item in app.events():
        if isinstance(item, Lifecycle):
            record(kind="lifecycle", event=item.event, state=item.state)
            if item.event == "willTerminate":
                return False
            continue
        if not isinstance(item, Event):
            continue
        kind, attributes = item.kind, item.attributes
        try:
            if kind == "ble.connected" and options.psm and session is None:
                reply = app.request("ble.openL2CAPChannel", peripheral=options.peripheral, psm=options.psm,
                                    reopen=options.reopen, **coalesce)
                session = state["session"] = reply["channel"]["session"]
                record(kind="channelOpened", channel=reply["channel"])
            elif kind == "ble.l2cap.incoming":
                session = state["session"] = attributes["session"]
                record(kind="incoming", channel=attributes)
            elif kind in ("ble.l2cap.reopened", "bluetooth.rfcomm.reopened"):
                record(kind="reopened", channel=attributes)
            elif kind == "session.data":
                # At its stream offset: an event delivered again (vigild
                # restarted before the acknowledgement was journaled) writes
                # the same bytes over themselves.
                fd = os.open(options.data, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.pwrite(fd, item.payload, attributes["offset"])
                finally:
                    os.close(fd)
                record(kind="data", session=attributes["session"], offset=attributes["offset"],
                       length=attributes["length"], seq=item.seq, redelivered=item.redelivered)
            elif kind == "ble.notification" and options.notify_data:
                values = [v.value for v in item.values]
                fd = os.open(options.notify_data, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, b"".join(values))
                finally:
                    os.close(fd)
                record(kind="notification", values=len(values), bytes=sum(map(len, values)), seq=item.seq)
            elif kind == "session.closed":
                record(kind="closed", session=attributes["session"], reason=attributes.get("reason"),
                       willReopen=attributes.get("willReopen"))
                if not attributes.get("willReopen") and attributes["session"] == session:
                    session = state["session"] = None
            elif kind == "session.loss":
                record(kind="loss", attributes=attributes)
            elif kind == "l2cap.send" and session is not None:
                count = int(attributes["bytes"])
                task = app.begin_background_task("l2cap.send")
                for start in range(sent, sent + count, 16384):
                    app.write(session, pattern(start, min(16384, sent + count - start)))
                sent = state["sent"] = sent + count
                record(kind="sent", bytes=sent)
                app.end_background_task(task)
            else:
                record(kind="event", eventKind=kind, attributes=attributes)
        except ConnectionClosed:
            raise
        except VigilError as error:
            record(kind="failed", eventKind=kind, code=error.code, error=error.message)
        if app.state not in FOREGROUND:
            app.finished_processing(acknowledging=item.seq)  # the ack in the same frame
        else:
            app.ack(item.seq)
    return True


if __name__ == "__main__":
    sys.exit(main())
