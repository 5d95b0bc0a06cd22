'''Tests of the host-tier BlueZ stand-in (Tests/bluez-mock).

They prove the mock behaves as its README documents, so that later tests of
vigild against it are tests of vigild. Run with Debian's interpreter:

    /usr/bin/python3 -m unittest discover -s Tests/python -v
'''

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK_DIR = os.path.join(HERE, '..', 'bluez-mock')
sys.path.insert(0, MOCK_DIR)

SKIP_REASON = None
try:
    import dbus
    import dbus.bus
    import dbus.service
    import dbus.mainloop.glib
    from gi.repository import GLib
except ImportError as e:  # pragma: no cover
    SKIP_REASON = ('BlueZ mock tests need python3-dbus and python3-gi '
                   f'(run with /usr/bin/python3): {e}')
# The mock process needs dbusmock; do not import it here: importing it patches
# dbus.service method lookup process-wide and breaks our exported objects.
if SKIP_REASON is None and importlib.util.find_spec('dbusmock') is None:
    SKIP_REASON = 'BlueZ mock tests need python3-dbusmock (run with /usr/bin/python3)'
if SKIP_REASON is None and shutil.which('dbus-daemon') is None:
    SKIP_REASON = 'BlueZ mock tests need dbus-daemon on PATH'

if SKIP_REASON is None:
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    from bluez_mock import MockBlueZ

OM = 'org.freedesktop.DBus.ObjectManager'
PROPS = 'org.freedesktop.DBus.Properties'
ADAPTER = 'org.bluez.Adapter1'
DEVICE = 'org.bluez.Device1'
CHAR = 'org.bluez.GattCharacteristic1'
SERVICE = 'org.bluez.GattService1'
HCI0 = '/org/bluez/hci0'
HRM_ADDR = 'AA:BB:CC:DD:EE:01'
HRM = HCI0 + '/dev_AA_BB_CC_DD_EE_01'
HR_MEAS = HRM + '/service000a/char000b'
BODY_LOC = HRM + '/service000a/char000e'
HR_CP = HRM + '/service000a/char0010'
APP_PATH = dbus.ObjectPath('/com/example/app') if SKIP_REASON is None else None
NOOPTS = dbus.Dictionary({}, signature='sv') if SKIP_REASON is None else None


def opts(**kw):
    return dbus.Dictionary(kw, signature='sv')


def u16(n):
    return f'{n:08x}-0000-1000-8000-00805f9b34fb'


def spin(cond, timeout=5.0):
    '''Run the GLib main context until cond() or timeout; returns cond().'''
    ctx = GLib.MainContext.default()
    end = time.monotonic() + timeout
    while True:
        while ctx.iteration(False):
            pass
        if cond():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.002)


_CLOSED = []


def close_connection(bus):
    '''Drain, close, and keep the Python object alive: dbus-python crashes the
    next main-loop iteration if a message is dispatched for a connection whose
    wrapper was already freed.'''
    spin(lambda: False, 0.01)
    bus.close()
    _CLOSED.append(bus)


class Pending:
    def __init__(self):
        self.done = False
        self.result = None
        self.error = None

    def ok(self, *r):
        self.done, self.result = True, r

    def err(self, e):
        self.done, self.error = True, e


def start_call(method, *args, timeout=5.0):
    p = Pending()
    method(*args, reply_handler=p.ok, error_handler=p.err, timeout=timeout)
    return p


def acall(method, *args, timeout=5.0):
    p = start_call(method, *args, timeout=timeout)
    if not spin(lambda: p.done, timeout + 1):
        raise AssertionError('no reply within %.1f s' % timeout)
    return p


class Signals:
    '''Every signal org.bluez sends, in arrival order.'''

    def __init__(self, bus):
        self.items = []
        bus.add_signal_receiver(self._cb, bus_name='org.bluez', member_keyword='member',
                                interface_keyword='iface', path_keyword='path')

    def _cb(self, *args, member=None, iface=None, path=None):
        if iface == 'org.freedesktop.DBus.Mock':
            return      # dbusmock's MethodCalled: clients must ignore it
        self.items.append((iface, member, str(path), args))

    def props(self, path, iface, key):
        return [a[1][key] for (i, m, p, a) in self.items
                if m == 'PropertiesChanged' and p == path and a[0] == iface and key in a[1]]

    def named(self, member, path=None):
        return [(p, a) for (i, m, p, a) in self.items if m == member and (path is None or p == path)]


