"""L2CAP connection-oriented channels (docs/bluetooth.md, "L2CAP channels"):
a byte stream to a PSM on a connected peripheral, or from a central to a PSM
this app published. A channel is a session in the daemon: its bytes arrive
as `session.data` events, exactly as an accessory session's, so
`L2CAPChannel` reads, writes and closes like an `AccessorySession`.

    channel = await app.open_l2cap_channel("C0:DE:00:00:00:20", 0x80)
    await channel.write(firmware)
    async for chunk in channel:          # bytes, until the channel closes
        store(chunk)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .accessories import Accessory, AccessorySession

if TYPE_CHECKING:
    from ._client import Client

#: A central opened a channel to a PSM this client published (attributes: the channel).
INCOMING = "ble.l2cap.incoming"
#: A channel opened with `reopen` is open again after its link came back (same session).
REOPENED = "ble.l2cap.reopened"
#: After a daemon restart vigild could not listen on a PSM this app published
#: again (attributes: `psm`, `reason`); it is no longer published.
UNPUBLISHED = "ble.l2cap.unpublished"


class L2CAPChannel(AccessorySession):
    """One channel: `peer` (the other device's address), `psm`, and the
    largest SDU each way (`send_mtu`, `receive_mtu`; writes of any length are
    cut at `send_mtu` by the daemon). Read, write, iterate and close as an
    `AccessorySession`; each chunk is acknowledged when the next is asked
    for, and until then counts against the channel's buffer in the daemon,
    which stops reading the channel when it is full (the kernel then holds
    the peer back with LE credits)."""

    def __init__(self, owner: Client, info: Mapping[str, Any]) -> None:
        super().__init__(owner, int(info["session"]), f"l2cap:{info['psm']}", _NO_ACCESSORY)
        self.peer = str(info["peer"])
        self.psm = int(info["psm"])
        self.send_mtu = int(info["sendMTU"])
        self.receive_mtu = int(info["receiveMTU"])

    def __repr__(self) -> str:
        return f"L2CAPChannel(session={self.id}, peer={self.peer}, psm={self.psm})"


def l2cap_options(security: str | None, receive_mtu: int | None, coalesce_ms: int | None = None) -> dict[str, Any]:
    members: dict[str, Any] = {}
    if security is not None:
        members["security"] = security
    if receive_mtu is not None:
        members["receiveMTU"] = int(receive_mtu)
    if coalesce_ms is not None:
        members["coalesceMilliseconds"] = int(coalesce_ms)
    return members


_NO_ACCESSORY = Accessory.from_json({"connectionID": 0, "name": "L2CAP channel"})
