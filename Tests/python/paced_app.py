#!/usr/bin/python3
"""The app of bench_paced.py: connected to N Bluetooth LE peripherals with
one subscription each, or holding a session on every accessory of a
protocol, woken by paced events. Each event is acknowledged and, in the
background, followed by finishedProcessing; one short line per event goes to
the record file (`seq`, `kind`, `values`), in one O_APPEND write.

    paced_app.py --record FILE [--ble ADDRESS ...] [--notify SERVICE/CHAR] [--sessions PROTOCOL]
"""

import argparse
import json
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import AppClient, Event, Lifecycle  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True)
    parser.add_argument("--ble", action="append", default=[], metavar="ADDRESS")
    parser.add_argument("--notify", default="180d/2a37", metavar="SERVICE/CHARACTERISTIC")
    parser.add_argument("--sessions", default=None, metavar="PROTOCOL")
    options = parser.parse_args()

    def record(**fields):
        descriptor = os.open(options.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(descriptor, (json.dumps(fields) + "\n").encode())
        finally:
            os.close(descriptor)

    with AppClient() as app:
        if options.ble:
            app.request("ble.registerCentral", restoreIdentifier="bench")
            service, characteristic = options.notify.split("/")
            for address in options.ble:
                app.request("ble.connect", peripheral=address)
                app.request("ble.notify", peripheral=address, service=service, characteristic=characteristic, enabled=True)
        sessions = 0
        if options.sessions:
            for accessory in app.accessories():
                if options.sessions in accessory["protocolStrings"]:
                    app.open_session(accessory["connectionID"], options.sessions)
                    sessions += 1
        record(kind="ready", sessions=sessions)
        for item in app.events():
            if isinstance(item, Lifecycle):
                if item.event == "willTerminate":
                    return 0
            elif isinstance(item, Event):
                values = len(item.values) if item.kind == "ble.notification" else 0
                record(kind=item.kind, seq=item.seq, values=values)
                app.ack(item.seq)
                if app.state not in ("active", "inactive"):
                    app.finished_processing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
