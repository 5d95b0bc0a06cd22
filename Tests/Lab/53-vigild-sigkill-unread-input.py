#!/usr/bin/env python3
"""A SIGKILL of vigild loses nothing a real tty (cdc-acm ttyACM) received and
vigild had not read yet, thanks to the port keeper (`vigild --fd-keeper`), which
holds a copy of every open port so that the daemon's death is not its last close
(lab tier, real USB CDC-ACM gadget):

1. an app (Tests/python/fault_app.py: it reconnects by itself and stores each
   event before acknowledging it) holds a `reopen` session on the accessory;
   the first records the device sends reach it;
2. vigild is stopped (SIGSTOP: it surely reads nothing), the device sends N
   numbered records, which are checked to wait unread in the host tty, then
   vigild is SIGKILLed and started again with the same config and state;
3. the app is adopted, the session re-established after the daemon restart,
   and a last record sent after that arrives; then every one of the N records
   must have reached the app once, in order.

Run twice: with `--no-port-keeper` the records are expected to be lost (the
figure is printed, not checked: it shows the premise holds on this kernel);
with the keeper (the default) any loss, duplicate or reordering fails.
"""
# lab-timeout: 240
import array
import atexit
import ctypes
import fcntl
import json
import os
import shutil
import signal
import sys
import termios
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

FAULT_APP = os.path.join(lab.REPO, "Tests", "python", "fault_app.py")
PROTOCOL = "org.vigil.sensor"
SERIAL = "VL-ACC-0053"
FIRST = 5      # records sent before the stop, to see the session work
UNREAD = 50    # records sent while vigild is stopped
LAST = FIRST + UNREAD + 1  # sent after the restart: once it is in, all that can come has come
SYS_PIDFD_GETFD = 438      # x86_64 (the lab guest)
_libc = ctypes.CDLL(None, use_errno=True)
MY_KEEPERS: set[int] = set()  # port keepers this test's vigild started


def record_line(number: int) -> bytes:
    """`NUMBER,VALUE,CRC32`: distinct, numbered, and checksummed like the fault suite's."""
    body = f"{number:03d},{(number * 7919) % 1000003:07d}"
    return f"{body},{zlib.crc32(body.encode()):08x}\n".encode()


def records(first: int, last: int) -> bytes:
    return b"".join(record_line(n) for n in range(first, last + 1))


UNREAD_BYTES = records(FIRST + 1, FIRST + UNREAD)
# Well under the 4 KiB n_tty buffer: the tty must hold all of it without
# throttling, so whatever is lost is lost by the close and nothing else.
assert len(records(1, LAST)) < 2048, len(records(1, LAST))


def analyse(rows: list[dict]) -> dict:
    """The session data the app stored, each event once (a copy of a sequence
    number with the same bytes is a flagged redelivery), as record numbers."""
    seen: dict[int, tuple] = {}
    figures = dict(events=0, redelivered=0, unflagged_duplicates=0, reused=0, corrupt=0)
    stream = bytearray()
    for r in rows:
        if r.get("kind") != "event":
            continue
        payload = bytes.fromhex(r.get("payloadHex", ""))
        content = (r["eventKind"], payload if r["eventKind"] == "session.data"
                   else json.dumps(r.get("attributes"), sort_keys=True))
        if r["seq"] in seen:
            if seen[r["seq"]] == content:
                figures["redelivered" if r.get("redelivered") else "unflagged_duplicates"] += 1
                continue
            figures["reused"] += 1  # a new event under an old number
        seen[r["seq"]] = content
        if r["eventKind"] == "session.data":
            figures["events"] += 1
            stream += payload
    numbers = []
    for line in bytes(stream).split(b"\n")[:-1]:  # the last piece has no newline yet
        try:
            number, value, crc = line.decode().split(",")
            if zlib.crc32(f"{number},{value}".encode()) != int(crc, 16):
                raise ValueError
            numbers.append(int(number))
        except ValueError:
            figures["corrupt"] += 1
    highest = reordered = 0
    for n in numbers:
        reordered += n < highest
        highest = max(highest, n)
    figures.update(numbers=numbers, stored=set(numbers), duplicated=len(numbers) - len(set(numbers)),
                   reordered=reordered)
    return figures


