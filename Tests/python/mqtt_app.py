#!/usr/bin/python3
"""An app of test_mqtt.py: push wakes (`mqtt.message` events) and exports.

Launched by vigild. Records each event (fsync'd) before it acknowledges it,
like fault_app.py, and connects again when vigild restarts. With
--publish-count N it first publishes N messages "0".."N-1" to
--publish-topic through `mqtt.publish`, recording each reply.

Record lines (`kind`): started, hello, queued (i, seq), refusedPublish (i,
code), event (seq, eventKind, topic, payload, redelivered, duplicate),
dropped, refused.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from fault_app import Recorder, run_connected  # noqa: E402
from vigil_client import Event, VigilError  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True)
    parser.add_argument("--publish-topic", default="vigil-test/export")
    parser.add_argument("--publish-count", type=int, default=0)
    options = parser.parse_args()
    record = Recorder(options.record)
    record(kind="started")
    published = 0

    def serve(app):
        nonlocal published
        record(kind="hello", state=app.state, launch=app.launch)
        while published < options.publish_count:
            try:
                reply = app.mqtt_publish(options.publish_topic, str(published))
                record(kind="queued", i=published, seq=reply["seq"], queuedCount=reply["queued"])
            except VigilError as error:
                if error.code in ("disconnected",):
                    raise
                record(kind="refusedPublish", i=published, code=error.code, error=error.message)
            published += 1
        for item in app.events():
            if not isinstance(item, Event):
                continue
            record(kind="event", seq=item.seq, eventKind=item.kind, topic=item.attributes.get("topic"),
                   payload=item.payload.decode(errors="replace"), redelivered=item.redelivered,
                   duplicate=item.attributes.get("duplicate"))
            app.ack(item.seq)
            app.finished_processing()
        return True  # the event stream ended: vigild went; connect again

    return run_connected(record, None, serve)


if __name__ == "__main__":
    sys.exit(main())
