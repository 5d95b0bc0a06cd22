# shellcheck shell=bash
# Tests/Lab/systemd_container.sh -- a real systemd as PID 1 of a container in
# the lab guest, for tests of what systemd does with vigild's package and
# units (Tests/Lab/80-systemd-package.sh). Source it; it is not a test itself.
#
#   sdc_start           boot the container, wait until systemd finished booting
#   sdc CMD...          run CMD inside it (all its namespaces, its root, a clean
#                       environment), as root
#   sdc_stop            power it off (cgroup.kill if it does not), idempotent
#
# The container's root is an overlay: the host's root file system (the
# guest's read-only 9p root, mounted without any of the guest's submounts)
# under a tmpfs. Everything the container writes (dpkg's files, /etc/passwd,
# the journal, systemd-tmpfiles' clean-up of /tmp) goes to that tmpfs and is
# gone when the container stops; nothing in it can reach the host, the
# guest's own /tmp or the results folder: no read-write 9p share is mounted
# in it. (systemd must never be PID 1 over the host's own root: its boot-time
# clean-up of /tmp would empty the host's /tmp.)
#
# Namespaces: mount, PID (systemd is PID 1), cgroup (its cgroup2 root is the
# guest's /sys/fs/cgroup/$SDC_NAME, a subtree it owns, as a container
# manager delegates one), UTS, IPC and network (only loopback: the lab's
# bluetoothd and udevd stay out of its reach). /sys is read-only, so
# systemd-udevd and its kin skip themselves as they do in any container;
# /dev is a small tmpfs with the pseudo devices, as systemd-nspawn makes it.

SDC_NAME="${SDC_NAME:-vigil-lab-systemd}"
SDC_DIR="/run/$SDC_NAME"                  # guest side: pid files, nothing mounted
SDC_CGROUP="/sys/fs/cgroup/$SDC_NAME"
SDC_TARGET="${SDC_TARGET:-vigil-lab.target}"
SDC_LOG="${LAB_LOGS:-/tmp}/systemd-container.log"
SDC_PID=""

sdc_log() { printf '[sdc %s] %s\n' "$(date +%T.%3N)" "$*" >&2; }

# The container's PID 1 as the guest sees it.
sdc_pid1() {
  local unshare_pid
  unshare_pid="$(cat "$SDC_DIR/unshare.pid" 2>/dev/null)" || return 1
  ps -o pid= --ppid "$unshare_pid" | tr -d ' ' | head -n1
}

# Runs inside the new namespaces as their PID 1 (see sdc_start): builds the
# root, pivots into it and becomes systemd.
sdc_stage2() {
  set -e
  local r="$SDC_DIR/root" lower="$SDC_DIR/lower" rw="$SDC_DIR/rw"
  mkdir -p "$r" "$lower" "$rw"
  # The host's root alone: a bind of / without --rbind leaves out every
  # submount the guest has (its tmpfs overlays, the results share, /proc).
  mount --bind / "$lower"
  mount -o remount,bind,ro "$lower"
  mount -t tmpfs -o mode=0755 "$SDC_NAME-rw" "$rw"
  mkdir -p "$rw/upper" "$rw/work"
  mount -t overlay -o "lowerdir=$lower,upperdir=$rw/upper,workdir=$rw/work" "$SDC_NAME" "$r"
  mount -t proc -o nosuid,nodev,noexec proc "$r/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$r/sys"
  mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 "$r/sys/fs/cgroup"
  mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs "$r/run"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/tmp"
  # /dev: the pseudo devices only, bound from the guest's.
  mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs "$r/dev"
  local node
  for node in null zero full random urandom tty; do
    touch "$r/dev/$node"
    mount --bind "/dev/$node" "$r/dev/$node"
  done
  mkdir -p "$r/dev/pts" "$r/dev/shm" "$r/dev/mqueue"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$r/dev/pts"
  ln -s pts/ptmx "$r/dev/ptmx"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
  ln -s /proc/self/fd "$r/dev/fd"
  ln -s /proc/self/fd/0 "$r/dev/stdin"
  ln -s /proc/self/fd/1 "$r/dev/stdout"
  ln -s /proc/self/fd/2 "$r/dev/stderr"
  # The target it boots: basic.target (journald, tmpfiles, sysusers, the
  # system bus socket) and nothing the host happens to have enabled.
  mkdir -p "$r/etc/systemd/system"
  cat > "$r/etc/systemd/system/vigil-lab.target" <<'UNIT'
[Unit]
Description=Vigil lab container
Requires=basic.target
After=basic.target
AllowIsolate=yes
UNIT
  hostname "$SDC_NAME"
  cd "$r"
  mkdir -p .sdc-old-root
  pivot_root . .sdc-old-root
  cd /
  umount -l /.sdc-old-root
  rmdir /.sdc-old-root
  exec env -i container=vigil-lab PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    /lib/systemd/systemd --unit="$SDC_TARGET" --show-status=no
}

