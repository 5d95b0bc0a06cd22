"""The Python package's `finished_processing(acknowledging=...)` against a
daemon whose welcome names no `features` (an older vigild, played by
fake_daemon.py): the acknowledgement goes as its own `ack` first, then a
`finishedProcessing` without it (docs/protocol.md, "Handshake"). Against
vigild, which names `finishedProcessing.ack`, test_finish_ack.py checks the
one-message ending."""

import asyncio
import os
import sys
import tempfile
import unittest

from fake_daemon import FakeDaemon

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import vigil  # noqa: E402


class FinishAckFallbackTests(unittest.TestCase):
    def test_an_older_daemon_gets_ack_then_finished_processing(self):
        with tempfile.TemporaryDirectory(prefix="vigil-fake-") as folder:
            path = os.path.join(folder, "vigild.sock")
            daemon = FakeDaemon(path)
            try:
                asyncio.run(self.finish(path))
            finally:
                daemon.close()
            kinds = [r["type"] for r in daemon.requests if r["type"] in ("ack", "finishedProcessing")]
            self.assertEqual(kinds, ["ack", "finishedProcessing"])
            self.assertEqual(daemon.requests_of("ack")[0]["seq"], 1)
            self.assertNotIn("ack", daemon.requests_of("finishedProcessing")[0])

    async def finish(self, path):
        async with vigil.App(path) as app:
            await app.register_for_accessory_notifications()  # the fake then sends event 1
            async for item in app:
                if isinstance(item, vigil.Event):
                    await app.finished_processing(acknowledging=item)
                    return


if __name__ == "__main__":
    unittest.main()
