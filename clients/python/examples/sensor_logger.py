#!/usr/bin/env python3
"""A sensor logger app for vigild: appends whatever a serial accessory sends to a file.

Opens a session with the first accessory that speaks PROTOCOL (and again with
each one that is plugged in), writes every chunk to the log as it comes, and
says `finished_processing` in the background: with the `external-accessory`
mode vigild keeps the port open while the app is suspended and wakes it when
data arrives (one wake per burst). A chunk is acknowledged once stored, so
what the app had not stored when it died comes again to the next process.

Manifest:
    id = "org.example.sensor-logger"
    exec = ["/path/to/venv/bin/python", "/path/to/sensor_logger.py", "org.vigil.sensor", "/var/tmp/sensor.log"]
    background-modes = ["external-accessory"]
    accessory-protocols = ["org.vigil.sensor"]
"""

import asyncio
import sys

import vigil


async def log_session(app: vigil.App, accessory: vigil.Accessory, protocol: str, path: str) -> None:
    async with await app.open_session(accessory, protocol, reopen=True) as session:
        async for chunk in session:
            with open(path, "ab") as log:
                log.write(chunk)
            session.acknowledge()  # stored: the daemon may drop it (and suspend the app)
            if app.state not in ("active", "inactive"):
                await app.finished_processing()


async def main(protocol: str, path: str) -> None:
    async with vigil.App() as app:
        await app.register_for_accessory_notifications()
        sessions = set()
        for accessory in await app.accessories():
            if accessory.speaks(protocol):
                sessions.add(asyncio.create_task(log_session(app, accessory, protocol, path)))
        async for item in app:
            if isinstance(item, vigil.Event):
                accessory = item.accessory
                if item.kind == "accessory.connected" and accessory is not None and accessory.speaks(protocol):
                    sessions.add(asyncio.create_task(log_session(app, accessory, protocol, path)))
                if app.state not in ("active", "inactive"):
                    await app.finished_processing(acknowledging=item)
                else:
                    app.acknowledge(item)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
