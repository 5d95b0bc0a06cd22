#!/usr/bin/env python3
"""Wait until the kernel's Bluetooth management interface lists controllers.

    python3 mgmt_wait.py [--timeout SECS] INDEX...     e.g. 0 1

The kernel lists a controller index (mgmt Read Index List) only after its
setup succeeded, so this is the test for "btvirt's hci0 and hci1 are
usable".  Exit 0 when all are listed, 1 on timeout (prints what is listed).
(`btmgmt info` is not usable from scripts: with stdin not a terminal it
prints nothing.)
"""
import argparse
import ctypes
import os
import select
import socket
import struct
import sys
import time

AF_BLUETOOTH = 31
BTPROTO_HCI = 1
HCI_CHANNEL_CONTROL = 3
HCI_DEV_NONE = 0xFFFF
MGMT_OP_READ_INDEX_LIST = 0x0003
MGMT_EV_CMD_COMPLETE = 0x0001


def open_mgmt() -> socket.socket:
    s = socket.socket(AF_BLUETOOTH, socket.SOCK_RAW | socket.SOCK_CLOEXEC, BTPROTO_HCI)
    libc = ctypes.CDLL(None, use_errno=True)
    addr = struct.pack("<HHH", AF_BLUETOOTH, HCI_DEV_NONE, HCI_CHANNEL_CONTROL)
    if libc.bind(s.fileno(), ctypes.create_string_buffer(addr), len(addr)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return s


def read_index_list(s: socket.socket, timeout: float = 2.0) -> list[int]:
    s.send(struct.pack("<HHH", MGMT_OP_READ_INDEX_LIST, HCI_DEV_NONE, 0))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([s], [], [], max(0, deadline - time.monotonic()))
        if not r:
            break
        data = s.recv(1024)
        ev, _idx, _plen = struct.unpack_from("<HHH", data)
        if ev != MGMT_EV_CMD_COMPLETE:
            continue
        op, status = struct.unpack_from("<HB", data, 6)
        if op != MGMT_OP_READ_INDEX_LIST:
            continue
        if status != 0:
            raise OSError(f"mgmt Read Index List status {status}")
        (n,) = struct.unpack_from("<H", data, 9)
        return list(struct.unpack_from(f"<{n}H", data, 11))
    raise TimeoutError("no reply to mgmt Read Index List")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("indexes", nargs="+", type=int)
    a = p.parse_args()
    s = open_mgmt()
    deadline = time.monotonic() + a.timeout
    have: list[int] = []
    while True:
        try:
            have = read_index_list(s)
        except TimeoutError:
            have = []
        if all(i in have for i in a.indexes):
            return 0
        if time.monotonic() >= deadline:
            print(f"mgmt lists controllers {have}, want {a.indexes}", file=sys.stderr)
            return 1
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
