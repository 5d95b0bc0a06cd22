#!/usr/bin/python3
"""A minimal Vigil app in Python, usable as an app's `exec` in a manifest:

    exec = ["/usr/bin/python3", "/path/to/clients/python/example_app.py", "--record", "/tmp/py.jsonl"]

It connects as an app, writes one JSON line per thing it receives to the file
named by --record or $VIGIL_PY_RECORD (the body as hex, so binary payloads can
be checked byte for byte), acknowledges each event and then, in the
background, says it has finished processing, so the daemon may suspend it at
once. A `ble.notification`
event gets one line per value it carries (`payloadHex` the value, `attributes`
its characteristic, `batch` how many the event held), written at once; a
`ble.monitor.advertisements` event one line per advertisement (`address`,
`rssi`, `manufacturer` company -> data hex, `batch`, `lost`).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vigil_client import AppClient, Event, Lifecycle, VigilError, monotonic_ns  # noqa: E402
from vigil.monitor import advertisement_records  # noqa: E402


# finishedProcessing matters only in the background (in the foreground the
# daemon never suspends the app): not sent there, it costs nothing per event.
FOREGROUND = ("active", "inactive")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", default=os.environ.get("VIGIL_PY_RECORD"), help="JSON-lines file to append to")
    parser.add_argument("--socket", default=None, help="daemon socket (default: $VIGIL_SOCKET, ...)")
    parser.add_argument("--accessory-protocol", default=None,
                        help="register for accessory notifications and keep a session open with the "
                             "first accessory speaking this protocol (reopened when it is replugged)")
    parser.add_argument("--watch-lines", choices=["wake", "held"], default=None,
                        help="watch the session's modem lines (session.lines events), waking the app or not")
    parser.add_argument("--ack-delay", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long before acknowledging each session.data or ble.notification event: "
                             "a slow consumer, so that the daemon's session buffer fills (back-pressure tests) "
                             "or notifications gather into batches")
    parser.add_argument("--ble-peripheral", default=None, metavar="ADDRESS",
                        help="create a central manager, connect to this peripheral and stay connected")
    parser.add_argument("--ble-notify", action="append", default=[], metavar="SERVICE/CHARACTERISTIC[#INSTANCE]",
                        help="subscribe to this characteristic of --ble-peripheral (repeatable; #1: the second of its UUID)")
    parser.add_argument("--ble-notify-on-wake", action="store_true",
                        help="subscribe (--ble-notify) when a wake with the payload 'subscribe' comes, not at start")
    parser.add_argument("--ble-adapter", default=None, metavar="ADAPTER",
                        help="connect to --ble-peripheral through this adapter (hci1, or its address)")
    parser.add_argument("--ble-acquire", choices=["auto", "true", "false"], default="auto",
                        help="ble.notify's acquire: auto (absent: AcquireNotify where possible), true or false (StartNotify)")
    parser.add_argument("--restore-id", default=None, help="the central or peripheral manager's restore identifier")
    parser.add_argument("--ble-monitor", action="append", default=[], metavar="MONITOR_JSON",
                        help="start this advertisement monitor (ble.monitor.start's members; repeatable)")
    parser.add_argument("--ble-serve", default=None, metavar="SERVICE_JSON",
                        help="publish this GATT service (ble.addService's `service`); answer reads of dynamic "
                             "characteristics with value-N (N counting reads) and accept writes")
    parser.add_argument("--ble-advertise", default=None, metavar="NAME",
                        help="with --ble-serve: advertise the service under this local name")
    parser.add_argument("--ble-pair-passkey", type=int, default=None, metavar="N",
                        help="answer pairing prompts: a passkey prompt with N, a confirmation by accepting")
    parser.add_argument("--ble-pair", action="store_true",
                        help="with --ble-peripheral: ask to pair with it once connected, from the event loop, which "
                             "the request blocks (not when the daemon restored the central: a pairing cut by its "
                             "restart is resumed by it)")
    parser.add_argument("--ble-updates", type=int, default=0, metavar="N",
                        help="with --ble-serve: when a central subscribes, send N value updates (00 01, 00 02, ...)")
    parser.add_argument("--rfcomm-publish", default=None, metavar="SERVICE_JSON",
                        help="publish a serial port service (bluetooth.publishRFCOMMService members) at launch; "
                             "write back each incoming channel's bytes (an echo)")
    options = parser.parse_args()

    def record(**fields):
        record_all([fields])

    def record_all(lines):
        t = monotonic_ns()
        text = "".join(json.dumps(dict(fields, t=t, pid=os.getpid()), sort_keys=True) + "\n" for fields in lines)
        print(text, end="", flush=True)
        if options.record:
            # One write on an O_APPEND descriptor: whole even if the app is frozen next.
            descriptor = os.open(options.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(descriptor, text.encode())
            finally:
                os.close(descriptor)

    pair_when_connected = False
    with AppClient(options.socket) as app:
        record(kind="launch", app=app.app_id, state=app.state, launch=app.launch)
        session = None

        def open_session(accessories):
            nonlocal session
            for accessory in accessories:
                if session is None and options.accessory_protocol in accessory["protocolStrings"]:
                    try:
                        reply = app.open_session(accessory["connectionID"], options.accessory_protocol, reopen=True)
                    except Exception as error:  # noqa: BLE001 - recorded for the test to see
                        record(kind="openFailed", error=str(error))
                        continue
                    session = reply["session"]
                    record(kind="sessionOpened", session=session, connectionID=accessory["connectionID"])
                    if options.watch_lines:
                        lines = app.request("watchSessionLines", session=session, enabled=True,
                                            wake=options.watch_lines == "wake")["lines"]
                        record(kind="watchingLines", lines=lines)

        if options.accessory_protocol:
            app.register_for_accessory_notifications()
            open_session(app.accessories())
        def subscribe():
            acquire = {} if options.ble_acquire == "auto" else {"acquire": options.ble_acquire == "true"}
            for path in options.ble_notify:
                path, _, instance = path.partition("#")
                service, characteristic = path.split("/")
                which = {"instance": int(instance)} if instance else {}
                app.request("ble.notify", peripheral=options.ble_peripheral, service=service,
                            characteristic=characteristic, enabled=True, **acquire, **which)
            record(kind="subscribed")

        if options.ble_peripheral or options.ble_monitor:
            members = {"restoreIdentifier": options.restore_id} if options.restore_id else {}
            registered = app.request("ble.registerCentral", **members)
            restored = registered.get("restored")
            record(kind="centralRegistered", state=registered["state"], restored=restored)
            if restored is None and options.ble_monitor:
                for monitor in options.ble_monitor:
                    app.request("ble.monitor.start", **json.loads(monitor))
            if restored is None and options.ble_peripheral:
                adapter = {} if options.ble_adapter is None else {"adapter": options.ble_adapter}
                app.request("ble.connect", peripheral=options.ble_peripheral, **adapter)
                if not options.ble_notify_on_wake:
                    subscribe()
            # At the first ble.connected (BlueZ knows the device then).
            pair_when_connected = restored is None and options.ble_pair and options.ble_peripheral
            record(kind="bleReady")
        reads = 0
        if options.ble_serve:
            members = {"restoreIdentifier": options.restore_id} if options.restore_id else {}
            registered = app.request("ble.registerPeripheral", **members)
            restored = registered.get("restored")
            record(kind="peripheralRegistered", state=registered["state"], restored=restored)
            if restored is None:
                service = json.loads(options.ble_serve)
                app.request("ble.addService", service=service)
                if options.ble_advertise:
                    app.request("ble.startAdvertising", advertisement={
                        "localName": options.ble_advertise, "serviceUUIDs": [service["uuid"]]})
            record(kind="bleServing")
        if options.rfcomm_publish:
            try:
                published = app.request("bluetooth.publishRFCOMMService", **json.loads(options.rfcomm_publish))
                record(kind="rfcommPublished", uuid=published["uuid"], channel=published.get("channel"))
            except VigilError as error:
                record(kind="rfcommRefused", code=error.code, error=error.message)
        rfcomm_sessions = set()
        for item in app.events():
            if isinstance(item, Lifecycle):
                record(kind="lifecycle", event=item.event, state=item.state)
                if item.event == "willTerminate":
                    return 0
            elif isinstance(item, Event) and item.kind == "ble.notification":
                # The values and the end of their handling in one write: one line per value.
                record_all([dict(kind="event", seq=item.seq, eventKind=item.kind, redelivered=item.redelivered,
                                 attributes={"peripheral": v.peripheral, "service": v.service,
                                             "characteristic": v.characteristic,
                                             **({"instance": v.instance} if v.instance else {})},
                                 payloadHex=v.value.hex(), batch=len(item.values)) for v in item.values]
                           + [dict(kind="finished", seq=item.seq)])
                if options.ack_delay > 0:
                    time.sleep(options.ack_delay)
                if app.state not in FOREGROUND:
                    app.finished_processing(acknowledging=item.seq)
                else:
                    app.ack(item.seq)
            elif isinstance(item, Event) and item.kind == "ble.monitor.advertisements":
                # One line per advertisement and the end of the handling, in one write.
                records = advertisement_records(item.attributes, item.payload)
                record_all([dict(kind="advertisement", seq=item.seq, monitor=item.attributes.get("monitor"),
                                 lost=item.attributes.get("lost", 0), address=r.address, rssi=r.rssi,
                                 manufacturer={str(k): v.hex() for k, v in r.manufacturer_data.items()},
                                 received=r.time, batch=len(records), redelivered=item.redelivered)
                            for r in records] + [dict(kind="finished", seq=item.seq)])
                if options.ack_delay > 0:
                    time.sleep(options.ack_delay)
                if app.state not in FOREGROUND:
                    app.finished_processing(acknowledging=item.seq)
                else:
                    app.ack(item.seq)
            elif isinstance(item, Event):
                record(kind="event", seq=item.seq, eventKind=item.kind, attributes=item.attributes,
                       payloadHex=item.payload.hex(), redelivered=item.redelivered)
                if item.kind == "accessory.connected":
                    open_session([item.attributes])
                elif item.kind == "ble.connected" and pair_when_connected:
                    pair_when_connected = False
                    record(kind="pairing")
                    try:
                        paired = app.request("ble.pair", peripheral=options.ble_peripheral)
                        record(kind="paired", paired=paired["paired"], bonded=paired["bonded"])
                    except VigilError as error:
                        record(kind="pairFailed", code=error.code, error=error.message)
                elif item.kind == "bluetooth.rfcomm.incoming":
                    rfcomm_sessions.add(item.attributes["session"])
                elif item.kind == "session.data" and item.attributes.get("session") in rfcomm_sessions:
                    app.write(item.attributes["session"], item.payload)
                elif item.kind == "session.closed" and item.attributes.get("session") == session \
                        and not item.attributes.get("willReopen"):
                    session = None
                try:
                    if item.kind == "test" and item.payload == b"subscribe" and options.ble_notify_on_wake:
                        subscribe()
                    elif item.kind == "ble.peripheral.read":
                        app.request("ble.respond", request=item.attributes["request"], body=f"value-{reads + 1}".encode())
                        reads += 1  # answers that reached a central
                    elif item.kind == "ble.peripheral.write" and "request" in item.attributes:
                        app.request("ble.respond", request=item.attributes["request"])
                    elif item.kind == "ble.pairingRequest" and options.ble_pair_passkey is not None:
                        passkey = options.ble_pair_passkey if item.attributes.get("kind") == "passkey" else None
                        app.request("ble.pairingResponse", request=item.attributes["request"], accept=True,
                                    **({"passkey": passkey} if passkey is not None else {}))
                        record(kind="pairingAnswered", request=item.attributes["request"])
                    elif item.kind == "ble.peripheral.subscribed":
                        for n in range(1, options.ble_updates + 1):
                            update = app.request("ble.updateValue", service=item.attributes["service"],
                                                 characteristic=item.attributes["characteristic"], body=bytes([0, n]))
                            record(kind="updateSent", n=n, sent=update["sent"], subscribed=update["subscribed"])
                except VigilError as error:
                    # E.g. a redelivered request (after a crash) that was already answered or timed out.
                    record(kind="bleRequestFailed", seq=item.seq, code=error.code, error=error.message)
                if item.kind == "session.data" and options.ack_delay > 0:
                    time.sleep(options.ack_delay)
                app.ack(item.seq)
                # Recorded first: with no task held the daemon freezes the app as soon as it replies.
                record(kind="finished", seq=item.seq)
                if app.state not in FOREGROUND:
                    app.finished_processing()
    record(kind="disconnected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
