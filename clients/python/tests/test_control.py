"""The control role against a real vigild."""

import asyncio

import pytest

import vigil
from vigil.testing import VigilDaemon


async def test_status_apps_wake_and_log(vigild: VigilDaemon, recorder) -> None:
    app = recorder()
    async with vigil.Control(vigild.socket) as control:
        status = await control.status()
        assert status["protocolVersion"] == 1 and status["suspension"] in ("cgroup", "signal")
        assert app.app_id in [a.id for a in await control.app_list()]
        accepted = await control.wake(app.app_id, attributes={"n": 1}, payload=b"\x00\x01")
        assert accepted["disposition"] == "launched"
        event = app.wait_for(lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"], "the event")
        assert event["payload"] == "0001"
        decisions = await control.decisions(app=app.app_id)
        assert decisions and decisions[0].app == app.app_id and decisions[0].action == "relaunch"
        with pytest.raises(vigil.VigilError) as refusal:
            await control.launch("org.example.nonexistent")
        assert refusal.value.code == "unknownApp"


async def test_request_errors_keep_the_connection(vigild: VigilDaemon) -> None:
    async with vigil.Control(vigild.socket) as control:
        with pytest.raises(vigil.VigilError) as refusal:
            await control.request("log", limit=-1)
        assert refusal.value.code == "invalidArgument" and "'limit'" in refusal.value.message
        assert isinstance(await control.app_list(), list)


async def test_plain_process_cannot_be_an_app(vigild: VigilDaemon) -> None:
    with pytest.raises(vigil.VigilError) as refusal:
        await vigil.App(vigild.socket).connect()
    assert refusal.value.code == "unauthorized"


async def test_typed_results_and_following_the_log(vigild: VigilDaemon) -> None:
    vigild.install_app("org.example.sleeper", ["/bin/sleep", "60"])
    async with vigil.Control(vigild.socket) as control:
        assert not {"type", "id"} & set(await control.status())  # no frame envelope
        assert not {"type", "id"} & set(await control.wake("org.example.sleeper"))
        decisions = control.follow_log(app="org.example.sleeper")
        first = await asyncio.wait_for(anext(decisions), 20)  # the wake's launch, from the log so far
        assert isinstance(first, vigil.Decision) and first.app == "org.example.sleeper" and first.time > 0
        info = await control.app_info("org.example.sleeper")
        assert isinstance(info, vigil.AppInfo) and info.id == "org.example.sleeper" and info.pid
        assert info.launches >= 1 and info.manifest_path and info.manifest_path.endswith("org.example.sleeper.toml")
        assert [a.id for a in await control.app_list()] == ["org.example.sleeper"]
        await control.quit("org.example.sleeper")
        quit = None
        async with asyncio.timeout(20):
            async for decision in decisions:  # each new decision as it is made
                if decision.action == "quit" or decision.state == "notRunning":
                    quit = decision
                    break
        assert quit is not None and quit.time >= first.time
        assert (await control.decisions(app="org.example.sleeper"))[-1].time >= quit.time
    assert vigild.app_info("org.example.sleeper").state == "notRunning"


async def test_the_dict_returning_calls_are_deprecated(vigild: VigilDaemon) -> None:
    """One way to do each thing: the typed calls; the dict ones of before warn until they go."""
    vigild.install_app("org.example.sleeper", ["/bin/sleep", "60"])
    launched = vigild.launch("org.example.sleeper")
    assert isinstance(launched, vigil.AppInfo) and launched.pid
    async with vigil.Control(vigild.socket) as control:
        for call, typed in ((control.apps(), "app_list"), (control.app("org.example.sleeper"), "app_info"),
                            (control.log(), "decisions"), (control.devices(), "device_changes")):
            with pytest.warns(DeprecationWarning, match=typed):
                await call
    with pytest.warns(DeprecationWarning, match="app_info"):
        assert vigild.app("org.example.sleeper")["pid"] == launched.pid
    with pytest.warns(DeprecationWarning, match="decisions"):
        assert vigild.decision_log()[-1]["action"] == "launch"
    with pytest.warns(DeprecationWarning, match="attribute"):
        assert launched["state"] == launched.state
    for call in (lambda c: c.apps(), lambda c: c.log(), lambda c: c.devices()):
        with pytest.warns(DeprecationWarning):
            vigild.control(call)
