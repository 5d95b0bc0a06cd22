"""HID sessions' record framing (docs/protocol.md, "HID accessories"), without a daemon."""

import asyncio

import pytest

import vigil
from vigil.accessories import Accessory, AccessorySession, Data


def test_split_records_gives_each_report_whole() -> None:
    assert vigil.split_records(b"") == []
    assert vigil.split_records(b"\x02\x00ab\x00\x00\x01\x00z") == [b"ab", b"", b"z"]
    with pytest.raises(vigil.VigilError):
        vigil.split_records(b"\x05\x00abc")      # a record cut short
    with pytest.raises(vigil.VigilError):
        vigil.split_records(b"\x01\x00a\x01")    # a length cut short


def test_an_accessory_says_its_kind() -> None:
    base = {"connectionID": 3, "protocolStrings": ["org.example.co2"]}
    assert Accessory.from_json({**base, "kind": "hid"}).is_hid
    assert not Accessory.from_json(base).is_hid   # an older daemon's: serial
    assert Accessory.from_json(base).kind == "serial"


def test_read_report_splits_chunks_in_order() -> None:
    async def run() -> list[bytes]:
        session = AccessorySession(None, 1, "org.example.co2", Accessory(1, ("org.example.co2",), kind="hid"))  # type: ignore[arg-type]
        session._feed(Data(b"\x01\x00A\x02\x00BB"), None)
        session._feed(Data(b"\x03\x00CCC"), None)
        return [await session.read_report(timeout=1) for _ in range(3)]

    assert asyncio.run(run()) == [b"A", b"BB", b"CCC"]
