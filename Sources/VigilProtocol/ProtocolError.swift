/// An error as it travels on the wire: `{"type":"error","code":…,"message":…,"id":…}`.
public struct ProtocolError: Error, Message, Equatable, CustomStringConvertible {
    public static let type = "error"

    public enum Code: String, Codable, Sendable {
        // Fatal: the daemon sends the error and closes the connection.
        case malformedFrame
        case frameTooLarge
        case handshakeRequired
        case unsupportedVersion
        case unauthorized
        // Per request: the connection stays open.
        case unknownMessage
        case invalidArgument
        case unknownApp
        case invalidState
        case launchFailed
        case queueFull
        /// The app may not do this (e.g. open a session for a protocol its
        /// manifest does not declare); unlike `unauthorized`, not fatal.
        case notPermitted
        case internalError
        /// Bluetooth cannot be used now: no adapter, powered off, bluetoothd not running.
        case unavailable
        /// No such peripheral, service or characteristic (as far as BlueZ knows now).
        case notFound
        /// The operation needs a connection the app does not have (yet).
        case notConnected
        /// The device or BlueZ refused the operation; the message names BlueZ's error.
        case deviceError
        /// The device's driver has no such control: modem lines on a pty,
        /// RS-485 on most USB adapters, BOTHER rates on some drivers.
        case notSupported
        /// A client-side code: the connection to the daemon is gone.
        case disconnected
        /// A code this client does not know (a newer daemon's): per request, not fatal.
        case unrecognized

        public init(from decoder: any Decoder) throws {
            let raw = try decoder.singleValueContainer().decode(String.self)
            self = Code(rawValue: raw) ?? .unrecognized
        }
    }

    public var code: Code
    public var message: String
    /// The request this answers, if any.
    public var id: Int?

    public init(_ code: Code, _ message: String, id: Int? = nil) {
        self.code = code
        self.message = message
        self.id = id
    }

    /// Whether the daemon closes the connection after sending this error.
    public var closesConnection: Bool {
        switch code {
        case .malformedFrame, .frameTooLarge, .handshakeRequired, .unsupportedVersion, .unauthorized, .disconnected:
            true
        default:
            false
        }
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
