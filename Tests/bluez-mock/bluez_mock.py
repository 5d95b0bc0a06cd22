#!/usr/bin/python3
# -*- coding: utf-8 -*-
'''Start a private, system-type D-Bus with Vigil's BlueZ mock on it.

As a module:

    from bluez_mock import MockBlueZ
    with MockBlueZ() as mock:               # private bus + org.bluez (hci0)
        os.environ['DBUS_SYSTEM_BUS_ADDRESS'] = mock.address
        dev = mock.control.AddHeartRateMonitor('hci0', 'AA:BB:CC:DD:EE:01', 'HRM')
        mock.restart_bluez()                # org.bluez vanishes and comes back

As a CLI (for Swift or shell tests):

    /usr/bin/python3 Tests/bluez-mock/bluez_mock.py --address-file F

prints the bus address (one line, "unix:path=...") on stdout, writes it to F
(atomically), then closes its stdout and stays up until SIGTERM/SIGINT (or
until its parent dies). SIGUSR1 restarts the mock bluetoothd.

Children (dbus-daemon, the dbusmock process) write to log files in the run
directory; none of them holds the caller's stdout/stderr.
'''

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, 'vigil_bluez.py')
CONTROL_PATH = '/org/vigil/mock'
CONTROL_IFACE = 'org.vigil.BlueZMock'
BLUEZ_NAME = 'org.bluez'

BUS_CONFIG = '''<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
</busconfig>
'''


def _python():
    '''Interpreter for the mock: Debian's (it has python3-dbusmock).'''
    exe = os.environ.get('VIGIL_BLUEZ_MOCK_PYTHON')
    if exe:
        return exe
    if os.path.exists('/usr/bin/python3'):
        return '/usr/bin/python3'
    return sys.executable


_CLOSED_BUSES = []


class MockBlueZError(RuntimeError):
    pass


