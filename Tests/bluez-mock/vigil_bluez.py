# -*- coding: utf-8 -*-
'''Vigil's BlueZ stand-in: python-dbusmock's bluez5 template, extended.

Loaded as the dbusmock template itself:

    DBUS_SYSTEM_BUS_ADDRESS=... /usr/bin/python3 -m dbusmock --system \
        --template Tests/bluez-mock/vigil_bluez.py -p '{"adapters": ["hci0"]}'

It keeps bluez5's org.bluez.Mock interface on "/" (AddAdapter, AddDevice, ...;
both re-implemented here so that their objects get the fixed methods) and adds:

  * fixed Adapter1 discovery (per-client sessions, no DiscoveryFilter KeyError),
  * a Device1 whose Connect/Disconnect keep state, resolve services and can be
    delayed, failed or left pending,
  * GATT objects (GattService1/GattCharacteristic1/GattDescriptor1) with
    ReadValue/WriteValue/StartNotify/StopNotify/AcquireNotify,
  * GattManager1 (RegisterApplication calls back into the application the way
    bluetoothd does), LEAdvertisingManager1,
  * a control interface org.vigil.BlueZMock on /org/vigil/mock for tests.

See README.md next to this file for the full control interface.
'''

import os
import socket
import time

import dbus
import dbus.service
from gi.repository import GLib

from dbusmock import mockobject
import dbusmock.templates.bluez5 as bluez5

BUS_NAME = 'org.bluez'
MAIN_OBJ = '/'
SYSTEM_BUS = True
IS_OBJECT_MANAGER = True

VERSION = '1'

OM_IFACE = 'org.freedesktop.DBus.ObjectManager'
PROPS_IFACE = dbus.PROPERTIES_IFACE
BLUEZ_MOCK_IFACE = 'org.bluez.Mock'
ADAPTER_IFACE = 'org.bluez.Adapter1'
DEVICE_IFACE = 'org.bluez.Device1'
SERVICE_IFACE = 'org.bluez.GattService1'
CHAR_IFACE = 'org.bluez.GattCharacteristic1'
DESC_IFACE = 'org.bluez.GattDescriptor1'
GATT_MANAGER_IFACE = 'org.bluez.GattManager1'
ADV_MANAGER_IFACE = 'org.bluez.LEAdvertisingManager1'
ADV_IFACE = 'org.bluez.LEAdvertisement1'

CONTROL_PATH = '/org/vigil/mock'
CONTROL_IFACE = 'org.vigil.BlueZMock'

# A fake remote central used in options of Remote* calls into applications.
REMOTE_CENTRAL = '/org/bluez/hci0/dev_C0_FF_EE_00_00_01'

BASE_UUID = '-0000-1000-8000-00805f9b34fb'


def uuid16(n):
    return f'{n:08x}{BASE_UUID}'


HRS_UUID = uuid16(0x180D)
HRM_UUID = uuid16(0x2A37)
BSL_UUID = uuid16(0x2A38)
HRCP_UUID = uuid16(0x2A39)
BAS_UUID = uuid16(0x180F)
BATTERY_LEVEL_UUID = uuid16(0x2A19)
CCCD_UUID = uuid16(0x2902)

VALID_CHAR_FLAGS = {
    'broadcast', 'read', 'write-without-response', 'write', 'notify',
    'indicate', 'authenticated-signed-writes', 'extended-properties',
    'reliable-write', 'writable-auxiliaries', 'encrypt-read', 'encrypt-write',
    'encrypt-notify', 'encrypt-indicate', 'encrypt-authenticated-read',
    'encrypt-authenticated-write', 'encrypt-authenticated-notify',
    'encrypt-authenticated-indicate', 'secure-read', 'secure-write',
    'secure-notify', 'secure-indicate', 'authorize',
}
VALID_DESC_FLAGS = {
    'read', 'write', 'encrypt-read', 'encrypt-write',
    'encrypt-authenticated-read', 'encrypt-authenticated-write',
    'secure-read', 'secure-write', 'authorize',
}

REASONS = {
    'local': ('org.bluez.Reason.Local', 'Connection terminated by local host'),
    'remote': ('org.bluez.Reason.Remote', 'Connection terminated by remote user'),
    'timeout': ('org.bluez.Reason.Timeout', 'Connection timed out'),
    'unknown': ('org.bluez.Reason.Unknown', 'Unknown reason'),
    'auth': ('org.bluez.Reason.Authentication', 'Authentication failure'),
    'suspend': ('org.bluez.Reason.Suspend', 'Connection terminated for suspend'),
}

DEFAULT_ERROR_MESSAGES = {
    'org.bluez.Error.InProgress': 'In Progress',
    'org.bluez.Error.Failed': 'le-connection-abort-by-local',
    'org.bluez.Error.NotReady': 'Resource Not Ready',
    'org.bluez.Error.AlreadyConnected': 'Already Connected',
    'org.bluez.Error.NotAvailable': 'Operation currently not available',
    'org.bluez.Error.AuthenticationFailed': 'Authentication Failed',
}


# --------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------

class _State:
    def __init__(self):
        self.root = None            # the dbusmock main object ("/")
        self.bus = None
        self.calls = []             # (t, sender, path, iface, method, args)
        self.devices = {}           # device path -> _Dev
        self.chars = {}             # characteristic path -> _Char
        self.adapters = {}          # adapter path -> _Adapter
        self.apps = {}              # (owner, app path) -> tree
        self.apps_pending = set()
        self.app_notifications = {}  # app char path -> [bytes]
        self.register_timeout = 3.0
        self.remote_timeout = 5.0
        self.hold_advertisements = False  # HoldAdvertisements: registrations answered on release
        self.agents = {}            # (owner, agent path) -> capability
        self.default_agent = None   # (owner, agent path)
        self.agent_timeout = 60.0   # bluetoothd's own agent request timeout
        self.agent_results = []     # (device path, method, result) of every agent-driven pairing
        self.held_advertisements = []     # their replies, in order
        self.profiles = {}          # (owner, profile path) -> (uuid, options): ProfileManager1.RegisterProfile


class _Adapter:
    def __init__(self):
        self.discovery = {}         # sender -> filter dict
        self.ads = {}               # (sender, path) -> props
        self.ads_pending = set()
        self.max_ads = 2
        self.max_adv_len = 31


class _Dev:
    def __init__(self, adapter):
        self.adapter = adapter
        self.state = 'disconnected'     # disconnected | connecting | connected
        self.gen = 0
        self.pending = []               # [(reply_cb, error_cb, sender)]
        self.fail_queue = []            # [(error_name, message)]
        self.connect_delay = 0.05
        self.resolve_delay = 0.05
        self.away = False
        self.quiet = False              # Connect's property changes are not signalled
        self.hang_connects = 0          # this many next Connect calls never complete
        self.snapshot = None            # [(path, props)] while removed
        self.next_handle = 0x000a
        self.gatt = []                  # GATT object paths, creation order
        self.hr_energy = 0
        self.hr_resets = 0
        self.pairing = 'justworks'      # SetPairingMethod: how Pair goes (see _pair)
        self.passkey = 123456
        self.pairing_pending = None     # (reply_cb, error_cb, agent) while a pairing waits
        self.pair_caller = None         # the bus name whose Pair that is (None: started by the device)
        self.lose_pair_reply = None     # LosePairReply: the identity address to take ('' none), or None
        self.withheld_pair_reply = None  # the reply_cb LosePairReply kept back (ReleasePairReply sends it)


class _Char:
    def __init__(self, device):
        self.device = device
        self.sessions = set()           # senders with StartNotify
        self.sock = None                # our end of an AcquireNotify pair
        self.dropped = 0                # values dropped because that socket was full
        self.watch = None
        self.owner = None


S = _State()


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _err(name, message):
    return dbus.exceptions.DBusException(message, name=name)


def _ay(data):
    return dbus.Array([dbus.Byte(b) for b in bytes(data)], signature='y')


def _as(items):
    return dbus.Array([dbus.String(i) for i in items], signature='s')


def _later(seconds, fn, *args):
    def cb():
        try:
            fn(*args)
        except Exception as e:  # keep the mock alive, leave a trace
            _debug(f'timer callback {fn.__name__} raised {e!r}')
        return False
    return GLib.timeout_add(max(0, int(seconds * 1000)), cb)


def _debug(msg):
    if S.root is not None:
        try:
            S.root.log('vigil: ' + msg)
        except Exception:
            pass


def _record(sender, path, iface, method, args):
    S.calls.append((time.time(), sender or '', str(path), iface, method, list(args)))


def _obj(path):
    try:
        return mockobject.objects[str(path)]
    except KeyError:
        raise _err('org.freedesktop.DBus.Error.UnknownObject', f'no object {path}')


def _adapter_path(adapter):
    adapter = str(adapter)
    return adapter if adapter.startswith('/') else '/org/bluez/' + adapter


def _dev(path):
    try:
        return S.devices[str(path)]
    except KeyError:
        raise _err('org.vigil.BlueZMock.Error.NoSuchDevice', f'no device {path}')


def _set_props(obj, iface, changes, emit=True):
    changes = dbus.Dictionary(changes, signature='sv')
    for k, v in changes.items():
        obj.props.setdefault(iface, {})[k] = v
    if emit and changes:
        obj.EmitSignal(PROPS_IFACE, 'PropertiesChanged', 'sa{sv}as',
                       [iface, changes, dbus.Array([], signature='s')])


def _emit_added(path):
    o = mockobject.objects[path]
    S.root.EmitSignal(OM_IFACE, 'InterfacesAdded', 'oa{sa{sv}}',
                      [dbus.ObjectPath(path),
                       dbus.Dictionary(o.props, signature='sa{sv}')])


