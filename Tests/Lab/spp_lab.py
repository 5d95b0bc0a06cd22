"""What the RFCOMM lab tests (65, 68) share with an SPP device on hci1: BlueZ
learning it by a BR/EDR inquiry, and pairing it through vigild's agent (the
kernel wants a link key for any RFCOMM channel to an SSP device; security
"low" only spares SDP). Not a test: the runner only runs files named NN-name."""

import asyncio

import vigillab as lab
from vigillab import LabError

import vigil  # accessory_lab put clients/python on the path


def discover(bluez, address: str) -> None:
    """BlueZ learns the device at `address` by an inquiry."""
    adapter = bluez.obj(bluez.adapter_path, "org.bluez.Adapter1")
    adapter.SetDiscoveryFilter({"Transport": "bredr"})
    adapter.StartDiscovery()
    try:
        bluez.wait(lambda: any(str(d.get("Address", "")).upper() == address for d in bluez.devices().values()), 60,
                   f"{address} in BlueZ's BR/EDR discovery")
    finally:
        try:
            adapter.StopDiscovery()
        except bluez.dbus.DBusException:
            pass


def pair(daemon, address: str) -> tuple[dict, list[dict]]:
    """Pairs through vigild's agent, answering its prompts; the pairing state and the prompts."""
    async def run():
        prompts = []
        async with vigil.Control(daemon.socket) as control:
            central = await control.central()

            async def on_prompt(prompt):
                prompts.append(dict(prompt))
                if prompt["kind"] in ("confirm", "authorize", "authorizeService"):
                    await central.respond_pairing(prompt["request"], True)
            central.pairing_callback = on_prompt
            return await asyncio.wait_for(central.pair(address), 120), prompts

    paired, prompts = asyncio.run(run())
    if not paired["paired"]:
        raise LabError(f"pairing with the SPP device: {paired}\n{daemon.diagnostics()}")
    lab.log(f"   paired through vigild's agent (bonded {paired['bonded']}; prompts {[p['kind'] for p in prompts]})")
    return paired, prompts
