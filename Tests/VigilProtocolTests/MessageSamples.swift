import VigilProtocol

/// One value of every message type, with optional members both set and not.
enum MessageSamples {
    static let app = AppInfo(
        id: "org.example.logger", state: .background, pid: 4242, backgroundModes: [.externalAccessory],
        exitsOnSuspend: false, forceQuit: false, wakes: 3, launches: 1, backgroundTimeUsed: 12.5,
        backgroundTimeRemaining: 167.5, tasks: [BackgroundTaskInfo(id: 1, name: "upload")], queuedEvents: 2,
        unacknowledgedEvents: 1, droppedEvents: 0, lastDecision: "wake", lastReason: "event 7 (test)",
        launchReason: .event, logPath: "/var/log/vigil/org.example.logger.log", manifestPath: "/etc/vigil/apps/logger.toml"
    )
    static let notRunningApp = AppInfo(
        id: "org.example.idle", state: .notRunning, pid: nil, backgroundModes: [], exitsOnSuspend: true,
        forceQuit: true, wakes: 0, launches: 0, backgroundTimeUsed: 0, backgroundTimeRemaining: nil, tasks: [],
        queuedEvents: 0, unacknowledgedEvents: 0, droppedEvents: 0, lastDecision: nil, lastReason: nil,
        launchReason: nil, logPath: nil, manifestPath: "/etc/vigil/apps/idle.toml"
    )
    static let problem = ManifestProblem(file: "/etc/vigil/apps/bad.toml", field: "exec", message: "must not be empty")
    static let sensor = AccessoryInfo(
        connectionID: 7, name: "Vigil Sensor", manufacturer: "Vigil Lab", modelNumber: "VS-1", serialNumber: "SN0001",
        firmwareRevision: "1.02", hardwareRevision: "", protocolStrings: ["org.example.sensor"], deviceNode: "/dev/ttyACM0",
        vendorID: "1209", productID: "0001", sysPath: "/sys/devices/usb1/1-1/1-1:1.0/tty/ttyACM0", lineSettings: "115200 8N1"
    )
    static let session = SessionInfo(
        session: 3, connectionID: 7, protocol: "org.example.sensor", holder: "app org.example.logger",
        lineSettings: "115200 8N1", bytesIn: 4096, bytesOut: 12, bufferedBytes: 512, readingPaused: true,
        overruns: 2, parityErrors: 0, frameErrors: 1
    )

    static let all: [any Message & Equatable] = [
        // Handshake
        Hello(role: .app, app: "org.example.logger", client: "tests/1"),
        Hello(versions: [1, 2], role: .control),
        Welcome(
            version: 1, daemon: "vigild/0.1.0", role: .app, app: "org.example.logger", state: .background,
            launch: LaunchOptions(reason: .event, eventKind: "test"), deadline: 123_456_789_000, limits: .default
        ),
        Welcome(version: 1, daemon: "vigild/0.1.0", role: .control, limits: .default),
        Done(),
        ProtocolError(.invalidArgument, "beginBackgroundTask: missing field 'name'", id: 7),
        ProtocolError(.malformedFrame, "header is not JSON"),
        // App → daemon
        BeginBackgroundTask(name: "upload"),
        BackgroundTaskGranted(task: 0),
        EndBackgroundTask(task: 3),
        FinishedProcessing(),
        FinishedProcessing(ack: 42),
        ScheduleRefresh(interval: 900, earliestBegin: 30.5),
        ScheduleRefresh(interval: 3600),
        RefreshScheduled(next: 30.5, interval: 900),
        CancelRefresh(),
        CompleteRefresh(result: .noData),
        MQTTPublish(topic: "fleet/gw1/data"),
        MQTTPublish(topic: "fleet/gw1/data", qos: 1),
        MQTTPublishQueued(seq: 1_795_663_204_665_885, queued: 3, connected: false),
        QueryBackgroundTime(),
        BackgroundTimeRemaining(seconds: 42.5),
        BackgroundTimeRemaining(seconds: nil),
        Acknowledge(seq: 18_446_744_073_709_551_615),
        // Daemon → app
        LifecycleMessage(event: .didEnterBackground, state: .background),
        EventMessage(seq: 9, kind: "test", attributes: ["n": 1, "ok": true, "nested": .object(["a": .array([.null])])]),
        EventMessage(seq: 10, kind: "overflow", attributes: ["dropped": 4, "firstDroppedKind": "test"], redelivered: true),
        TaskExpiring(task: 2, name: "upload"),
        DeadlineChanged(deadline: 99),
        DeadlineChanged(deadline: nil),
        // Control
        StatusRequest(),
        DaemonStatus(
            daemon: "vigild/0.1.0", pid: 1, protocolVersion: 1, socket: "/run/vigil/vigild.sock",
            suspension: .cgroupFreezer, suspensionDetail: "cgroup v2 freezer at /sys/fs/cgroup/vigil",
            cgroupRoot: "/sys/fs/cgroup/vigil", apps: 2, manifestProblems: [problem],
            timings: ["suspend-grace": 5, "wake-budget": 10], uptime: 3.25
        ),
        {
            var status = DaemonStatus(
                daemon: "vigild/0.1.0", pid: 1, protocolVersion: 1, socket: "/run/vigil/vigild.sock", suspension: .signals,
                suspensionDetail: "chosen", cgroupRoot: nil, apps: 0, manifestProblems: [], timings: [:], uptime: 1)
            status.mqtt = MQTTHealth(
                broker: "mqtts://broker.example.net:8883", connected: false, detail: "cannot connect", outbox: 2,
                outboxBytes: 40, held: 1, received: 5, published: 7, refused: 1, unrouted: 0)
            return status
        }(),
        ListApps(),
        AppList(apps: [app, notRunningApp]),
        AppActionRequest(action: .terminate, app: "org.example.logger"),
        AppReply(app: app),
        WakeRequest(app: "org.example.logger", kind: "test", attributes: ["sent": 123]),
        WakeRequest(app: "org.example.logger"),
        EventAccepted(seq: 11, disposition: "woke"),
        LogRequest(app: "org.example.logger", limit: 20),
        LogRequest(),
        DecisionLog(decisions: [DecisionRecord(time: 1.7e9, app: "org.example.logger", action: "suspend", reason: "grace period over", state: .suspended)]),
        ReloadRequest(),
        ReloadResult(apps: ["org.example.logger"], problems: [ManifestProblem(file: "x.toml", field: nil, message: "not TOML")]),
        // Accessories
        ListAccessories(),
        AccessoryList(accessories: [sensor], sessions: [session]),
        AccessoryList(accessories: []),
        RegisterForAccessoryNotifications(enabled: false),
        OpenSession(connectionID: 7, protocol: "org.example.sensor", lineSettings: "9600 7E1 xonxoff", reopen: true),
        OpenSession(connectionID: 7, protocol: "org.example.sensor"),
        SessionOpened(session: 3, accessory: sensor),
        WriteToSession(session: 3),
        BytesWritten(written: 65536),
        CloseSession(session: 3),
        SessionData(session: 3),
        SessionClosed(session: 3, reason: "the accessory was unplugged"),
        WatchAccessories(),
        AccessoryEvent(change: "disconnected", accessory: sensor),
    ]
}
