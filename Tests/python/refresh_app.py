#!/usr/bin/python3
"""An app with the `fetch` background mode, for test_refresh.py.

Schedules a refresh every --interval seconds (first after --earliest), and
answers each `app.refresh` event with `refresh.complete` and --result,
after acknowledging it. Records one JSON line per thing (hello, scheduled,
refresh, completed) in --record, with CLOCK_MONOTONIC times.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from vigil_client import AppClient, Event, VigilError  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--earliest", type=float, default=None)
    parser.add_argument("--result", default="newData")
    options = parser.parse_args()
    fd = os.open(options.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(**fields):
        fields.update(t=time.monotonic(), pid=os.getpid())
        os.write(fd, (json.dumps(fields, sort_keys=True) + "\n").encode())

    with AppClient() as app:
        record(kind="hello", state=app.state, launch=app.launch)
        try:
            reply = app.schedule_refresh(options.interval, options.earliest)
            record(kind="scheduled", next=reply["next"], interval=reply["interval"])
        except VigilError as error:
            record(kind="refused", code=error.code, message=error.message)
        for item in app.events():
            if not isinstance(item, Event):
                continue
            if item.kind == "app.refresh":
                record(kind="refresh", seq=item.seq, attributes=item.attributes, redelivered=item.redelivered)
                app.ack(item.seq)
                record(kind="completed", result=options.result)
                app.complete_refresh(options.result)
            else:
                app.ack(item.seq)
                app.finished_processing()


if __name__ == "__main__":
    sys.exit(main())
