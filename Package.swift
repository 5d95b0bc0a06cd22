// swift-tools-version:6.1
// Vigil: the iOS background model for Linux accessory and Bluetooth apps.
//
// Targets are layered; dependencies point down only:
//   C shims / system libraries  CVigilShim, CUdev (libudev), CDBus (libdbus-1),
//                                CBluetooth (libbluetooth's headers), CPaho (Paho MQTT C, dlopen'd)
//   typed system wrappers        VigilSystem (event loop, sockets, cgroups, spawn),
//                                VigilUdev, VigilSerial, VigilHID, VigilDBus, VigilL2CAP, VigilMQTT
//   wire format, TOML            VigilProtocol, VigilTOML
//   domain                       VigilLifecycle (the lifecycle engine and the manifest it reads),
//                                VigilStreams (session logs, holders: every byte transport's),
//                                VigilAccessories, VigilBluetooth
//   files                        VigilConfig (manifest and daemon config files, in TOML)
//   daemon, client, CLI          VigilDaemon (a core and its components; docs/architecture.md) + vigild,
//                                VigilKit, VigilTimeline, vigilctl, examples (VigilDemoApp, SensorLogger,
//                                HeartRateBridge), VigilTOMLCheck
//   benchmarks                   VigilBench, WakeFloor (C), EngineBench, AccessoryBench
//   fuzzing                      CLibFuzzer, FuzzSupport, FuzzFrames, FuzzGATT, FuzzTOML
//   tests                        one test target per library, VigilDaemonTests (components in-process),
//                                VigilIntegrationTests (the real vigild), VigilFuzzTests (saved inputs)
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "Vigil",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "vigild", targets: ["vigild"]),
        .executable(name: "vigilctl", targets: ["vigilctl"]),
        .library(name: "VigilKit", targets: ["VigilKit"]),
        .executable(name: "vigil-demo-app", targets: ["VigilDemoApp"]),
        .executable(name: "vigil-bench", targets: ["VigilBench"]),
        .executable(name: "vigil-accessory-bench", targets: ["AccessoryBench"]),
        .executable(name: "vigil-engine-bench", targets: ["EngineBench"]),
        .executable(name: "vigil-wake-floor", targets: ["WakeFloor"]),
        .executable(name: "vigil-sensor-logger", targets: ["SensorLogger"]),
        .executable(name: "vigil-hrm-bridge", targets: ["HeartRateBridge"]),
        .executable(name: "vigil-toml-check", targets: ["VigilTOMLCheck"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // Bottom layer: the few syscalls Swift cannot reach directly.
        .target(name: "CVigilShim"),

        // Typed wrappers over the kernel: errors as values, no domain knowledge.
        .target(
            name: "VigilSystem",
            dependencies: [
                "CVigilShim",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),

        // The vocabulary (app states, modes, messages) and wire format shared by
        // the daemon and every client.
        .target(name: "VigilProtocol", swiftSettings: strict),

        // A strict TOML 1.0 parser that cannot trap on any input (manifests and
        // the daemon config are untrusted), and a tool that prints what it parsed.
        .target(name: "VigilTOML", swiftSettings: strict),
        .executableTarget(
            name: "VigilTOMLCheck", dependencies: ["VigilTOML"], path: "Sources/Tools/VigilTOMLCheck", swiftSettings: strict),

        // The domain: the lifecycle engine and what it knows of an app (pure
        // logic; no file formats).
        .target(name: "VigilLifecycle", dependencies: ["VigilProtocol"], swiftSettings: strict),

        // Manifest files and the daemon's config file, read with VigilTOML and
        // checked: every mistake named with its file and field.
        .target(name: "VigilConfig", dependencies: ["VigilLifecycle", "VigilProtocol", "VigilTOML"], swiftSettings: strict),

        // What every byte transport's sessions share (serial accessories, L2CAP
        // channels): the session log apps map, and who holds a session.
        .target(name: "VigilStreams", dependencies: ["VigilProtocol", "VigilSystem"], swiftSettings: strict),

        // The accessory domain: which devices are accessories, their identity
        // across replugs, and which accessory a session is on (pure logic, no libudev).
        .target(
            name: "VigilAccessories",
            dependencies: ["VigilConfig", "VigilLifecycle", "VigilProtocol", "VigilStreams", "VigilSystem"],
            swiftSettings: strict
        ),

        // The daemon as a library, so tests and benchmarks can drive it in-process too.
        .target(
            name: "VigilDaemon",
            dependencies: [
                "VigilSystem", "VigilProtocol", "VigilLifecycle", "VigilConfig", "VigilStreams", "VigilAccessories", "VigilUdev", "VigilSerial", "VigilHID",
                "VigilBluetooth", "VigilL2CAP", "VigilMQTT",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "vigild",
            dependencies: [
                "VigilDaemon", "VigilConfig", "VigilLifecycle",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // Client side.
        .target(
            name: "VigilKit",
            dependencies: ["VigilProtocol", "VigilSystem"],
            swiftSettings: strict
        ),
        // The decision log as a picture and a trace (vigilctl timeline).
        .target(name: "VigilTimeline", dependencies: ["VigilProtocol"], swiftSettings: strict),
        .executableTarget(
            name: "vigilctl",
            dependencies: [
                "VigilKit",
                "VigilProtocol",
                "VigilTimeline",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "VigilDemoApp",
            dependencies: ["VigilKit"],
            path: "Sources/Examples/VigilDemoApp",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "SensorLogger",
            dependencies: ["VigilKit", .product(name: "GRDB", package: "GRDB.swift")],
            path: "Sources/Examples/SensorLogger",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "HeartRateBridge",
            dependencies: ["VigilKit"],
            path: "Sources/Examples/HeartRateBridge",
            exclude: ["org.vigil.example.hrm-bridge.toml", "org.vigil.example.hrm-bridge-serial.toml"],
            swiftSettings: strict
        ),
        // Benchmarks print figures (ratios against a baseline of the same run); they assert nothing.
        .executableTarget(
            name: "VigilBench",
            dependencies: ["VigilKit", "VigilSystem"],
            path: "Sources/Benchmarks/VigilBench",
            swiftSettings: strict
        ),
        // The kernel work of a wake cycle with no daemon logic, in C (vigil-bench's `floor` phase).
        .executableTarget(name: "WakeFloor", path: "Sources/Benchmarks/WakeFloor"),
        .executableTarget(
            name: "EngineBench",
            dependencies: ["VigilLifecycle"],
            path: "Sources/Benchmarks/EngineBench",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "AccessoryBench",
            dependencies: ["VigilKit", "VigilSerial"],
            path: "Sources/Benchmarks/AccessoryBench",
            swiftSettings: strict
        ),

        // Accessories: libudev discovery (CUdev, VigilUdev) and serial ports (VigilSerial).
        .systemLibrary(name: "CUdev", pkgConfig: "libudev", providers: [.apt(["libudev-dev"])]),
        .target(name: "VigilUdev", dependencies: ["CUdev", "VigilSystem"], swiftSettings: strict),
        .target(name: "VigilSerial", dependencies: ["CVigilShim", "VigilSystem"], swiftSettings: strict),
        // USB HID sensors: hidraw nodes (reports, feature reports, the report descriptor).
        .target(name: "VigilHID", dependencies: ["CVigilShim", "VigilSystem"], swiftSettings: strict),

        // D-Bus: libdbus-1 (CDBus) driven by the EventLoop, with typed values,
        // calls, signals, exported objects and fd passing (VigilDBus).
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .target(name: "VigilDBus", dependencies: ["CDBus", "VigilSystem"], swiftSettings: strict),

        // The Bluetooth LE domain: one mirror of BlueZ's object tree, and the
        // central role shared by every app (scans, links, subscriptions).
        .target(name: "VigilBluetooth", dependencies: ["VigilDBus", "VigilProtocol", "VigilSystem"], swiftSettings: strict),

        // MQTT (docs/fleet.md): Eclipse Paho's C client (CPaho: libpaho-mqtt-dev's
        // headers; the library is opened with dlopen when [mqtt] is configured,
        // so that a daemon without it maps no Paho or OpenSSL) behind a typed
        // connection, topic checks and the durable outbox (VigilMQTT).
        .target(name: "CPaho"),
        .target(name: "VigilMQTT", dependencies: ["CPaho", "VigilSystem"], swiftSettings: strict),
        .testTarget(name: "VigilMQTTTests", dependencies: ["VigilMQTT"], swiftSettings: strict),

        // L2CAP connection-oriented channels: libbluetooth's socket headers only
        // (CBluetooth: constants and structs, nothing linked) under a typed
        // wrapper of AF_BLUETOOTH/BTPROTO_L2CAP sockets (VigilL2CAP).
        .systemLibrary(name: "CBluetooth", providers: [.apt(["libbluetooth-dev"])]),
        .target(
            name: "VigilL2CAP",
            dependencies: ["CBluetooth", "VigilSystem", .product(name: "SystemPackage", package: "swift-system")],
            swiftSettings: strict),

        // Fuzz targets (scripts/fuzz; docs/reliability.md, "Fuzzing"): libFuzzer when
        // built with -sanitize=fuzzer -DFUZZING, a replay of saved inputs otherwise.
        .target(name: "CLibFuzzer", path: "Sources/Fuzz/CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"], path: "Sources/Fuzz/FuzzSupport", swiftSettings: strict),
        .executableTarget(
            name: "FuzzFrames", dependencies: ["FuzzSupport", "VigilProtocol"], path: "Sources/Fuzz/FuzzFrames", swiftSettings: strict),
        .executableTarget(
            name: "FuzzGATT", dependencies: ["FuzzSupport", "VigilProtocol"], path: "Sources/Fuzz/FuzzGATT", swiftSettings: strict),
        .executableTarget(
            name: "FuzzTOML", dependencies: ["FuzzSupport", "VigilConfig", "VigilLifecycle", "VigilProtocol", "VigilTOML"], path: "Sources/Fuzz/FuzzTOML",
            swiftSettings: strict),

        .testTarget(name: "VigilTimelineTests", dependencies: ["VigilTimeline"], exclude: ["Golden"], swiftSettings: strict),
        .testTarget(name: "VigilSystemTests", dependencies: ["VigilSystem"], swiftSettings: strict),
        .testTarget(name: "VigilProtocolTests", dependencies: ["VigilProtocol"], swiftSettings: strict),
        .testTarget(name: "VigilTOMLTests", dependencies: ["VigilTOML"], swiftSettings: strict),
        .testTarget(name: "VigilLifecycleTests", dependencies: ["VigilLifecycle", "VigilConfig"], swiftSettings: strict),
        .testTarget(name: "VigilStreamsTests", dependencies: ["VigilStreams", "VigilProtocol", "VigilSystem"], swiftSettings: strict),
        .testTarget(name: "VigilAccessoriesTests", dependencies: ["VigilAccessories", "VigilConfig", "VigilStreams", "VigilSystem"], swiftSettings: strict),
        // The daemon's components in-process, against a fake DaemonServices
        // (the stream layer with socketpair endpoints); the binary is tested black-box in Tests/python.
        .testTarget(
            name: "VigilDaemonTests",
            dependencies: ["VigilDaemon", "VigilConfig", "VigilStreams", "VigilLifecycle", "VigilProtocol", "VigilSystem",
                           "VigilAccessories", "VigilSerial", "VigilHID", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        .testTarget(name: "VigilSerialTests", dependencies: ["VigilSerial"], swiftSettings: strict),
        .testTarget(
            name: "VigilUdevTests",
            dependencies: ["VigilUdev", "VigilSerial", "VigilSystem"],
            exclude: ["umockdev-testbed.py"],
            swiftSettings: strict
        ),
        .testTarget(name: "VigilBluetoothTests", dependencies: ["VigilBluetooth", "VigilDBus", "VigilProtocol", "VigilSystem"], swiftSettings: strict),
        .testTarget(name: "VigilL2CAPTests", dependencies: ["VigilL2CAP", "VigilSystem"], swiftSettings: strict),
        .testTarget(name: "VigilDBusTests", dependencies: ["VigilDBus", "VigilSystem"], swiftSettings: strict),
        .testTarget(name: "HeartRateBridgeTests", dependencies: ["HeartRateBridge"], swiftSettings: strict),
        .testTarget(name: "SensorLoggerTests", dependencies: ["SensorLogger"], swiftSettings: strict),
        .testTarget(
            name: "VigilFuzzTests", dependencies: ["FuzzSupport", "FuzzFrames", "FuzzGATT", "FuzzTOML"], path: "Tests/Fuzz",
            exclude: ["Corpus", "Dictionaries", "make-seeds.py"], swiftSettings: strict),
        .testTarget(
            name: "VigilIntegrationTests",
            dependencies: ["VigilKit", "VigilProtocol", "VigilSystem"],
            swiftSettings: strict
        ),
    ]
)