def _remove_object(path):
    o = mockobject.objects.get(path)
    if o is None:
        return
    ifaces = list(o.props.keys())
    S.root.RemoveObject(path)
    S.root.EmitSignal(OM_IFACE, 'InterfacesRemoved', 'oas',
                      [dbus.ObjectPath(path), _as(ifaces)])


def _install(obj, iface, name, in_sig, out_sig, impl, is_async=False, log=False):
    '''Install a D-Bus method on one mock object that receives the sender
    (and, if is_async, reply_cb/error_cb keywords). impl(obj, sender, *args).
    Methods of org.bluez.* interfaces check the call's signature strictly, as
    bluetoothd does; the control interface accepts what dbus-python guesses.'''
    strict = iface.startswith('org.bluez.') or iface == OM_IFACE

    def method(self, *args, **kw):
        sender = kw.pop('sender', None)
        msg = kw.pop('dbus_message', None)
        if strict and msg is not None and (msg.get_signature() or '') != in_sig:
            # like bluetoothd (gdbus): a method is matched by name *and* signature
            raise _err('org.freedesktop.DBus.Error.UnknownMethod',
                       f'Method "{name}" with signature "{msg.get_signature() or ""}" on '
                       f'interface "{iface}" doesn\'t exist')
        args = list(args)
        if log:
            _record(sender, self.path, iface, name, args)
        try:
            self.MethodCalled(name, args)   # dbusmock's quirk, kept on purpose
        except Exception:
            pass
        return impl(self, sender, *args, **kw)

    n_args = len(list(dbus.Signature(in_sig)))
    method.__name__ = str(name)
    method._dbus_is_method = True
    method._dbus_interface = iface
    method._dbus_in_signature = in_sig
    method._dbus_out_signature = out_sig
    method._dbus_async_callbacks = ('reply_cb', 'error_cb') if is_async else None
    method._dbus_sender_keyword = 'sender'
    method._dbus_path_keyword = None
    method._dbus_rel_path_keyword = None
    method._dbus_destination_keyword = None
    method._dbus_message_keyword = 'dbus_message'
    method._dbus_connection_keyword = None
    method._dbus_args = [f'arg{i}' for i in range(1, n_args + 1)]
    method._dbus_get_args_options = {'byte_arrays': False}
    obj.methods.setdefault(iface, {})[str(name)] = (in_sig, out_sig, '', method)


def _export(path, ifaces):
    '''Create a mock object with several interfaces and install the methods
    that belong to them. Does not emit InterfacesAdded.'''
    main = next(iter(ifaces))
    S.root.AddObject(path, main, dbus.Dictionary(ifaces[main], signature='sv'), [])
    o = mockobject.objects[path]
    for iface, props in ifaces.items():
        o.props[iface] = dbus.Dictionary(props, signature='sv')
    if DEVICE_IFACE in ifaces:
        _install_device_methods(o)
    if CHAR_IFACE in ifaces:
        _install_char_methods(o)
    if DESC_IFACE in ifaces:
        _install_desc_methods(o)
    return o


# --------------------------------------------------------------------------
# adapters and discovery
# --------------------------------------------------------------------------

def _add_adapter(name, alias):
    path = _adapter_path(name)
    if path in mockobject.objects:
        raise _err('org.bluez.Mock.Error.Exists', f'adapter {path} exists')
    bluez5.AddAdapter(S.root, path.rsplit('/', 1)[1], alias)   # emits InterfacesAdded
    a = mockobject.objects[path]
    S.adapters[path] = st = _Adapter()
    # replace bluez5's buggy discovery and RemoveDevice
    _install(a, ADAPTER_IFACE, 'StartDiscovery', '', '', _start_discovery, log=True)
    _install(a, ADAPTER_IFACE, 'StopDiscovery', '', '', _stop_discovery, log=True)
    _install(a, ADAPTER_IFACE, 'SetDiscoveryFilter', 'a{sv}', '', _set_discovery_filter, log=True)
    _install(a, ADAPTER_IFACE, 'GetDiscoveryFilters', '', 'as',
             lambda o, s: _as(['UUIDs', 'RSSI', 'Pathloss', 'Transport',
                               'DuplicateData', 'Discoverable', 'Pattern']))
    _install(a, ADAPTER_IFACE, 'RemoveDevice', 'o', '', _adapter_remove_device, log=True)
    _install(a, PROPS_IFACE, 'Set', 'ssv', '', _adapter_set_property)
    a.props[ADAPTER_IFACE].pop('DiscoveryFilter', None)
    # GattManager1 and LEAdvertisingManager1 (visible in GetManagedObjects)
    a.props[GATT_MANAGER_IFACE] = dbus.Dictionary({}, signature='sv')
    _install(a, GATT_MANAGER_IFACE, 'RegisterApplication', 'oa{sv}', '',
             _register_application, is_async=True, log=True)
    _install(a, GATT_MANAGER_IFACE, 'UnregisterApplication', 'o', '',
             _unregister_application, log=True)
    a.props[ADV_MANAGER_IFACE] = dbus.Dictionary({}, signature='sv')
    _update_adv_props(a, st, emit=False)
    _install(a, ADV_MANAGER_IFACE, 'RegisterAdvertisement', 'oa{sv}', '',
             _register_advertisement, is_async=True, log=True)
    _install(a, ADV_MANAGER_IFACE, 'UnregisterAdvertisement', 'o', '',
             _unregister_advertisement, log=True)
    return path


def _adapter_state(obj):
    return S.adapters[obj.path]


def _powered(adapter_path):
    a = mockobject.objects.get(adapter_path)
    return bool(a and a.props[ADAPTER_IFACE].get('Powered', False))


def _update_discovering(a, st):
    want = bool(st.discovery)
    if bool(a.props[ADAPTER_IFACE].get('Discovering')) != want:
        _set_props(a, ADAPTER_IFACE, {'Discovering': dbus.Boolean(want)})


def _start_discovery(a, sender):
    st = _adapter_state(a)
    if not _powered(a.path):
        raise _err('org.bluez.Error.NotReady', 'Resource Not Ready')
    if sender in st.discovery and st.discovery[sender] is not None and \
            st.discovery[sender].get('__active__'):
        raise _err('org.bluez.Error.InProgress', 'Operation already in progress')
    f = dict(st.discovery.get(sender) or {})
    f['__active__'] = True
    st.discovery[sender] = f
    _update_discovering(a, st)


def _stop_discovery(a, sender):
    st = _adapter_state(a)
    f = st.discovery.get(sender)
    if not f or not f.get('__active__'):
        raise _err('org.bluez.Error.Failed', 'No discovery started')
    del st.discovery[sender]
    _update_discovering(a, st)


_FILTER_KEYS = {'UUIDs': 'as', 'RSSI': 'n', 'Pathloss': 'q', 'Transport': 's',
                'DuplicateData': 'b', 'Discoverable': 'b', 'Pattern': 's'}


def _set_discovery_filter(a, sender, flt):
    st = _adapter_state(a)
    for k, v in flt.items():
        if k not in _FILTER_KEYS:
            raise _err('org.bluez.Error.InvalidArguments', f'Invalid arguments in method call: {k}')
        if k == 'Transport' and v not in ('auto', 'bredr', 'le'):
            raise _err('org.bluez.Error.InvalidArguments', 'Invalid arguments in method call: Transport')
    if 'RSSI' in flt and 'Pathloss' in flt:
        raise _err('org.bluez.Error.InvalidArguments', 'RSSI and Pathloss are mutually exclusive')
    cur = st.discovery.get(sender) or {}
    active = cur.get('__active__', False)
    new = {str(k): v for k, v in flt.items()}
    if active:
        new['__active__'] = True
    if new:
        st.discovery[sender] = new
    else:
        st.discovery.pop(sender, None)


def _adapter_remove_device(a, sender, path):
    path = str(path)
    if path not in S.devices or not path.startswith(a.path + '/'):
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')
    _remove_device(path)


def _adapter_set_property(a, sender, iface, name, value):
    if iface == ADAPTER_IFACE and name == 'Powered':
        _set_powered(a.path, bool(value))
        return
    if name not in a.props.get(iface, {}):
        raise _err('org.freedesktop.DBus.Error.InvalidArgs', f'No such property {name}')
    _set_props(a, iface, {name: value})


def _set_powered(adapter_path, powered):
    a = _obj(adapter_path)
    st = S.adapters[adapter_path]
    if not powered:
        for path, d in list(S.devices.items()):
            if d.adapter == adapter_path and d.state != 'disconnected':
                _drop_connection(path, 'local', 'org.bluez.Error.Failed', 'Not Powered')
        st.discovery.clear()
        _update_discovering(a, st)
    if bool(a.props[ADAPTER_IFACE]['Powered']) != powered:
        _set_props(a, ADAPTER_IFACE, {'Powered': dbus.Boolean(powered)})


# --------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------

def _device_path(adapter_path, address):
    return adapter_path + '/dev_' + str(address).replace(':', '_').upper()