class MockBlueZ:
    '''A private system-like bus with the BlueZ mock on it.

    adapters: adapters created at every (re)start of the mock bluetoothd.
    register_timeout: seconds the mock waits for an application's
        GetManagedObjects (RegisterApplication) or an advertisement's GetAll.
    keep_logs: keep the run directory (logs) after stop(); also when the
        environment variable VIGIL_BLUEZ_MOCK_KEEP=1 is set.
    '''

    def __init__(self, adapters=('hci0',), register_timeout=3.0, keep_logs=False,
                 start_timeout=10.0):
        self.adapters = list(adapters)
        self.register_timeout = register_timeout
        self.keep_logs = keep_logs or os.environ.get('VIGIL_BLUEZ_MOCK_KEEP') == '1'
        self.start_timeout = start_timeout
        self.dir = None
        self.address = None
        self.daemon = None
        self.mock = None
        self._bus = None
        self._restarts = 0

    # -- lifecycle ---------------------------------------------------------

    def start(self):
        try:
            self.dir = tempfile.mkdtemp(prefix='vigil-bluez-mock-')
            sock = os.path.join(self.dir, 'system_bus_socket')
            conf = os.path.join(self.dir, 'system.conf')
            with open(conf, 'w') as f:
                f.write(BUS_CONFIG.format(socket=sock))
            self.address = 'unix:path=' + sock
            with open(os.path.join(self.dir, 'dbus-daemon.log'), 'wb') as log:
                self.daemon = subprocess.Popen(
                    ['dbus-daemon', '--config-file=' + conf, '--nofork', '--nopidfile'],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    close_fds=True)
            self._wait(lambda: os.path.exists(sock), 'dbus-daemon socket')
            self._start_mock()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_mock(self):
        env = dict(os.environ)
        env['DBUS_SYSTEM_BUS_ADDRESS'] = self.address
        env.pop('PYTHONHOME', None)
        params = {'adapters': self.adapters, 'register_timeout': self.register_timeout}
        n = self._restarts
        log = os.path.join(self.dir, f'bluez-mock-{n}.log')
        with open(os.path.join(self.dir, f'bluez-mock-{n}.out'), 'wb') as out:
            self.mock = subprocess.Popen(
                [_python(), '-m', 'dbusmock', '--system', '--template', TEMPLATE,
                 '-l', log, '-p', json.dumps(params)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, close_fds=True)
        self._wait(lambda: self._has_owner(), 'org.bluez on the bus')
        # the template is loaded before the main loop answers, so this waits
        # until the mock is fully set up
        try:
            self.control.Ping(timeout=self.start_timeout)
        except Exception as e:
            raise MockBlueZError(f'bluez mock did not come up: {e}; logs in {self.dir}:\n'
                                 f'{self.log_tail()}') from e

    def _wait(self, cond, what):
        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            for p, name in ((self.daemon, 'dbus-daemon'), (self.mock, 'bluez mock')):
                if p is not None and p.poll() is not None:
                    raise MockBlueZError(f'{name} exited with {p.returncode} waiting for {what}; '
                                         f'logs in {self.dir}: {self.log_tail()}')
            if cond():
                return
            time.sleep(0.01)
        raise MockBlueZError(f'timed out waiting for {what}; logs in {self.dir}')

    def _has_owner(self):
        import dbus
        try:
            return bool(self.bus.name_has_owner(BLUEZ_NAME))
        except dbus.exceptions.DBusException:
            return False

    def _kill(self, proc):
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(3)

    def restart_bluez(self, adapters=None):
        '''Kill the mock bluetoothd (org.bluez vanishes from the bus: all its
        objects, connections, notify sessions, registered applications and
        advertisements are gone) and start a fresh one with `adapters`
        (default: the ones given to the constructor).'''
        if adapters is not None:
            self.adapters = list(adapters)
        self.kill_bluez()
        self._restarts += 1
        self._start_mock()

    def kill_bluez(self):
        '''Kill the mock bluetoothd and leave it dead (start_bluez() revives).'''
        self._kill(self.mock)
        self.mock = None
        self._wait(lambda: not self._has_owner(), 'org.bluez to vanish')

    def start_bluez(self, adapters=None):
        if adapters is not None:
            self.adapters = list(adapters)
        self._restarts += 1
        self._start_mock()

    def stop(self):
        if self._bus is not None:
            try:
                self._bus.close()
            except Exception:
                pass
            # keep the wrapper alive: with a GLib main loop, dbus-python fails
            # on messages still queued for a connection whose object is freed
            _CLOSED_BUSES.append(self._bus)
            self._bus = None
        self._kill(self.mock)
        self._kill(self.daemon)
        self.mock = self.daemon = None
        if self.dir and not self.keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start() if self.daemon is None else self

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- access ------------------------------------------------------------

    @property
    def bus(self):
        '''A connection of our own to the private bus (for control calls).'''
        import dbus
        import dbus.bus
        if self._bus is None:
            self._bus = dbus.bus.BusConnection(self.address)
        return self._bus

    @property
    def control(self):
        '''dbus.Interface for org.vigil.BlueZMock (bound to the current mock
        process: fetch it again after restart_bluez()).'''
        import dbus
        obj = self.bus.get_object(BLUEZ_NAME, CONTROL_PATH, introspect=False)
        return dbus.Interface(obj, CONTROL_IFACE)

    @property
    def env(self):
        '''Environment for a client process (e.g. vigild) to use this bus.'''
        e = dict(os.environ)
        e['DBUS_SYSTEM_BUS_ADDRESS'] = self.address
        return e

    def log_tail(self, n=40):
        out = []
        for name in sorted(os.listdir(self.dir or '.')) if self.dir else []:
            if name.endswith(('.log', '.out')):
                try:
                    with open(os.path.join(self.dir, name), errors='replace') as f:
                        lines = f.readlines()[-n:]
                    out.append(f'--- {name}\n' + ''.join(lines))
                except OSError:
                    pass
        return '\n'.join(out)


# -- CLI ----------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--address-file', help='write the bus address to this file (atomically)')
    ap.add_argument('--adapter', action='append', default=None,
                    help='adapter to create (repeatable; default hci0)')
    ap.add_argument('--no-adapter', action='store_true', help='start without adapters')
    ap.add_argument('--hrm', action='append', default=[], metavar='ADDRESS',
                    help='add a heart rate monitor with this address on the first adapter')
    ap.add_argument('--register-timeout', type=float, default=3.0)
    ap.add_argument('--keep-logs', action='store_true')
    ap.add_argument('--no-parent-watch', action='store_true',
                    help='keep running when the parent process dies')
    args = ap.parse_args(argv)

    adapters = [] if args.no_adapter else (args.adapter or ['hci0'])
    mock = MockBlueZ(adapters=adapters, register_timeout=args.register_timeout,
                     keep_logs=args.keep_logs)
    stop = []
    restart = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    signal.signal(signal.SIGHUP, lambda *a: stop.append(1))
    signal.signal(signal.SIGUSR1, lambda *a: restart.append(1))
    parent = os.getppid()
    mock.start()
    try:
        def add_devices():
            for addr in args.hrm:
                mock.control.AddHeartRateMonitor(adapters[0], addr, 'Mock HRM ' + addr[-5:])
        add_devices()
        if args.address_file:
            tmp = args.address_file + '.tmp'
            with open(tmp, 'w') as f:
                f.write(mock.address + '\n')
            os.replace(tmp, args.address_file)
        sys.stdout.write(mock.address + '\n')
        sys.stdout.flush()
        # let go of the caller's pipes: reader sees EOF after the address line
        log = os.open(os.path.join(mock.dir, 'launcher.log'),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        while not stop:
            if restart:
                restart.clear()
                mock.restart_bluez()
                add_devices()
            if not args.no_parent_watch and os.getppid() != parent:
                break
            if mock.daemon.poll() is not None:
                break
            time.sleep(0.1)
    finally:
        mock.stop()
        if args.address_file:
            try:
                os.unlink(args.address_file)
            except OSError:
                pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
