"""A rig file: the daemons a test session needs, each a pytest fixture of its
own scope, with its apps and virtual devices (docs/testing-with-vigil.md,
"A rig file").

    [daemons.gateway]                 # a fixture named `gateway`
    scope = "session"                 # function, module or session (default)
    timings = { suspend-grace = 0.5 }
    settings = { event-queue-limit = 100 }
    bluez-mock = false                # true: a BlueZ mock of the same scope (`gateway.bluetooth_mock`)

    [[daemons.gateway.accessories]]   # vigil.testing.SerialAccessory, keys in kebab case
    name = "gauge"
    vendor-id = "abcd"
    product-id = "0042"
    serial = "G-0001"
    protocols = ["com.acme.gauge"]

    [[daemons.gateway.apps]]          # a manifest (docs/lifecycle.md), and `launch`
    id = "org.example.logger"
    exec = ["{python}", "{rig}/logger.py", "{root}/out"]   # this interpreter, the rig file's folder,
                                                          # the daemon's own folder
    background-modes = ["external-accessory"]
    accessory-protocols = ["com.acme.gauge"]
    launch = true
"""

from __future__ import annotations

import dataclasses
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .testing import SerialAccessory

SCOPES = ("function", "module", "session")
_ACCESSORY_KEYS = {"name": "name", "vendor-id": "vendor_id", "product-id": "product_id", "serial": "serial",
                   "manufacturer": "manufacturer", "product": "product", "protocols": "protocols",
                   "line-settings": "line_settings", "modem-lines": "modem_lines"}
_APP_KEYS = {"id", "exec", "background-modes", "accessory-protocols", "exits-on-suspend", "launch"}
_DAEMON_KEYS = {"scope", "vigild", "timings", "settings", "bluez-mock", "accessories", "apps"}


class RigError(ValueError):
    """A rig file that cannot be used; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class RigApp:
    id: str
    command: tuple[str, ...]
    background_modes: tuple[str, ...] = ()
    accessory_protocols: tuple[str, ...] = ()
    exits_on_suspend: bool = False
    launch: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RigDaemon:
    name: str
    scope: str = "session"
    vigild: str | None = None
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bluez_mock: bool = False
    accessories: tuple[SerialAccessory, ...] = ()
    apps: tuple[RigApp, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rig:
    path: Path
    daemons: tuple[RigDaemon, ...]


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RigError(f"{where}: an array of strings")
    return tuple(value)


def _table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RigError(f"{where}: a table")
    return value


def load_rig(path: str | Path) -> Rig:
    """Reads and checks a rig file; RigError naming the file and key otherwise."""
    path = Path(path).resolve()
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RigError(f"{path}: {error}") from error
    unknown = set(document) - {"daemons"}
    if unknown:
        raise RigError(f"{path}: unknown keys {sorted(unknown)} (a rig file has [daemons.NAME] tables)")
    daemons = []
    for name, table in _table(f"{path}: daemons", document.get("daemons", {})).items():
        where = f"{path}: daemons.{name}"
        table = _table(where, table)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise RigError(f"{where}: the name is the fixture's: a Python identifier")
        unknown = set(table) - _DAEMON_KEYS
        if unknown:
            raise RigError(f"{where}: unknown keys {sorted(unknown)}")
        scope = table.get("scope", "session")
        if scope not in SCOPES:
            raise RigError(f"{where}.scope: one of {', '.join(SCOPES)}")
        accessories = []
        for index, accessory in enumerate(table.get("accessories", [])):
            place = f"{where}.accessories[{index}]"
            accessory = _table(place, accessory)
            unknown = set(accessory) - set(_ACCESSORY_KEYS)
            if unknown:
                raise RigError(f"{place}: unknown keys {sorted(unknown)}")
            arguments: dict[str, Any] = {_ACCESSORY_KEYS[k]: (_strings(f"{place}.{k}", v) if k == "protocols" else v)
                         for k, v in accessory.items()}
            try:
                accessories.append(SerialAccessory(**arguments))
            except (TypeError, ValueError) as error:
                raise RigError(f"{place}: {error}") from error
        apps = []
        for index, app in enumerate(table.get("apps", [])):
            place = f"{where}.apps[{index}]"
            app = _table(place, app)
            if not isinstance(app.get("id"), str) or "exec" not in app:
                raise RigError(f"{place}: needs id and exec")
            command = tuple(part.replace("{python}", sys.executable).replace("{rig}", str(path.parent))
                            for part in _strings(f"{place}.exec", app["exec"]))
            apps.append(RigApp(app["id"], command, _strings(f"{place}.background-modes", app.get("background-modes", [])),
                               _strings(f"{place}.accessory-protocols", app.get("accessory-protocols", [])),
                               bool(app.get("exits-on-suspend", False)), bool(app.get("launch", False)),
                               {k: v for k, v in app.items() if k not in _APP_KEYS}))
        vigild = table.get("vigild")
        if vigild is not None:
            vigild = str((path.parent / str(vigild)).resolve())
        daemons.append(RigDaemon(name, scope, vigild, dict(_table(f"{where}.timings", table.get("timings", {}))),
                                 dict(_table(f"{where}.settings", table.get("settings", {}))),
                                 bool(table.get("bluez-mock", False)), tuple(accessories), tuple(apps)))
    return Rig(path, tuple(daemons))