sdc_start() {
  [[ ! -d "$SDC_CGROUP" ]] || { sdc_log "ERROR: $SDC_CGROUP exists: a container is running (sdc_stop)"; return 1; }
  mkdir -p "$SDC_DIR"
  mkdir "$SDC_CGROUP"
  # Into the subtree first, then a cgroup namespace rooted there: systemd
  # sees it as / and moves itself to /init.scope.
  SDC_NAME="$SDC_NAME" SDC_DIR="$SDC_DIR" SDC_TARGET="$SDC_TARGET" \
    setsid bash -c '
      echo $$ > "$1/cgroup.procs"
      echo $$ > "$2/unshare.pid"
      . "$3"
      exec unshare --pid --fork --mount --cgroup --uts --ipc --net --propagation private \
        bash -c ". \"\$0\"; sdc_stage2" "$3"' \
      sdc "$SDC_CGROUP" "$SDC_DIR" "${BASH_SOURCE[0]}" </dev/null >"$SDC_LOG" 2>&1 &
  local deadline=$((SECONDS + 30))
  until SDC_PID="$(sdc_pid1)" && [[ -n "$SDC_PID" ]] && [[ "$(readlink "/proc/$SDC_PID/exe")" == */systemd ]]; do
    ((SECONDS < deadline)) || { sdc_log "ERROR: systemd did not start; its log:"; cat "$SDC_LOG" >&2; return 1; }
    sleep 0.1
  done
  sdc_log "systemd is PID 1 of the container (guest pid $SDC_PID); waiting for it to finish booting"
  # is-system-running --wait needs the manager's bus, which exists once it
  # is up; `running`, or `degraded` when some unit of the host failed.
  deadline=$((SECONDS + 120))
  local state=""
  until state="$(sdc systemctl is-system-running --wait 2>/dev/null)"; [[ "$state" == running || "$state" == degraded ]]; do
    ((SECONDS < deadline)) || { sdc_log "ERROR: systemd did not finish booting (state '$state'); its log:"; cat "$SDC_LOG" >&2; return 1; }
    sleep 0.5
  done
  sdc_log "booted: $state"
  if [[ "$state" == degraded ]]; then
    sdc systemctl --failed --no-legend >&2 || true
  fi
}

sdc() {
  [[ -n "$SDC_PID" ]] || { sdc_log "ERROR: no container"; return 1; }
  nsenter --target "$SDC_PID" --mount --uts --ipc --net --pid --cgroup --root --wd \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root TERM=dumb SYSTEMD_PAGER= "$@"
}

sdc_stop() {
  [[ -d "$SDC_CGROUP" ]] || return 0
  if [[ -n "$SDC_PID" ]] && kill -0 "$SDC_PID" 2>/dev/null; then
    sdc systemctl poweroff --no-block >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$SDC_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  fi
  # Whatever is left (a hung poweroff, KillMode=process leftovers).
  [[ -f "$SDC_CGROUP/cgroup.kill" ]] && echo 1 > "$SDC_CGROUP/cgroup.kill"
  local i
  for ((i = 0; i < 100; i++)); do
    grep -q '^populated 0' "$SDC_CGROUP/cgroup.events" 2>/dev/null && break
    sleep 0.1
  done
  find "$SDC_CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null
  # The mount points (empty here: the mounts were in the container's own
  # mount namespace, gone with it).
  rm -f "$SDC_DIR/unshare.pid"
  rmdir "$SDC_DIR/root" "$SDC_DIR/lower" "$SDC_DIR/rw" "$SDC_DIR" 2>/dev/null
  SDC_PID=""
}
