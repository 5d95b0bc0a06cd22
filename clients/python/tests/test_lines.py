"""Serial line control from the package (docs/protocol.md, "Serial line control"), against a real
vigild and the virtual accessory: with its modem lines (the default, emulated as a USB CDC-ACM port
has them) the device sees the host's DTR/RTS and breaks, and its CTS/DSR/DCD/RI reach the host; a
bare pty (`modem_lines=False`) gets the `notSupported` answers. The lab moves real lines (Tests/Lab/54-*)."""

import pytest

import vigil
from vigil.accessories import session_item
from vigil.testing import ControlSession, ExpectTimeout, SerialAccessory, VigilDaemon, VirtualAccessory

PROTOCOL = "org.example.sensor"


def test_a_lines_event_is_a_lines_item() -> None:
    item = session_item("session.lines", {"session": 3, "dtr": True, "rts": False, "cts": True, "dsr": False,
                                          "dcd": True, "ri": False, "changed": ["cts", "dcd"]}, b"")
    assert item == vigil.Lines(dtr=True, cts=True, dcd=True, changed=("cts", "dcd"))


@pytest.mark.vigil(accessories=[SerialAccessory(modem_lines=False)])
async def test_line_requests_name_what_a_bare_pty_lacks(vigild: VigilDaemon,
                                                         virtual_accessory: VirtualAccessory) -> None:
    async with vigil.Control(vigild.socket) as control:
        accessory = (await control.accessories())[0]
        session = await control.open_session(accessory, PROTOCOL, line_settings="115200 8N1 nohupcl")
        for call in (session.lines(), session.set_lines(dtr=False), session.reset_pulse(10),
                     session.watch_lines(wake=True), session.set_rs485(True, delayAfterSend=1),
                     session.send_break(50)):
            with pytest.raises(vigil.VigilError) as caught:
                await call
            assert caught.value.code == "notSupported", caught.value
        with pytest.raises(vigil.VigilError) as caught:
            await session.send_break(0)
        assert caught.value.code == "invalidArgument"
        # The session is unharmed.
        virtual_accessory.write(b"ok")
        assert await session.read(timeout=10) == b"ok"
        await session.close()
    with pytest.raises(RuntimeError, match="no modem lines"):
        virtual_accessory.set_modem_lines(cts=True)


def test_the_device_sees_the_reset_pulse_and_the_break(accessory_session: ControlSession,
                                                       virtual_accessory: VirtualAccessory) -> None:
    # Opening the port raised DTR and RTS, as Linux does at every open.
    assert virtual_accessory.expect_lines(dtr=True, rts=True, timeout=5)
    lines = accessory_session.lines()
    assert (lines.dtr, lines.rts, lines.dsr, lines.dcd, lines.cts) == (True, True, True, True, False)
    accessory_session.reset_pulse(150)
    down = virtual_accessory.expect_lines(dtr=False, rts=False, timeout=5)
    up = virtual_accessory.expect_lines(dtr=True, rts=True, timeout=5)
    assert up.time - down.time >= 0.15, (str(down), str(up))
    accessory_session.send_break(100)
    start = virtual_accessory.expect_lines(in_break=True, timeout=5)
    end = virtual_accessory.expect_lines(in_break=False, timeout=5)
    assert end.time - start.time >= 0.1
    assert (start.dtr, start.rts) == (True, True)            # a break leaves the lines alone
    # Nothing more happened: an expect of another change times out (and says what it saw).
    with pytest.raises(ExpectTimeout):
        virtual_accessory.expect_lines(dtr=False, timeout=0.3)
    assert [str(c).split(" ", 1)[1] for c in virtual_accessory.line_changes()] == [
        "DTR up, RTS up", "DTR down, RTS down", "DTR up, RTS up", "DTR up, RTS up, break", "DTR up, RTS up"]
    # One DTR alone: the device sees RTS stay.
    accessory_session.set_lines(dtr=False)
    assert not virtual_accessory.expect_lines(timeout=5).dtr
    assert virtual_accessory.modem_lines() == vigil.Lines(dtr=False, rts=True, dsr=True, dcd=True)


def test_the_devices_lines_reach_a_watching_session(accessory_session: ControlSession,
                                                    virtual_accessory: VirtualAccessory) -> None:
    assert accessory_session.watch_lines(interval_ms=20).cts is False
    virtual_accessory.set_modem_lines(cts=True)
    change = accessory_session.next_lines(timeout=10)
    assert change is not None and change.cts and change.changed == ("cts",)
    # A ring shorter than any sampling interval: the line is back, its counter says it moved.
    virtual_accessory.pulse_modem_lines("ri")
    change = accessory_session.next_lines(timeout=10)
    assert change is not None and change.changed == ("ri",) and not change.ri
    # Carrier lost: DSR and DCD together, in one change or two samples.
    virtual_accessory.set_modem_lines(dsr=False, dcd=False)
    seen: set[str] = set()
    while seen != {"dsr", "dcd"}:
        change = accessory_session.next_lines(timeout=10)
        assert change is not None, f"only {seen} changed"
        seen |= set(change.changed)
    assert accessory_session.lines() == vigil.Lines(dtr=True, rts=True, cts=True)
    # The session's bytes still flow beside the line pushes.
    virtual_accessory.write(b"still here\n")
    assert accessory_session.expect(rb"still here\n", timeout=10)


async def test_an_app_is_woken_by_a_line_change(vigild: VigilDaemon, virtual_accessory: VirtualAccessory,
                                                recorder) -> None:
    app = recorder("org.example.py.lines", "--watch-lines", PROTOCOL, background_modes=["external-accessory"],
                   accessory_protocols=[PROTOCOL])
    vigild.launch(app.app_id)
    app.wait_for(lambda r: r["kind"] == "watching", "the app watching its lines")
    vigild.suspend(app.app_id)
    virtual_accessory.set_modem_lines(dcd=False)
    lines = app.wait_for(lambda r: r["kind"] == "lines", "the line change in the app")
    assert lines["changed"] == ["dcd"] and lines["dcd"] is False
