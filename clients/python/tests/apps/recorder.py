"""A test app built on `vigil.App`: records what it gets as JSON lines in
$VIGIL_RECORD, acknowledges events, holds a background task on a `task`
event, echoes accessory bytes with --echo PROTOCOL, records its session's
modem-line changes (waking it) with --watch-lines PROTOCOL."""

import argparse
import asyncio
import json
import os
import sys

import vigil


def record(**fields: object) -> None:
    with open(os.environ["VIGIL_RECORD"], "a") as out:
        out.write(json.dumps(fields, sort_keys=True) + "\n")


async def echo(app: vigil.App, protocol: str) -> None:
    accessory = next(a for a in await app.accessories() if a.speaks(protocol))
    async with await app.open_session(accessory, protocol) as session:
        record(kind="session", id=session.id, serial=accessory.serial_number)
        async for chunk in session:
            record(kind="data", hex=chunk.hex())
            await session.write(b"ack:" + chunk)


async def watch_lines(app: vigil.App, protocol: str) -> None:
    accessory = next(a for a in await app.accessories() if a.speaks(protocol))
    async with await app.open_session(accessory, protocol) as session:
        await session.watch_lines(wake=True)
        record(kind="watching", id=session.id)
        async for item in session.items():
            if isinstance(item, vigil.Lines):
                record(kind="lines", changed=list(item.changed), dcd=item.dcd, cts=item.cts, state=app.state)
                if app.state not in ("active", "inactive"):
                    session.acknowledge()
                    await app.finished_processing()


async def serve(app: vigil.App) -> None:
    manager = await app.peripheral(restore_identifier="recorder")
    if not (manager.restored or {}).get("services"):
        await manager.add_service(vigil.service_definition("180d", [
            vigil.characteristic_definition("2a38", ["read"], value=b"\x02"),
            vigil.characteristic_definition("2a39", ["read", "write"])]))
    record(kind="serving", restored=manager.restored is not None)
    reads = 0
    async for request in manager.requests():
        if request.kind == "read":
            reads += 1
            await request.respond(f"value-{reads}".encode())
        record(kind="request", request=request.kind, characteristic=request.characteristic)
        if app.state not in ("active", "inactive"):
            manager.acknowledge()
            await app.finished_processing()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--echo", default=None)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--watch-lines", default=None)
    options = parser.parse_args()
    async with vigil.App() as app:
        record(kind="launch", app=app.id, state=app.state, reason=app.launch.reason, eventKind=app.launch.event_kind)
        if options.echo:
            asyncio.get_running_loop().create_task(echo(app, options.echo))
        if options.watch_lines:
            asyncio.get_running_loop().create_task(watch_lines(app, options.watch_lines))
        if options.serve:
            asyncio.get_running_loop().create_task(serve(app))
        async for item in app:
            if isinstance(item, vigil.Lifecycle):
                record(kind="lifecycle", event=item.event, state=item.state)
            elif isinstance(item, vigil.ConnectionRestored):
                record(kind="restored", generation=item.generation, state=app.state)
            elif isinstance(item, vigil.Event):
                record(kind="event", seq=item.seq, eventKind=item.kind, payload=item.payload.hex(),
                       redelivered=item.redelivered, remaining=app.background_time_remaining)
                if item.kind == "hold":  # hold a task until the daemon says time is nearly up
                    held: list[int] = []

                    async def expiring() -> None:
                        record(kind="expiring", remaining=app.background_time_remaining)
                        await app.end_background_task(held[0])
                        await app.finished_processing()

                    held.append(await app.begin_background_task("held", expiring))
                    record(kind="held", task=held[0])
                    app.acknowledge(item)
                    continue
                if item.kind == "ble.held":  # a Bluetooth kind with no manager here: held until told
                    while not os.path.exists(os.environ["VIGIL_RECORD"] + ".go"):
                        await asyncio.sleep(0.05)
                if item.kind == "task":
                    task = await app.begin_background_task("upload", lambda: record(kind="expiring"))
                    record(kind="task", task=task, remaining=app.background_time_remaining)
                    await app.end_background_task(task)
                app.acknowledge(item)
                if app.state not in ("active", "inactive"):
                    await app.finished_processing()
    record(kind="end")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
