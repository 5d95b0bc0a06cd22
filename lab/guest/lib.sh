# shellcheck shell=bash
# lab/guest/lib.sh -- bring-up helpers for the Vigil lab guest.
#
# Source it inside the guest (scripts/vigil-lab run -- bash -c '. lab/guest/lib.sh; ...').
# Every function returns non-zero with a message on stderr when the thing it
# waits for does not happen in time; none of them sleeps blindly.
#
#   lab_bt_up                      system bus + btvirt (hci0, hci1) + bluetoothd,
#                                  hci0 powered and ready for BlueZ clients
#   lab_udev_up                    systemd-udevd running, coldplug done
#   lab_usb_init [N]               dummy_hcd with N virtual UDCs (default 4)
#   lab_usb_plug NAME VID PID MANUFACTURER PRODUCT SERIAL [UDC]
#                                  create+bind a CDC-ACM gadget, print
#                                  "HOST_NODE DEVICE_NODE" (/dev/ttyACMn /dev/ttyGSn)
#   lab_usb_unplug NAME            unbind (host sees a USB disconnect)
#   lab_usb_replug NAME            bind again, print "HOST_NODE DEVICE_NODE"
#   lab_usb_remove NAME            unbind and delete the gadget
#   lab_usb_host_node SERIAL       the /dev/ttyACMn udev reports for SERIAL
#   lab_peer_start NAME SCRIPT [ARGS...]
#                                  run lab/peers/SCRIPT in the background and
#                                  wait until it says it is ready
#   lab_daemon NAME CMD...         run CMD in the background, log to the results
#   lab_daemon_stop NAME           stop it (TERM, then KILL)
#   lab_stop_all                   stop everything started with lab_daemon
#   lab_wait_for SECS WHAT CMD...  poll CMD until it succeeds
#
# Bluetooth layout: btvirt -L -l2 makes hci0 and hci1, two LE controllers on
# one emulated link.  BlueZ (bluetoothd) owns hci0.  hci1 is for Bumble
# peers, which take it over through an HCI user channel (transport
# "hci-socket:1").  bluetoothd runs with AutoEnable=false so it never powers
# hci1 on: that keeps hci1 free for peers (a powered controller gives EBUSY),
# whether a peer starts before or after bluetoothd, and between peers.

LAB_REPO="${VIGIL_LAB_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
LAB_RUN="${LAB_RUN:-/run/vigil-lab}"
LAB_LOGS="${VIGIL_LAB_GUEST_LOGS:-/tmp/vigil-lab-logs}"
LAB_TIMEOUT="${LAB_TIMEOUT:-30}"
LAB_GADGETS=/sys/kernel/config/usb_gadget
mkdir -p "$LAB_RUN" "$LAB_LOGS"

lab_log()  { printf '[lab %s] %s\n' "$(date +%T.%3N)" "$*" >&2; }
lab_fail() { printf '[lab %s] ERROR: %s\n' "$(date +%T.%3N)" "$*" >&2; return 1; }
lab_not()  { ! "$@"; }

# lab_wait_for SECS DESCRIPTION CMD...: poll CMD (every 0.1 s) until it
# succeeds; on timeout report what was awaited.
lab_wait_for() {
  local secs="$1" what="$2"; shift 2
  local deadline=$((SECONDS + secs))
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    ((SECONDS >= deadline)) && { lab_fail "timed out after ${secs}s waiting for $what"; return 1; }
    sleep 0.1
  done
}

# ------------------------------------------------------------ daemons ----
lab_daemon() {
  local name="$1"; shift
  local pidf="$LAB_RUN/$name.pid"
  if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    lab_fail "$name already running (pid $(cat "$pidf"))"; return 1
  fi
  setsid "$@" </dev/null >>"$LAB_LOGS/$name.log" 2>&1 &
  echo $! > "$pidf"
  echo "$name" >> "$LAB_RUN/order"
}

lab_daemon_alive() { local p="$LAB_RUN/$1.pid"; [[ -f "$p" ]] && kill -0 "$(cat "$p")" 2>/dev/null; }

lab_daemon_stop() {
  local name="$1" pidf="$LAB_RUN/$1.pid" pid i
  [[ -f "$pidf" ]] || return 0
  pid="$(cat "$pidf")"
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$pidf"
}

lab_stop_all() {
  local n
  [[ -f "$LAB_RUN/order" ]] || return 0
  for n in $(tac "$LAB_RUN/order"); do lab_daemon_stop "$n"; done
  rm -f "$LAB_RUN/order"
}

# ------------------------------------------------------------- D-Bus ----
lab_dbus_ready() {
  busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId
}

