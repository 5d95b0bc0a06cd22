"""The app role through a real app process built on vigil.App."""

import time

import pytest

import vigil
from vigil.testing import VigilDaemon


def test_launch_options_events_background_task_and_suspension(vigild: VigilDaemon, recorder) -> None:
    app = recorder()
    accepted = vigild.wake(app.app_id, kind="task", payload=b"go")
    assert accepted["disposition"] == "launched"
    launch = app.wait_for(lambda r: r["kind"] == "launch", "the launch")
    assert (launch["reason"], launch["eventKind"], launch["state"]) == ("event", "task", "background")
    task = app.wait_for(lambda r: r["kind"] == "task", "the background task")
    assert task["task"] == 1 and 0 < task["remaining"] < float("inf")
    # Acknowledged and finished: the daemon suspends it at once.
    vigild.wait_for_state(app.app_id, "suspended")
    assert vigild.app_info(app.app_id).unacknowledged_events == 0


def test_foreground_is_unlimited_and_lifecycle_is_reported(vigild: VigilDaemon, recorder) -> None:
    app = recorder()
    vigild.launch(app.app_id)
    app.wait_for(lambda r: r["kind"] == "launch", "the launch")
    vigild.wake(app.app_id, payload=b"x")
    event = app.wait_for(lambda r: r["kind"] == "event", "the event")
    assert event["remaining"] == float("inf")
    vigild.suspend(app.app_id)
    app.wait_for(lambda r: r.get("event") == "didEnterBackground", "didEnterBackground")


def test_reconnects_after_a_daemon_restart_and_gets_unacknowledged_events_again(vigild: VigilDaemon, recorder) -> None:
    app = recorder()
    vigild.launch(app.app_id)
    app.wait_for(lambda r: r["kind"] == "launch", "the launch")
    pid = vigild.app_info(app.app_id).pid
    vigild.process.terminate()  # a graceful stop leaves the apps running
    vigild.process.wait(15)
    vigild.start()
    restored = app.wait_for(lambda r: r["kind"] == "restored", "the reconnection")
    assert restored["generation"] == 1
    assert vigild.wait_until(lambda: vigild.app_info(app.app_id).pid == pid, "the app adopted")
    accepted = vigild.wake(app.app_id, payload=b"after")
    app.wait_for(lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"], "an event on the new connection")


async def test_async_app_object_outside_vigild_is_refused_quickly(vigild: VigilDaemon) -> None:
    started = time.monotonic()
    try:
        await vigil.App(vigild.socket).connect()
    except vigil.VigilError as error:
        assert error.code == "unauthorized"
    assert time.monotonic() - started < 30


@pytest.mark.vigil(timings={"background-time-limit": 10.0, "expiration-warning": 5.0})
def test_an_expiration_handler_is_called_before_the_limit(vigild: VigilDaemon, recorder) -> None:
    app = recorder()
    vigild.wake(app.app_id, kind="hold")
    held = app.wait_for(lambda r: r["kind"] == "held", "the task")
    assert held["task"] == 1
    expiring = app.wait_for(lambda r: r["kind"] == "expiring", "the expiration handler")
    assert expiring["remaining"] <= 5.5  # told when the warning time (5 s) was left, not before
    # The handler ended the task and finished: suspended, not terminated for overrunning.
    vigild.wait_for_state(app.app_id, "suspended")


def test_an_event_is_acknowledged_only_once_handled(vigild: VigilDaemon, recorder) -> None:
    # A ble.* kind with no Bluetooth manager in the app goes to its events, and
    # is not acknowledged on the way (as the lab's peripheral test once caught).
    app = recorder()
    vigild.launch(app.app_id)
    app.wait_for(lambda r: r["kind"] == "launch", "the launch")
    accepted = vigild.wake(app.app_id, kind="ble.held")
    app.wait_for(lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"], "the event")
    assert vigild.app_info(app.app_id).unacknowledged_events == 1
    (app.path.parent / (app.path.name + ".go")).touch()
    vigild.wait_until(lambda: vigild.app_info(app.app_id).unacknowledged_events == 0, "the acknowledgement")
