"""RFCOMM channels (Bluetooth Classic serial, SPP; docs/bluetooth.md, "RFCOMM
channels"): a byte stream to a serial port service on a BR/EDR device BlueZ
knows. A channel is a session in the daemon, exactly as an L2CAP channel or
an accessory session, so `RFCOMMChannel` reads, writes and closes like an
`AccessorySession`.

    channel = await app.open_rfcomm_channel("00:AA:01:00:00:23", channel=1, reopen=True)
    await channel.write(b"ATZ\\r")
    async for chunk in channel:          # bytes, until the channel closes
        store(chunk)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .accessories import Accessory, AccessorySession

if TYPE_CHECKING:
    from ._client import Client

#: A channel opened with `reopen` is open again after it closed (same session).
REOPENED = "bluetooth.rfcomm.reopened"
#: A device connected to a service published with `publish_rfcomm_service` (a new session).
INCOMING = "bluetooth.rfcomm.incoming"
#: A published service bluetoothd would not take (back), with `uuid` and `reason`.
UNPUBLISHED = "bluetooth.rfcomm.unpublished"


class RFCOMMChannel(AccessorySession):
    """One channel: `peer` (the device's address) and `channel` (its server
    channel, 1-30). Each chunk is acknowledged when the next is asked for,
    and until then counts against the channel's buffer in the daemon, which
    stops reading when it is full (RFCOMM's credits then hold the device back)."""

    def __init__(self, owner: Client, info: Mapping[str, Any]) -> None:
        super().__init__(owner, int(info["session"]), f"rfcomm:{info['channel']}", _NO_ACCESSORY)
        self.peer = str(info["peer"])
        self.channel = int(info["channel"])

    def __repr__(self) -> str:
        return f"RFCOMMChannel(session={self.id}, peer={self.peer}, channel={self.channel})"


_NO_ACCESSORY = Accessory.from_json({"connectionID": 0, "name": "RFCOMM channel"})
