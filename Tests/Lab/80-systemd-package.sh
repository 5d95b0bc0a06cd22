#!/bin/bash
# 80-systemd-package.sh -- the Debian package under a real systemd (issue 13):
# docs/install.md's path as an administrator takes it, with systemd as PID 1
# of a container in the lab guest (Tests/Lab/systemd_container.sh), so that
# what scripts/test-package can only imitate on the CI machine (no systemd
# there) happens for real:
#
#  1. `dpkg -i` of the package scripts/test-package built: its maintainer
#     scripts run against a running systemd (sysusers makes the vigil group,
#     tmpfiles /run/vigil, dh_installsystemd enables and starts vigild.service,
#     leaves vigild.socket disabled). The service is active: Type=notify, so
#     READY=1 arrived; STATUS= is shown; NotifyAccess=main; WatchdogSec=60.
#     Under the hardened unit vigild keeps udev and the cgroup freezer.
#  2. `systemctl enable --now vigild.socket vigild.service` (the service
#     stopped first: systemd refuses to start a socket whose service runs):
#     vigild serves the socket systemd holds.
#  3. The example manifest in /etc/vigil/apps, its user made as install.md
#     says, `systemctl reload vigild` (SIGHUP: RELOADING=1, READY=1): the same
#     process, the manifest loaded.
#  4. As a member of group vigil: launch (the app runs as its manifest's user,
#     uid read in /proc, in vigild.service's delegated cgroup, under the
#     unit's sandbox), background -> suspended (cgroup frozen), wake ->
#     the event reaches the app (its output in the journal, under its id) ->
#     suspended again. Someone outside the group gets exit status 77.
#  5. `journalctl -u vigild -p err` finds the error vigild logs for a broken
#     manifest (the <N> priority prefixes), and no line carries a timestamp
#     of its own.
#  6. Socket activation: the service stopped (the app keeps running,
#     KillMode=process), a client's connection starts it, and the new vigild
#     adopts the app.
#  7. The watchdog (a drop-in shortens WatchdogSec): keep-alives reach
#     systemd (WatchdogTimestamp moves, no restart); a vigild that sends none
#     (SIGSTOP) is killed for "Watchdog timeout", restarted, and adopts the app.
#  8. `systemctl stop` ends it cleanly (Result=success, exit status 0).
#  9. A per-user daemon from the package's user units, on the same machine:
#     user@UID.service started for an ordinary user, `systemctl --user
#     enable --now vigild` as that user: active (Type=notify, READY=1), in the
#     user manager's app.slice, serving $XDG_RUNTIME_DIR/vigil/vigild.sock,
#     its settings from ~/.config/vigil/vigild.toml, untroubled by the system
#     daemon's manifest in /etc/vigil/apps; another user (a vigil member)
#     cannot reach it (77); an app from ~/.config/vigil/apps runs as the user
#     in the user's delegated cgroup, is suspended (frozen) and woken by
#     vigilctl, its output in `journalctl --user`; socket activation
#     (vigild.socket, the service stopped first) adopts the app; a clean
#     `systemctl --user stop`.
#
# The package comes from scripts/test-package (CI runs it before the lab
# tier), found at .build-deb/vigil.deb (scripts/build-deb) or $VIGIL_LAB_DEB.
# With VIGIL_SKIP_PACKAGE=1 (no package built) the test is skipped.
# It passed in 366-449 s (step 9: 87-115 s of it) on a loaded host.
# lab-timeout: 720
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../lab/guest/lib.sh
. "$VIGIL_LAB_REPO/lab/guest/lib.sh"
# shellcheck source=systemd_container.sh
. "$here/systemd_container.sh"

say() { printf '[80-systemd %s] %s\n' "$(date +%T.%3N)" "$*"; }
fail() { printf '[80-systemd %s] FAILED: %s\n' "$(date +%T.%3N)" "$*" >&2; exit 1; }

if [[ "${VIGIL_SKIP_PACKAGE:-0}" == 1 ]]; then
  say "SKIPPED: VIGIL_SKIP_PACKAGE=1, so no package was built to test under systemd"
  exit 77
