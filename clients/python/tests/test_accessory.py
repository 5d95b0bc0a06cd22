"""Accessory sessions through a real vigild and the virtual USB serial accessory (umockdev)."""

import asyncio

import pytest

import vigil
from vigil.testing import ControlSession, ExpectTimeout, SerialAccessory, VigilDaemon, VirtualAccessory

PROTOCOL = "org.example.sensor"


def test_app_session_is_a_byte_stream_both_ways(vigild: VigilDaemon, virtual_accessory: VirtualAccessory,
                                                recorder) -> None:
    app = recorder("org.example.py.echo", "--echo", PROTOCOL, background_modes=["external-accessory"],
                   accessory_protocols=[PROTOCOL])
    vigild.launch(app.app_id)
    session = app.wait_for(lambda r: r["kind"] == "session", "the session")
    assert session["serial"] == "VGL123"
    virtual_accessory.write(b"hello")
    app.wait_for(lambda r: r["kind"] == "data" and bytes.fromhex(r["hex"]) == b"hello", "the bytes in the app")
    assert virtual_accessory.read(9) == b"ack:hello"
    # Read from the session log and acknowledged as the loop came round: nothing left in the daemon.
    vigild.wait_until(lambda: vigild.control(lambda c: c.accessories()["sessions"][0]["bufferedBytes"] == 0),
                      "the data acknowledged")


async def test_control_session_watch_and_unplug(vigild: VigilDaemon, virtual_accessory: VirtualAccessory) -> None:
    async with vigil.Control(vigild.socket) as control:
        changes = await control.watch_accessories()
        first = await anext(changes)
        assert first.change == "connected" and first.accessory.speaks(PROTOCOL)
        session = await control.open_session(first.accessory, PROTOCOL)
        virtual_accessory.write(b"\x00\x01\x02")
        assert await session.read(timeout=10) == b"\x00\x01\x02"
        assert await session.write(b"out") == 3
        assert virtual_accessory.read(3) == b"out"
        virtual_accessory.unplug()
        gone = await asyncio.wait_for(anext(changes), 20)
        assert gone.change == "disconnected"
        assert await session.read(timeout=10) == b""  # the stream ended with the device
        assert session.close_reason


async def test_a_control_session_opened_with_reopen_survives_a_replug(vigild: VigilDaemon,
                                                                      virtual_accessory: VirtualAccessory) -> None:
    async with vigil.Control(vigild.socket) as control:
        accessory = (await control.accessories())[0]
        session = await control.open_session(accessory, PROTOCOL, reopen=True)
        virtual_accessory.unplug()
        item = await session.next_item(timeout=20)
        assert isinstance(item, vigil.Closed) and item.will_reopen and session.is_open
        virtual_accessory.plug()

        async def reopened() -> None:  # no push says so to a control client: the session object does
            while (await control.accessory_status())["sessions"][0]["connectionID"] == accessory.connection_id:
                await asyncio.sleep(0.05)
        await asyncio.wait_for(reopened(), 20)
        virtual_accessory.write(b"back")
        assert await session.read(timeout=20) == b"back"


GAUGE = SerialAccessory(name="gauge", vendor_id="abcd", product_id="12EF", serial="ACME-7", manufacturer="Acme Corp",
                        product="Gauge 3", protocols=("com.acme.gauge", "com.acme.gauge.dfu"), line_settings="9600 8N1")
PROBE = SerialAccessory(name="probe", serial="PROBE-1", protocols=("com.acme.probe",))


@pytest.mark.vigil(accessories=[GAUGE, PROBE])
def test_described_accessories_have_their_identity_and_protocols(
        vigild: VigilDaemon, virtual_accessories: dict[str, VirtualAccessory], accessory_session: ControlSession) -> None:
    listed = {a["serialNumber"]: a for a in vigild.control(lambda c: c.accessories()["accessories"])}
    assert set(listed) == {"ACME-7", "PROBE-1"}
    gauge = listed["ACME-7"]
    assert (gauge["vendorID"], gauge["productID"]) == ("abcd", "12ef")
    assert (gauge["manufacturer"], gauge["protocolStrings"]) == ("Acme Corp", ["com.acme.gauge", "com.acme.gauge.dfu"])
    assert gauge["lineSettings"].startswith("9600")
    assert listed["PROBE-1"]["protocolStrings"] == ["com.acme.probe"]
    # accessory_session: the first described accessory, on its first protocol.
    device = virtual_accessories["gauge"]
    accessory_session.write(b"status\r\n")
    assert device.expect(rb"status\r\n", timeout=10).group(0) == b"status\r\n"
    device.write(b"boot 1.2\r\nready> ")
    match = accessory_session.expect(rb"boot (\S+)", timeout=10)
    assert match.group(1) == b"1.2"
    assert accessory_session.read(9, timeout=10) == b"\r\nready> "  # what expect left, then what came after
    device.write(b"ab")
    assert accessory_session.read(5, timeout=0.5) == b"ab"  # fewer than asked for: the timeout passed
    with pytest.raises(ExpectTimeout) as timeout:
        accessory_session.expect("never", timeout=0.3)
    assert timeout.value.received == b""
    # The other device is its own stream.
    virtual_accessories["probe"].write(b"x")
    with pytest.raises(ExpectTimeout):
        virtual_accessories["probe"].expect(b"anything", timeout=0.3)  # the host wrote nothing to the probe


def test_a_described_accessory_needs_a_valid_identity() -> None:
    with pytest.raises(ValueError, match="four hex digits"):
        SerialAccessory(vendor_id="12345")
    with pytest.raises(ValueError, match="at least one protocol"):
        SerialAccessory(protocols=())