def _add_le_device(adapter, address, name, props):
    adapter_path = _adapter_path(adapter)
    if adapter_path not in S.adapters:
        raise _err('org.bluez.Mock.NoSuchAdapter', f'Adapter {adapter} does not exist.')
    path = _device_path(adapter_path, address)
    if path in mockobject.objects or path in S.devices:
        raise _err('org.bluez.Mock.Error.Exists', f'device {path} exists')
    p = {
        'Address': dbus.String(str(address).upper()),
        'AddressType': dbus.String('public'),
        'Alias': dbus.String(name or str(address).replace(':', '-')),
        'Paired': dbus.Boolean(False),
        'Bonded': dbus.Boolean(False),
        'Trusted': dbus.Boolean(False),
        'Blocked': dbus.Boolean(False),
        'LegacyPairing': dbus.Boolean(False),
        'Connected': dbus.Boolean(False),
        'ServicesResolved': dbus.Boolean(False),
        'UUIDs': _as([]),
        'Adapter': dbus.ObjectPath(adapter_path),
        'RSSI': dbus.Int16(-60),
        'ManufacturerData': dbus.Dictionary({}, signature='qv'),
        'ServiceData': dbus.Dictionary({}, signature='sv'),
        'AdvertisingFlags': _ay([0x06]),
        'WakeAllowed': dbus.Boolean(False),
    }
    if name:
        p['Name'] = dbus.String(name)
    for k, v in (props or {}).items():
        p[str(k)] = v
    S.devices[path] = _Dev(adapter_path)
    if p.get('Connected'):
        # Appears connected (bluetoothd merges the change into InterfacesAdded
        # when it creates a device for a link): no PropertiesChanged follows.
        S.devices[path].state = 'connected'
    _export(path, {DEVICE_IFACE: p})
    _emit_added(path)
    return path


def _install_device_methods(o):
    _install(o, DEVICE_IFACE, 'Connect', '', '', _connect, is_async=True, log=True)
    _install(o, DEVICE_IFACE, 'Disconnect', '', '', _disconnect, log=True)
    _install(o, DEVICE_IFACE, 'ConnectProfile', 's', '', lambda *a: None, log=True)
    _install(o, DEVICE_IFACE, 'DisconnectProfile', 's', '', lambda *a: None, log=True)
    _install(o, DEVICE_IFACE, 'Pair', '', '', _pair, is_async=True, log=True)
    _install(o, DEVICE_IFACE, 'CancelPairing', '', '', _cancel_pairing, log=True)
    _install(o, PROPS_IFACE, 'Set', 'ssv', '', _device_set_property)


def _device_set_property(o, sender, iface, name, value):
    if iface != DEVICE_IFACE or name not in ('Trusted', 'Blocked', 'Alias', 'WakeAllowed'):
        raise _err('org.freedesktop.DBus.Error.InvalidArgs', f'No such property {name}')
    _set_props(o, DEVICE_IFACE, {name: value})


# --------------------------------------------------------------------------
# pairing and agents (AgentManager1, Agent1), as bluetoothd drives them
# --------------------------------------------------------------------------

AGENT_IFACE = 'org.bluez.Agent1'
# An agent's error -> what Pair fails with. Over LE, bluetoothd 5.66 answers the
# kernel's SMP request negatively whatever the agent said, and Pair fails with
# AuthenticationFailed (seen in the lab: Tests/Lab/59-vigild-ble-pairing, an
# agent's Canceled); only its own timeout differs.
AGENT_ERRORS = {
    'org.freedesktop.DBus.Error.NoReply': ('org.bluez.Error.AuthenticationTimeout', 'Authentication Timeout'),
}


def _register_agent(o, sender, path, capability):
    caps = ('DisplayOnly', 'DisplayYesNo', 'KeyboardOnly', 'NoInputNoOutput', 'KeyboardDisplay', '')
    if str(capability) not in caps:
        raise _err('org.bluez.Error.InvalidArguments', 'Invalid Arguments')
    key = (str(sender), str(path))
    if any(owner == key[0] for owner, _p in S.agents):
        raise _err('org.bluez.Error.AlreadyExists', 'Already Exists')
    S.agents[key] = str(capability) or 'KeyboardDisplay'


def _request_default_agent(o, sender, path):
    key = (str(sender), str(path))
    if key not in S.agents:
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')
    S.default_agent = key


def _unregister_agent(o, sender, path):
    key = (str(sender), str(path))
    if S.agents.pop(key, None) is None:
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')
    if S.default_agent == key:
        S.default_agent = None


def _register_profile(o, sender, path, uuid, options):
    uuid = str(uuid).lower()
    if any(u == uuid for u, _o in S.profiles.values()):
        raise _err('org.bluez.Error.NotPermitted', 'UUID already registered')
    channel = options.get('Channel')
    if channel is not None and any(opts.get('Channel') == channel for _u, opts in S.profiles.values()):
        raise _err('org.bluez.Error.Failed', 'Failed to listen on channel')
    S.profiles[(str(sender), str(path))] = (uuid, dict(options))


def _unregister_profile(o, sender, path):
    if S.profiles.pop((str(sender), str(path)), None) is None:
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')


def _c_profiles(o, s):
    return dbus.Array([dbus.Struct((owner, dbus.ObjectPath(path), uuid, dbus.Dictionary(opts, signature='sv')),
                                   signature='sosa{sv}')
                       for (owner, path), (uuid, opts) in S.profiles.items()], signature='(sosa{sv})')


def _c_connect_profile(o, s, dev, uuid, fd, reply_cb, error_cb):
    '''A device connecting to a registered serial profile: bluetoothd's
    NewConnection(device, fd, {}) to the profile's owner, with the caller's
    end of a socket pair standing in for the accepted RFCOMM socket.'''
    uuid = str(uuid).lower()
    found = [(owner, path) for (owner, path), (u, _o) in S.profiles.items() if u == uuid]
    if not found:
        error_cb(_err('org.bluez.Error.DoesNotExist', f'no profile registered for {uuid}'))
        return
    owner, path = found[0]
    _record(owner, path, 'org.bluez.Profile1', 'NewConnection', [dev])
    S.bus.call_async(owner, path, 'org.bluez.Profile1', 'NewConnection', 'oha{sv}',
                     (dbus.ObjectPath(dev), fd, dbus.Dictionary({}, signature='sv')),
                     lambda *r: reply_cb(), error_cb, timeout=S.remote_timeout)


def _agent_for(sender):
    '''The Pair caller's own agent, else the default one (bluetoothd's rule).'''
    for key in S.agents:
        if key[0] == str(sender):
            return key
    return S.default_agent


def _agent_call(agent, method, sig, args, ok, fail):
    owner, path = agent
    _record(owner, path, AGENT_IFACE, method, args)
    S.bus.call_async(owner, path, AGENT_IFACE, method, sig, args, ok, fail, timeout=S.agent_timeout)


def _pair_done(o, d, bonded):
    pending, d.pairing_pending = d.pairing_pending, None
    adapter = mockobject.objects.get(d.adapter)
    bondable = adapter is None or bool(adapter.props[ADAPTER_IFACE].get('Pairable', True))
    lost, d.lose_pair_reply = d.lose_pair_reply, None
    if lost:
        # BlueZ 5.66 as seen in the lab: the peer's IRK resolved its private
        # address mid-Pair, the object took the identity address...
        _set_props(o, DEVICE_IFACE, {'Address': dbus.String(lost.upper()), 'AddressType': dbus.String('random')})
    _set_props(o, DEVICE_IFACE, {'Paired': dbus.Boolean(True), 'Bonded': dbus.Boolean(bonded and bondable)})
    if lost is not None:
        # ... and Pair's reply never came.
        d.withheld_pair_reply = pending[0] if pending else None
        return
    if pending:
        pending[0]()


def _pair_failed(d, name, message):
    pending, d.pairing_pending = d.pairing_pending, None
    if pending:
        pending[1](_err(name, message))


def _pair_with_agent(o, d, agent, method):
    '''Drives one pairing method through `agent`, then ends the pending Pair.'''
    dev = dbus.ObjectPath(o.path)

    def failed(e):
        name = e.get_dbus_name() if isinstance(e, dbus.exceptions.DBusException) else ''
        S.agent_results.append((o.path, method, name or 'error'))
        mapped = AGENT_ERRORS.get(name, ('org.bluez.Error.AuthenticationFailed', 'Authentication Failed'))
        _pair_failed(d, *mapped)

    def succeeded(*result):
        if method == 'passkey' and (not result or int(result[0]) != d.passkey):
            S.agent_results.append((o.path, method, 'wrong passkey'))
            return _pair_failed(d, 'org.bluez.Error.AuthenticationFailed', 'Authentication Failed')
        if method == 'pin' and (not result or str(result[0]) != str(d.passkey)):
            S.agent_results.append((o.path, method, 'wrong pin'))
            return _pair_failed(d, 'org.bluez.Error.AuthenticationFailed', 'Authentication Failed')
        S.agent_results.append((o.path, method, 'ok'))
        if d.pairing_pending is not None:
            _pair_done(o, d, True)

    if method == 'authorize':
        _agent_call(agent, 'RequestAuthorization', 'o', (dev,), succeeded, failed)
    elif method == 'passkey':
        _agent_call(agent, 'RequestPasskey', 'o', (dev,), succeeded, failed)
    elif method == 'pin':
        _agent_call(agent, 'RequestPinCode', 'o', (dev,), succeeded, failed)
    elif method == 'confirm':
        _agent_call(agent, 'RequestConfirmation', 'ou', (dev, dbus.UInt32(d.passkey)), succeeded, failed)
    elif method == 'display':
        # The agent shows the passkey; the peripheral's user types it: done a moment later.
        def shown(*_r):
            S.agent_results.append((o.path, method, 'ok'))
            _later(0.1, lambda: d.pairing_pending is not None and _pair_done(o, d, True))
        _agent_call(agent, 'DisplayPasskey', 'ouq', (dev, dbus.UInt32(d.passkey), dbus.UInt16(0)), shown, failed)