lab_dbus_up() {
  lab_daemon_alive dbus && return 0
  mkdir -p /run/dbus
  rm -f /run/dbus/pid /run/dbus/system_bus_socket   # stale from an earlier start
  lab_daemon dbus dbus-daemon --system --nofork --nopidfile || return 1
  lab_wait_for "$LAB_TIMEOUT" "the system bus" lab_dbus_ready
}

# --------------------------------------------------------------- udev ----
lab_udevd_bin() {
  local b
  for b in /usr/lib/systemd/systemd-udevd /lib/systemd/systemd-udevd; do
    [[ -x "$b" ]] && { echo "$b"; return 0; }
  done
  return 1
}

lab_udev_up() {
  lab_daemon_alive udevd && return 0
  local bin; bin="$(lab_udevd_bin)" || { lab_fail "systemd-udevd not found (apt-get install udev)"; return 1; }
  lab_daemon udevd "$bin" || return 1
  lab_wait_for "$LAB_TIMEOUT" "udevd's control socket" test -S /run/udev/control || return 1
  udevadm trigger --action=add --type=subsystems
  udevadm trigger --action=add --type=devices
  udevadm settle --timeout="$LAB_TIMEOUT" || lab_fail "udevadm settle timed out"
}

# ---------------------------------------------------------- Bluetooth ----
lab_adapter_address() {  # lab_adapter_address hci0
  busctl --system --auto-start=no get-property org.bluez "/org/bluez/$1" org.bluez.Adapter1 Address
}
lab_adapter_powered() {
  [[ "$(busctl --system --auto-start=no get-property org.bluez "/org/bluez/$1" org.bluez.Adapter1 Powered 2>/dev/null)" == "b true" ]]
}

# Both controllers finished their setup: the kernel lists an index in mgmt
# only after that succeeded.
# How many btvirt controllers (hci0 ... hciN-1): 2 (BlueZ's hci0, the peers'
# hci1) unless a test asks for more with lab_bt_relayout.
LAB_BT_CONTROLLERS="${LAB_BT_CONTROLLERS:-2}"

lab_bt_indexes_ready() {  # [SECS]
  /usr/bin/python3 "$LAB_REPO/lab/guest/mgmt_wait.py" --timeout "${1:-$LAB_TIMEOUT}" $(seq 0 $((LAB_BT_CONTROLLERS - 1)))
}

lab_bt_init_done() {
  local i
  for ((i = 0; i < LAB_BT_CONTROLLERS; i++)); do
    [[ -e /sys/kernel/debug/bluetooth/hci$i/hci_version ]] || return 1
  done
  # More controllers than asked for (a test's relayout left over): not this layout.
  [[ ! -e /sys/kernel/debug/bluetooth/hci$LAB_BT_CONTROLLERS ]]
}

# LAB_BT_MODE=le (default): btvirt -L, LE-only controllers; dual: btvirt's
# BR/EDR/LE controllers, for Bluetooth Classic (RFCOMM) tests.  Asking for
# the other mode than the running btvirt's restarts btvirt and bluetoothd.
lab_bt_controllers() {  # btvirt: hci0 + hci1 (+ more, LAB_BT_CONTROLLERS) on one emulated link
  local mode="${LAB_BT_MODE:-le}" flags=-L
  [[ "$mode" == dual ]] && flags=
  if lab_daemon_alive btvirt && lab_bt_init_done; then
    [[ "$(cat "$LAB_RUN/btvirt.mode" 2>/dev/null || echo le)" == "$mode" ]] && return 0
    lab_log "btvirt runs in another mode than $mode: restarting it and bluetoothd"
    lab_daemon_stop bluetoothd
    lab_daemon_stop btvirt
    lab_wait_for 10 "hci0/hci1 to go away" lab_not test -e /sys/class/bluetooth/hci0 || return 1
  fi
  modprobe hci_vhci || { lab_fail "modprobe hci_vhci failed"; return 1; }
  mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
  lab_wait_for 10 "/dev/vhci" test -c /dev/vhci || return 1
  # Under TCG on a loaded host btvirt can miss the kernel's 2 s HCI command
  # timeout while the controller is set up ("Opcode 0x0c03 failed: -110");
  # the index then never appears.  Start over in that case.
  local attempt mark deadline
  for attempt in 1 2 3; do
    mark="$(dmesg | wc -l)"
    lab_daemon btvirt btvirt $flags -l"$LAB_BT_CONTROLLERS" || return 1
    echo "$mode" > "$LAB_RUN/btvirt.mode"
    # Cheap wait first (debugfs gets hci_version once a controller's init
    # succeeded), so no heavy process competes with btvirt in the meantime;
    # then confirm with the kernel's mgmt index list.
    deadline=$((SECONDS + LAB_TIMEOUT))
    while :; do
      if lab_bt_init_done; then
        lab_bt_indexes_ready 10 && return 0
        break
      fi
      # A failed setup never recovers: restart at once.
      dmesg | tail -n +"$((mark + 1))" | grep -Eq 'hci[0-9]+: .*failed: -110' && break
      ((SECONDS >= deadline)) && break
      sleep 0.1
    done
    lab_log "btvirt controllers not ready (attempt $attempt; usual for the first start in a cold TCG guest), retrying: $(dmesg | tail -n +"$((mark + 1))" | grep -Ei 'hci[0-9]+' | tail -n 2 | tr '\n' ' ')"
    lab_daemon_stop btvirt
    lab_wait_for 10 "hci0/hci1 to go away" lab_not test -e /sys/class/bluetooth/hci0 || return 1
  done
  lab_fail "btvirt controllers failed to initialise 3 times"
}