# -- a GATT application and an advertisement, as a client would export them ---

class AppChar(dbus.service.Object if SKIP_REASON is None else object):
    def __init__(self, bus, path, service, value):
        super().__init__(bus, path)
        self.path, self.value = path, bytes(value)
        self.props = {'UUID': u16(0xFFF1), 'Service': dbus.ObjectPath(service),
                      'Flags': dbus.Array(['read', 'write', 'notify'], signature='s')}
        self.reads, self.writes, self.notifying = [], [], False

    if SKIP_REASON is None:
        @dbus.service.method(CHAR, in_signature='a{sv}', out_signature='ay')
        def ReadValue(self, options):
            self.reads.append(dict(options))
            return dbus.Array(self.value[int(options.get('offset', 0)):], signature='y')

        @dbus.service.method(CHAR, in_signature='aya{sv}')
        def WriteValue(self, value, options):
            if bytes(value) == b'\xff':
                raise dbus.exceptions.DBusException('nope', name='org.bluez.Error.NotPermitted')
            self.writes.append((bytes(value), dict(options)))

        @dbus.service.method(CHAR)
        def StartNotify(self):
            self.notifying = True
            GLib.idle_add(lambda: self.PropertiesChanged(
                CHAR, {'Value': dbus.Array(b'\x2a', signature='y')}, []) and False)

        @dbus.service.method(CHAR)
        def StopNotify(self):
            self.notifying = False

        @dbus.service.signal(PROPS, signature='sa{sv}as')
        def PropertiesChanged(self, iface, changed, invalidated):
            pass


class App(dbus.service.Object if SKIP_REASON is None else object):
    def __init__(self, bus, path, tree):
        super().__init__(bus, path)
        self.tree = tree
        self.calls = 0

    if SKIP_REASON is None:
        @dbus.service.method(OM, out_signature='a{oa{sa{sv}}}')
        def GetManagedObjects(self):
            self.calls += 1
            return self.tree


class Adv(dbus.service.Object if SKIP_REASON is None else object):
    def __init__(self, bus, path, props):
        super().__init__(bus, path)
        self.props = props

    if SKIP_REASON is None:
        @dbus.service.method(PROPS, in_signature='s', out_signature='a{sv}')
        def GetAll(self, iface):
            return self.props

        @dbus.service.method('org.bluez.LEAdvertisement1')
        def Release(self):
            pass