def _pair(o, sender, reply_cb, error_cb):
    '''Device1.Pair. The device's pairing method (SetPairingMethod) decides:
    `justworks` (no agent call; with no agent registered at all it fails with
    AuthenticationFailed, as on a non-bondable adapter), `authorize`
    (RequestAuthorization), `passkey` (RequestPasskey, must match), `pin`
    (RequestPinCode), `confirm` (RequestConfirmation), `display`
    (DisplayPasskey), `fail` (AuthenticationFailed), `hang` (nothing
    happens until CancelPairing), `slow` (Just Works, done after `passkey`
    milliseconds). Bonded only while the adapter is
    Pairable. LosePairReply makes the next one finish without its reply.'''
    d = _dev(o.path)
    if o.props[DEVICE_IFACE].get('Paired'):
        raise _err('org.bluez.Error.AlreadyExists', 'Already Exists')
    if d.pairing_pending is not None:
        raise _err('org.bluez.Error.InProgress', 'In Progress')
    if d.away:
        raise _err('org.bluez.Error.ConnectionAttemptFailed', 'Page Timeout')
    agent = _agent_for(sender)
    d.pairing_pending = (reply_cb, error_cb, agent)
    d.pair_caller = str(sender)
    if d.pairing == 'fail' or agent is None:
        return _pair_failed(d, 'org.bluez.Error.AuthenticationFailed', 'Authentication Failed')
    if d.pairing == 'hang':
        return  # BlueZ wedged: nothing happens until CancelPairing
    if d.pairing == 'justworks':
        return _later(0.05, lambda: d.pairing_pending is not None and _pair_done(o, d, True))
    if d.pairing == 'slow':  # Just Works taking `passkey` milliseconds (a slow link or peer)
        return _later(d.passkey / 1000.0, lambda: d.pairing_pending is not None and _pair_done(o, d, True))
    _pair_with_agent(o, d, agent, d.pairing)


def _cancel_pairing(o, sender):
    d = _dev(o.path)
    if d.pairing_pending is None:
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')
    agent = d.pairing_pending[2]
    if agent is not None:
        _agent_call(agent, 'Cancel', '', (), lambda *a: None, lambda e: None)
    _pair_failed(d, 'org.bluez.Error.AuthenticationCanceled', 'Authentication Canceled')


def _c_request_from_device(o, s, dev, method, reply_cb, error_cb):
    '''bluetoothd starting a pairing by itself (a protected characteristic
    was accessed, or a remote central pairs): the default agent is asked with
    no Pair call. Answers '' on success, else the error name.'''
    d = _dev(dev)
    path = str(dev)
    agent = S.default_agent
    if agent is None:
        return reply_cb('org.bluez.Error.AuthenticationFailed')
    d.pairing_pending = (lambda: reply_cb(''), lambda e: reply_cb(e.get_dbus_name()), agent)
    d.pair_caller = None
    _pair_with_agent(mockobject.objects[path], d, agent, str(method))


def _c_set_pairing(o, s, dev, method, passkey):
    d = _dev(dev)
    d.pairing = str(method)
    d.passkey = int(passkey)


def _c_lose_pair_reply(o, s, dev, identity):
    _dev(dev).lose_pair_reply = str(identity)


def _c_release_pair_reply(o, s, dev):
    d = _dev(dev)
    reply, d.withheld_pair_reply = d.withheld_pair_reply, None
    if reply is None:
        return False
    reply()
    return True


def _c_agents(o, s):
    return dbus.Array([dbus.Struct((owner, dbus.ObjectPath(path), cap, (owner, path) == S.default_agent),
                                   signature='sosb') for (owner, path), cap in S.agents.items()],
                      signature='(sosb)')


def _c_change_address(o, s, dev, address, address_type):
    '''A bond resolved a private address: bluetoothd keeps the object (and
    its path) and changes Address to the identity address.'''
    _set_props(_obj(dev), DEVICE_IFACE, {'Address': dbus.String(str(address).upper()),
                                         'AddressType': dbus.String(str(address_type))})


def _connect(o, sender, reply_cb, error_cb):
    d = _dev(o.path)
    if not _powered(d.adapter):
        raise _err('org.bluez.Error.NotReady', 'Resource Not Ready')
    if d.state == 'connected':
        raise _err('org.bluez.Error.AlreadyConnected', 'Already Connected')
    if d.state == 'connecting':
        raise _err('org.bluez.Error.InProgress', 'In Progress')
    d.state = 'connecting'
    d.gen += 1
    d.pending.append((reply_cb, error_cb, sender))
    if d.fail_queue:
        name, msg = d.fail_queue.pop(0)
        gen = d.gen

        def fail():
            if d.gen == gen and d.state == 'connecting':
                d.state = 'disconnected'
                d.gen += 1
                pending, d.pending = d.pending, []
                for _r, e_cb, _s in pending:
                    e_cb(_err(name, msg))
        _later(d.connect_delay, fail)
        return
    if d.hang_connects > 0:
        d.hang_connects -= 1  # left pending, the device present: only Disconnect ends it
        return
    if not d.away:
        _schedule_connect(o.path, d)


def _schedule_connect(path, d):
    gen = d.gen
    _later(d.connect_delay, _connect_step, path, gen)


def _connect_step(path, gen):
    d = S.devices.get(path)
    if d is None or d.gen != gen or d.state != 'connecting' or d.away:
        return
    o = mockobject.objects.get(path)
    if o is None:
        return
    d.state = 'connected'
    _set_props(o, DEVICE_IFACE, {'Connected': dbus.Boolean(True)}, emit=not d.quiet)
    _later(d.resolve_delay, _resolve_step, path, gen)


def _resolve_step(path, gen):
    d = S.devices.get(path)
    if d is None or d.gen != gen or d.state != 'connected':
        return
    o = mockobject.objects.get(path)
    if o is None:
        return
    _set_props(o, DEVICE_IFACE, {'ServicesResolved': dbus.Boolean(True)}, emit=not d.quiet)
    pending, d.pending = d.pending, []
    for reply_cb, _e, _s in pending:
        reply_cb()


def _drop_connection(path, reason, pending_error='org.bluez.Error.Failed',
                     pending_message='le-connection-abort-by-local'):
    '''Tear down a connection or connection attempt; emits the signals.'''
    d = S.devices[path]
    o = mockobject.objects.get(path)
    was = d.state
    d.state = 'disconnected'
    d.gen += 1
    pending, d.pending = d.pending, []
    for _r, error_cb, _s in pending:
        error_cb(_err(pending_error, pending_message))
    for cpath in d.gatt:
        c = S.chars.get(cpath)
        if c:
            _reset_char(cpath, c, emit=o is not None)
    if o is not None and was != 'disconnected':
        props = o.props[DEVICE_IFACE]
        if props.get('ServicesResolved'):
            _set_props(o, DEVICE_IFACE, {'ServicesResolved': dbus.Boolean(False)})
        if props.get('Connected'):
            _set_props(o, DEVICE_IFACE, {'Connected': dbus.Boolean(False)})
            rname, rmsg = REASONS.get(reason, (reason, reason))
            o.EmitSignal(DEVICE_IFACE, 'Disconnected', 'ss', [rname, rmsg])


def _disconnect(o, sender):
    d = _dev(o.path)
    if d.state == 'disconnected':
        raise _err('org.bluez.Error.NotConnected', 'Not Connected')
    _drop_connection(o.path, 'local')


def _remove_device(path):
    d = S.devices.get(path)
    if d is None:
        raise _err('org.vigil.BlueZMock.Error.NoSuchDevice', f'no device {path}')
    if d.state != 'disconnected':
        _drop_connection(path, 'local', 'org.bluez.Error.Failed', 'Device removed')
    for p in reversed(d.gatt):
        _remove_object(p)
        S.chars.pop(p, None)
    _remove_object(path)
    del S.devices[path]


def _snapshot_and_remove(path, d):
    snap = [(path, {i: dict(v) for i, v in mockobject.objects[path].props.items()})]
    for p in d.gatt:
        snap.append((p, {i: dict(v) for i, v in mockobject.objects[p].props.items()}))
    for p in reversed(d.gatt):
        _remove_object(p)
    _remove_object(path)
    d.snapshot = snap


def _restore(d):
    for p, ifaces in d.snapshot:
        _export(p, ifaces)
        _emit_added(p)
    d.snapshot = None


# --------------------------------------------------------------------------
# GATT (remote device side)
# --------------------------------------------------------------------------

def _add_service(device_path, uuid, primary=True):
    device_path = str(device_path)
    d = _dev(device_path)
    h = d.next_handle
    d.next_handle += 1
    path = f'{device_path}/service{h:04x}'
    _export(path, {SERVICE_IFACE: {
        'UUID': dbus.String(str(uuid).lower()),
        'Device': dbus.ObjectPath(device_path),
        'Primary': dbus.Boolean(primary),
        'Includes': dbus.Array([], signature='o'),
        'Handle': dbus.UInt16(h),
    }})
    d.gatt.append(path)
    if device_path in mockobject.objects:
        _emit_added(path)
    return path


def _device_of(gatt_path):
    p = str(gatt_path)
    while p and p not in S.devices:
        p = p.rsplit('/', 1)[0]
    if not p:
        raise _err('org.vigil.BlueZMock.Error.NoSuchDevice', f'no device above {gatt_path}')
    return p


def _add_char(service_path, uuid, flags, value, mtu=247):
    service_path = str(service_path)
    if service_path not in mockobject.objects or SERVICE_IFACE not in mockobject.objects[service_path].props:
        raise _err('org.vigil.BlueZMock.Error.NoSuchService', f'no service {service_path}')
    dpath = _device_of(service_path)
    d = S.devices[dpath]
    h = d.next_handle
    d.next_handle += 2
    path = f'{service_path}/char{h:04x}'
    props = {
        'UUID': dbus.String(str(uuid).lower()),
        'Service': dbus.ObjectPath(service_path),
        'Value': _ay(value),
        'Flags': _as(flags),
        'MTU': dbus.UInt16(mtu),
        'Handle': dbus.UInt16(h + 1),
    }
    if 'notify' in flags or 'indicate' in flags:
        props['Notifying'] = dbus.Boolean(False)
        props['NotifyAcquired'] = dbus.Boolean(False)
    if 'write-without-response' in flags:
        props['WriteAcquired'] = dbus.Boolean(False)
    _export(path, {CHAR_IFACE: props})
    d.gatt.append(path)
    S.chars[path] = _Char(dpath)
    if dpath in mockobject.objects:
        _emit_added(path)
    return path