fi
deb="${VIGIL_LAB_DEB:-$VIGIL_LAB_REPO/.build-deb/vigil.deb}"
[[ -f "$deb" ]] || fail "no package at $deb: scripts/test-package (or scripts/build-deb) builds it on the host before the lab tier; VIGIL_SKIP_PACKAGE=1 skips this test"
deb="$(readlink -f "$deb")"
say "package: $deb ($(stat -c '%s bytes, built %y' "$deb"))"

app_id=org.vigil.demo
app_user=vigil-demo            # the example manifest's user
operator=vigil-lab-operator    # a member of group vigil
outsider=vigil-lab-outsider
desktop_user=vigil-lab-desktop # runs a per-user daemon (step 9)
user_app=org.vigil.user-demo   # the example app as that user's own
uid=""

# Everything for a post-mortem goes to the results, whatever happened.
dump() {
  set +e
  if [[ -n "$SDC_PID" ]]; then
    sdc journalctl -b --no-pager -o short-monotonic > "$LAB_LOGS/systemd-journal.log" 2>&1
    sdc systemctl status --no-pager vigild.service vigild.socket > "$LAB_LOGS/systemd-vigild-status.log" 2>&1
    [[ -z "$uid" ]] || uctl systemctl --user status --no-pager vigild.service vigild.socket > "$LAB_LOGS/systemd-user-vigild-status.log" 2>&1
  fi
}
trap 'dump; sdc_stop' EXIT

# has PATTERN CMD...: CMD's output matches PATTERN. The output is read in
# full first: under pipefail, `CMD | grep -q` fails when grep stops reading early.
has() {
  local pattern="$1" out; shift
  out="$("$@" 2>&1)" || true
  grep -q -- "$pattern" <<<"$out"
}
show() {  # show UNIT PROPERTY: one property's value
  sdc systemctl show -P "$2" "$1"
}
expect() {  # expect UNIT PROPERTY VALUE
  local got; got="$(show "$1" "$2")"
  [[ "$got" == "$3" ]] || fail "$1 $2 is '$got', not '$3' ($(sdc systemctl status --no-pager "$1" 2>&1 | tail -n 15))"
}
# vigilctl as the operator, a member of group vigil (runuser sets up its groups).
ctl() { sdc runuser -u "$operator" -- /usr/bin/vigilctl "$@"; }
# The per-user daemon's side (step 9): its user, their systemctl --user and vigilctl.
uctl() { sdc runuser -u "$desktop_user" -- env "XDG_RUNTIME_DIR=/run/user/$uid" "$@"; }
ushow() { uctl systemctl --user show -P "$2" "$1"; }
uexpect() {  # uexpect UNIT PROPERTY=VALUE...: in the user's manager, with one systemctl call (each costs a second or two)
  local unit="$1" kv got; shift
  local props=()
  for kv in "$@"; do props+=(-p "${kv%%=*}"); done
  got="$(uctl systemctl --user show "${props[@]}" "$unit")"
  for kv in "$@"; do
    grep -qxF -- "$kv" <<<"$got" ||
      fail "user unit $unit has $(grep "^${kv%%=*}=" <<<"$got" || echo "no ${kv%%=*}"), not $kv ($(uctl systemctl --user status --no-pager "$unit" 2>&1 | tail -n 15))"
  done
}
app_field() {  # app_field FIELD [APP [CTL]]: the app's FIELD from vigilctl --json apps (CTL: ctl, or uctl for the user's daemon)
  local app="${2:-$app_id}" run="${3:-ctl}"
  if [[ "$run" == uctl ]]; then uctl /usr/bin/vigilctl --json apps; else ctl --json apps; fi |
    /usr/bin/python3 -c "import json,sys; print(next(a for a in json.load(sys.stdin) if a['id']=='$app').get('$1'))"
}
wait_state() {  # wait_state STATE [APP [CTL]]
  local i app="${2:-$app_id}" run="${3:-ctl}"
  for ((i = 0; i < 600; i++)); do [[ "$(app_field state "$app" "$run")" == "$1" ]] && return 0; sleep 0.1; done
  if [[ "$run" == uctl ]]; then uctl /usr/bin/vigilctl apps; uctl /usr/bin/vigilctl log --app "$app"; else ctl apps; ctl log --app "$app"; fi
  fail "$app did not become $1"
}
wait_active() {  # wait_active UNIT: until it is active (a reload or start job finished)
  local i state
  for ((i = 0; i < 600; i++)); do
    state="$(show "$1" ActiveState)"
    [[ "$state" == active ]] && return 0
    [[ "$state" == failed ]] && break
    sleep 0.1
  done
  fail "$1 is $state, not active: $(sdc systemctl status --no-pager "$1" 2>&1 | tail -n 20)"
}
wait_active_user() {  # wait_active_user UNIT: the same in the user's manager
  local i state
  for ((i = 0; i < 600; i++)); do
    state="$(ushow "$1" ActiveState)"
    [[ "$state" == active ]] && return 0
    [[ "$state" == failed ]] && break
    sleep 0.1
  done
  fail "user unit $1 is $state, not active: $(uctl systemctl --user status --no-pager "$1" 2>&1 | tail -n 20)"
}