lab_bluetoothd_up() {
  lab_daemon_alive bluetoothd && return 0
  cat > "$LAB_RUN/bluetooth-main.conf" <<'CONF'
[General]
Name = vigil-lab
[GATT]
# Discover services afresh on every connection (tests reuse addresses).
Cache = no
[Policy]
# Do not power controllers on by ourselves: hci1 is left to Bumble peers.
AutoEnable = false
CONF
  local -a dbg=()
  [[ -n "${VIGIL_LAB_BT_DEBUG:-}" ]] && dbg=(-d)
  lab_daemon bluetoothd /usr/libexec/bluetooth/bluetoothd -n -f "$LAB_RUN/bluetooth-main.conf" "${dbg[@]}" || return 1
  lab_wait_for "$LAB_TIMEOUT" "bluetoothd's adapter hci0 (org.bluez /org/bluez/hci0 Address)" \
    lab_adapter_address hci0 || return 1
  lab_bt_power hci0 on
}

# bluetoothd (BlueZ 5.66) is gone: its process ended or is a zombie nobody
# reaped yet (kill -0 still answers for one).
lab_bluetoothd_gone() {
  local pidf="$LAB_RUN/bluetoothd.pid" state
  [[ -f "$pidf" ]] || return 0
  state="$(awk '{print $3}' "/proc/$(cat "$pidf")/stat" 2>/dev/null)"
  [[ -z "$state" || "$state" == Z ]]
}

lab_bt_power() {  # lab_bt_power hci0 on|off
  local v=true; [[ "$2" == off ]] && v=false
  # Powering on runs the controller init again: retry on a timeout.
  local i
  for i in 1 2 3; do
    if lab_bluetoothd_gone; then
      # BlueZ 5.66 sometimes crashes when an adapter with a connected device
      # and an AcquireNotify socket is powered off (lab 63, CI 2026-11-28):
      # started again, as systemd's Restart= would; vigild must (and does)
      # take it back as after any bluetoothd restart.
      lab_log "bluetoothd is gone ($(dmesg | grep -m1 -o 'bluetoothd\[[0-9]*\]: segfault.*' || echo 'no segfault in dmesg')): starting it again"
      rm -f "$LAB_RUN/bluetoothd.pid"
      lab_bluetoothd_up || return 1
    fi
    busctl --system --auto-start=no --timeout=30 set-property org.bluez "/org/bluez/$1" \
      org.bluez.Adapter1 Powered b "$v" && break
    ((i == 3)) && { lab_fail "cannot set $1 Powered=$v"; return 1; }
    lab_log "setting $1 Powered=$v failed (attempt $i), retrying"
  done
  if [[ "$v" == true ]]; then
    lab_wait_for "$LAB_TIMEOUT" "$1 Powered=true" lab_adapter_powered "$1"
  else
    lab_wait_for "$LAB_TIMEOUT" "$1 Powered=false" lab_not lab_adapter_powered "$1"
  fi
}

lab_bt_up() {
  lab_dbus_up && lab_bt_controllers && lab_bluetoothd_up
}

# lab_bt_fresh: btvirt and bluetoothd stopped, so the next lab_bt_up starts
# both anew: nothing of an earlier test's links, keys or SSP state left in
# the emulated controllers (lab 67's incoming SPP failed 2 of 2 right after
# lab 65 in one boot without it, and passed in a fresh boot; cause not found).
lab_bt_fresh() {
  lab_daemon_stop bluetoothd
  lab_daemon_stop btvirt
  lab_wait_for 10 "btvirt's controllers to go away" lab_not test -e /sys/class/bluetooth/hci0
}

