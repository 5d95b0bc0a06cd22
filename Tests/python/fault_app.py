#!/usr/bin/python3
"""The fault suite's app: a logger that acknowledges only what is on disk.

Launched by vigild (a manifest's `exec`). Writes one JSON line per thing it
receives to --record, and fsyncs it, before it acknowledges: a crash of the
app or of vigild can then only cause redelivery, never loss, and the record
file shows the test exactly what arrived, how often and with which flags.

Like VigilKit's `Application`, it connects again when its connection drops
(vigild restarted) and stops at `unauthorized`/`unsupportedVersion`. After
each event it says it has finished processing, so vigild may suspend it.

    --accessory-protocol P   keep a `reopen` session with the accessory that
                             speaks P (opened again after every reconnect)
    --start-delay S          sleep S seconds before the first connection
                             (an app slow to start: an interpreter, a
                             loaded machine)
    --hold                   leave an event whose attribute `hold` is true
                             unacknowledged the first time (redelivered
                             copies are acknowledged), and, since `ack` is
                             cumulative, every later one on that connection:
                             the app then holds unacknowledged events
    --ack-delay S            take S seconds over each event before
                             acknowledging it (a slow app: vigild may
                             suspend it mid-event), then record `acked`
                             once vigild has read the `ack`: the reply to
                             a request sent after it (frames are read in
                             order) proves it, so the record's time is no
                             earlier than vigild's reading
    --ack-file PATH          right after each hello, if PATH exists: send
                             `ack` for the seq it holds, record `acked`
                             (late: true) and remove it (an app that
                             finishes on a new connection an event it got
                             before, ahead of its redelivery)
    --ack-after S            acknowledge each event S seconds after it
                             arrived, reading on meanwhile (events that
                             arrive together are acknowledged together),
                             then record `acked`; finishedProcessing once
                             no acknowledgement is due

Record lines (`kind`): started (the process, before any delay), hello (pid, state, launch), event (seq, eventKind,
redelivered, attributes, payloadHex, acked), acked (seq; with --ack-delay once vigild has read the `ack`), lifecycle, sessionOpened,
openFailed, dropped (the connection), refused (exit at unauthorized).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from vigil_client import AppClient, ConnectionClosed, Event, Lifecycle, VigilError  # noqa: E402

# Connect again after 50 ms, doubling up to this (VigilKit's backoff), for at most GIVE_UP s.
BACKOFF_LIMIT = 1.0
GIVE_UP = 120.0
# How often a missing session is asked for again while the app runs.
REOPEN_EVERY = 0.5


class Recorder:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, **fields):
        fields.update(pid=os.getpid(), t=time.monotonic())
        # One write per line on O_APPEND, then fsync: the line is whole and durable before any ack.
        os.write(self.fd, (json.dumps(fields, sort_keys=True) + "\n").encode())
        os.fsync(self.fd)


def connect(record, socket_path):
    """An AppClient, retrying while no daemon listens; None when refused for good."""
    pause, deadline = 0.05, time.monotonic() + GIVE_UP
    while True:
        try:
            return AppClient(socket_path)
        except VigilError as error:
            if error.code in ("unauthorized", "unsupportedVersion") or time.monotonic() > deadline:
                record(kind="refused", code=error.code, error=error.message)
                return None
        except OSError:
            if time.monotonic() > deadline:
                record(kind="refused", code="unreachable", error="no daemon")
                return None
        time.sleep(pause)
        pause = min(pause * 2, BACKOFF_LIMIT)


def serve(app, record, options):
    """One connection's life; returns True to connect again, False to exit."""
    record(kind="hello", app=app.app_id, state=app.state, launch=app.launch)
    if options.ack_file and os.path.exists(options.ack_file):
        with open(options.ack_file) as file:
            late = int(file.read())
        app.ack(late)
        record(kind="acked", seq=late, late=True)
        os.unlink(options.ack_file)
    session = None
    tried = 0.0

    def open_session():
        nonlocal session, tried
        tried = time.monotonic()
        for accessory in app.accessories():
            if options.accessory_protocol not in accessory["protocolStrings"]:
                continue
            try:
                reply = app.open_session(accessory["connectionID"], options.accessory_protocol, reopen=True)
            except VigilError as error:
                record(kind="openFailed", code=error.code, error=error.message)
                continue
            session = reply["session"]
            record(kind="sessionOpened", session=session, connectionID=accessory["connectionID"])
            return

    if options.accessory_protocol:
        app.register_for_accessory_notifications()
        open_session()
    holding = False  # `ack` is cumulative: nothing after a held event is acknowledged on this connection
    due = []  # --ack-after: (when, seq) in arrival order
    while True:
        if options.accessory_protocol and session is None and time.monotonic() - tried > REOPEN_EVERY:
            open_session()
        while due and due[0][0] <= time.monotonic():
            seq = due.pop(0)[1]
            app.ack(seq)
            record(kind="acked", seq=seq)
            if not due:
                app.finished_processing()
        wait = REOPEN_EVERY if not due else max(0.0, min(REOPEN_EVERY, due[0][0] - time.monotonic()))
        item = app.next_event(timeout=wait)
        if item is None:
            continue
        if isinstance(item, Lifecycle):
            record(kind="lifecycle", event=item.event, state=item.state)
            if item.event == "willTerminate":
                return False
            continue
        if not isinstance(item, Event):
            continue
        holding = holding or (options.hold and item.attributes.get("hold") is True and not item.redelivered)
        record(kind="event", seq=item.seq, eventKind=item.kind, redelivered=item.redelivered,
               attributes=item.attributes, payloadHex=item.payload.hex(), acked=not holding)
        if item.kind == "session.closed" and item.attributes.get("session") == session \
                and not item.attributes.get("willReopen"):
            session = None
        elif item.kind == "accessory.connected" and session is None and options.accessory_protocol:
            open_session()
        if options.ack_after:
            due.append((time.monotonic() + options.ack_after, item.seq))
            continue
        if not holding:
            if options.ack_delay:
                time.sleep(options.ack_delay)  # the work; the app may be frozen meanwhile
            app.ack(item.seq)
            if options.ack_delay:
                # `ack` has no reply; this request's reply comes after vigild read it.
                app.background_time_remaining()
                record(kind="acked", seq=item.seq)
        app.finished_processing()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True)
    parser.add_argument("--socket", default=None)
    parser.add_argument("--accessory-protocol", default=None)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--start-delay", type=float, default=0.0)
    parser.add_argument("--ack-delay", type=float, default=0.0)
    parser.add_argument("--ack-after", type=float, default=0.0)
    parser.add_argument("--ack-file", default=None)
    options = parser.parse_args()
    record = Recorder(options.record)
    record(kind="started")
    time.sleep(options.start_delay)
    return run_connected(record, options.socket, lambda app: serve(app, record, options))


def run_connected(record, socket_path, serve_one):
    """Connects and calls `serve_one(app)` until it returns False (exit 0),
    connecting again whenever vigild drops the connection (it restarted, or
    a request failed with the connection up); a refusal ends it (exit 1).
    Shared with mqtt_app.py."""
    while True:
        app = connect(record, socket_path)
        if app is None:
            return 1
        try:
            with app:
                if not serve_one(app):
                    return 0
        except ConnectionClosed as error:
            record(kind="dropped", error=error.message)
        except VigilError as error:
            if error.code in ("unauthorized", "unsupportedVersion"):
                record(kind="refused", code=error.code, error=error.message)
                return 1
            # A request failed with the connection still up: start over on a new one.
            record(kind="dropped", error=f"{error.code}: {error.message}")


if __name__ == "__main__":
    sys.exit(main())
