"""The synchronous Python client for vigild, as one importable file.

A shim: the implementation is the `vigil` package beside this file
(`vigil.sync` wraps its asyncio client), so there is one client to maintain.
Scripts that used this file keep working with Debian's python3 and nothing
installed, as long as the `vigil` folder sits next to it (or is installed:
`pip install ./clients/python`).

    with ControlClient() as control:
        for app in control.apps():       # the wire's members (this file's ControlClient)
            print(app["id"], app["state"])

    with AppClient() as app:              # only inside a process vigild launched
        for item in app.events():
            if isinstance(item, Event):
                handle(item)
                app.ack(item.seq)
                app.finished_processing()
"""

import os
import sys

try:
    import vigil.sync  # noqa: F401
except ImportError:  # run from a checkout with the package folder beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import vigil.sync  # noqa: E402
from vigil.sync import (  # noqa: E402,F401
    ACCESSORY_EVENT_KINDS, CLIENT_NAME, FATAL_CODES, MAX_BODY_BYTES, MAX_HEADER_BYTES, PROTOCOL_VERSIONS,
    SYSTEM_SOCKET, WRITE_CHUNK, AppClient, Connection, ConnectionClosed, Event, FrameDecoder,
    Lifecycle, Message, NotificationValue, SessionLogs, VigilError, encode_frame, monotonic_ns, notification_values,
    socket_path,
)


class ControlClient(vigil.sync.ControlClient):
    """The control role with replies as the wire has them (dicts of protocol members),
    for scripts and the protocol's own tests, which check members as sent. The
    package's `vigil.sync.ControlClient` returns typed results (`app_list`,
    `decisions`, `device_changes`)."""

    def apps(self):
        return list(self.request("apps")["apps"])

    def app_action(self, action, app):
        return dict(self.request("appAction", action=action, app=app)["app"])

    def log(self, app=None, limit=None, since=None):
        return list(self.request("log", **self.control._log_members(app, limit, since))["decisions"])

    def devices(self, since=None):
        return list(self.request("log", **self.control._log_members(None, 0, since)).get("devices") or [])
