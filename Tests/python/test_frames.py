"""The Python client's framing, without a daemon: docs/protocol.md's byte layout and limits."""

import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from vigil_client import FrameDecoder, VigilError, encode_frame, socket_path  # noqa: E402


class FrameTests(unittest.TestCase):
    def test_documented_hello_bytes(self):
        frame = encode_frame({"type": "hello", "versions": [1], "role": "control"})
        self.assertEqual(frame[:8], bytes.fromhex("30000000 00000000"))
        self.assertEqual(frame[8:], b'{"type":"hello","versions":[1],"role":"control"}')

    def test_round_trip_with_binary_body(self):
        decoder = FrameDecoder()
        decoder.feed(encode_frame({"type": "event", "seq": 1}, bytes(range(256))))
        message = decoder.next_message()
        self.assertEqual((message.type, message["seq"], message.body), ("event", 1, bytes(range(256))))
        self.assertIsNone(decoder.next_message())

    def test_byte_by_byte(self):
        frame = encode_frame({"type": "ack", "seq": 3}, b"xyz")
        decoder = FrameDecoder()
        for byte in frame[:-1]:
            decoder.feed(bytes([byte]))
            self.assertIsNone(decoder.next_message())
        decoder.feed(frame[-1:])
        self.assertEqual(decoder.next_message().body, b"xyz")

    def test_limits_are_checked_on_the_prefix(self):
        for prefix in (struct.pack("<II", 65537, 0), struct.pack("<II", 10, 1048577)):
            decoder = FrameDecoder()
            decoder.feed(prefix)
            with self.assertRaises(VigilError) as error:
                decoder.next_message()
            self.assertEqual(error.exception.code, "frameTooLarge")

    def test_malformed_headers(self):
        for header in (b"", b"not json", b"[1]", b'{"type":3}'):
            decoder = FrameDecoder()
            decoder.feed(struct.pack("<II", len(header), 0) + header)
            with self.assertRaises(VigilError) as error:
                decoder.next_message()
            self.assertEqual(error.exception.code, "malformedFrame", header)

    def test_socket_path_order(self):
        self.assertEqual(socket_path("/x", {"VIGIL_SOCKET": "/y"}), "/x")
        self.assertEqual(socket_path(None, {"VIGIL_SOCKET": "/y", "XDG_RUNTIME_DIR": "/run/user/1"}), "/y")
        self.assertEqual(socket_path(None, {"XDG_RUNTIME_DIR": "/run/user/1"}), "/run/user/1/vigil/vigild.sock")
        self.assertEqual(socket_path(None, {}), "/run/vigil/vigild.sock")


if __name__ == "__main__":
    unittest.main()
