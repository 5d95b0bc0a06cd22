#!/usr/bin/python3
"""test_finish_ack's app: ends each wake with one `finishedProcessing` that
carries the acknowledgement (issue 31), and records what it did.

    --mode library   `finished_processing(acknowledging=seq)` (the package's ledger)
    --mode beyond    the raw request with `ack` far beyond the event's seq
                     (the daemon acknowledges only what it sent this connection)
    --mode bad       first a raw request with `ack: -1` (refused, nothing done),
                     then as `library`
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from vigil_client import AppClient, Event, VigilError  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--mode", choices=("library", "beyond", "bad"), required=True)
    options = parser.parse_args()

    def record(**fields):
        fields.update(pid=os.getpid(), t=time.monotonic())
        with open(options.record, "a") as file:
            file.write(json.dumps(fields, sort_keys=True) + "\n")
            file.flush()
            os.fsync(file.fileno())

    with AppClient() as app:
        record(kind="hello", state=app.state)
        for item in app.events():
            if not isinstance(item, Event):
                continue
            record(kind="event", seq=item.seq, redelivered=item.redelivered)
            if app.state in ("active", "inactive"):
                app.ack(item.seq)
                continue
            if options.mode == "bad":
                try:
                    app.request("finishedProcessing", ack=-1)
                    record(kind="badAccepted")
                except VigilError as error:
                    record(kind="badRefused", code=error.code, error=error.message)
            record(kind="finished", seq=item.seq)
            if options.mode == "beyond":
                app.request("finishedProcessing", ack=item.seq + 1000)
            else:
                app.finished_processing(acknowledging=item.seq)


if __name__ == "__main__":
    main()