t0=$SECONDS
sdc_start
say "container booted in $((SECONDS - t0)) s"

# 1. Install. The container's root is the CI machine's, a Docker image: its
# /usr/sbin/policy-rc.d (exit 101) forbids maintainer scripts to start
# services, which a Debian machine does not; it goes. Two settings an
# administrator may make keep this fast and contained: man-db's trigger off
# (regenerating the index over 9p under TCG takes minutes), bluetooth.service
# masked (the container has no Bluetooth: its network namespace cannot open
# AF_BLUETOOTH sockets; the lab's own bluetoothd owns hci0).
sdc rm -f /usr/sbin/policy-rc.d /var/lib/man-db/auto-update
sdc systemctl mask --quiet bluetooth.service
# The group must come from the package: one left on the host by an earlier
# run would hide a postinst that makes none (the container's copy goes).
! sdc getent group vigil >/dev/null || sdc groupdel vigil
t1=$SECONDS
# Copied in: the container sees the host's files as they were, but not
# below /tmp (its own tmpfs), where a checkout may live.
sdc sh -c 'cat > "/root/$1"' sh "${deb##*/}" < "$deb"
sdc dpkg -i "/root/${deb##*/}" > "$LAB_LOGS/dpkg-install.log" 2>&1 || { cat "$LAB_LOGS/dpkg-install.log"; fail "dpkg -i $deb"; }
say "dpkg -i took $((SECONDS - t1)) s"
[[ "$(sdc dpkg-query -W -f='${Status}' vigil)" == "install ok installed" ]] || fail "vigil is not installed"
sdc getent group vigil >/dev/null || fail "the postinst made no group vigil (systemd-sysusers)"
sdc test -d /run/vigil || fail "no /run/vigil (the postinst's systemd-tmpfiles, the unit's RuntimeDirectory=)"
[[ "$(sdc systemctl is-enabled vigild.service)" == enabled ]] || fail "vigild.service is not enabled by the package"
[[ "$(sdc systemctl is-enabled vigild.socket || true)" == disabled ]] || fail "vigild.socket is not left disabled by the package"
# The postinst's start: deb-systemd-invoke waits for the job, which for
# Type=notify ends at READY=1.
expect vigild.service ActiveState active
expect vigild.service SubState running
expect vigild.service Type notify
expect vigild.service NotifyAccess main
expect vigild.service WatchdogUSec 1min
status_text="$(show vigild.service StatusText)"
[[ "$status_text" =~ ^0\ apps\ \(0\ running,\ 0\ suspended\),\ 0\ sessions,\ Bluetooth:\  ]] ||
  fail "vigild.service's StatusText is '$status_text', not vigild's STATUS= line"
say "installed and started by the package: active (running), READY=1 arrived, StatusText '$status_text'"

# The hardened unit leaves vigild what it needs: its udev monitor (whose
# 4 MiB receive buffer would need CAP_NET_ADMIN) and the cgroup freezer.
! has "accessories disabled" sdc journalctl -u vigild.service -o cat --no-pager ||
  fail "under vigild.service, vigild cannot use udev: $(sdc journalctl -u vigild.service -o cat --no-pager | grep "accessories disabled")"
