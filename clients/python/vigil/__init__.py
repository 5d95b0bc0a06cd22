"""Vigil's Python client: an asyncio package for apps, control clients and test rigs.

    import vigil

    async with vigil.App() as app:               # inside a process vigild launched
        async for item in app:
            if isinstance(item, vigil.Event):
                handle(item)
                await app.finished_processing(acknowledging=item)

    async with vigil.Control() as control:       # what vigilctl does
        print(await control.status())

The protocol is docs/protocol.md; `vigil.sync` wraps this for scripts
without an event loop.
"""

from ._connection import DEFAULT_TIMEOUT, Connection, RequestTimeout
from ._frames import (
    CLIENT_NAME, FATAL_CODES, MAX_BODY_BYTES, MAX_HEADER_BYTES, PROTOCOL_VERSIONS, SYSTEM_SOCKET, WRITE_CHUNK,
    ConnectionClosed, FrameDecoder, Message, VigilError, encode_frame, monotonic_ns, socket_path,
)
from ._payloads import NotificationValue, SessionLogs, notification_values
from .accessories import (Accessory, AccessoryChange, AccessorySession, Closed, Data, Lines, Loss, Reopened, SessionItem,
                          split_records)
from .app import INVALID_TASK, App, AppItem, BackgroundTask, ConnectionRestored, Event, LaunchOptions, Lifecycle
from .ble import (
    BLEClient, Central, Characteristic, Descriptor, Device, PeripheralManager, PeripheralRequest, Scanner, Service,
    Services, UpdateResult, characteristic_definition, normalize_uuid, service_definition,
)
from .control import Control
from .monitor import AdvertisementData, AdvertisementMonitor, Dropped, Found, Lost, advertisement_records, pattern
from .l2cap import L2CAPChannel
from .rfcomm import RFCOMMChannel
from .records import AppInfo, Decision, DeviceChange, Task

__version__ = "0.1.0"

__all__ = [
    "AppInfo", "Decision", "DeviceChange", "Task",
    "DEFAULT_TIMEOUT", "Connection", "RequestTimeout", "CLIENT_NAME", "FATAL_CODES", "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES", "PROTOCOL_VERSIONS", "SYSTEM_SOCKET", "WRITE_CHUNK", "ConnectionClosed", "FrameDecoder",
    "Message", "VigilError", "encode_frame", "monotonic_ns", "socket_path", "NotificationValue", "SessionLogs",
    "notification_values", "Accessory", "AccessoryChange", "AccessorySession", "Closed", "Data", "Lines", "Loss", "Reopened",
    "SessionItem", "split_records", "INVALID_TASK", "App", "AppItem", "BackgroundTask", "ConnectionRestored", "Event", "LaunchOptions",
    "Lifecycle", "BLEClient", "Central", "Characteristic", "Descriptor", "Device", "PeripheralManager",
    "PeripheralRequest", "Scanner", "Service", "Services", "UpdateResult", "characteristic_definition",
    "normalize_uuid", "service_definition", "Control", "L2CAPChannel", "RFCOMMChannel", "__version__",
    "AdvertisementData", "AdvertisementMonitor", "Dropped", "Found", "Lost", "advertisement_records", "pattern",
]