def keeper_pids() -> set[int]:
    """Live `vigild --fd-keeper` processes, this test's or not (an earlier
    test's keeper is not ours to end)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"--fd-keeper" in argv and proc_state(int(entry)) not in (None, "Z"):
                pids.add(int(entry))
    return pids


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def vigild_pid() -> int:
    with open(os.path.join(lab.RUN, "vigild.pid")) as f:
        return int(f.read().strip())


def unread_in_port(pid: int, node: str) -> int:
    """Bytes waiting unread in the tty that (stopped) vigild holds open: FIONREAD
    on a copy of its descriptor (pidfd_getfd). Opening the node ourselves would
    make us a holder of the port and spoil the no-keeper case."""
    fds = [int(fd) for fd in os.listdir(f"/proc/{pid}/fd")
           if os.path.realpath(f"/proc/{pid}/fd/{fd}") == os.path.realpath(node)]
    if len(fds) != 1:
        raise LabError(f"vigild (pid {pid}) holds {node} open {len(fds)} times, want once")
    pidfd = os.pidfd_open(pid)
    try:
        fd = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fds[0], 0)
        if fd < 0:
            err = ctypes.get_errno()
            raise LabError(f"pidfd_getfd({pid}, {fds[0]}): {os.strerror(err)}")
    finally:
        os.close(pidfd)
    try:
        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
        return count[0]
    finally:
        os.close(fd)  # vigild still holds it: not a close of the port


def logged(daemon: acc.Daemon, offset: int, *parts: str) -> bool:
    """A line of vigild's log past `offset` (the restarted daemon's) has all of `parts`."""
    with open(daemon.log_path, "rb") as f:
        f.seek(offset)
        return any(all(p in line for p in parts) for line in f.read().decode(errors="replace").splitlines())


def start_daemon(name: str, app: str, keeper: bool) -> acc.Daemon:
    # accessory_lab starts example_app.py, which exits when its connection
    # drops; fault_app.py connects again to the restarted daemon, as VigilKit
    # apps do. And Daemon() takes no vigild flags: a wrapper adds the one.
    saved = acc.EXAMPLE_APP, acc.VIGILD
    acc.EXAMPLE_APP, acc.VIGILD = FAULT_APP, vigild_command(keeper)
    try:
        # on-stop = terminate: the final graceful stop ends the keeper too
        # (`leave` would leave it holding the port for a next daemon for 120 s).
        return acc.Daemon(name, config='on-stop = "terminate"',
                          apps={app: {"declares": [PROTOCOL], "args": ["--accessory-protocol", PROTOCOL]}})
    finally:
        acc.EXAMPLE_APP, acc.VIGILD = saved


def vigild_command(keeper: bool) -> str:
    if keeper:
        return acc.VIGILD
    wrapper = "/tmp/vigild-no-port-keeper"
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nexec "{acc.VIGILD}" --no-port-keeper "$@"\n')  # exec: the pid file stays right
    os.chmod(wrapper, 0o755)
    return wrapper


def run(keeper: bool, host: str, dev: str) -> dict:
    tag = "keeper" if keeper else "no-keeper"
    app = f"org.vigil.lab.unread.{tag.replace('-', '')}"
    log(f"===== {tag}: vigild{'' if keeper else ' --no-port-keeper'}")
    t0 = time.monotonic()
    earlier = keeper_pids()
    daemon = start_daemon(f"53-{tag}", app, keeper)
    rows = lambda: daemon.read(app)  # noqa: E731

    # ------------------------------------------------ 1. a session, first records ----
    daemon.wait(lambda: any(a["serialNumber"] == SERIAL for a in daemon.accessories()), 30,
                f"vigild to list {SERIAL}")
    daemon.control.app_action("launch", app)
    session = daemon.wait(lambda: daemon.records_of(app, "sessionOpened"), 60, "the app's session")[0]["session"]
    daemon.control.app_action("background", app)
    daemon.wait_state(app, "suspended")
    g = lab.open_raw(dev)
    try:
        lab.write_all(g, records(1, FIRST))
        daemon.wait(lambda: analyse(rows())["stored"] == set(range(1, FIRST + 1)), 60,
                    f"records 1..{FIRST} in the app")
        # Nothing in flight at the stop: the app acknowledged and is frozen
        # again, vigild has read and delivered all it got.
        daemon.wait_state(app, "suspended", 30)
        info = next(s for s in daemon.sessions() if s["session"] == session)
        if info["bytesIn"] != len(records(1, FIRST)) or info["bufferedBytes"]:
            raise LabError(f"before the stop: session {info}, want bytesIn={len(records(1, FIRST))}, nothing buffered")
        # vigild starts its keeper with the first port it opens.
        keepers = keeper_pids() - earlier
        MY_KEEPERS.update(keepers)
        if keeper and len(keepers) != 1:
            raise LabError(f"vigild started {len(keepers)} port keepers {keepers} with session {session}, "
                           f"want one\n{daemon.log_tail()}")
        if not keeper and keepers:
            raise LabError(f"vigild --no-port-keeper started port keepers {keepers}")
        log(f"1. session {session}: records 1..{FIRST} reached the app, which is suspended; "
            f"port keeper {sorted(keepers) or 'none'}")

        # ------------------------------------ 2. unread input, SIGKILL, restart ----
        old = vigild_pid()
        os.kill(old, signal.SIGSTOP)
        lab.wait_for(lambda: proc_state(old) == "T", 10, f"vigild (pid {old}) to stop")
        lab.write_all(g, UNREAD_BYTES)
        # The premise, observed: all of it arrived in the host tty and waits unread.
        lab.wait_for(lambda: unread_in_port(old, host) == len(UNREAD_BYTES), 30,
                     f"{len(UNREAD_BYTES)} bytes unread in {host}")
        log(f"2. vigild stopped; records {FIRST + 1}..{FIRST + UNREAD} ({len(UNREAD_BYTES)} bytes) "
            f"wait unread in {host}; SIGKILL")
        os.kill(old, signal.SIGKILL)
        lab.wait_for(lambda: proc_state(old) in (None, "Z"), 20, f"vigild (pid {old}) to die")
        os.unlink(os.path.join(lab.RUN, "vigild.pid"))  # lab_daemon refuses while a (zombie) pid answers
        with open(daemon.log_path, "rb") as f:
            offset = len(f.read())
        lab.sh("lab_daemon", "vigild", vigild_command(keeper), "--socket", daemon.socket,
               "--config", f"{daemon.dir}/vigild.toml")
        t_restart = time.monotonic()
        daemon.control = daemon.connect(timeout=60)
        daemon.wait(lambda: logged(daemon, offset, f"session {session} of ", "re-established after a daemon restart"),
                    60, f"session {session} re-established after the restart")
        daemon.wait(lambda: logged(daemon, offset, f"session {session} reopened on connection"), 60,
                    f"session {session}'s port reopened")
        daemon.wait(lambda: daemon.decisions(app, "adopt"), 60, f"{app} adopted")
        took_back = logged(daemon, offset, f"session {session}: took back its open port from the port keeper")
        if keeper and not took_back:
            raise LabError(f"the restarted vigild did not take session {session}'s port back from the keeper\n"
                           f"{daemon.log_tail()}")
        # The restarted vigild uses the keeper that outlived the first, no other.
        now = keeper_pids() - earlier
        MY_KEEPERS.update(now)
        if now != keepers:
            raise LabError(f"port keepers of this daemon: {keepers} before the restart, {now} after")

        # ----------------------------------------- 3. what reached the app ----
        lab.write_all(g, record_line(LAST))
        daemon.wait(lambda: LAST in analyse(rows())["stored"], 90, f"record {LAST}, sent after the restart")
        took = time.monotonic() - t_restart
    finally:
        os.close(g)
    figures = analyse(rows())
    unread = range(FIRST + 1, FIRST + UNREAD + 1)
    lost = [n for n in unread if n not in figures["stored"]]
    hellos = len([r for r in rows() if r.get("kind") == "hello"])
    print(f"{'with' if keeper else 'without'} the keeper: lost {len(lost)} of {UNREAD}"
          + (f" (numbers {lost[0]}..{lost[-1]})" if lost else "")
          + f"; duplicated {figures['duplicated']}, reordered {figures['reordered']}, corrupt {figures['corrupt']}, "
            f"unflagged duplicate events {figures['unflagged_duplicates']}, reused seqs {figures['reused']}, "
            f"redelivered copies {figures['redelivered']}; {figures['events']} data events; app connections {hellos}; "
            f"port taken back from the keeper: {took_back}; restart to record {LAST}: {took:.1f}s", flush=True)
    problems = [f"{k} {v}" for k, v in (("lost", len(lost)), ("duplicated", figures["duplicated"]),
                                        ("reordered", figures["reordered"]), ("corrupt", figures["corrupt"]),
                                        ("unflagged duplicate events", figures["unflagged_duplicates"]),
                                        ("reused sequence numbers", figures["reused"])) if v]
    if keeper and (problems or figures["numbers"] != list(range(1, LAST + 1))):
        raise LabError(f"with the port keeper: {', '.join(problems) or 'records not 1..' + str(LAST)}; "
                       f"stored {figures['numbers']}\n{daemon.diagnostics()}")
    if not keeper and not lost:
        log("NOTE: without the keeper nothing was lost: the premise (a tty's last close discards "
            "unread input) does not hold here")

    # ------------------------------------------------------------- teardown ----
    daemon.stop()
    shutil.copyfile(daemon.log_path, os.path.join(lab.LOGS, f"vigild-53-{tag}.log"))
    # A graceful stop with on-stop = terminate ends the keeper; lab_daemon_stop
    # SIGKILLs vigild after 5 s, though, and then the keeper would hold the
    # port for 120 s into the next half or test: end it, and say so.
    try:
        lab.wait_for(lambda: not keeper_pids() & keepers, 10, "the port keeper to end after vigild's stop")
    except LabError:
        left = keeper_pids() & keepers
        log(f"port keeper {left} still running 10 s after vigild's graceful stop: killed")
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    log(f"{tag}: {time.monotonic() - t0:.1f}s")
    return dict(lost=len(lost), took_back=took_back, **{k: figures[k] for k in ("duplicated", "reordered")})


def end_keepers() -> None:
    """At exit, after the daemons' own stop (atexit runs last-registered first): a
    keeper left with no daemon by a failure would hold the port 120 s into the next test."""
    try:
        lab.wait_for(lambda: not keeper_pids() & MY_KEEPERS, 10, "the port keeper to end")
    except LabError:
        pass
    for pid in keeper_pids() & MY_KEEPERS:
        log(f"port keeper {pid} left running: killed")
        os.kill(pid, signal.SIGKILL)


atexit.register(end_keepers)
lab.udev_up()
lab.usb_init(4)
rules = acc.install_udev_rules()
HOST, DEV = lab.usb_plug("unread", acc.VID, acc.PID, "Vigil Lab", "Vigil Sensor", SERIAL)
acc.check_udev_marked(HOST)
log(f"plugged {SERIAL}: host {HOST}, gadget {DEV}")
without = run(False, HOST, DEV)
with_keeper = run(True, HOST, DEV)
print(f"without the keeper: lost {without['lost']} of {UNREAD}; with the keeper: lost {with_keeper['lost']} of "
      f"{UNREAD}", flush=True)
rules.remove()
print("OK")