has "listening .*suspension=cgroup" sdc journalctl -u vigild.service -o cat --no-pager ||
  fail "under vigild.service, vigild does not use the cgroup freezer: $(sdc journalctl -u vigild.service -o cat --no-pager | grep listening)"

# 2. Socket activation on, as docs/systemd.md says. systemd refuses to start
# a socket unit whose service is already running ("Socket service
# vigild.service already active, refusing"): the service stops first.
sdc systemctl stop vigild.service
sdc systemctl enable --quiet --now vigild.socket vigild.service
expect vigild.socket ActiveState active
expect vigild.service ActiveState active
main_pid="$(show vigild.service MainPID)"
# One listening socket, held by both: systemd's, passed to vigild.
listening="$(sdc ss -xlpn | grep ' /run/vigil/vigild.sock ' || true)"
grep -q '"systemd",pid=1,' <<<"$listening" && grep -q "\"vigild\",pid=$main_pid," <<<"$listening" ||
  fail "/run/vigil/vigild.sock is not systemd's socket served by vigild (pid $main_pid): $(sdc ss -xlpn | grep vigil)"
say "vigild.socket enabled; vigild (pid $main_pid) serves systemd's socket"

# 3. The app's user and the manifest as install.md has them; a reload.
sdc useradd --system --no-create-home --shell /usr/sbin/nologin "$app_user"
sdc useradd --system --no-create-home --shell /bin/sh --groups vigil "$operator"
sdc useradd --system --no-create-home --shell /bin/sh "$outsider"
sdc install -m 0644 "/usr/share/doc/vigil/examples/$app_id.toml" /etc/vigil/apps/
sdc systemctl reload vigild.service
wait_active vigild.service
[[ "$(show vigild.service MainPID)" == "$main_pid" ]] || fail "systemctl reload replaced vigild (pid $main_pid -> $(show vigild.service MainPID))"
# ExecReload's kill returns at once; vigild rereads on its loop.
for ((i = 0; i < 100; i++)); do has "$app_id" ctl apps && break; sleep 0.2; done
has "$app_id" ctl apps || fail "after systemctl reload, vigild has not loaded $app_id: $(ctl apps 2>&1)"
say "systemctl reload: the same vigild (pid $main_pid) loaded $app_id"

