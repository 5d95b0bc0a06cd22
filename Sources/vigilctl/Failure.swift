import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

/// How vigilctl ends when a command fails: one line on stderr (one JSON
/// object under `--json`) and an exit status from sysexits(3), so a script
/// can tell "start the daemon" from "you may not" from "fix the command".
struct Failure {
    /// Exit statuses, documented in `vigilctl --help` and docs/install.md.
    enum Status: Int32 {
        /// Anything else: the daemon refused the request (unknown app, wrong state, Bluetooth unavailable, ...).
        case failure = 1
        /// EX_USAGE: the command line is wrong.
        case usage = 64
        /// EX_UNAVAILABLE: no daemon listens at the socket, or it went away during the command.
        case noDaemon = 69
        /// EX_NOPERM: the daemon refused this user (control role, group), or the socket's permissions did.
        case refused = 77
    }

    var status: Status
    /// A stable name for scripts: `noDaemon`, `refused`, `usage`, or the daemon's error code.
    var code: String
    var message: String

    /// Exits with ArgumentParser's handling for help and `--version`, else as `status` says.
    static func exit(_ error: any Error, json: Bool) -> Never {
        guard let failure = Failure(error) else { Vigilctl.exit(withError: error) }
        if !json, failure.code == "usage" { Vigilctl.exit(withError: error) }  // with the usage text
        failure.report(json: json)
        Glibc.exit(failure.status.rawValue)
    }

    /// nil for what is not a failure (help, `--version`).
    init?(_ error: any Error) {
        switch error {
        case let error as ConnectionError:
            switch error.errno {
            case ENOENT, ECONNREFUSED: (status, code) = (.noDaemon, "noDaemon")
            case EACCES, EPERM: (status, code) = (.refused, "refused")
            default: (status, code) = (.failure, "connectionFailed")
            }
            message = error.description
        case let error as ProtocolError:
            code = error.code.rawValue
            message = Self.words(error)
            switch error.code {
            case .unauthorized, .notPermitted: status = .refused
            case .disconnected: status = .noDaemon
            default: status = .failure
            }
        default:
            let exitCode = Vigilctl.exitCode(for: error)
            if exitCode.isSuccess { return nil }
            message = Vigilctl.message(for: error)
            if exitCode.rawValue == Status.usage.rawValue {
                (status, code) = (.usage, "usage")
            } else {
                (status, code) = (.failure, "failure")
            }
        }
    }

    /// The daemon's message, with the code in words where the message alone
    /// would not say what kind of failure it is.
    private static func words(_ error: ProtocolError) -> String {
        let message = error.message.isEmpty ? nil : error.message
        let kind: String? =
            switch error.code {
            case .unauthorized: "refused"
            case .launchFailed: "launch failed"
            case .queueFull: "the app's event queue is full"
            case .internalError: "internal error in vigild"
            case .malformedFrame, .frameTooLarge, .handshakeRequired, .unsupportedVersion: "protocol error"
            case .deviceError: "the device or BlueZ refused"
            default: nil
            }
        return [kind, message].compactMap(\.self).joined(separator: ": ")
    }

    private func report(json: Bool) {
        let line: String
        if json {
            struct Body: Encodable {
                struct Inner: Encodable {
                    var code: String
                    var message: String
                    var exitStatus: Int32
                }
                var error: Inner
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let body = Body(error: .init(code: code, message: message, exitStatus: status.rawValue))
            line = (try? String(decoding: encoder.encode(body), as: UTF8.self)) ?? #"{"error":{}}"#
        } else {
            line = "vigilctl: \(message)"
        }
        writeStandardError((line + "\n"))
    }
}
