// Bluetooth LE pairing and bonds (docs/protocol.md, "Bluetooth LE: pairing and
// bonds"). vigild is BlueZ's pairing agent for the machine: a prompt BlueZ
// asks of it (a passkey to type, a number to confirm) goes to the client that
// asked to pair (or uses the device) as a `ble.pairingRequest` event, and the
// client answers with `ble.pairingResponse` before the prompt's deadline.

/// Request: pair with (bond to) a peripheral. BlueZ connects if needed; the
/// prompts its pairing method needs come as `ble.pairingRequest` events.
/// Reply: `PairingState` once paired (also when it already was). Errors:
/// `deviceError` naming BlueZ's error (`AuthenticationFailed`,
/// `AuthenticationCanceled`, `AuthenticationRejected`, `AuthenticationTimeout`,
/// `ConnectionAttemptFailed`), and why when vigild knows more (a prompt
/// nobody answered in time, a prompt the client rejected); `notFound` when
/// BlueZ does not know the device (scan or connect first).
public struct PairPeripheral: Message, Equatable {
    public static let type = "ble.pair"
    public var peripheral: String
    public init(peripheral: String) { self.peripheral = peripheral }
}

/// Request: cancel a pairing in progress (Device1.CancelPairing). Reply: `Done`.
public struct CancelPairing: Message, Equatable {
    public static let type = "ble.cancelPairing"
    public var peripheral: String
    public init(peripheral: String) { self.peripheral = peripheral }
}

/// Request: forget a peripheral: its bond (keys) and BlueZ's record of it
/// (Adapter1.RemoveDevice); a link vigild holds for clients comes back
/// unpaired when the device advertises again. Reply: `Done`.
public struct ForgetPeripheral: Message, Equatable {
    public static let type = "ble.forget"
    public var peripheral: String
    public init(peripheral: String) { self.peripheral = peripheral }
}

/// Request: mark a peripheral trusted or not (Device1.Trusted). Reply: `PairingState`.
public struct SetTrusted: Message, Equatable {
    public static let type = "ble.setTrusted"
    public var peripheral: String
    public var trusted: Bool
    public init(peripheral: String, trusted: Bool) {
        self.peripheral = peripheral
        self.trusted = trusted
    }
}

/// Request: the answer to a `ble.pairingRequest`. `accept` false rejects the
/// pairing. `passkey` (0-999999) answers `passkey`, `pin` (1-16 characters)
/// answers `pin`; `confirm` and `authorize` need only `accept`. Reply: `Done`;
/// `notFound` when the prompt is no longer waiting (answered, cancelled by
/// BlueZ, or past its deadline).
public struct PairingResponse: Message, Equatable {
    public static let type = "ble.pairingResponse"
    public var request: Int
    public var accept: Bool
    public var passkey: Int?
    public var pin: String?
    public init(request: Int, accept: Bool, passkey: Int? = nil, pin: String? = nil) {
        self.request = request
        self.accept = accept
        self.passkey = passkey
        self.pin = pin
    }
}

/// A peripheral's pairing state, as BlueZ reports it.
public struct PairingState: Message, Equatable {
    public static let type = "reply"
    public var peripheral: String
    public var paired: Bool
    public var bonded: Bool
    public var trusted: Bool
    public init(peripheral: String, paired: Bool, bonded: Bool, trusted: Bool) {
        self.peripheral = peripheral
        self.paired = paired
        self.bonded = bonded
        self.trusted = trusted
    }
}

/// What BlueZ asks during a pairing (Agent1's methods).
public enum PairingPromptKind: String, Sendable, Codable, Equatable, CaseIterable {
    /// Type the passkey the peripheral displays (RequestPasskey): answer with `passkey`.
    case passkey
    /// Type the PIN code (RequestPinCode, legacy): answer with `pin`.
    case pin
    /// Does the peripheral show `passkey`? (RequestConfirmation, numeric comparison): accept or reject.
    case confirm
    /// Pair without a passkey? (RequestAuthorization, Just Works the policy did not accept by itself).
    case authorize
    /// Allow the peripheral to use `service`? (AuthorizeService).
    case authorizeService
    /// Type `passkey` on the peripheral (DisplayPasskey; `entered` digits so far): nothing to answer.
    case displayPasskey
    /// Type `pin` on the peripheral (DisplayPinCode): nothing to answer.
    case displayPin

    /// Whether the prompt waits for a `ble.pairingResponse`.
    public var needsAnswer: Bool { self != .displayPasskey && self != .displayPin }
}

/// One prompt, as the `ble.pairingRequest` event's attributes.
public struct PairingPrompt: Sendable, Codable, Equatable {
    /// The id to answer with (`ble.pairingResponse`'s `request`).
    public var request: Int
    public var peripheral: String
    public var kind: PairingPromptKind
    /// `confirm`, `displayPasskey`: the six digits (0-999999).
    public var passkey: Int?
    /// `displayPin`: the PIN to type on the peripheral.
    public var pin: String?
    /// `displayPasskey`: digits typed so far.
    public var entered: Int?
    /// `authorizeService`: the service UUID.
    public var service: String?
    /// Seconds the daemon waits for the answer before rejecting the pairing.
    public var timeout: Double?

    public init(
        request: Int, peripheral: String, kind: PairingPromptKind, passkey: Int? = nil, pin: String? = nil,
        entered: Int? = nil, service: String? = nil, timeout: Double? = nil
    ) {
        self.request = request
        self.peripheral = peripheral
        self.kind = kind
        self.passkey = passkey
        self.pin = pin
        self.entered = entered
        self.service = service
        self.timeout = timeout
    }

    /// The passkey as a device shows it: six digits, leading zeros kept.
    public var passkeyText: String? {
        passkey.map { String(repeating: "0", count: max(0, 6 - String($0).count)) + String($0) }
    }
}

extension BluetoothEventKind {
    /// A pairing prompt for the app (wakes it, `bluetooth-central`): the
    /// `PairingPrompt` members. Answer with `ble.pairingResponse` within `timeout`.
    public static let pairingRequest = "ble.pairingRequest"
    /// A prompt ended without (or despite) the app's answer: `request`,
    /// `peripheral`, `reason` (BlueZ cancelled it, the deadline passed).
    public static let pairingCancelled = "ble.pairingCancelled"
    /// BlueZ resolved a bonded peripheral's private address: the same device
    /// is now `peripheral` (its identity address), was `previous`. The daemon
    /// moved the client's connect request and subscriptions to it.
    public static let addressChanged = "ble.addressChanged"
    /// A pairing the app asked for whose `ble.pair` was cut by the daemon's
    /// restart ended (wakes or relaunches it, `bluetooth-central`):
    /// `peripheral`, `paired`, `bonded`, `trusted`, and `error` if it failed.
    public static let pairingEnded = "ble.pairingEnded"
}