# 4. Launch, suspend and wake as a member of the group.
set +e
sdc runuser -u "$outsider" -- /usr/bin/vigilctl status >/dev/null 2>"$LAB_LOGS/outsider.err"
refused=$?
set -e
[[ "$refused" == 77 ]] || fail "a non-member got exit status $refused from vigilctl status, not 77: $(cat "$LAB_LOGS/outsider.err")"
ctl launch "$app_id" >/dev/null
wait_state active
pid="$(app_field pid)"
uid="$(sdc awk '/^Uid:/ {print $2}' "/proc/$pid/status")"
[[ "$uid" == "$(sdc id -u "$app_user")" ]] || fail "$app_id runs as uid $uid, not $app_user's $(sdc id -u "$app_user")"
cgroup="$(sdc cat "/proc/$pid/cgroup")"
[[ "$cgroup" == "0::/system.slice/vigild.service/"* ]] || fail "$app_id is in cgroup '$cgroup', not below vigild.service's"
say "$app_id runs as $app_user (uid $uid, pid $pid, /proc/$pid/status), cgroup ${cgroup#0::}"
ctl background "$app_id" >/dev/null
wait_state suspended
[[ "$(sdc cat "/sys/fs/cgroup${cgroup#0::}/cgroup.freeze")" == 1 ]] || fail "$app_id is suspended but its cgroup is not frozen"
say "$app_id suspended (cgroup.freeze 1); StatusText '$(show vigild.service StatusText)'"
woke="$(ctl wake "$app_id" --payload hello)"
grep -q woke <<<"$woke" || fail "vigilctl wake did not wake $app_id: $woke"
wait_state suspended
has wake ctl log --app "$app_id" || fail "no wake decision in vigilctl log"
# app-output = auto: under systemd the app's output goes to the journal, as its id.
for ((i = 0; i < 100; i++)); do
  has "event [0-9]* test, 5 byte(s)" sdc journalctl -t "$app_id" -o cat --no-pager && break
  sleep 0.1
done
has "event [0-9]* test, 5 byte(s)" sdc journalctl -t "$app_id" -o cat --no-pager ||
  fail "the app's output in the journal shows no event: $(sdc journalctl -t "$app_id" -o cat --no-pager | tail -n 20)"
say "$app_id woken by vigilctl wake, got the event (journalctl -t $app_id), suspended again"

# 5. An error as the journal sees it: a manifest that cannot be read.
sdc sh -c 'printf "id = \"org.vigil.broken\"\nexec = 42\n" > /etc/vigil/apps/org.vigil.broken.toml'
sdc systemctl reload vigild.service
wait_active vigild.service
for ((i = 0; i < 100; i++)); do
  has org.vigil.broken sdc journalctl -u vigild.service -p err -o cat --no-pager && break
  sleep 0.1
done
errors="$(sdc journalctl -u vigild.service -p err -o cat --no-pager)"
grep -q "org.vigil.broken" <<<"$errors" || fail "journalctl -u vigild -p err does not show the broken manifest: $errors"
say "journalctl -u vigild -p err: $(grep "org.vigil.broken" <<<"$errors" | head -n1)"
stamped="$(sdc journalctl -u vigild.service -o cat --no-pager | grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T' || true)"
[[ -z "$stamped" ]] || fail "vigild's journal lines carry their own timestamp: $stamped"
sdc rm /etc/vigil/apps/org.vigil.broken.toml

# 6. Socket activation: stop the service; the app stays; a connection starts
# it. (The app itself reconnects to the socket as soon as vigild has gone,
# which may start vigild before vigilctl does: either way it is systemd
# starting vigild for a client, as nothing else starts a stopped service.)
sdc systemctl stop vigild.service 2>/dev/null   # "... can still be activated by vigild.socket"
expect vigild.socket ActiveState active
sdc kill -0 "$pid" || fail "$app_id (pid $pid) did not outlive vigild's stop (KillMode=process)"
ctl status >/dev/null || fail "vigilctl status through the socket did not start vigild"
wait_active vigild.service
new_pid="$(show vigild.service MainPID)"
[[ "$new_pid" != "$main_pid" ]] || fail "vigild was not restarted"
[[ "$(app_field pid)" == "$pid" ]] || fail "the socket-activated vigild did not adopt $app_id (pid $pid): $(ctl apps)"
say "socket activation: a client started vigild (pid $new_pid), which adopted $app_id (pid $pid)"

# 7. The watchdog: keep-alives reach systemd (WatchdogTimestamp moves while
# the service stays up). A drop-in shortens the interval from 60 s to 10 s
# (a keep-alive every 5 s: far from what a loaded TCG guest may stall).
sdc mkdir -p /run/systemd/system/vigild.service.d
sdc sh -c 'printf "[Service]\nWatchdogSec=10\n" > /run/systemd/system/vigild.service.d/lab-watchdog.conf'
sdc systemctl daemon-reload
sdc systemctl restart vigild.service
main_pid="$(show vigild.service MainPID)"
expect vigild.service WatchdogUSec 10s
first="$(show vigild.service WatchdogTimestampMonotonic)"
for ((i = 0; i < 120; i++)); do
  [[ "$(show vigild.service WatchdogTimestampMonotonic)" != "$first" ]] && break
  sleep 0.5
done
[[ "$(show vigild.service WatchdogTimestampMonotonic)" != "$first" ]] || fail "no WATCHDOG=1 reached systemd in 60 s"
expect vigild.service MainPID "$main_pid"
expect vigild.service NRestarts 0
say "watchdog: keep-alives arrive (WatchdogTimestamp moved), no restart"
# A vigild that stops sending them (stopped outright here) is killed with
# SIGABRT and restarted (Restart=on-failure), and the new one adopts the app.
sdc kill -STOP "$main_pid"
for ((i = 0; i < 180; i++)); do
  [[ "$(show vigild.service NRestarts)" == 1 && "$(show vigild.service ActiveState)" == active ]] && break
  sleep 0.5
done
expect vigild.service NRestarts 1
expect vigild.service ActiveState active
has "Watchdog timeout" sdc journalctl -u vigild.service -o cat --no-pager ||
  fail "vigild.service was restarted, but not for its watchdog: $(sdc journalctl -u vigild.service -o cat --no-pager | tail -n 20)"
main_pid="$(show vigild.service MainPID)"
[[ "$(app_field pid)" == "$pid" ]] || fail "the restarted vigild did not adopt $app_id (pid $pid): $(ctl apps)"
say "watchdog: a stopped vigild was killed (Watchdog timeout) and restarted (pid $main_pid), $app_id adopted"


# 8. Stop cleanly (both units: with the socket still listening, the app's
# reconnection would start vigild again).
sdc systemctl stop vigild.socket vigild.service
expect vigild.service ActiveState inactive
expect vigild.service Result success
expect vigild.service ExecMainStatus 0
say "systemctl stop: inactive, Result=success, exit status 0"
say "systemd-analyze security: $(sdc systemd-analyze security --no-pager vigild.service 2>/dev/null | tail -n 1)"

# 9. A per-user daemon (dist/user/) under a user's own systemd, on the
# same machine as the system daemon and its manifest in /etc/vigil/apps.
t9=$SECONDS
sdc useradd --create-home --shell /bin/sh "$desktop_user"
uid="$(sdc id -u "$desktop_user")"
# No logind runs in the container (nothing logs in): user@UID.service is
# started as logind starts it at a login or for a lingering user (the
# start job ends once the manager is ready, Type=notify).
sdc systemctl start "user@$uid.service"
manager_pid="$(show "user@$uid.service" MainPID)"
# Its settings and an app of its own before the first start: a short
# suspend-grace ($XDG_CONFIG_HOME/vigil/vigild.toml, read from the user's
# default), the app in $XDG_CONFIG_HOME/vigil/apps with no `user`. Then
# `systemctl --user enable --now vigild`, with --no-reload: the user
# manager's reload (~10 s here) is systemd's business, and it loads a unit
# it has not seen when asked to start it. One runuser for all of it.
uctl sh -c 'set -e; mkdir -p ~/.config/vigil/apps
  printf "[timings]\nsuspend-grace = 1\n" > ~/.config/vigil/vigild.toml
  sed "/^user = /d; s/^id = .*/id = \"$1\"/" /usr/share/doc/vigil/examples/org.vigil.demo.toml > ~/.config/vigil/apps/$1.toml
  systemctl --user enable --quiet --no-reload --now vigild.service' \
  sh "$user_app"
uexpect vigild.service ActiveState=active Type=notify NotifyAccess=main WatchdogUSec=1min \
  "ControlGroup=/user.slice/user-$uid.slice/user@$uid.service/app.slice/vigild.service"
props="$(uctl systemctl --user show -p MainPID -p StatusText vigild.service)"
user_pid="$(sed -n 's/^MainPID=//p' <<<"$props")"
status_text="$(sed -n 's/^StatusText=//p' <<<"$props")"
[[ "$status_text" =~ ^1\ apps\ \(0\ running ]] || fail "the per-user vigild.service's StatusText is '$status_text', not vigild's STATUS= line with its one app"
user_socket="/run/user/$uid/vigil/vigild.sock"
status="$(uctl /usr/bin/vigilctl status)" || fail "vigilctl status as $desktop_user: $status"
grep -q "^socket  *$user_socket\$" <<<"$status" || fail "the per-user vigild does not listen at $user_socket: $status"
grep -q "^suspension  *cgroup freezer" <<<"$status" || fail "the per-user vigild does not use the cgroup freezer: $status"
grep -q "suspend-grace 1.0s" <<<"$status" || fail "the per-user vigild did not read ~/.config/vigil/vigild.toml (suspend-grace 1): $status"
# The system daemon's manifest in /etc/vigil/apps (user = vigil-demo) is
# not this daemon's business: no manifest problem (each one is also an
# error in the user's journal).
! grep -q "manifest problems" <<<"$status" || fail "the per-user vigild reports manifest problems: $status"
say "per-user vigild.service (pid $user_pid) active under user@$uid.service, READY=1, StatusText '$status_text', socket $user_socket"
# Another user cannot reach it, a member of group vigil included:
# $XDG_RUNTIME_DIR is the user's alone (0700).
set +e
sdc runuser -u "$operator" -- /usr/bin/vigilctl --socket "$user_socket" status >/dev/null 2>"$LAB_LOGS/user-refused.err"
refused=$?
set -e
[[ "$refused" == 77 ]] || fail "another user got exit status $refused from $desktop_user's vigild, not 77: $(cat "$LAB_LOGS/user-refused.err")"

# The app as the user, in the user manager's delegated cgroup, suspended and woken.
uctl /usr/bin/vigilctl launch "$user_app" >/dev/null
wait_state active "$user_app" uctl
pid="$(app_field pid "$user_app" uctl)"
proc="$(sdc sh -c 'awk "/^Uid:/ {print \$2}" "/proc/$1/status"; cat "/proc/$1/cgroup"' sh "$pid")"
app_uid="$(head -n1 <<<"$proc")"
cgroup="$(grep "^0::" <<<"$proc" || true)"
[[ "$app_uid" == "$uid" ]] || fail "$user_app runs as uid $app_uid, not $desktop_user's $uid"
[[ "$cgroup" == "0::/user.slice/user-$uid.slice/user@$uid.service/app.slice/vigild.service/"* ]] ||
  fail "$user_app is in cgroup '$cgroup', not below the per-user vigild.service's"
uctl /usr/bin/vigilctl background "$user_app" >/dev/null
wait_state suspended "$user_app" uctl
[[ "$(sdc cat "/sys/fs/cgroup${cgroup#0::}/cgroup.freeze")" == 1 ]] || fail "$user_app is suspended but its cgroup is not frozen"
woke="$(uctl /usr/bin/vigilctl wake "$user_app" --payload hello)"
grep -q woke <<<"$woke" || fail "vigilctl wake did not wake $user_app: $woke"
wait_state suspended "$user_app" uctl
for ((i = 0; i < 100; i++)); do
  has "event [0-9]* test, 5 byte(s)" uctl journalctl --user -t "$user_app" -o cat --no-pager && break
  sleep 0.1
done
has "event [0-9]* test, 5 byte(s)" uctl journalctl --user -t "$user_app" -o cat --no-pager ||
  fail "the app's output in the user's journal shows no event: $(uctl journalctl --user -t "$user_app" -o cat --no-pager | tail -n 20)"
say "$user_app runs as $desktop_user (uid $uid, pid $pid), cgroup ${cgroup#0::}: suspended (cgroup.freeze 1), woken, got the event (journalctl --user -t $user_app), suspended again"

# Socket activation, as for the system units: the service stopped first
# (the app stays, KillMode=process: the new vigild adopts the same pid).
# `start`, not `enable --now` as a user would: enabling makes the user
# manager reload (~10 s here), and what is tested is the activation.
uctl systemctl --user stop vigild.service
uctl systemctl --user start vigild.socket
uctl /usr/bin/vigilctl status >/dev/null || fail "vigilctl status through the user's socket did not start vigild"
wait_active_user vigild.service
new_pid="$(ushow vigild.service MainPID)"
[[ "$new_pid" != "$user_pid" ]] || fail "the per-user vigild was not restarted"
listening="$(sdc ss -xlpn | grep " $user_socket " || true)"
grep -q "\"systemd\",pid=$manager_pid," <<<"$listening" && grep -q "\"vigild\",pid=$new_pid," <<<"$listening" ||
  fail "$user_socket is not the user manager's (pid $manager_pid) socket served by vigild (pid $new_pid): $listening"
[[ "$(app_field pid "$user_app" uctl)" == "$pid" ]] || fail "the socket-activated per-user vigild did not adopt $user_app (pid $pid): $(uctl /usr/bin/vigilctl apps)"
say "per-user socket activation: vigild (pid $new_pid) serves the user manager's socket, adopted $user_app (pid $pid)"

uctl systemctl --user stop vigild.socket vigild.service
uexpect vigild.service ActiveState=inactive Result=success ExecMainStatus=0
say "per-user systemctl --user stop: inactive, Result=success, exit status 0 (per-user part: $((SECONDS - t9)) s)"
say "passed in $((SECONDS - t0)) s"
