import Testing
import VigilDBus
import VigilSystem

@Suite(.timeLimit(.minutes(1)))
struct SignalTests {
    static let interface = "org.vigil.Signals"

    @Test func matchingSignalsArriveInOrderAndOthersDoNot() async throws {
        try await withConnections { _, receiver, emitter in
            let ticks = Recorder<Int32>()
            let onLoop = Recorder<Bool>()
            let loop = receiver.loop
            let subscription = try await receiver.subscribe(
                to: MatchRule(sender: await emitter.uniqueName, path: "/sig", interface: Self.interface, member: "Tick")
            ) { message in
                onLoop.append(loop.isInLoopThread)
                ticks.append(message.body.first?.int32 ?? -1)
            }
            // Tock (other member) and a Tick on another path come between 3 and 4:
            // delivered, they would show up in the sequence.
            for value: Int32 in 1...3 {
                try await emitter.emitSignal(path: "/sig", interface: Self.interface, member: "Tick", arguments: [.int32(value)])
            }
            try await emitter.emitSignal(path: "/sig", interface: Self.interface, member: "Tock", arguments: [.int32(100)])
            try await emitter.emitSignal(path: "/other", interface: Self.interface, member: "Tick", arguments: [.int32(200)])
            for value: Int32 in 4...5 {
                try await emitter.emitSignal(path: "/sig", interface: Self.interface, member: "Tick", arguments: [.int32(value)])
            }
            #expect(await ticks.wait(forCount: 5) == [1, 2, 3, 4, 5])
            #expect(onLoop.snapshot.allSatisfy { $0 })
            await subscription.cancel()
        }
    }

    @Test func cancelStopsDelivery() async throws {
        try await withConnections { _, receiver, emitter in
            let ticks = Recorder<Int32>()
            let sentinels = Recorder<Int32>()
            let rule = MatchRule(path: "/sig", interface: Self.interface, member: "Tick")
            let subscription = try await receiver.subscribe(to: rule) { ticks.append($0.body.first?.int32 ?? -1) }
            let sentinel = try await receiver.subscribe(to: MatchRule(interface: Self.interface, member: "Sentinel")) {
                sentinels.append($0.body.first?.int32 ?? -1)
            }
            try await emitter.emitSignal(path: "/sig", interface: Self.interface, member: "Tick", arguments: [.int32(1)])
            #expect(await ticks.wait(forCount: 1) == [1])
            await subscription.cancel()
            try await emitter.emitSignal(path: "/sig", interface: Self.interface, member: "Tick", arguments: [.int32(2)])
            try await emitter.emitSignal(path: "/s", interface: Self.interface, member: "Sentinel", arguments: [.int32(9)])
            // Signals from one sender arrive in order: once the sentinel is here, Tick 2 would have been too.
            #expect(await sentinels.wait(forCount: 1) == [9])
            #expect(ticks.snapshot == [1])
            await sentinel.cancel()
        }
    }

    @Test func pathNamespaceAndArg0Filter() async throws {
        try await withConnections { _, receiver, emitter in
            let seen = Recorder<String>()
            let changes = try await receiver.subscribe(to: MatchRule(
                pathNamespace: "/org/bluez", interface: "org.freedesktop.DBus.Properties",
                member: "PropertiesChanged", arg0: "org.bluez.Device1")
            ) { seen.append($0.path?.rawValue ?? "") }
            let properties = DBusValue.stringVariantDictionary(["RSSI": .int16(-50)])
            for (path, interface) in [("/org/bluez/hci0/dev_1", "org.bluez.Device1"),
                                      ("/org/bluez/hci0", "org.bluez.Adapter1"),
                                      ("/org/bluezz", "org.bluez.Device1"),
                                      ("/org/bluez/hci0/dev_2", "org.bluez.Device1")] {
                try await emitter.emitSignal(
                    path: try ObjectPath(path), interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged", arguments: [.string(interface), properties, .strings([])])
            }
            #expect(await seen.wait(forCount: 2) == ["/org/bluez/hci0/dev_1", "/org/bluez/hci0/dev_2"])
            try await Task.sleep(for: .milliseconds(50))
            #expect(seen.snapshot.count == 2)
            await changes.cancel()
        }
    }

    @Test func invalidRuleIsRejected() async throws {
        try await withConnections { _, receiver, _ in
            let error = await errorOf { _ = try await receiver.subscribe(to: MatchRule(interface: "no")) { _ in } }
            #expect((error as? DBusError)?.name == DBusError.Name.invalidArgs)
        }
    }
}