def _add_desc(char_path, uuid, flags, value):
    char_path = str(char_path)
    if char_path not in S.chars:
        raise _err('org.vigil.BlueZMock.Error.NoSuchCharacteristic', f'no characteristic {char_path}')
    dpath = _device_of(char_path)
    d = S.devices[dpath]
    h = d.next_handle
    d.next_handle += 1
    path = f'{char_path}/desc{h:04x}'
    _export(path, {DESC_IFACE: {
        'UUID': dbus.String(str(uuid).lower()),
        'Characteristic': dbus.ObjectPath(char_path),
        'Value': _ay(value),
        'Flags': _as(flags),
        'Handle': dbus.UInt16(h),
    }})
    d.gatt.append(path)
    if dpath in mockobject.objects:
        _emit_added(path)
    return path


def _install_char_methods(o):
    _install(o, CHAR_IFACE, 'ReadValue', 'a{sv}', 'ay', _char_read, log=True)
    _install(o, CHAR_IFACE, 'WriteValue', 'aya{sv}', '', _char_write, log=True)
    _install(o, CHAR_IFACE, 'StartNotify', '', '', _start_notify, log=True)
    _install(o, CHAR_IFACE, 'StopNotify', '', '', _stop_notify, log=True)
    _install(o, CHAR_IFACE, 'AcquireNotify', 'a{sv}', 'hq', _acquire_notify, log=True)
    _install(o, CHAR_IFACE, 'AcquireWrite', 'a{sv}', 'hq', _acquire_write, log=True)


def _install_desc_methods(o):
    _install(o, DESC_IFACE, 'ReadValue', 'a{sv}', 'ay', _desc_read, log=True)
    _install(o, DESC_IFACE, 'WriteValue', 'aya{sv}', '', _desc_write, log=True)


def _require_connected(path):
    d = S.devices[_device_of(path)]
    if d.state != 'connected':
        raise _err('org.bluez.Error.Failed', 'Not connected')
    return d


def _char_read(o, sender, options):
    _require_connected(o.path)
    p = o.props[CHAR_IFACE]
    if 'read' not in p['Flags']:
        raise _err('org.bluez.Error.NotPermitted', 'Read not permitted')
    value = bytes(p['Value'])
    offset = int(options.get('offset', 0))
    if offset > len(value):
        raise _err('org.bluez.Error.InvalidOffset', 'Invalid offset')
    return _ay(value[offset:])


def _char_write(o, sender, value, options):
    d = _require_connected(o.path)
    p = o.props[CHAR_IFACE]
    flags = list(p['Flags'])
    wtype = str(options.get('type', ''))
    if wtype == 'command':
        ok = 'write-without-response' in flags
    elif wtype in ('request', 'reliable'):
        ok = 'write' in flags or 'reliable-write' in flags
    else:
        ok = 'write' in flags or 'write-without-response' in flags
    if not ok:
        raise _err('org.bluez.Error.NotPermitted', 'Write not permitted')
    data = bytes(value)
    if str(p['UUID']) == HRCP_UUID:
        if data == b'\x01':
            d.hr_energy = 0
            d.hr_resets += 1
            return
        raise _err('org.bluez.Error.Failed', 'Operation failed with ATT error: 0x80')
    offset = int(options.get('offset', 0))
    old = bytes(p['Value'])
    if offset > len(old):
        raise _err('org.bluez.Error.InvalidOffset', 'Invalid offset')
    p['Value'] = _ay(old[:offset] + data)


def _cccd(char_path):
    for p, o in mockobject.objects.items():
        if p.startswith(char_path + '/') and DESC_IFACE in o.props and \
                str(o.props[DESC_IFACE]['UUID']) == CCCD_UUID:
            return o
    return None


def _set_cccd(char_path, value):
    c = _cccd(char_path)
    if c is not None:
        c.props[DESC_IFACE]['Value'] = _ay(value)


def _start_notify(o, sender):
    _require_connected(o.path)
    p = o.props[CHAR_IFACE]
    if 'notify' not in p['Flags'] and 'indicate' not in p['Flags']:
        raise _err('org.bluez.Error.NotSupported', 'Operation is not supported')
    c = S.chars[o.path]
    if c.sock is not None:
        raise _err('org.bluez.Error.NotPermitted', 'Notify acquired')
    if sender in c.sessions:
        return      # same client again: fine, like bluetoothd
    c.sessions.add(sender)
    if not p.get('Notifying'):
        _set_cccd(o.path, [0x01 if 'notify' in p['Flags'] else 0x02, 0x00])
        _set_props(o, CHAR_IFACE, {'Notifying': dbus.Boolean(True)})


def _stop_notify(o, sender):
    c = S.chars[o.path]
    if sender not in c.sessions:
        raise _err('org.bluez.Error.Failed', 'No notify session started')
    c.sessions.discard(sender)
    if not c.sessions:
        _set_cccd(o.path, [0, 0])
        _set_props(o, CHAR_IFACE, {'Notifying': dbus.Boolean(False)})


def _acquire_notify(o, sender, options):
    _require_connected(o.path)
    p = o.props[CHAR_IFACE]
    if 'notify' not in p['Flags'] and 'indicate' not in p['Flags']:
        raise _err('org.bluez.Error.NotSupported', 'Operation is not supported')
    c = S.chars[o.path]
    if c.sock is not None:
        raise _err('org.bluez.Error.NotPermitted', 'Notify acquired')
    if c.sessions:
        raise _err('org.bluez.Error.InProgress', 'In Progress')
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    c.sock, c.owner = ours, sender
    path = o.path

    def on_event(_fd, _cond):
        ch = S.chars.get(path)
        if ch is None or ch.sock is not ours:
            return False
        try:
            if ours.recv(4096):
                return True     # ignore data sent back
        except BlockingIOError:
            return True
        except OSError:
            pass
        _release_notify_fd(path, ch, emit=True)   # client closed its end
        return False

    c.watch = GLib.io_add_watch(ours.fileno(), GLib.PRIORITY_DEFAULT,
                                GLib.IO_IN | GLib.IO_HUP | GLib.IO_ERR, on_event)
    fd = dbus.types.UnixFd(theirs.fileno())
    theirs.close()
    _set_cccd(o.path, [0x01, 0x00])
    _set_props(o, CHAR_IFACE, {'NotifyAcquired': dbus.Boolean(True)})
    return (fd, dbus.UInt16(int(p['MTU'])))


def _acquire_write(o, sender, options):
    _require_connected(o.path)
    p = o.props[CHAR_IFACE]
    if 'write-without-response' not in p['Flags']:
        raise _err('org.bluez.Error.NotSupported', 'Operation is not supported')
    raise _err('org.bluez.Error.NotSupported', 'AcquireWrite is not modelled by the mock')


def _release_notify_fd(path, c, emit):
    if c.watch is not None:
        GLib.source_remove(c.watch)
        c.watch = None
    if c.sock is not None:
        try:
            c.sock.close()
        except OSError:
            pass
        c.sock = None
        c.owner = None
        o = mockobject.objects.get(path)
        if o is not None and emit:
            _set_props(o, CHAR_IFACE, {'NotifyAcquired': dbus.Boolean(False)})
        elif o is not None:
            o.props[CHAR_IFACE]['NotifyAcquired'] = dbus.Boolean(False)


def _reset_char(path, c, emit):
    '''Connection gone: notify sessions end, acquired fds hang up.'''
    _release_notify_fd(path, c, emit)
    if c.sessions:
        c.sessions.clear()
        o = mockobject.objects.get(path)
        if o is not None:
            _set_cccd(path, [0, 0])
            if emit:
                _set_props(o, CHAR_IFACE, {'Notifying': dbus.Boolean(False)})
            else:
                o.props[CHAR_IFACE]['Notifying'] = dbus.Boolean(False)


def _desc_read(o, sender, options):
    _require_connected(o.path)
    value = bytes(o.props[DESC_IFACE]['Value'])
    offset = int(options.get('offset', 0))
    if offset > len(value):
        raise _err('org.bluez.Error.InvalidOffset', 'Invalid offset')
    return _ay(value[offset:])


def _desc_write(o, sender, value, options):
    _require_connected(o.path)
    p = o.props[DESC_IFACE]
    if str(p['UUID']) == CCCD_UUID or 'write' not in p['Flags']:
        raise _err('org.bluez.Error.NotPermitted', 'Write not permitted')
    p['Value'] = _ay(value)


def _notify(char_path, value):
    char_path = str(char_path)
    c = S.chars.get(char_path)
    o = mockobject.objects.get(char_path)
    if c is None or o is None:
        raise _err('org.vigil.BlueZMock.Error.NoSuchCharacteristic', f'no characteristic {char_path}')
    if S.devices[c.device].state != 'connected':
        return 0
    data = bytes(value)
    delivered = 0
    if c.sock is not None:
        mtu = int(o.props[CHAR_IFACE]['MTU'])
        try:
            c.sock.send(data[:max(0, mtu - 3)])
            delivered += 1
        except BlockingIOError:
            # As bluetoothd (notify_io_cb): the reader is ~200+ values behind
            # and the socket is full; the value is dropped ("sendmsg: Resource
            # temporarily unavailable"), the socket stays.
            c.dropped += 1
            _debug(f'notify fd full: value dropped ({c.dropped} so far)')
        except OSError as e:
            _debug(f'notify fd write failed: {e!r}')
            _release_notify_fd(char_path, c, emit=True)
    if c.sessions:
        _set_props(o, CHAR_IFACE, {'Value': _ay(data)})
        delivered += 1
    return delivered