@unittest.skipIf(SKIP_REASON is not None, SKIP_REASON or '')
class BlueZMockTest(unittest.TestCase):

    def setUp(self):
        self.mock = MockBlueZ(adapters=['hci0'])
        self.mock.start()
        self.addCleanup(self.mock.stop)
        self.bus = self.connection()
        self.sig = Signals(self.bus)
        self.ctl = self.mock.control

    def connection(self):
        '''A main-loop connection to the private bus, closed after the test.'''
        bus = dbus.bus.BusConnection(self.mock.address)
        self.addCleanup(close_connection, bus)
        return bus

    def obj(self, path):
        return self.bus.get_object('org.bluez', path, introspect=False)

    def iface(self, path, iface):
        return dbus.Interface(self.obj(path), iface)

    def prop(self, path, iface, name):
        return self.obj(path).Get(iface, name, dbus_interface=PROPS)

    def managed(self):
        return self.iface('/', OM).GetManagedObjects()

    def add_hrm(self):
        path = self.ctl.AddHeartRateMonitor('hci0', HRM_ADDR, 'Polar H10')
        self.assertEqual(path, HRM)
        return path

    def connect(self, path=HRM):
        p = acall(self.iface(path, DEVICE).Connect)
        self.assertIsNone(p.error)

    def error_name(self, p):
        self.assertIsNotNone(p.error, 'expected an error')
        return p.error.get_dbus_name()

    # -- object tree ---------------------------------------------------------

    def test_managed_objects_show_adapter_and_hrm_gatt_tree(self):
        self.add_hrm()
        objs = self.managed()
        self.assertIn(ADAPTER, objs[HCI0])
        self.assertIn('org.bluez.GattManager1', objs[HCI0])
        self.assertIn('org.bluez.LEAdvertisingManager1', objs[HCI0])
        self.assertTrue(objs[HCI0][ADAPTER]['Powered'])
        self.assertNotIn('/org/vigil/mock', objs)
        dev = objs[HRM][DEVICE]
        self.assertEqual(dev['Address'], HRM_ADDR)
        self.assertFalse(dev['Connected'])
        self.assertIn(u16(0x180D), dev['UUIDs'])
        self.assertEqual(objs[HRM + '/service000a'][SERVICE]['UUID'], u16(0x180D))
        self.assertEqual(objs[HRM + '/service000a'][SERVICE]['Device'], HRM)
        self.assertEqual(objs[HR_MEAS][CHAR]['UUID'], u16(0x2A37))
        self.assertEqual(list(objs[HR_MEAS][CHAR]['Flags']), ['notify'])
        self.assertEqual(objs[HR_MEAS][CHAR]['MTU'], 247)
        self.assertEqual(objs[HR_MEAS + '/desc000d']['org.bluez.GattDescriptor1']['UUID'], u16(0x2902))
        self.assertEqual(objs[BODY_LOC][CHAR]['UUID'], u16(0x2A38))
        self.assertEqual(objs[HR_CP][CHAR]['UUID'], u16(0x2A39))
        self.assertEqual(objs[HRM + '/service0012'][SERVICE]['UUID'], u16(0x180F))
        self.assertEqual(list(objs[HRM + '/service0012/char0013'][CHAR]['Flags']), ['read', 'notify'])

    def test_discovery_without_filter_shared_between_clients(self):
        other = self.connection()
        mine = self.iface(HCI0, ADAPTER)
        theirs = dbus.Interface(other.get_object('org.bluez', HCI0, introspect=False), ADAPTER)
        mine.StartDiscovery()                          # no SetDiscoveryFilter first
        theirs.SetDiscoveryFilter(opts(Transport='le', DuplicateData=True))
        theirs.StartDiscovery()
        self.assertTrue(spin(lambda: self.sig.props(HCI0, ADAPTER, 'Discovering') == [True]))
        dev = self.ctl.AddLEDevice('hci0', '11:22:33:44:55:66', 'Thermo', opts(
            RSSI=dbus.Int16(-70),
            ManufacturerData=dbus.Dictionary({dbus.UInt16(0xFFFF): dbus.Array(b'\x01\x02', signature='y')},
                                             signature='qv'),
            ServiceData=dbus.Dictionary({u16(0x181A): dbus.Array(b'\x10', signature='y')}, signature='sv'),
        ))
        self.assertTrue(spin(lambda: self.sig.named('InterfacesAdded')))
        path, (added_path, ifaces) = self.sig.named('InterfacesAdded')[0]
        self.assertEqual(added_path, dev)
        self.assertEqual(ifaces[DEVICE]['RSSI'], -70)
        self.assertEqual(bytes(ifaces[DEVICE]['ManufacturerData'][0xFFFF]), b'\x01\x02')
        self.assertEqual(bytes(ifaces[DEVICE]['ServiceData'][u16(0x181A)]), b'\x10')
        self.ctl.SetAdvertisement(dev, opts(RSSI=dbus.Int16(-50)))
        self.assertTrue(spin(lambda: self.sig.props(dev, DEVICE, 'RSSI') == [-50]))
        sessions = self.ctl.DiscoverySessions(HCI0)
        self.assertEqual(len(sessions), 2)
        mine.StopDiscovery()
        self.assertTrue(self.prop(HCI0, ADAPTER, 'Discovering'), 'other client still discovers')
        with self.assertRaises(dbus.exceptions.DBusException) as cm:
            mine.StopDiscovery()
        self.assertEqual(cm.exception.get_dbus_name(), 'org.bluez.Error.Failed')
        other.close()                                   # client leaves the bus
        self.assertTrue(spin(lambda: self.sig.props(HCI0, ADAPTER, 'Discovering') == [True, False]))

    # -- connections -----------------------------------------------------------

    def test_connect_sets_connected_then_services_resolved(self):
        self.add_hrm()
        self.connect()
        self.assertEqual(self.sig.props(HRM, DEVICE, 'Connected'), [True])
        self.assertTrue(spin(lambda: self.sig.props(HRM, DEVICE, 'ServicesResolved') == [True]))
        order = [a[1] for (i, m, p, a) in self.sig.items if m == 'PropertiesChanged' and p == HRM]
        self.assertEqual(order, [{'Connected': True}, {'ServicesResolved': True}])
        self.assertTrue(self.prop(HRM, DEVICE, 'Connected'))
        self.assertTrue(self.prop(HRM, DEVICE, 'ServicesResolved'))
        again = acall(self.iface(HRM, DEVICE).Connect)
        self.assertEqual(self.error_name(again), 'org.bluez.Error.AlreadyConnected')
        self.iface(HRM, DEVICE).Disconnect()
        self.assertTrue(spin(lambda: self.sig.named('Disconnected', HRM)))
        self.assertEqual(self.sig.props(HRM, DEVICE, 'Connected'), [True, False])
        self.assertEqual(self.sig.props(HRM, DEVICE, 'ServicesResolved'), [True, False])
        self.assertEqual(self.sig.named('Disconnected', HRM)[0][1][0], 'org.bluez.Reason.Local')
        calls = [(str(c[1]), str(c[2]), str(c[4])) for c in self.ctl.Calls()]
        me = self.bus.get_unique_name()
        self.assertIn((me, HRM, 'Connect'), calls)
        self.assertIn((me, HRM, 'Disconnect'), calls)

    def test_fail_next_connect_then_success(self):
        self.add_hrm()
        self.ctl.FailNextConnect(HRM, 'org.bluez.Error.InProgress', 1)
        self.ctl.FailNextConnectWithMessage(HRM, 'org.bluez.Error.Failed', 'le-connection-abort-by-local', 1)
        dev = self.iface(HRM, DEVICE)
        first = acall(dev.Connect)
        self.assertEqual(self.error_name(first), 'org.bluez.Error.InProgress')
        second = acall(dev.Connect)
        self.assertEqual(self.error_name(second), 'org.bluez.Error.Failed')
        self.assertIn('le-connection-abort-by-local', second.error.get_dbus_message())
        self.assertEqual(self.sig.props(HRM, DEVICE, 'Connected'), [])
        self.connect()
        self.assertTrue(self.prop(HRM, DEVICE, 'Connected'))

    def test_concurrent_connect_is_in_progress(self):
        self.add_hrm()
        self.ctl.SetConnectDelay(HRM, 0.3)
        first = start_call(self.iface(HRM, DEVICE).Connect)
        second = acall(self.iface(HRM, DEVICE).Connect)
        self.assertEqual(self.error_name(second), 'org.bluez.Error.InProgress')
        self.assertTrue(spin(lambda: first.done))
        self.assertIsNone(first.error)

    def test_connect_pending_while_away_completes_on_device_back(self):
        self.add_hrm()
        self.ctl.SetConnectDelay(HRM, 0.2)
        pending = start_call(self.iface(HRM, DEVICE).Connect, timeout=10)
        self.ctl.DeviceAway(HRM, True)                  # gone: InterfacesRemoved
        self.assertTrue(spin(lambda: self.sig.named('InterfacesRemoved')))
        removed = [a[0] for (p, a) in self.sig.named('InterfacesRemoved')]
        self.assertIn(HRM, removed)
        self.assertIn(HR_MEAS, removed)
        self.assertLess(removed.index(HR_MEAS), removed.index(HRM), 'children go first')
        self.assertNotIn(HRM, self.managed())
        spin(lambda: pending.done, 0.6)
        self.assertFalse(pending.done, 'Connect must stay pending while the device is away')
        self.ctl.DeviceBack(HRM)
        self.assertTrue(spin(lambda: pending.done, 3))
        self.assertIsNone(pending.error)
        self.assertIn(HRM, [a[0] for (p, a) in self.sig.named('InterfacesAdded')])
        self.assertTrue(self.prop(HRM, DEVICE, 'Connected'))

    def test_peer_disconnect_and_disconnect_cancels_pending_connect(self):
        self.add_hrm()
        self.connect()
        self.iface(HR_MEAS, CHAR).StartNotify()
        self.ctl.DisconnectDevice(HRM, 'remote')
        self.assertTrue(spin(lambda: self.sig.named('Disconnected', HRM)))
        self.assertEqual(tuple(self.sig.named('Disconnected', HRM)[0][1]),
                         ('org.bluez.Reason.Remote', 'Connection terminated by remote user'))
        self.assertFalse(self.prop(HRM, DEVICE, 'Connected'))
        self.assertFalse(self.prop(HRM, DEVICE, 'ServicesResolved'))
        self.assertFalse(self.prop(HR_MEAS, CHAR, 'Notifying'))
        # Disconnect cancels a pending Connect
        self.ctl.DeviceAway(HRM, False)
        pending = start_call(self.iface(HRM, DEVICE).Connect)
        spin(lambda: pending.done, 0.2)
        self.assertFalse(pending.done)
        self.iface(HRM, DEVICE).Disconnect()
        self.assertTrue(spin(lambda: pending.done))
        self.assertEqual(self.error_name(pending), 'org.bluez.Error.Failed')

    def test_power_off_drops_connections_and_refuses_work(self):
        self.add_hrm()
        self.connect()
        self.ctl.SetPowered(HCI0, False)
        self.assertTrue(spin(lambda: self.sig.props(HCI0, ADAPTER, 'Powered') == [False]))
        self.assertFalse(self.prop(HRM, DEVICE, 'Connected'))
        self.assertEqual(self.error_name(acall(self.iface(HRM, DEVICE).Connect)), 'org.bluez.Error.NotReady')
        self.assertEqual(self.error_name(acall(self.iface(HCI0, ADAPTER).StartDiscovery)),
                         'org.bluez.Error.NotReady')
        self.obj(HCI0).Set(ADAPTER, 'Powered', dbus.Boolean(True), dbus_interface=PROPS)
        self.assertTrue(self.prop(HCI0, ADAPTER, 'Powered'))
        self.connect()

    # -- GATT client side ------------------------------------------------------

    def test_start_notify_and_notify_arrive_in_order(self):
        self.add_hrm()
        self.connect()
        ch = self.iface(HR_MEAS, CHAR)
        self.assertEqual(self.error_name(acall(self.iface(BODY_LOC, CHAR).StartNotify)),
                         'org.bluez.Error.NotSupported')
        ch.StartNotify()
        ch.StartNotify()                                # same client again: fine
        self.assertTrue(self.prop(HR_MEAS, CHAR, 'Notifying'))
        values = [bytes([0x06, 60 + i]) for i in range(5)]
        for v in values:
            self.assertEqual(self.ctl.Notify(HR_MEAS, dbus.Array(v, signature='y')), 1)
        self.assertEqual(self.ctl.NotifyHeartRate(HRM, 300, [1024, 512]), 1)
        want = values + [bytes([0x17]) + (300).to_bytes(2, 'little') + (1024).to_bytes(2, 'little')
                         + (512).to_bytes(2, 'little')]
        self.assertTrue(spin(lambda: len(self.sig.props(HR_MEAS, CHAR, 'Value')) == len(want)))
        self.assertEqual([bytes(v) for v in self.sig.props(HR_MEAS, CHAR, 'Value')], want)
        ch.StopNotify()
        self.assertFalse(self.prop(HR_MEAS, CHAR, 'Notifying'))
        self.assertEqual(self.ctl.Notify(HR_MEAS, dbus.Array(b'\x00\x01', signature='y')), 0)
        self.assertEqual(self.error_name(acall(ch.StopNotify)), 'org.bluez.Error.Failed')

    def test_acquire_notify_gives_working_fd_that_hangs_up_on_disconnect(self):
        self.add_hrm()
        self.connect()
        fd, mtu = self.iface(HR_MEAS, CHAR).AcquireNotify(NOOPTS)
        self.assertEqual(mtu, 247)
        sock = socket.socket(fileno=fd.take())
        self.addCleanup(sock.close)
        self.assertEqual(sock.type, socket.SOCK_SEQPACKET)
        sock.settimeout(2)
        self.assertTrue(self.prop(HR_MEAS, CHAR, 'NotifyAcquired'))
        self.assertEqual(self.error_name(acall(self.iface(HR_MEAS, CHAR).StartNotify)),
                         'org.bluez.Error.NotPermitted')
        self.ctl.Notify(HR_MEAS, dbus.Array(b'\x06\x48', signature='y'))
        self.ctl.Notify(HR_MEAS, dbus.Array(b'\x06\x49', signature='y'))
        self.assertEqual(sock.recv(512), b'\x06\x48')      # one packet per notification
        self.assertEqual(sock.recv(512), b'\x06\x49')
        self.assertEqual(self.sig.props(HR_MEAS, CHAR, 'Value'), [], 'fd path does not touch Value')
        self.iface(HRM, DEVICE).Disconnect()
        self.assertEqual(sock.recv(512), b'', 'fd hangs up on disconnect')
        self.assertFalse(self.prop(HR_MEAS, CHAR, 'NotifyAcquired'))

    def test_read_and_write_values(self):
        self.add_hrm()
        read = acall(self.iface(BODY_LOC, CHAR).ReadValue, NOOPTS)
        self.assertEqual(self.error_name(read), 'org.bluez.Error.Failed')   # not connected
        self.connect()
        self.assertEqual(bytes(self.iface(BODY_LOC, CHAR).ReadValue(NOOPTS)), b'\x01')
        self.assertEqual(bytes(self.iface(BODY_LOC, CHAR).ReadValue(opts(offset=dbus.UInt16(1)))), b'')
        self.assertEqual(self.error_name(acall(self.iface(BODY_LOC, CHAR).ReadValue,
                                               opts(offset=dbus.UInt16(5)))),
                         'org.bluez.Error.InvalidOffset')
        cp = self.iface(HR_CP, CHAR)
        cp.WriteValue(dbus.Array(b'\x01', signature='y'), opts(type='request'))
        self.assertEqual(self.ctl.HeartRateState(HRM)['EnergyResets'], 1)
        self.assertEqual(self.error_name(acall(cp.WriteValue, dbus.Array(b'\x02', signature='y'), NOOPTS)),
                         'org.bluez.Error.Failed')
        self.assertEqual(self.error_name(acall(cp.ReadValue, NOOPTS)), 'org.bluez.Error.NotPermitted')
        writes = [c for c in self.ctl.Calls() if c[4] == 'WriteValue']
        self.assertEqual([bytes(w[5][0]) for w in writes], [b'\x01', b'\x02'])

    # -- GattManager1 ----------------------------------------------------------

    def export_app(self, char_service='/com/example/app/service0'):
        root = '/com/example/app'
        svc = root + '/service0'
        ch = AppChar(self.bus, svc + '/char0', char_service, b'hello')
        self.addCleanup(ch.remove_from_connection)
        tree = {
            dbus.ObjectPath(svc): {SERVICE: {'UUID': u16(0xFFF0), 'Primary': True,
                                             'Characteristics': dbus.Array([ch.path], signature='o')}},
            dbus.ObjectPath(ch.path): {CHAR: ch.props},
        }
        app = App(self.bus, root, tree)
        self.addCleanup(app.remove_from_connection)
        return app, ch

    def test_register_application_calls_back_and_remote_central_works(self):
        app, ch = self.export_app()
        gm = self.iface(HCI0, 'org.bluez.GattManager1')
        reg = acall(gm.RegisterApplication, APP_PATH, NOOPTS)
        self.assertIsNone(reg.error)
        self.assertEqual(app.calls, 1, 'mock called the app\'s GetManagedObjects')
        apps = self.ctl.Applications()
        self.assertEqual(len(apps), 1)
        self.assertEqual((str(apps[0][0]), str(apps[0][1])), (self.bus.get_unique_name(), '/com/example/app'))
        self.assertIn(ch.path, apps[0][2])
        # the mock acts as a remote central through "BlueZ"
        r = acall(self.ctl.RemoteRead, ch.path, dbus.UInt16(1))
        self.assertEqual((str(r.result[0]), bytes(r.result[1])), ('', b'ello'))
        self.assertEqual(ch.reads[0]['offset'], 1)
        self.assertEqual(ch.reads[0]['mtu'], 247)
        self.assertEqual(ch.reads[0]['link'], 'LE')
        self.assertTrue(str(ch.reads[0]['device']).startswith('/org/bluez/hci0/dev_'))
        w = acall(self.ctl.RemoteWrite, ch.path, dbus.Array(b'\x01\x02', signature='y'), 'command')
        self.assertEqual(str(w.result[0]), '')
        self.assertEqual(ch.writes[0][0], b'\x01\x02')
        self.assertEqual(ch.writes[0][1]['type'], 'command')
        bad = acall(self.ctl.RemoteWrite, ch.path, dbus.Array(b'\xff', signature='y'), 'request')
        self.assertEqual(str(bad.result[0]), 'org.bluez.Error.NotPermitted')
        n = acall(self.ctl.RemoteStartNotify, ch.path)
        self.assertEqual(str(n.result[0]), '')
        self.assertTrue(ch.notifying)
        self.assertTrue(spin(lambda: len(self.ctl.RemoteNotifications(ch.path)) == 1))
        self.assertEqual(bytes(self.ctl.RemoteNotifications(ch.path)[0]), b'\x2a')
        gm.UnregisterApplication(APP_PATH)
        self.assertEqual(len(self.ctl.Applications()), 0)
        self.assertEqual(self.error_name(acall(gm.UnregisterApplication, APP_PATH)),
                         'org.bluez.Error.DoesNotExist')

    def test_register_application_catches_a_blocked_app(self):
        self.export_app()
        self.ctl.SetTimeouts(0.5, 0)
        gm = self.iface(HCI0, 'org.bluez.GattManager1')
        t0 = time.monotonic()
        with self.assertRaises(dbus.exceptions.DBusException) as cm:
            # a blocking call: this process cannot answer GetManagedObjects meanwhile
            gm.RegisterApplication(APP_PATH, NOOPTS, timeout=10)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(cm.exception.get_dbus_name(), 'org.bluez.Error.Failed')
        self.assertIn('blocked', cm.exception.get_dbus_message())
        self.assertEqual(len(self.ctl.Applications()), 0)

    def test_register_application_rejects_invalid_tree(self):
        self.export_app(char_service='/com/example/app/nowhere')
        gm = self.iface(HCI0, 'org.bluez.GattManager1')
        reg = acall(gm.RegisterApplication, APP_PATH, NOOPTS)
        self.assertEqual(self.error_name(reg), 'org.bluez.Error.InvalidArguments')
        missing = acall(gm.RegisterApplication, dbus.ObjectPath('/com/example/none'), NOOPTS)
        self.assertEqual(self.error_name(missing), 'org.bluez.Error.Failed')

    # -- LEAdvertisingManager1 -------------------------------------------------

    def test_advertisement_limits(self):
        am = self.iface(HCI0, 'org.bluez.LEAdvertisingManager1')
        self.assertEqual(self.prop(HCI0, 'org.bluez.LEAdvertisingManager1', 'SupportedInstances'), 2)
        for i in range(3):
            adv = Adv(self.bus, f'/com/example/adv{i}', {
                'Type': 'peripheral', 'LocalName': f'vigil{i}',
                'ServiceUUIDs': dbus.Array([u16(0x180D)], signature='s')})
            self.addCleanup(adv.remove_from_connection)
        self.assertIsNone(acall(am.RegisterAdvertisement, dbus.ObjectPath('/com/example/adv0'), NOOPTS).error)
        self.assertIsNone(acall(am.RegisterAdvertisement, dbus.ObjectPath('/com/example/adv1'), NOOPTS).error)
        third = acall(am.RegisterAdvertisement, dbus.ObjectPath('/com/example/adv2'), NOOPTS)
        self.assertEqual(self.error_name(third), 'org.bluez.Error.NotPermitted')
        self.assertIn('Maximum advertisements reached', third.error.get_dbus_message())
        self.assertEqual(self.prop(HCI0, 'org.bluez.LEAdvertisingManager1', 'ActiveInstances'), 2)
        self.assertEqual(self.prop(HCI0, 'org.bluez.LEAdvertisingManager1', 'SupportedInstances'), 0)
        self.assertEqual(len(self.ctl.Advertisements()), 2)
        am.UnregisterAdvertisement(dbus.ObjectPath('/com/example/adv0'))
        self.assertIsNone(acall(am.RegisterAdvertisement, dbus.ObjectPath('/com/example/adv2'), NOOPTS).error)
        am.UnregisterAdvertisement(dbus.ObjectPath('/com/example/adv1'))
        big = Adv(self.bus, '/com/example/big', {
            'Type': 'peripheral', 'LocalName': 'a-rather-long-advertised-name',
            'ManufacturerData': dbus.Dictionary({dbus.UInt16(0xFFFF): dbus.Array(b'\x00' * 8, signature='y')},
                                                signature='qv')})
        self.addCleanup(big.remove_from_connection)
        long_ = acall(am.RegisterAdvertisement, dbus.ObjectPath('/com/example/big'), NOOPTS)
        self.assertEqual(self.error_name(long_), 'org.bluez.Error.InvalidLength')

    # -- bluetoothd restart ----------------------------------------------------

    def test_restart_bluez_vanishes_and_comes_back(self):
        self.add_hrm()
        owners = []
        self.bus.add_signal_receiver(lambda n, o, nw: owners.append((str(o) != '', str(nw) != '')),
                                     'NameOwnerChanged', 'org.freedesktop.DBus',
                                     'org.freedesktop.DBus', '/org/freedesktop/DBus', arg0='org.bluez')
        spin(lambda: False, 0.05)
        self.mock.restart_bluez()
        self.ctl = self.mock.control                     # bound to the new process
        self.assertTrue(spin(lambda: len(owners) >= 2))
        self.assertEqual(owners[:2], [(True, False), (False, True)])
        objs = self.managed()
        self.assertIn(HCI0, objs)
        self.assertNotIn(HRM, objs, 'devices are gone after a restart')
        self.add_hrm()                                   # the test re-adds what it wants
        self.connect()


