// vigil-hrm-bridge: see HeartRateBridgeApp.swift.
import Glibc

switch BridgeOptions.parse(Array(CommandLine.arguments.dropFirst())) {
case let .run(options):
    await HeartRateBridgeApp.run(options)
case .help:
    print(BridgeOptions.usage)
    exit(0)
case let .failure(message):
    say("\(message)\n\(BridgeOptions.usage)")
    exit(2)
}