def _add_hrm(adapter, address, name):
    path = _add_le_device(adapter, address, name, {
        'UUIDs': _as([HRS_UUID, BAS_UUID]),
        'Appearance': dbus.UInt16(0x0341),
        'RSSI': dbus.Int16(-55),
        'TxPower': dbus.Int16(0),
        'AddressType': dbus.String('random'),
    })
    svc = _add_service(path, HRS_UUID)                               # service000a
    hrm = _add_char(svc, HRM_UUID, ['notify'], [])                   # char000b
    _add_desc(hrm, CCCD_UUID, ['read', 'write'], [0, 0])             # desc000d
    _add_char(svc, BSL_UUID, ['read'], [0x01])                       # char000e (chest)
    _add_char(svc, HRCP_UUID, ['write'], [])                         # char0010
    bas = _add_service(path, BAS_UUID)                               # service0012
    bl = _add_char(bas, BATTERY_LEVEL_UUID, ['read', 'notify'], [100])  # char0013
    _add_desc(bl, CCCD_UUID, ['read', 'write'], [0, 0])              # desc0015
    return path


def _hrm_char(device_path):
    for p in S.devices[str(device_path)].gatt:
        o = mockobject.objects.get(p)
        if o is not None and CHAR_IFACE in o.props and str(o.props[CHAR_IFACE]['UUID']) == HRM_UUID:
            return p
    raise _err('org.vigil.BlueZMock.Error.NoSuchCharacteristic', 'device has no 0x2A37')


# --------------------------------------------------------------------------
# GattManager1: applications exported by clients
# --------------------------------------------------------------------------

def _validate_app(app_path, tree):
    app_path = str(app_path)
    prefix = '' if app_path == '/' else app_path
    objs = {str(k): v for k, v in tree.items()
            if str(k) == app_path or str(k).startswith(prefix + '/')}
    services = {p for p, i in objs.items() if SERVICE_IFACE in i}
    chars = {p for p, i in objs.items() if CHAR_IFACE in i}
    if not services:
        return 'No valid service object found'
    for p in services:
        s = objs[p][SERVICE_IFACE]
        if 'UUID' not in s or 'Primary' not in s:
            return f'{p}: GattService1 needs UUID and Primary'
    for p in chars:
        c = objs[p][CHAR_IFACE]
        for k in ('UUID', 'Service', 'Flags'):
            if k not in c:
                return f'{p}: GattCharacteristic1 needs {k}'
        if str(c['Service']) not in services:
            return f'{p}: Service {c["Service"]} is not a service of this application'
        bad = [f for f in c['Flags'] if str(f) not in VALID_CHAR_FLAGS]
        if bad or not c['Flags']:
            return f'{p}: invalid Flags {list(map(str, c["Flags"]))}'
    for p, i in objs.items():
        if DESC_IFACE in i:
            dsc = i[DESC_IFACE]
            for k in ('UUID', 'Characteristic', 'Flags'):
                if k not in dsc:
                    return f'{p}: GattDescriptor1 needs {k}'
            if str(dsc['Characteristic']) not in chars:
                return f'{p}: Characteristic {dsc["Characteristic"]} is not in this application'
            bad = [f for f in dsc['Flags'] if str(f) not in VALID_DESC_FLAGS]
            if bad:
                return f'{p}: invalid Flags {bad}'
    return None


def _register_application(a, sender, app_path, options, reply_cb, error_cb):
    key = (str(sender), str(app_path))
    if key in S.apps or key in S.apps_pending:
        raise _err('org.bluez.Error.AlreadyExists', 'Already Exists')
    S.apps_pending.add(key)
    done = []

    def ok(tree):
        if done:
            return
        done.append(1)
        S.apps_pending.discard(key)
        problem = _validate_app(app_path, tree)
        if problem:
            _debug(f'RegisterApplication {key}: {problem}')
            error_cb(_err('org.bluez.Error.InvalidArguments', problem))
            return
        prefix = '' if str(app_path) == '/' else str(app_path)
        S.apps[key] = dbus.Dictionary(
            {dbus.ObjectPath(k): v for k, v in tree.items()
             if str(k) == str(app_path) or str(k).startswith(prefix + '/')},
            signature='oa{sa{sv}}')
        reply_cb()

    def fail(e):
        if done:
            return
        done.append(1)
        S.apps_pending.discard(key)
        name = e.get_dbus_name() if isinstance(e, dbus.exceptions.DBusException) else ''
        if name == 'org.freedesktop.DBus.Error.NoReply':
            error_cb(_err('org.bluez.Error.Failed',
                          'application did not answer GetManagedObjects (blocked?)'))
        else:
            error_cb(_err('org.bluez.Error.Failed', f'Failed to read application: {name}: {e}'))

    S.bus.call_async(sender, app_path, OM_IFACE, 'GetManagedObjects', '', (),
                     ok, fail, timeout=S.register_timeout)


def _unregister_application(a, sender, app_path):
    key = (str(sender), str(app_path))
    if key not in S.apps:
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')
    del S.apps[key]


def _find_app_object(path):
    for (owner, _app), tree in S.apps.items():
        if dbus.ObjectPath(path) in tree:
            return owner, tree[dbus.ObjectPath(path)]
    raise _err('org.vigil.BlueZMock.Error.NoSuchAppObject',
               f'no registered application exports {path}')


def _remote_call(path, method, sig, args, reply_cb, shape):
    '''Call into an application as bluetoothd would for a remote central.
    shape(result) -> reply tuple; on error the reply carries the error name.'''
    owner, ifaces = _find_app_object(path)
    iface = CHAR_IFACE if CHAR_IFACE in ifaces else DESC_IFACE
    _record(owner, path, iface, 'Remote' + method, args)

    def ok(*res):
        reply_cb(*shape('', res))

    def fail(e):
        name = e.get_dbus_name() if isinstance(e, dbus.exceptions.DBusException) else 'org.freedesktop.DBus.Error.Failed'
        _debug(f'remote {method} on {path} failed: {name}: {e}')
        reply_cb(*shape(name or 'org.freedesktop.DBus.Error.Failed', None))

    S.bus.call_async(owner, path, iface, method, sig, args, ok, fail,
                     timeout=S.remote_timeout)


def _remote_options(path, extra):
    opts = {'device': dbus.ObjectPath(REMOTE_CENTRAL), 'mtu': dbus.UInt16(247),
            'link': dbus.String('LE')}
    opts.update(extra)
    return dbus.Dictionary(opts, signature='sv')


def _on_properties_changed(iface, changed, invalidated, sender=None, path=None):
    if iface != CHAR_IFACE or 'Value' not in changed:
        return
    if not any(owner == sender for owner, _a in S.apps):
        return
    S.app_notifications.setdefault(str(path), []).append(bytes(changed['Value']))


# --------------------------------------------------------------------------
# LEAdvertisingManager1
# --------------------------------------------------------------------------

def _update_adv_props(a, st, emit=True):
    active = len(st.ads)
    _set_props(a, ADV_MANAGER_IFACE, {
        'ActiveInstances': dbus.Byte(active),
        'SupportedInstances': dbus.Byte(max(0, st.max_ads - active)),
        'SupportedIncludes': _as(['tx-power', 'appearance', 'local-name']),
        'SupportedSecondaryChannels': _as(['1M', '2M', 'Coded']),
        'SupportedCapabilities': dbus.Dictionary({
            'MaxAdvLen': dbus.Byte(st.max_adv_len),
            'MaxScnRspLen': dbus.Byte(st.max_adv_len),
        }, signature='sv'),
        'SupportedFeatures': _as([]),
    }, emit=emit)


def _uuid_len(u):
    u = str(u).lower()
    if len(u) <= 4 or (u.startswith('0000') and u.endswith(BASE_UUID)):
        return 2
    if len(u) == 8 or u.endswith(BASE_UUID):
        return 4
    return 16


def _adv_length(props, alias):
    '''Rough legacy advertising payload size, in bytes, as bluetoothd would
    put it into the advertising data (name included; no scan response).'''
    n = 0
    includes = [str(i) for i in props.get('Includes', [])]
    if str(props.get('Type', '')) == 'peripheral' or props.get('Discoverable'):
        n += 3                                          # Flags AD
    for key in ('ServiceUUIDs', 'SolicitUUIDs'):
        uuids = list(props.get(key, []))
        by_len = {}
        for u in uuids:
            by_len.setdefault(_uuid_len(u), []).append(u)
        for ln, us in by_len.items():
            n += 2 + ln * len(us)
    for _k, v in props.get('ManufacturerData', {}).items():
        n += 2 + 2 + len(v)
    for k, v in props.get('ServiceData', {}).items():
        n += 2 + _uuid_len(k) + len(v)
    for _k, v in props.get('Data', {}).items():
        n += 2 + len(v)
    name = props.get('LocalName')
    if name is None and 'local-name' in includes:
        name = alias
    if name:
        n += 2 + len(str(name).encode('utf-8'))
    if 'Appearance' in props or 'appearance' in includes:
        n += 4
    if 'tx-power' in includes or 'TxPower' in props:
        n += 3
    return n


