"""The parts of the package that need no daemon: frames, batches, the acknowledgement ledger."""

import struct

import pytest

import vigil
from vigil._ledger import Ledger


def test_frame_round_trip_and_prefix_limits() -> None:
    frame = vigil.encode_frame({"type": "wake", "id": 3}, b"\x00\xff")
    decoder = vigil.FrameDecoder()
    for byte in frame:
        assert decoder.next_message() is None
        decoder.feed(bytes([byte]))
    message = decoder.next_message()
    assert message is not None and (message.type, message.id, message.body) == ("wake", 3, b"\x00\xff")
    decoder.feed(struct.pack("<II", 65537, 0))
    with pytest.raises(vigil.VigilError) as refusal:
        decoder.next_message()
    assert refusal.value.code == "frameTooLarge"


def test_notification_batches_decode_in_order() -> None:
    attributes = {"peripheral": "AA", "service": "s", "characteristic": "c", "framing": "u16le"}
    other = b"BB s2 c2"
    body = b"\x02\x00\x16\x3c" + b"\xff\xff" + len(other).to_bytes(2, "little") + other + b"\x01\x00\x07"
    values = vigil.notification_values(attributes, body)
    assert [(v.peripheral, v.characteristic, v.value) for v in values] == [("AA", "c", b"\x16\x3c"), ("BB", "c2", b"\x07")]
    with pytest.raises(vigil.VigilError):
        vigil.notification_values(attributes, b"\x05\x00\x01")


def test_notification_batches_carry_instances() -> None:
    attributes = {"peripheral": "AA", "service": "s", "characteristic": "c", "instance": 1, "framing": "u16le"}
    other = b"AA s c 0"
    body = b"\x01\x00\x01" + b"\xff\xff" + len(other).to_bytes(2, "little") + other + b"\x01\x00\x02"
    values = vigil.notification_values(attributes, body)
    assert [(v.instance, v.value) for v in values] == [(1, b"\x01"), (0, b"\x02")]
    with pytest.raises(vigil.VigilError):
        vigil.notification_values({**attributes, "instance": -1}, body)


def test_ledger_acknowledges_up_to_the_oldest_held_event() -> None:
    sent: list[int] = []
    ledger = Ledger(sent.append)
    main = ledger.received(1, Ledger.MAIN)
    session = ledger.received(2, "session 1")
    ledger.received(3, Ledger.MAIN)
    ledger.finish_main(1)
    assert sent == [1]
    ledger.finish_main(3)  # 2 is still held by the session
    assert sent == [1]
    session.finish()
    assert sent == [1, 3]
    ledger.reset()
    main.finish()  # a token of the lost connection finishes nothing
    assert sent == [1, 3]


def test_ledger_hands_the_ack_to_a_finish_that_carries_it() -> None:
    sent: list[int] = []
    ledger = Ledger(sent.append)
    ledger.received(1, Ledger.MAIN)
    session = ledger.received(2, "session 1")
    ledger.received(3, Ledger.MAIN)
    assert ledger.take_main(1) == 1  # returned, not sent: `finishedProcessing` carries it
    assert ledger.take_main(3) is None  # 2 is still held by the session: nothing to carry
    assert sent == []
    session.finish()
    assert sent == [3]
    assert ledger.take_main(3) is None  # already acknowledged


def test_uuid_short_forms() -> None:
    assert vigil.normalize_uuid("0x2A37") == "00002a37-0000-1000-8000-00805f9b34fb"
    assert vigil.normalize_uuid("180d") == "0000180d-0000-1000-8000-00805f9b34fb"


def test_advertisement_records_decode_in_order_with_bleaks_shape() -> None:
    ruuvi = bytes([0x1B, 0xFF, 0x99, 0x04, 0x05]) + bytes(23)
    service = bytes([0x05, 0x16, 0xD2, 0xFC, 0x40, 0x01])
    name = bytes([0x05, 0x09]) + b"Ruuv"

    def record(time_ns: int, rssi: int, data: bytes) -> bytes:
        head = struct.pack("<Q", time_ns) + bytes.fromhex("C0DE00000062") + bytes([1]) + struct.pack("b", rssi)
        return struct.pack("<H", len(head) + len(data)) + head + data

    body = record(1_764_300_000_500_000_000, -61, name + ruuvi + service) + record(1, 127, b"")
    first, second = vigil.advertisement_records({"monitor": "ruuvi", "framing": "adv1"}, body)
    assert (first.address, first.rssi, first.local_name, first.random_address) == ("C0:DE:00:00:00:62", -61, "Ruuv", True)
    assert first.manufacturer_data == {0x0499: bytes([5]) + bytes(23)}
    assert first.service_data == {"0000fcd2-0000-1000-8000-00805f9b34fb": b"\x40\x01"}
    assert abs(first.time - 1_764_300_000.5) < 1e-6
    assert (second.rssi, second.raw) == (None, b"")
    with pytest.raises(vigil.VigilError):
        vigil.advertisement_records({"framing": "adv1"}, body[:-1] + b"\x00\x00")
    with pytest.raises(vigil.VigilError):
        vigil.advertisement_records({"framing": "adv9"}, body)
