"""JSON-lines files that another process may be writing: one reader for every harness
(fault_harness, test_protocol, test_accessory_daemon, ble_harness), without importing any of them."""

import json


def read_jsonl(path):
    """The lines of a JSON-lines file; a torn last line (a writer killed mid-line) is skipped."""
    try:
        with open(path) as file:
            lines = file.read().split("\n")
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
    return records