def _register_advertisement(a, sender, path, options, reply_cb, error_cb):
    st = _adapter_state(a)
    key = (str(sender), str(path))
    if key in st.ads or key in st.ads_pending:
        raise _err('org.bluez.Error.AlreadyExists', 'Already Exists')
    if len(st.ads) + len(st.ads_pending) >= st.max_ads:
        raise _err('org.bluez.Error.NotPermitted', 'Maximum advertisements reached')
    st.ads_pending.add(key)

    def ok(props):
        st.ads_pending.discard(key)
        if str(props.get('Type', '')) not in ('broadcast', 'peripheral'):
            error_cb(_err('org.bluez.Error.Failed', 'Failed to parse advertisement.'))
            return
        n = _adv_length(props, str(a.props[ADAPTER_IFACE].get('Alias', '')))
        if n > st.max_adv_len:
            error_cb(_err('org.bluez.Error.InvalidLength',
                          f'Advertising data too long ({n} > {st.max_adv_len} bytes)'))
            return
        def finish():
            st.ads_pending.discard(key)
            st.ads[key] = dbus.Dictionary(props, signature='sv')
            _update_adv_props(a, st)
            reply_cb()
        if S.hold_advertisements:
            st.ads_pending.add(key)
            S.held_advertisements.append(finish)
        else:
            finish()

    def fail(e):
        st.ads_pending.discard(key)
        name = e.get_dbus_name() if isinstance(e, dbus.exceptions.DBusException) else ''
        if name == 'org.freedesktop.DBus.Error.NoReply':
            error_cb(_err('org.bluez.Error.Failed',
                          'advertisement did not answer Properties.GetAll (blocked?)'))
        else:
            error_cb(_err('org.bluez.Error.Failed', f'Failed to parse advertisement: {name}: {e}'))

    S.bus.call_async(sender, path, PROPS_IFACE, 'GetAll', 's', (ADV_IFACE,),
                     ok, fail, timeout=S.register_timeout)


def _unregister_advertisement(a, sender, path):
    st = _adapter_state(a)
    key = (str(sender), str(path))
    if key not in st.ads:
        raise _err('org.bluez.Error.DoesNotExist', 'Does Not Exist')
    del st.ads[key]
    _update_adv_props(a, st)


# --------------------------------------------------------------------------
# clients leaving the bus
# --------------------------------------------------------------------------

def _on_name_owner_changed(name, old, new):
    if not name.startswith(':') or new:
        return
    gone = str(name)
    for apath, st in S.adapters.items():
        a = mockobject.objects.get(apath)
        if st.discovery.pop(gone, None) is not None and a is not None:
            _update_discovering(a, st)
        ads = [k for k in st.ads if k[0] == gone]
        for k in ads:
            del st.ads[k]
        if ads and a is not None:
            _update_adv_props(a, st)
    for k in [k for k in S.apps if k[0] == gone]:
        del S.apps[k]
    for k in [k for k in S.profiles if k[0] == gone]:
        del S.profiles[k]  # bluetoothd drops a client's profiles when it leaves the bus
    for path, d in S.devices.items():
        if d.pairing_pending is not None and d.pair_caller == gone:
            # bluetoothd cancels a bonding whose Pair caller left the bus
            # (device.c, create_bond_req_exit): nothing stays in progress.
            S.agent_results.append((path, d.pairing, 'caller left the bus'))
            _pair_failed(d, 'org.bluez.Error.AuthenticationCanceled', 'Authentication Canceled')
    for k in [k for k in S.agents if k[0] == gone]:
        del S.agents[k]
        if S.default_agent == k:
            S.default_agent = None
    for path, c in S.chars.items():
        o = mockobject.objects.get(path)
        if gone in c.sessions:
            c.sessions.discard(gone)
            if not c.sessions and o is not None:
                _set_cccd(path, [0, 0])
                _set_props(o, CHAR_IFACE, {'Notifying': dbus.Boolean(False)})
        if c.owner == gone:
            _release_notify_fd(path, c, emit=o is not None)


# --------------------------------------------------------------------------
# org.bluez.Mock on "/" (bluez5's names, re-implemented)
# --------------------------------------------------------------------------

@dbus.service.method(BLUEZ_MOCK_IFACE, in_signature='ss', out_signature='s')
def AddAdapter(self, device_name, system_name):
    '''bluez5's AddAdapter, giving the adapter Vigil's fixed methods.'''
    return _add_adapter(device_name, system_name)


@dbus.service.method(BLUEZ_MOCK_IFACE, in_signature='sss', out_signature='s')
def AddDevice(self, adapter_device_name, device_address, alias):
    '''bluez5's AddDevice, giving the device Vigil's fixed methods.'''
    return _add_le_device(adapter_device_name, device_address, alias, {})


# --------------------------------------------------------------------------
# control interface
# --------------------------------------------------------------------------

def _c_connect_delay(o, s, dev, seconds):
    _dev(dev).connect_delay = float(seconds)


def _c_resolve_delay(o, s, dev, seconds):
    _dev(dev).resolve_delay = float(seconds)


def _c_fail(o, s, dev, name, msg, count):
    d = _dev(dev)
    msg = msg or DEFAULT_ERROR_MESSAGES.get(str(name), 'Failed')
    d.fail_queue.extend([(str(name), str(msg))] * int(count))


def _c_connect_signals(o, s, dev, emit):
    _dev(dev).quiet = not bool(emit)


def _c_hang_connects(o, s, dev, count):
    _dev(str(dev)).hang_connects = int(count)


def _c_connect_silently(o, s, dev):
    dev = str(dev)
    d = _dev(dev)
    if d.state == 'connected':
        raise _err('org.bluez.Error.AlreadyConnected', 'Already Connected')
    d.state = 'connected'
    d.gen += 1
    _set_props(_obj(dev), DEVICE_IFACE,
               {'Connected': dbus.Boolean(True), 'ServicesResolved': dbus.Boolean(True)}, emit=False)
    pending, d.pending = d.pending, []
    for reply_cb, _e, _s in pending:
        reply_cb()


def _c_set_advertisement(o, s, dev, props):
    obj = _obj(dev)
    _set_props(obj, DEVICE_IFACE, props)


def _c_advertise_many(o, s, dev, series):
    """Advertisements back to back: one PropertiesChanged per entry, in order
    (a broadcaster faster than an app's wake-ups)."""
    obj = _obj(dev)
    for props in series:
        _set_props(obj, DEVICE_IFACE, props)


def _c_device_away(o, s, dev, remove):
    dev = str(dev)
    d = _dev(dev)
    if d.away:
        return
    d.away = True
    if d.state == 'connected':
        _drop_connection(dev, 'timeout')
    if remove and d.snapshot is None and dev in mockobject.objects:
        _snapshot_and_remove(dev, d)


def _c_device_back(o, s, dev):
    dev = str(dev)
    d = _dev(dev)
    if d.snapshot is not None:
        _restore(d)
    if not d.away:
        return
    d.away = False
    if d.state == 'connecting' and d.pending:
        _schedule_connect(dev, d)


def _c_disconnect_device(o, s, dev, reason):
    dev = str(dev)
    d = _dev(dev)
    if d.state == 'disconnected':
        raise _err('org.bluez.Error.NotConnected', 'Not Connected')
    _drop_connection(dev, str(reason) or 'remote', 'org.bluez.Error.Failed',
                      'le-connection-abort-by-remote')


def _c_notify_hr(o, s, dev, bpm, rr):
    d = _dev(dev)
    flags = 0x06                        # contact supported + detected
    body = b''
    bpm = int(bpm)
    if bpm > 255:
        flags |= 0x01
        body += bpm.to_bytes(2, 'little')
    else:
        body += bytes([bpm])
    d.hr_energy += 1
    if rr:
        flags |= 0x10
        for r in rr:
            body += int(r).to_bytes(2, 'little')
    return dbus.UInt32(_notify(_hrm_char(dev), bytes([flags]) + body))


def _c_hr_state(o, s, dev):
    d = _dev(dev)
    return dbus.Dictionary({'EnergyExpended': dbus.UInt16(d.hr_energy & 0xFFFF),
                            'EnergyResets': dbus.UInt32(d.hr_resets)}, signature='sv')


def _c_set_char_value(o, s, path, value):
    obj = _obj(path)
    iface = CHAR_IFACE if CHAR_IFACE in obj.props else DESC_IFACE
    obj.props[iface]['Value'] = _ay(value)


def _c_calls(o, s):
    out = dbus.Array([], signature='(dssssav)')
    for t, sender, path, iface, method, args in S.calls:
        out.append(dbus.Struct((dbus.Double(t), dbus.String(sender), dbus.String(path),
                                dbus.String(iface), dbus.String(method),
                                dbus.Array(args, signature='v')), signature='dssssav'))
    return out


def _c_clear_calls(o, s):
    S.calls.clear()


def _c_timeouts(o, s, register, remote):
    if register > 0:
        S.register_timeout = float(register)
    if remote > 0:
        S.remote_timeout = float(remote)


def _c_applications(o, s):
    return dbus.Array([dbus.Struct((dbus.String(k[0]), dbus.ObjectPath(k[1]), tree),
                                   signature='soa{oa{sa{sv}}}')
                       for k, tree in S.apps.items()],
                      signature='(soa{oa{sa{sv}}})')


def _c_remote_read(o, s, path, offset, reply_cb, error_cb):
    _remote_call(str(path), 'ReadValue', 'a{sv}',
                 (_remote_options(path, {'offset': dbus.UInt16(offset)}),), reply_cb,
                 lambda e, r: (e, _ay(bytes(r[0]) if r else b'')))


def _c_remote_write(o, s, path, value, wtype, reply_cb, error_cb):
    opts = {'offset': dbus.UInt16(0), 'type': dbus.String(wtype or 'request')}
    _remote_call(str(path), 'WriteValue', 'aya{sv}',
                 (_ay(value), _remote_options(path, opts)), reply_cb,
                 lambda e, r: (e,))


def _c_remote_start_notify(o, s, path, reply_cb, error_cb):
    _remote_call(str(path), 'StartNotify', '', (), reply_cb, lambda e, r: (e,))


