#!/usr/bin/env python3
"""A heart-rate logger app for vigild, on `vigil.App` and the Bleak-like central.

Connects to a heart-rate monitor, subscribes to Heart Rate Measurement
(0x2A37) and appends "monotonic_ns,bpm" lines to a file. With the
`bluetooth-central` background mode vigild wakes it for each batch of
notifications while it is suspended; it says `finished_processing` after each.

Manifest:
    id = "org.example.hrm-logger"
    exec = ["/path/to/venv/bin/python", "/path/to/heart_rate_logger.py", "AA:BB:CC:DD:EE:01", "/var/tmp/hrm.csv"]
    background-modes = ["bluetooth-central"]
"""

import asyncio
import sys

import vigil

HEART_RATE = "180d"
MEASUREMENT = "2a37"


def beats_per_minute(value: bytes) -> int:
    """Heart Rate Measurement: flags, then the rate as u8 or (flag bit 0) u16 LE."""
    return value[1] | value[2] << 8 if value[0] & 1 else value[1]


async def main(address: str, path: str) -> None:
    async with vigil.App() as app:
        central = await app.central()
        pending: set[asyncio.Task[None]] = set()

        async def logged(characteristic: vigil.Characteristic, data: bytearray) -> None:
            with open(path, "a") as log:
                log.write(f"{vigil.monotonic_ns()},{beats_per_minute(bytes(data))}\n")
            if app.state not in ("active", "inactive"):
                # After this value is acknowledged (when the callback returns): let the app be suspended.
                task = asyncio.get_running_loop().create_task(app.finished_processing())
                pending.add(task)
                task.add_done_callback(pending.discard)

        client = central.client(address)
        await client.connect()
        await client.start_notify((HEART_RATE, MEASUREMENT), logged)
        async for item in app:  # lifecycle and anything that is not Bluetooth
            if isinstance(item, vigil.Event):
                app.acknowledge(item)
            elif isinstance(item, vigil.Lifecycle) and item.event == "willTerminate":
                return


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