@unittest.skipIf(SKIP_REASON is not None, SKIP_REASON or '')
class BlueZMockCLITest(unittest.TestCase):

    def test_cli_prints_address_releases_pipes_and_stops(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        addr_file = os.path.join(d, 'addr')
        p = subprocess.Popen(['/usr/bin/python3', os.path.join(MOCK_DIR, 'bluez_mock.py'),
                              '--address-file', addr_file, '--hrm', HRM_ADDR],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        # stdout carries exactly one line, then EOF although the mock runs on
        out = p.stdout.read()
        p.stdout.close()
        address = out.decode().strip()
        self.assertTrue(address.startswith('unix:path='), out)
        with open(addr_file) as f:
            self.assertEqual(f.read().strip(), address)
        bus = dbus.bus.BusConnection(address)
        self.addCleanup(close_connection, bus)
        ctl = dbus.Interface(bus.get_object('org.bluez', '/org/vigil/mock', introspect=False),
                             'org.vigil.BlueZMock')
        self.assertEqual(ctl.Ping(), '1')
        om = dbus.Interface(bus.get_object('org.bluez', '/', introspect=False), OM)
        self.assertIn(HRM, om.GetManagedObjects())
        p.send_signal(signal.SIGUSR1)                   # restart bluetoothd
        deadline = time.monotonic() + 5
        first = bus.get_name_owner('org.bluez')
        while time.monotonic() < deadline:
            try:
                if bus.get_name_owner('org.bluez') != first:
                    break
            except dbus.exceptions.DBusException:
                pass
            time.sleep(0.02)
        self.assertNotEqual(bus.get_name_owner('org.bluez'), first)
        p.terminate()
        self.assertEqual(p.wait(10), 0)
        self.assertEqual(p.stderr.read(), b'')
        p.stderr.close()
        self.assertFalse(os.path.exists(addr_file))


if __name__ == '__main__':
    unittest.main()