# lab_bt_relayout N: btvirt again with N controllers (hci0 ... hciN-1) on
# one link; bluetoothd stays and follows the controllers (it powers none:
# AutoEnable=false), hci0 is powered again. A test that needs more than two
# calls it with N, and with 2 when it is done, so the tests after it find
# the usual layout.
lab_bt_relayout() {
  local n="$1"
  lab_dbus_up || return 1
  lab_daemon_stop btvirt
  lab_wait_for 10 "btvirt's controllers to go away" lab_not test -e /sys/class/bluetooth/hci0 || return 1
  LAB_BT_CONTROLLERS="$n" lab_bt_controllers || return 1
  lab_bluetoothd_up || return 1
  lab_wait_for "$LAB_TIMEOUT" "bluetoothd's adapter hci0 (org.bluez /org/bluez/hci0 Address)" \
    lab_adapter_address hci0 || return 1
  lab_bt_power hci0 on
}

# -------------------------------------------------------------- peers ----
# lab_peer_start NAME SCRIPT [ARGS...]: start lab/peers/SCRIPT (or a path)
# with --ready-file; wait until the peer has created it.
lab_peer_start() {
  local name="$1" script="$2"; shift 2
  [[ -f "$script" ]] || script="$LAB_REPO/lab/peers/$script"
  local ready="$LAB_RUN/$name.ready"
  rm -f "$ready"
  lab_daemon "$name" python3 "$script" --ready-file "$ready" "$@" || return 1
  local deadline=$((SECONDS + ${LAB_PEER_TIMEOUT:-60}))
  until [[ -f "$ready" ]]; do
    if ! lab_daemon_alive "$name"; then
      lab_fail "peer $name exited before it was ready; last lines of $LAB_LOGS/$name.log:"
      tail -n 20 "$LAB_LOGS/$name.log" >&2
      rm -f "$LAB_RUN/$name.pid"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      lab_fail "peer $name not ready after ${LAB_PEER_TIMEOUT:-60}s; see $LAB_LOGS/$name.log"
      return 1
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------- USB serial ----
lab_usb_init() {
  local n="${1:-4}"
  if [[ -d /sys/module/dummy_hcd ]]; then
    local have; have="$(ls -d /sys/class/udc/dummy_udc.* 2>/dev/null | wc -l)"
    ((have >= n)) || { lab_fail "dummy_hcd already loaded with $have UDCs (< $n)"; return 1; }
  else
    modprobe dummy_hcd num="$n" || { lab_fail "modprobe dummy_hcd failed"; return 1; }
  fi
  modprobe libcomposite && modprobe usb_f_acm && modprobe cdc_acm ||
    { lab_fail "modprobe libcomposite/usb_f_acm/cdc_acm failed"; return 1; }
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config ||
    { lab_fail "cannot mount configfs"; return 1; }
  lab_wait_for 10 "configfs usb_gadget" test -d "$LAB_GADGETS"
}

lab_usb_free_udc() {
  local u used
  for u in $(ls /sys/class/udc | sort -V); do
    used=0
    for g in "$LAB_GADGETS"/*/; do
      [[ -f "$g/UDC" && "$(cat "$g/UDC")" == "$u" ]] && used=1
      [[ -f "$g/.lab_udc" && "$(cat "$g/.lab_udc" 2>/dev/null)" == "$u" ]] && used=1
    done
    [[ -f "$LAB_RUN/udc.$u" ]] && used=1
    ((used)) || { echo "$u"; return 0; }
  done
  return 1
}

# The udev-reported tty for a USB serial number (by identity, not by name).
lab_usb_host_node_once() {
  local serial="$1" t props
  for t in /sys/class/tty/ttyACM*; do
    [[ -e "$t" ]] || continue
    props="$(udevadm info --query=property --path="$t" 2>/dev/null)" || continue
    if grep -qx "ID_SERIAL_SHORT=$serial" <<<"$props"; then
      sed -n 's/^DEVNAME=//p' <<<"$props"
      return 0
    fi
  done
  return 1
}

lab_usb_host_node() {  # lab_usb_host_node SERIAL [TIMEOUT]
  local serial="$1" secs="${2:-$LAB_TIMEOUT}" node
  local deadline=$((SECONDS + secs))
  while :; do
    if node="$(lab_usb_host_node_once "$serial")" && [[ -c "$node" ]]; then
      echo "$node"; return 0
    fi
    ((SECONDS >= deadline)) && { lab_fail "no ttyACM with ID_SERIAL_SHORT=$serial in udev after ${secs}s"; return 1; }
    sleep 0.1
  done
}

lab_usb_device_node() {  # the gadget-side /dev/ttyGSn of gadget NAME
  local f="$LAB_GADGETS/$1/functions/acm.$1/port_num"
  [[ -r "$f" ]] || { lab_fail "gadget $1 has no acm function"; return 1; }
  echo "/dev/ttyGS$(cat "$f")"
}

lab_usb_plug() {  # NAME VID PID MANUFACTURER PRODUCT SERIAL [UDC]
  local name="$1" vid="$2" pid="$3" manu="$4" prod="$5" serial="$6" udc="${7:-}"
  [[ -n "$serial" ]] || { lab_fail "usage: lab_usb_plug NAME VID PID MANUFACTURER PRODUCT SERIAL [UDC]"; return 1; }
  [[ -d "$LAB_GADGETS" ]] || lab_usb_init || return 1
  local g="$LAB_GADGETS/$name"
  [[ -e "$g" ]] && { lab_fail "gadget $name exists already"; return 1; }
  [[ -n "$udc" ]] || udc="$(lab_usb_free_udc)" || { lab_fail "no free dummy UDC (lab_usb_init N)"; return 1; }
  mkdir "$g" || return 1
  printf '0x%04x\n' "$((16#${vid#0x}))" > "$g/idVendor"
  printf '0x%04x\n' "$((16#${pid#0x}))" > "$g/idProduct"
  echo 0x0200 > "$g/bcdUSB"
  echo 0x0100 > "$g/bcdDevice"
  mkdir "$g/strings/0x409"
  printf '%s\n' "$manu" > "$g/strings/0x409/manufacturer"
  printf '%s\n' "$prod" > "$g/strings/0x409/product"
  printf '%s\n' "$serial" > "$g/strings/0x409/serialnumber"
  mkdir "$g/configs/c.1" "$g/configs/c.1/strings/0x409"
  echo "CDC ACM" > "$g/configs/c.1/strings/0x409/configuration"
  echo 100 > "$g/configs/c.1/MaxPower"
  mkdir "$g/functions/acm.$name" || { lab_fail "cannot create acm function (usb_f_acm loaded?)"; return 1; }
  ln -s "$g/functions/acm.$name" "$g/configs/c.1/"
  echo "$udc" > "$LAB_RUN/gadget.$name.udc"
  echo "$serial" > "$LAB_RUN/gadget.$name.serial"
  touch "$LAB_RUN/udc.$udc"
  lab_usb_replug "$name"
}

lab_usb_replug() {  # NAME -> prints "HOST_NODE DEVICE_NODE"
  local name="$1" g="$LAB_GADGETS/$1"
  local udc; udc="$(cat "$LAB_RUN/gadget.$name.udc" 2>/dev/null)" || { lab_fail "unknown gadget $name"; return 1; }
  local serial; serial="$(cat "$LAB_RUN/gadget.$name.serial")"
  echo "$udc" > "$g/UDC" || { lab_fail "cannot bind gadget $name to $udc"; return 1; }
  local host dev
  host="$(lab_usb_host_node "$serial")" || return 1
  dev="$(lab_usb_device_node "$name")" || return 1
  lab_wait_for 10 "$dev" test -c "$dev" || return 1
  echo "$host $dev"
}

lab_usb_unplug() {  # NAME: unbind; waits until udev no longer lists the tty
  local name="$1" g="$LAB_GADGETS/$1"
  [[ -f "$g/UDC" ]] || { lab_fail "unknown gadget $name"; return 1; }
  local serial; serial="$(cat "$LAB_RUN/gadget.$name.serial")"
  echo "" > "$g/UDC" || { lab_fail "cannot unbind gadget $name"; return 1; }
  lab_wait_for "$LAB_TIMEOUT" "the ttyACM of $serial to go away" \
    lab_not lab_usb_host_node_once "$serial"
}

lab_usb_remove() {  # NAME: unbind and delete the gadget
  local name="$1" g="$LAB_GADGETS/$1"
  [[ -d "$g" ]] || return 0
  [[ -n "$(cat "$g/UDC" 2>/dev/null)" ]] && lab_usb_unplug "$name"
  rm -f "$g/configs/c.1/acm.$name"
  rmdir "$g/configs/c.1/strings/0x409" "$g/configs/c.1" "$g/functions/acm.$name" \
        "$g/strings/0x409" "$g" 2>/dev/null
  local udc; udc="$(cat "$LAB_RUN/gadget.$name.udc" 2>/dev/null)"
  rm -f "$LAB_RUN/gadget.$name.udc" "$LAB_RUN/gadget.$name.serial" "$LAB_RUN/udc.$udc"
  [[ ! -d "$g" ]] || lab_fail "gadget $name could not be removed"
}
