"""Pairing and bonds through the real vigild, against the host-tier BlueZ mock
(Tests/bluez-mock: its AgentManager1 records who registered, and Device1.Pair
calls the registered agent back the way bluetoothd does: RequestPasskey,
RequestConfirmation, DisplayPasskey, ...; `RequestFromDevice` starts a
pairing with no Pair call, as bluetoothd does when a protected characteristic
is accessed).

What a pass proves: vigild registers its agent (KeyboardDisplay, default) and
again after a bluetoothd restart, keeps the adapter bondable, routes prompts
to the client that pairs (vigilctl's connection) or uses the device (an app,
woken from suspension for it), answers BlueZ with the client's answer or
rejects in time, reports BlueZ's errors with the reason, and follows a
device object whose address BlueZ resolved to its identity. The lab tier
checks pairing against real BlueZ and a Bumble peer.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ble_harness import EXAMPLE_APP, PYTHON, VIGILD, MockBlueZDaemonTest, missing  # noqa: E402
from vigil_client import ControlClient, VigilError  # noqa: E402
import vigil  # noqa: E402

HRM = "AA:BB:CC:DD:EE:01"
VIGILCTL = os.path.join(os.path.dirname(os.environ.get("VIGILD") or VIGILD), "vigilctl")
IDENTITY = "C0:DE:00:00:00:99"
APP = "org.vigil.test.blepair"


class PairingRig(MockBlueZDaemonTest):
    APP = APP
    #: Prompts wait 1.5 s for an answer here (bluetooth-request-timeout).
    config_lines = "bluetooth-request-timeout = 1.5\n"
    passkey_answer = None

    def prepare_mock(self):
        self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")

    def manifest(self):
        answer = [] if self.passkey_answer is None else ["--ble-pair-passkey", str(self.passkey_answer)]
        args = ", ".join(f'"{a}"' for a in [PYTHON, EXAMPLE_APP, "--record", self.record, "--ble-peripheral", HRM,
                                               "--restore-id", "pair", *answer])
        return f'id = "{APP}"\nexec = [{args}]\nbackground-modes = ["bluetooth-central"]\n'

    def device(self, address=HRM):
        for peripheral in self.control.request("ble.peripherals")["peripherals"]:
            if peripheral["address"] == address:
                return peripheral
        return None

    def agents(self):
        return [(str(owner), str(path), str(cap), bool(default)) for owner, path, cap, default in self.mock.control.Agents()]

    def mock_device(self, name):
        obj = self.mock.bus.get_object("org.bluez", self.hrm)
        return obj.Get("org.bluez.Device1", name, dbus_interface="org.freedesktop.DBus.Properties")

    def adapter_pairable(self):
        obj = self.mock.bus.get_object("org.bluez", "/org/bluez/hci0")
        return bool(obj.Get("org.bluez.Adapter1", "Pairable", dbus_interface="org.freedesktop.DBus.Properties"))

    def pair_with_prompts(self, answer, address=HRM, timeout=30):
        """ble.pair from a control connection (the vigil package), answering
        each prompt with answer(prompt, central); returns (reply or VigilError, prompts)."""
        prompts = []

        async def body():
            async with vigil.Control(self.socket) as control:
                central = await control.central()

                async def on_prompt(prompt):
                    prompts.append(dict(prompt))
                    await answer(prompt, central)
                central.pairing_callback = on_prompt
                try:
                    return await asyncio.wait_for(central.pair(address), timeout)
                except vigil.VigilError as error:
                    return error
        return asyncio.run(body()), prompts


@unittest.skipIf(missing(), missing() or "")
class PairingTests(PairingRig):
    def test_agent_registered_as_default_and_adapter_kept_bondable(self):
        self.wait_until(lambda: any(cap == "KeyboardDisplay" and default and path == "/org/vigil/agent"
                                    for _o, path, cap, default in self.agents()), "vigild's agent registered as default")
        # Something turns bondable off (bluetoothd does when its agent goes): vigild turns it on again.
        adapter = self.mock.bus.get_object("org.bluez", "/org/bluez/hci0")
        adapter.Set("org.bluez.Adapter1", "Pairable", self.dbus.Boolean(False), dbus_interface="org.freedesktop.DBus.Properties")
        self.wait_until(self.adapter_pairable, "Pairable on again")

    def test_agent_registered_again_after_bluetoothd_restart(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.restart_bluez()
        self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
        self.wait_until(lambda: any(default for *_r, default in self.agents()), "the agent registered with the new bluetoothd")
        # And it works: a passkey pairing through the new bluetoothd.
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(4242))
        reply, prompts = self.pair_with_prompts(lambda p, c: c.respond_pairing(p["request"], True, passkey=4242))
        self.assertNotIsInstance(reply, VigilError, f"{reply}\n{self.diagnostics()}")
        self.assertTrue(reply["bonded"])

    def test_just_works_pair_trust_and_forget_from_the_control_role(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.assertEqual((self.device()["paired"], self.device()["bonded"], self.device()["trusted"]), (False, False, False))
        reply = self.control.request("ble.pair", peripheral=HRM.lower())
        self.assertEqual((reply["peripheral"], reply["paired"], reply["bonded"], reply["trusted"]), (HRM, True, True, False))
        self.assertTrue(self.device()["bonded"])
        # Pairing again is not an error: it says so.
        self.assertTrue(self.control.request("ble.pair", peripheral=HRM)["paired"])
        self.assertTrue(self.control.request("ble.setTrusted", peripheral=HRM, trusted=True)["trusted"])
        self.assertTrue(bool(self.mock_device("Trusted")))
        self.wait_until(lambda: self.device()["trusted"], "trusted in ble.peripherals")
        self.control.request("ble.forget", peripheral=HRM)
        self.wait_until(lambda: self.device() is None, "the device forgotten")
        self.assertEqual([c[4] for c in self.mock.control.Calls() if str(c[4]) == "RemoveDevice"], ["RemoveDevice"])
        with self.assertRaises(VigilError) as unknown:
            self.control.request("ble.pair", peripheral=HRM)
        self.assertEqual(unknown.exception.code, "notFound")

    def test_passkey_prompt_goes_to_the_pairing_client_and_a_wrong_passkey_fails(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(654321))
        reply, prompts = self.pair_with_prompts(lambda p, c: c.respond_pairing(p["request"], True, passkey=111111))
        self.assertIsInstance(reply, VigilError)
        self.assertEqual(reply.code, "deviceError")
        self.assertIn("AuthenticationFailed", reply.message)
        self.assertEqual([(p["kind"], p["peripheral"]) for p in prompts], [("passkey", HRM)])
        self.assertEqual(prompts[0]["timeout"], 1.5)
        self.assertFalse(self.device()["paired"])

        reply, prompts = self.pair_with_prompts(lambda p, c: c.respond_pairing(p["request"], True, passkey=654321))
        self.assertNotIsInstance(reply, VigilError, f"{reply}\n{self.diagnostics()}")
        self.assertEqual((reply["paired"], reply["bonded"]), (True, True))
        self.assertEqual([str(r[2]) for r in self.mock.control.AgentResults()], ["wrong passkey", "ok"])

    def test_confirmation_rejected_and_display_shown(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "confirm", self.dbus.UInt32(7))
        reply, prompts = self.pair_with_prompts(lambda p, c: c.respond_pairing(p["request"], False))
        self.assertIsInstance(reply, VigilError)
        self.assertIn("AuthenticationFailed", reply.message)  # as bluetoothd says over LE: vigild adds why
        self.assertIn("rejected the confirm prompt", reply.message)
        self.assertEqual((prompts[0]["kind"], prompts[0]["passkey"]), ("confirm", 7))

        self.mock.control.SetPairingMethod(self.hrm, "display", self.dbus.UInt32(123))

        async def nothing(prompt, central):
            return None
        reply, prompts = self.pair_with_prompts(nothing)
        self.assertNotIsInstance(reply, VigilError, f"{reply}\n{self.diagnostics()}")
        self.assertEqual((prompts[0]["kind"], prompts[0]["passkey"]), ("displayPasskey", 123))

    def test_a_prompt_nobody_answers_is_rejected_in_time(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(1))

        async def ignore(prompt, central):
            return None
        started = time.monotonic()
        reply, prompts = self.pair_with_prompts(ignore)
        elapsed = time.monotonic() - started
        self.assertIsInstance(reply, VigilError)
        self.assertIn("AuthenticationFailed", reply.message)
        self.assertIn("nobody answered the passkey prompt", reply.message)
        self.assertLess(elapsed, 10, "rejected at vigild's deadline, not BlueZ's")
        self.assertEqual([str(r[2]) for r in self.mock.control.AgentResults()], ["org.bluez.Error.Canceled"])
        # Nothing stuck: a second pairing, answered, works.
        self.mock.control.SetPairingMethod(self.hrm, "confirm", self.dbus.UInt32(5))
        reply, _ = self.pair_with_prompts(lambda p, c: c.respond_pairing(p["request"], True))
        self.assertNotIsInstance(reply, VigilError, f"{reply}\n{self.diagnostics()}")

    def vigild_log(self):
        with open(f"{self.dir}/vigild.log") as log:
            return log.read()

    def test_a_pair_whose_reply_never_comes_ends_when_bluez_reports_the_device_paired(self):
        # As BlueZ 5.66 did in the lab with a private peer: SMP finished, the
        # object took the identity address, and Pair never replied.
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.LosePairReply(self.hrm, IDENTITY)
        reply, prompts = self.pair_with_prompts(lambda p, c: None)
        self.assertNotIsInstance(reply, VigilError, f"{reply}\n{self.diagnostics()}")
        self.assertEqual((reply["peripheral"], reply["paired"], reply["bonded"]), (IDENTITY, True, True))
        self.assertEqual(prompts, [])
        self.assertIn(f"{HRM}: BlueZ reports it paired", self.vigild_log())
        # The lost reply arrives after all: ignored, nothing answered twice, nothing stuck.
        self.assertTrue(self.mock.control.ReleasePairReply(self.hrm))
        self.wait_until(lambda: f"{HRM}: BlueZ's Pair replied after the pairing had ended (ignored)" in self.vigild_log(),
                        "the late reply ignored")
        self.assertTrue(self.control.request("ble.pair", peripheral=IDENTITY)["paired"])
        self.control.request("ble.forget", peripheral=IDENTITY)
        self.wait_until(lambda: self.device(IDENTITY) is None, "forgotten")
        self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
        self.wait_until(lambda: self.device(HRM) is not None, "the device seen again")
        again = self.control.request("ble.pair", peripheral=HRM)
        self.assertEqual((again["peripheral"], again["paired"]), (HRM, True))

    def test_a_pair_bluez_never_ends_is_cancelled_at_vigilds_deadline(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "hang", self.dbus.UInt32(0))
        reply, _ = self.pair_with_prompts(lambda p, c: None, timeout=120)
        self.assertIsInstance(reply, VigilError, self.diagnostics())
        self.assertIn("did not end within", reply.message)
        self.assertEqual([str(c[4]) for c in self.mock.control.Calls() if str(c[4]) in ("Pair", "CancelPairing")],
                         ["Pair", "CancelPairing"])
        # Nothing left behind: the next pairing runs.
        self.mock.control.SetPairingMethod(self.hrm, "justworks", self.dbus.UInt32(0))
        self.assertTrue(self.control.request("ble.pair", peripheral=HRM)["paired"])

    def vigilctl(self, *args, stdin=""):
        return subprocess.run([VIGILCTL, "--socket", self.socket, "ble", *args], input=stdin, capture_output=True,
                              text=True, timeout=60)

    def test_vigilctl_pair_asks_on_the_terminal_or_takes_the_passkey_then_unpair(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(31337))
        typed = self.vigilctl("pair", HRM, stdin="031337\n")
        self.assertEqual(typed.returncode, 0, typed.stderr + self.diagnostics())
        self.assertIn(f"Passkey shown on {HRM}", typed.stderr)
        self.assertIn(f"paired with {HRM} (bonded: yes", typed.stdout)
        self.assertIn("bonded", self.vigilctl("devices").stdout)
        forgot = self.vigilctl("unpair", HRM)
        self.assertEqual(forgot.returncode, 0, forgot.stderr)
        self.wait_until(lambda: self.device() is None, "forgotten")

        self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(42))
        wrong = self.vigilctl("pair", HRM, "--passkey", "43")
        self.assertNotEqual(wrong.returncode, 0)
        self.assertIn("AuthenticationFailed", wrong.stderr)
        right = self.vigilctl("pair", HRM, "--passkey", "42", "--trust", "--json")
        self.assertEqual(right.returncode, 0, right.stderr)
        self.assertEqual(json.loads(right.stdout), {"peripheral": HRM, "paired": True, "bonded": True, "trusted": True})

    def test_an_answer_to_a_prompt_that_is_not_waiting_is_refused(self):
        with self.assertRaises(VigilError) as refused:
            self.control.request("ble.pairingResponse", request=999, accept=True)
        self.assertEqual(refused.exception.code, "notFound")

    def test_forget_ends_the_connect_requests_that_name_the_device(self):
        # Before: the connect request outlived the forget, so vigild connected
        # (and, with a protected characteristic, paired) again the device
        # someone had just asked it to forget, retrying meanwhile on the
        # removed object (UnknownObject).
        self.control.request("ble.connect", peripheral=HRM)
        self.push(self.control, "ble.connected")
        self.control.request("ble.forget", peripheral=HRM)
        ended = self.push(self.control, "ble.disconnected")
        self.assertEqual(ended["attributes"]["willReconnect"], False, ended.header)
        self.assertIn("forgotten", ended["attributes"]["reason"])
        self.wait_until(lambda: self.device() is None, "forgotten")
        # The device advertises again: nobody asks for it any more, so no Connect.
        connects = len([c for c in self.mock.control.Calls() if str(c[4]) == "Connect"])
        self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
        self.wait_until(lambda: self.device() is not None, "the device seen again")
        self.control.request("ble.state")  # a round trip after vigild's reaction to it
        self.assertEqual(len([c for c in self.mock.control.Calls() if str(c[4]) == "Connect"]), connects,
                         self.diagnostics())
        self.assertNotIn("UnknownObject", self.vigild_log())

    def test_a_pairing_longer_than_the_request_timeout_is_waited_for(self):
        # The Python clients' default request timeout (10 s) is shorter than
        # vigild's pairing deadline (up to 120 s): ble.pair waits for that.
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "slow", self.dbus.UInt32(1500))
        impatient = ControlClient(self.socket, timeout=0.5)
        self.clients.append(impatient)
        reply = impatient.request("ble.pair", peripheral=HRM)
        self.assertEqual((reply["paired"], reply["bonded"]), (True, True))

    def test_a_resolved_private_address_keeps_the_connect_request(self):
        self.control.request("ble.connect", peripheral=HRM)
        self.push(self.control, "ble.connected")
        self.mock.control.ChangeAddress(self.hrm, IDENTITY, "random")
        changed = self.push(self.control, "ble.addressChanged")
        self.assertEqual((changed["attributes"]["peripheral"], changed["attributes"]["previous"]), (IDENTITY, HRM))
        self.assertIsNone(self.device(HRM))
        self.assertEqual(self.device(IDENTITY)["addressType"], "random")
        # The link drops; vigild reconnects it under the identity address.
        self.mock.control.DisconnectDevice(self.hrm, "timeout")
        self.push(self.control, "ble.disconnected", where=lambda m: m["attributes"]["peripheral"] == IDENTITY)
        self.push(self.control, "ble.connected", where=lambda m: m["attributes"]["peripheral"] == IDENTITY)


@unittest.skipIf(missing(), missing() or "")
class AppPairingTests(PairingRig):
    passkey_answer = 2468

    def test_a_prompt_wakes_the_suspended_app_that_uses_the_device(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r.get("kind") == "bleReady" for r in self.records()), "the app's connect request")
        self.control.app_action("background", APP)
        self.wait_until(lambda: next(a for a in self.control.apps() if a["id"] == APP)["state"] == "suspended",
                        "the app suspended")
        wakes_before = len([d for d in self.control.log(app=APP) if d["action"] == "wake"])
        # bluetoothd pairs by itself (the app read a protected characteristic): the prompt goes to the app.
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(self.passkey_answer))
        result = self.mock.control.RequestFromDevice(self.hrm, "passkey", timeout=30)
        self.assertEqual(str(result), "", self.diagnostics())
        records = self.records()
        self.assertTrue(any(r.get("eventKind") == "ble.pairingRequest" and r["attributes"]["kind"] == "passkey"
                            for r in records), self.diagnostics())
        # The app records its answer after vigild replied to it, which may be after BlueZ heard it.
        self.wait_until(lambda: any(r.get("kind") == "pairingAnswered" for r in self.records()), "the app's answer recorded")
        wakes = [d for d in self.control.log(app=APP) if d["action"] == "wake"][wakes_before:]
        self.assertTrue(any("ble.pairingRequest" in d["reason"] for d in wakes), wakes)


@unittest.skipIf(missing(), missing() or "")
class StoppedAppPairingTests(PairingRig):
    passkey_answer = 1357
    #: Room for the relaunch to answer the prompt (a Python app starting).
    config_lines = "bluetooth-request-timeout = 15\n"

    def test_a_prompt_relaunches_the_app_that_uses_the_device_when_it_is_not_running(self):
        # bluetoothd pairs by itself for a protected characteristic (as lab 69)
        # but with a passkey, while the app's process is gone (not force-quit):
        # the prompt relaunches it, and the new process answers.
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r.get("kind") == "bleReady" for r in self.records()), "the app's connect request")
        # Its ble.connected handled, so nothing unacknowledged relaunches it first.
        self.wait_until(lambda: any(r.get("kind") == "finished" for r in self.records()), "ble.connected acknowledged")
        pid = next(a for a in self.control.apps() if a["id"] == APP)["pid"]
        os.kill(pid, 9)
        self.wait_until(lambda: next(a for a in self.control.apps() if a["id"] == APP)["state"] == "notRunning",
                        "the app not running")
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(self.passkey_answer))
        result = self.mock.control.RequestFromDevice(self.hrm, "passkey", timeout=40)
        self.assertEqual(str(result), "", self.diagnostics())
        launches = [r for r in self.records() if r.get("kind") == "launch"]
        self.assertEqual(len(launches), 2, self.diagnostics())
        self.assertNotEqual(launches[1]["pid"], pid)
        self.assertTrue(any(r.get("eventKind") == "ble.pairingRequest" and r["pid"] == launches[1]["pid"]
                            for r in self.records()), self.diagnostics())
        self.assertIn(("passkey", "ok"), [(str(r[1]), str(r[2])) for r in self.mock.control.AgentResults()])


@unittest.skipIf(missing(), missing() or "")
class PairingAcrossRestartTests(PairingRig):
    """A pairing intent: an app's `ble.pair` not yet answered, saved in the
    state file and done after vigild's restart, the app told by an event."""
    passkey_answer = 2468
    #: Room for the relaunched app to answer the prompt.
    config_lines = "bluetooth-request-timeout = 15\n"

    def manifest(self):
        return super().manifest().replace('"--restore-id"', '"--ble-pair", "--restore-id"')

    def saved_pairs(self):
        try:
            with open(f"{self.dir}/state/state.json") as file:
                central = json.load(file).get("bluetooth", {}).get("central", {}).get(APP) or {}
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return central.get("pairs") or []

    def test_a_pairing_cut_by_a_sigkill_is_done_after_the_restart_and_the_app_told(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "hang", self.dbus.UInt32(0))
        self.control.app_action("launch", APP)
        self.wait_until(lambda: [str(c[4]) for c in self.mock.control.Calls() if str(c[4]) == "Pair"], "BlueZ's Pair")
        self.wait_until(lambda: self.saved_pairs() == [HRM], "the pairing intent in the state file")
        self.daemon.kill()
        self.daemon.wait()
        for client in self.clients:
            client.close()
        self.clients = []
        # bluetoothd ends a pairing whose caller left the bus: nothing stays in progress.
        self.wait_until(lambda: [r for r in self.mock.control.AgentResults() if str(r[2]) == "caller left the bus"],
                        "BlueZ's pairing ended with vigild")
        self.assertFalse(bool(self.mock_device("Paired")))
        self.mock.control.SetPairingMethod(self.hrm, "passkey", self.dbus.UInt32(self.passkey_answer))
        self.start_daemon()
        # vigild pairs again; the passkey prompt relaunches the app, which answers it.
        self.wait_until(lambda: any(r.get("eventKind") == "ble.pairingEnded" for r in self.records()),
                        "the app told the pairing ended", timeout=40)
        ended = next(r for r in self.records() if r.get("eventKind") == "ble.pairingEnded")
        self.assertEqual({k: ended["attributes"].get(k) for k in ("peripheral", "paired", "bonded", "error")},
                         {"peripheral": HRM, "paired": True, "bonded": True, "error": None}, self.diagnostics())
        self.assertTrue(bool(self.mock_device("Paired")))
        self.assertIn(("passkey", "ok"), [(str(r[1]), str(r[2])) for r in self.mock.control.AgentResults()])
        self.assertTrue(any(r.get("kind") == "pairingAnswered" for r in self.records()))
        # The relaunched app was restored and did not ask again; the intent is done.
        self.assertEqual(len([r for r in self.records() if r.get("kind") == "pairing"]), 1)
        self.wait_until(lambda: self.saved_pairs() == [], "the intent gone from the state file")

    def test_cancel_pairing_ends_a_saved_intent(self):
        self.wait_until(lambda: self.agents(), "the agent registered")
        self.mock.control.SetPairingMethod(self.hrm, "hang", self.dbus.UInt32(0))
        self.control.app_action("launch", APP)
        self.wait_until(lambda: self.saved_pairs() == [HRM], "the pairing intent in the state file")
        self.control.request("ble.cancelPairing", peripheral=HRM)
        self.wait_until(lambda: any(r.get("kind") == "pairFailed" for r in self.records()), "the app's pair failed")
        self.wait_until(lambda: self.saved_pairs() == [], "the intent gone from the state file")


if __name__ == "__main__":
    unittest.main()
