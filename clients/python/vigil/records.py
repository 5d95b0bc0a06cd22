"""Typed results of the control role: what `vigil.Control` (and `vigil.sync.ControlClient`)
return from `app_list`, `app_info`, `decisions`, `device_changes` and `follow_log`.
Protocol members only (docs/protocol.md), in snake case; no frame envelope
(`type`, `id`). `raw` keeps the members as the daemon sent them, for what a
newer daemon adds."""

from __future__ import annotations

import dataclasses
import datetime
import warnings
from typing import Any

JSON = dict[str, Any]


def clock(epoch: float) -> str:
    """A UTC time of day with milliseconds (HH:MM:SS.mmm)."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclasses.dataclass(frozen=True)
class Task:
    id: int
    name: str


@dataclasses.dataclass(frozen=True)
class AppInfo:
    """An app as the daemon sees it (docs/protocol.md, "App object members")."""
    id: str
    state: str
    pid: int | None
    background_modes: tuple[str, ...]
    exits_on_suspend: bool
    force_quit: bool
    wakes: int
    launches: int
    background_time_used: float
    background_time_remaining: float | None
    tasks: tuple[Task, ...]
    queued_events: int
    unacknowledged_events: int
    dropped_events: int
    last_decision: str | None
    last_reason: str | None
    launch_reason: str | None
    log_path: str | None
    journal_identifier: str | None
    manifest_path: str | None
    next_refresh: float | None
    refresh_interval: float | None
    raw: JSON = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, member: JSON) -> AppInfo:
        def text(key: str) -> str | None:
            value = member.get(key)
            return None if value is None else str(value)
        return cls(
            id=str(member["id"]), state=str(member.get("state", "")),
            pid=None if member.get("pid") is None else int(member["pid"]),
            background_modes=tuple(str(m) for m in member.get("backgroundModes") or ()),
            exits_on_suspend=bool(member.get("exitsOnSuspend", False)), force_quit=bool(member.get("forceQuit", False)),
            wakes=int(member.get("wakes") or 0), launches=int(member.get("launches") or 0),
            background_time_used=float(member.get("backgroundTimeUsed") or 0),
            background_time_remaining=_optional_float(member.get("backgroundTimeRemaining")),
            tasks=tuple(Task(int(t["id"]), str(t.get("name", ""))) for t in member.get("tasks") or ()),
            queued_events=int(member.get("queuedEvents") or 0),
            unacknowledged_events=int(member.get("unacknowledgedEvents") or 0),
            dropped_events=int(member.get("droppedEvents") or 0),
            last_decision=text("lastDecision"), last_reason=text("lastReason"), launch_reason=text("launchReason"),
            log_path=text("logPath"), journal_identifier=text("journalIdentifier"),
            manifest_path=text("manifestPath"), next_refresh=_optional_float(member.get("nextRefresh")),
            refresh_interval=_optional_float(member.get("refreshInterval")), raw=dict(member))

    def __getitem__(self, member: str) -> Any:
        """Deprecated: a member by its protocol name, as the dict-returning calls gave it (`raw[member]`)."""
        warnings.warn(f"vigil: AppInfo[{member!r}] is deprecated and will be removed: use its attribute "
                      "(snake case) or .raw", DeprecationWarning, stacklevel=2)
        return self.raw[member]


@dataclasses.dataclass(frozen=True)
class Decision:
    """One line of the decision log: why vigild woke, suspended, relaunched or killed an app."""
    time: float  # seconds since the Unix epoch
    app: str
    action: str
    reason: str
    state: str

    @classmethod
    def from_json(cls, member: JSON) -> Decision:
        return cls(float(member.get("time") or 0), str(member.get("app", "")), str(member.get("action", "")),
                   str(member.get("reason", "")), str(member.get("state", "")))

    def __str__(self) -> str:
        return f"{clock(self.time)} {self.app}: {self.action} ({self.reason}) -> {self.state}"


@dataclasses.dataclass(frozen=True)
class DeviceChange:
    """A device that came or went, as the decision log records it."""
    time: float
    kind: str  # accessory, bluetooth
    device: str
    change: str  # connected, disconnected
    detail: str

    @classmethod
    def from_json(cls, member: JSON) -> DeviceChange:
        return cls(float(member.get("time") or 0), str(member.get("kind", "")), str(member.get("device", "")),
                   str(member.get("change", "")), str(member.get("detail", "")))

    def __str__(self) -> str:
        return f"{clock(self.time)} {self.kind} {self.device}: {self.change} {self.detail}".rstrip()
