"""The control role against a real vigild."""

import pytest

import vigil
from vigil.testing import VigilDaemon


async def test_status_apps_wake_and_log(vigild: VigilDaemon, recorder) -> None:
    app = recorder()
    async with vigil.Control(vigild.socket) as control:
        status = await control.status()
        assert status["protocolVersion"] == 1 and status["suspension"] in ("cgroup", "signal")
        assert app.app_id in [a["id"] for a in await control.apps()]
        accepted = await control.wake(app.app_id, attributes={"n": 1}, payload=b"\x00\x01")
        assert accepted["disposition"] == "launched"
        event = app.wait_for(lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"], "the event")
        assert event["payload"] == "0001"
        decisions = await control.log(app=app.app_id)
        assert decisions and {"time", "app", "action", "reason", "state"} <= set(decisions[-1])
        with pytest.raises(vigil.VigilError) as refusal:
            await control.launch("org.example.nonexistent")
        assert refusal.value.code == "unknownApp"


async def test_request_errors_keep_the_connection(vigild: VigilDaemon) -> None:
    async with vigil.Control(vigild.socket) as control:
        with pytest.raises(vigil.VigilError) as refusal:
            await control.request("log", limit=-1)
        assert refusal.value.code == "invalidArgument" and "'limit'" in refusal.value.message
        assert isinstance(await control.apps(), list)


async def test_plain_process_cannot_be_an_app(vigild: VigilDaemon) -> None:
    with pytest.raises(vigil.VigilError) as refusal:
        await vigil.App(vigild.socket).connect()
    assert refusal.value.code == "unauthorized"
