"""Serial line control from the package (docs/protocol.md, "Serial line control"), against a real
vigild and the virtual accessory, whose tty (umockdev's) has no modem lines: the package's requests,
their replies' shape and the `notSupported` answers. The lab moves real lines (Tests/Lab/54-*)."""

import pytest

import vigil
from vigil.accessories import session_item
from vigil.testing import VigilDaemon, VirtualAccessory

PROTOCOL = "org.example.sensor"


def test_a_lines_event_is_a_lines_item() -> None:
    item = session_item("session.lines", {"session": 3, "dtr": True, "rts": False, "cts": True, "dsr": False,
                                          "dcd": True, "ri": False, "changed": ["cts", "dcd"]}, b"")
    assert item == vigil.Lines(dtr=True, cts=True, dcd=True, changed=("cts", "dcd"))


async def test_line_requests_name_what_the_driver_lacks(vigild: VigilDaemon,
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