def _c_remote_stop_notify(o, s, path, reply_cb, error_cb):
    _remote_call(str(path), 'StopNotify', '', (), reply_cb, lambda e, r: (e,))


def _c_remote_notifications(o, s, path):
    return dbus.Array([_ay(v) for v in S.app_notifications.get(str(path), [])],
                      signature='ay')


def _c_advertisements(o, s):
    out = dbus.Array([], signature='(soa{sv})')
    for st in S.adapters.values():
        for (owner, path), props in st.ads.items():
            out.append(dbus.Struct((dbus.String(owner), dbus.ObjectPath(path), props),
                                   signature='soa{sv}'))
    return out


def _c_hold_advertisements(o, s, hold):
    """While held, RegisterAdvertisement has read the object's properties but
    does not answer yet (a slow bluetoothd); releasing answers every held one."""
    S.hold_advertisements = bool(hold)
    if not hold:
        held, S.held_advertisements = S.held_advertisements, []
        for finish in held:
            finish()


def _c_adv_limits(o, s, adapter, instances, max_len):
    apath = _adapter_path(adapter)
    st = S.adapters[apath]
    st.max_ads = int(instances)
    st.max_adv_len = int(max_len)
    _update_adv_props(_obj(apath), st)


def _c_discovery_sessions(o, s, adapter):
    st = S.adapters[_adapter_path(adapter)]
    return dbus.Dictionary(
        {k: dbus.Dictionary({kk: vv for kk, vv in (v or {}).items() if kk != '__active__'},
                            signature='sv')
         for k, v in st.discovery.items() if v and v.get('__active__')},
        signature='sa{sv}')


def _c_remove_adapter(o, s, name):
    apath = _adapter_path(name)
    for dpath in [p for p, d in S.devices.items() if d.adapter == apath]:
        _remove_device(dpath)
    _remove_object(apath)
    S.adapters.pop(apath, None)


CONTROL_METHODS = [
    # name, in, out, impl, async
    ('Ping', '', 's', lambda o, s: VERSION, False),
    ('AddAdapter', 'ss', 'o', lambda o, s, n, a: dbus.ObjectPath(_add_adapter(n, a)), False),
    ('RemoveAdapter', 's', '', _c_remove_adapter, False),
    ('SetPowered', 'ob', '', lambda o, s, a, p: _set_powered(str(a), bool(p)), False),
    ('AddLEDevice', 'sssa{sv}', 'o',
     lambda o, s, ad, addr, n, p: dbus.ObjectPath(_add_le_device(ad, addr, n, p)), False),
    ('AddHeartRateMonitor', 'sss', 'o',
     lambda o, s, ad, addr, n: dbus.ObjectPath(_add_hrm(ad, addr, n)), False),
    ('AddGattService', 'osb', 'o',
     lambda o, s, d, u, p: dbus.ObjectPath(_add_service(d, u, bool(p))), False),
    ('AddGattCharacteristic', 'osasay', 'o',
     lambda o, s, sv, u, f, v: dbus.ObjectPath(_add_char(sv, u, [str(x) for x in f], bytes(v))), False),
    ('AddGattDescriptor', 'osasay', 'o',
     lambda o, s, c, u, f, v: dbus.ObjectPath(_add_desc(c, u, [str(x) for x in f], bytes(v))), False),
    ('SetAdvertisement', 'oa{sv}', '', _c_set_advertisement, False),
    ('AdvertiseMany', 'oaa{sv}', '', _c_advertise_many, False),
    ('RemoveDevice', 'o', '', lambda o, s, d: _remove_device(str(d)), False),
    ('DeviceAway', 'ob', '', _c_device_away, False),
    ('DeviceBack', 'o', '', _c_device_back, False),
    ('DisconnectDevice', 'os', '', _c_disconnect_device, False),
    ('FailNextConnect', 'osu', '', lambda o, s, d, n, c: _c_fail(o, s, d, n, '', c), False),
    ('FailNextConnectWithMessage', 'ossu', '', _c_fail, False),
    ('SetConnectDelay', 'od', '', _c_connect_delay, False),
    ('SetConnectSignals', 'ob', '', _c_connect_signals, False),
    ('ConnectSilently', 'o', '', _c_connect_silently, False),
    ('HangConnects', 'ou', '', _c_hang_connects, False),
    ('SetResolveDelay', 'od', '', _c_resolve_delay, False),
    ('Notify', 'oay', 'u', lambda o, s, c, v: dbus.UInt32(_notify(c, v)), False),
    ('NotifyMany', 'oaay', 'u', lambda o, s, c, vs: dbus.UInt32(sum(_notify(c, v) for v in vs)), False),
    ('NotifyHeartRate', 'oqaq', 'u', _c_notify_hr, False),
    ('HeartRateState', 'o', 'a{sv}', _c_hr_state, False),
    ('SetCharacteristicValue', 'oay', '', _c_set_char_value, False),
    ('Calls', '', 'a(dssssav)', _c_calls, False),
    ('ClearCalls', '', '', _c_clear_calls, False),
    ('SetTimeouts', 'dd', '', _c_timeouts, False),
    ('Applications', '', 'a(soa{oa{sa{sv}}})', _c_applications, False),
    ('RemoteRead', 'oq', 'say', _c_remote_read, True),
    ('RemoteWrite', 'oays', 's', _c_remote_write, True),
    ('RemoteStartNotify', 'o', 's', _c_remote_start_notify, True),
    ('RemoteStopNotify', 'o', 's', _c_remote_stop_notify, True),
    ('RemoteNotifications', 'o', 'aay', _c_remote_notifications, False),
    ('Advertisements', '', 'a(soa{sv})', _c_advertisements, False),
    ('SetAdvertisingLimits', 'oyy', '', _c_adv_limits, False),
    ('HoldAdvertisements', 'b', '', _c_hold_advertisements, False),
    ('DiscoverySessions', 'o', 'a{sa{sv}}', _c_discovery_sessions, False),
    ('SetPairingMethod', 'osu', '', _c_set_pairing, False),
    ('Agents', '', 'a(sosb)', _c_agents, False),
    ('AgentResults', '', 'a(sss)', lambda o, s: dbus.Array(
        [dbus.Struct(r, signature='sss') for r in S.agent_results], signature='(sss)'), False),
    ('SetAgentTimeout', 'd', '', lambda o, s, t: setattr(S, 'agent_timeout', float(t)), False),
    ('RequestFromDevice', 'os', 's', _c_request_from_device, True),
    ('ChangeAddress', 'oss', '', _c_change_address, False),
    ('LosePairReply', 'os', '', _c_lose_pair_reply, False),
    ('ReleasePairReply', 'o', 'b', _c_release_pair_reply, False),
    ('Profiles', '', 'a(sosa{sv})', _c_profiles, False),
    ('ConnectProfile', 'osh', '', _c_connect_profile, True),
]


def _get_managed_objects(o, sender):
    return dbus.Dictionary(
        {dbus.ObjectPath(k): v.props for k, v in mockobject.objects.items()
         if k.startswith('/org/bluez')},
        signature='oa{sa{sv}}')


def load(mock, parameters):
    S.root = mock
    S.bus = mock.bus_name.get_bus()
    # dbusmock registers the main object only after load(); bluez5 needs it
    mockobject.objects.setdefault(mock.path, mock)
    bluez5.load(mock, parameters)
    bz = mockobject.objects['/org/bluez']
    bz.props.setdefault(bluez5.PROFILE_MANAGER_IFACE, dbus.Dictionary({}, signature='sv'))
    # AgentManager1 that knows who registered (bluez5's does not): the mock calls the agent back
    _install(bz, 'org.bluez.AgentManager1', 'RegisterAgent', 'os', '', _register_agent, log=True)
    _install(bz, 'org.bluez.AgentManager1', 'RequestDefaultAgent', 'o', '', _request_default_agent, log=True)
    _install(bz, 'org.bluez.AgentManager1', 'UnregisterAgent', 'o', '', _unregister_agent, log=True)
    # ProfileManager1 that keeps the registrations (bluez5's only records the call): ConnectProfile uses them
    _install(bz, bluez5.PROFILE_MANAGER_IFACE, 'RegisterProfile', 'osa{sv}', '', _register_profile, log=True)
    _install(bz, bluez5.PROFILE_MANAGER_IFACE, 'UnregisterProfile', 'o', '', _unregister_profile, log=True)
    # GetManagedObjects on "/" lists only org.bluez's tree, not our control object
    _install(mock, OM_IFACE, 'GetManagedObjects', '', 'a{oa{sa{sv}}}', _get_managed_objects)

    mock.AddObject(CONTROL_PATH, CONTROL_IFACE, {}, [])
    ctl = mockobject.objects[CONTROL_PATH]
    for name, in_sig, out_sig, impl, is_async in CONTROL_METHODS:
        _install(ctl, CONTROL_IFACE, name, in_sig, out_sig, impl, is_async=is_async)

    S.register_timeout = float(parameters.get('register_timeout', S.register_timeout))
    S.remote_timeout = float(parameters.get('remote_timeout', S.remote_timeout))
    S.bus.add_signal_receiver(_on_name_owner_changed, signal_name='NameOwnerChanged',
                              dbus_interface='org.freedesktop.DBus',
                              bus_name='org.freedesktop.DBus',
                              path='/org/freedesktop/DBus')
    S.bus.add_signal_receiver(_on_properties_changed, signal_name='PropertiesChanged',
                              dbus_interface=PROPS_IFACE,
                              sender_keyword='sender', path_keyword='path')
    for name in parameters.get('adapters', []):
        _add_adapter(str(name), 'vigil-mock-' + str(name))
