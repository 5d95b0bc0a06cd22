import Glibc
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// The metrics endpoint: Prometheus's text format over a minimal HTTP/1.1
/// (GET /metrics, one request per connection), on a Unix socket
/// (`metrics-socket`) and/or 127.0.0.1:`metrics-port`, served from the event
/// loop. Opt-in; without it no metric is counted. docs/observability.md.
final class MetricsEndpoint {
    let metrics = DaemonMetrics()
    var unix: UnixListener?
    var tcp: LoopbackListener?
    var watches: [WatchID] = []
    /// Scrapes in progress: the request read so far, and a timer that ends a
    /// client that does not finish it.
    var clients: [Int32: Client] = [:]

    final class Client {
        let stream: UnixStream
        var request: [UInt8] = []
        var watch: WatchID?
        var timer: TimerID?
        init(stream: UnixStream) { self.stream = stream }
    }

    /// At most this many scrapes at once; a request header at most this long.
    static let maxClients = 8
    static let maxRequest = 8192
}

/// The metrics endpoint as a component: first in the start order, so it
/// counts from the start; the page asks every component for its series.
final class MetricsComponent: DaemonComponent {
    let name = "metrics"
    /// nil unless `metrics-socket` or `metrics-port` is configured (and opened).
    private(set) var endpoint: MetricsEndpoint?

    /// Opens the configured endpoints; a failure is logged and the daemon runs without them.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        let config = services.config
        let logger = services.logger
        let loop = services.loop
        guard config.metricsSocket != nil || config.metricsPort != nil else { return }
        let endpoint = MetricsEndpoint()
        do {
            if let path = config.metricsSocket {
                // Who may scrape: the daemon's user (root for the system daemon); see docs/observability.md.
                let listener = try UnixListener.bind(path: path, permissions: 0o600)
                endpoint.unix = listener
                endpoint.watches.append(try loop.watch(listener.fd, for: .readable, services.watchCallback(MetricsComponent.self) {
                    metrics, _, services in metrics.acceptScrapes(services: services)
                }))
            }
            if let port = config.metricsPort {
                let listener = try LoopbackListener.bind(port: UInt16(port))
                endpoint.tcp = listener
                endpoint.watches.append(try loop.watch(listener.fd, for: .readable, services.watchCallback(MetricsComponent.self) {
                    metrics, _, services in metrics.acceptScrapes(services: services)
                }))
            }
        } catch {
            logger.error("metrics endpoint not started: \(error)")
            for watch in endpoint.watches { loop.removeWatch(watch) }
            endpoint.unix?.close()
            endpoint.tcp?.close()
            return
        }
        self.endpoint = endpoint
        logger.notice("metrics at \([config.metricsSocket, config.metricsPort.map { "127.0.0.1:\($0)" }].compactMap(\.self).joined(separator: " and "))")
    }

    /// The stop's first step: no more scrapes.
    func stopIntake<S: DaemonServices>(services: isolated S) {
        guard let endpoint else { return }
        for watch in endpoint.watches { services.loop.removeWatch(watch) }
        for fd in Array(endpoint.clients.keys) { endScrape(fd, services: services) }
        endpoint.unix?.close()
        endpoint.tcp?.close()
        self.endpoint = nil
    }

    private func acceptScrapes<S: DaemonServices>(services: isolated S) {
        guard let endpoint else { return }
        let loop = services.loop
        for listener in [endpoint.unix.map { l in { try l.accept() } }, endpoint.tcp.map { l in { try l.accept() } }].compactMap(\.self) {
            while let stream = try? listener() {
                if endpoint.clients.count >= MetricsEndpoint.maxClients {
                    stream.close()  // a scraper that floods gets refused, the daemon is not held up
                    continue
                }
                let client = MetricsEndpoint.Client(stream: stream)
                let fd = stream.fd
                endpoint.clients[fd] = client
                client.watch = try? loop.watch(fd, for: .readable, services.watchCallback(MetricsComponent.self) { metrics, _, services in
                    metrics.readScrape(fd, services: services)
                })
                client.timer = loop.schedule(after: .seconds(5), services.callback(MetricsComponent.self) { metrics, services in
                    metrics.endScrape(fd, services: services)
                })
            }
        }
    }

    private func readScrape<S: DaemonServices>(_ fd: Int32, services: isolated S) {
        guard let client = endpoint?.clients[fd] else { return }
        let read: [UInt8]?
        do {
            read = try client.stream.read(maxBytes: 4096)
        } catch {
            return endScrape(fd, services: services)
        }
        guard let bytes = read else { return }  // nothing yet
        guard !bytes.isEmpty else { return endScrape(fd, services: services) }  // closed before a whole request
        client.request += bytes
        guard let end = Self.headerEnd(client.request) else {
            if client.request.count > MetricsEndpoint.maxRequest { respond(client, status: "431 Request Header Fields Too Large", body: []) }
            return
        }
        let line = String(decoding: client.request[..<(client.request.firstIndex(of: UInt8(ascii: "\r")) ?? end)], as: UTF8.self)
        let words = line.split(separator: " ")
        if words.count != 3 || !words[2].hasPrefix("HTTP/1.") {
            respond(client, status: "400 Bad Request", body: Array("not an HTTP/1.x request line\n".utf8))
        } else if words[0] != "GET" {
            respond(client, status: "405 Method Not Allowed", body: Array("GET /metrics\n".utf8))
        } else if words[1] != "/metrics" && !words[1].hasPrefix("/metrics?") {
            respond(client, status: "404 Not Found", body: Array("GET /metrics\n".utf8))
        } else {
            respond(client, status: "200 OK", body: page(services: services), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        endScrape(fd, services: services)
    }

    private static func headerEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4) where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }

    private func respond(_ client: MetricsEndpoint.Client, status: String, body: [UInt8], contentType: String = "text/plain; charset=utf-8") {
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        // Blocking for the response: a page is tens of kilobytes, and a
        // scraper that stops reading is cut off by the socket's send timeout.
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        _ = setsockopt(client.stream.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        try? client.stream.setNonBlocking(false)
        try? client.stream.writeAll(Array(head.utf8) + body)
    }

    private func endScrape<S: DaemonServices>(_ fd: Int32, services: isolated S) {
        guard let client = endpoint?.clients.removeValue(forKey: fd) else { return }
        if let watch = client.watch { services.loop.removeWatch(watch) }
        if let timer = client.timer { services.loop.cancelTimer(timer) }
        client.stream.close()
    }

    /// The page: gauges set from the daemon's state now, then every series.
    func page<S: DaemonServices>(services: isolated S) -> [UInt8] {
        guard let metrics = endpoint?.metrics else { return [] }
        let previous = metrics.beginGauges()
        var byState: [AppState: Int] = [:]
        for (id, app) in services.engine.apps {
            byState[app.state, default: 0] += 1
            metrics.gauge("vigil_queued_events", [("app", id)], Double(app.queue.queuedCount))
            metrics.gauge("vigil_unacknowledged_events", [("app", id)], Double(app.queue.unacknowledgedCount))
        }
        for state in [AppState.notRunning, .inactive, .active, .background, .suspended] {
            metrics.gauge("vigil_apps", [("state", state.rawValue)], Double(byState[state] ?? 0))
        }
        metrics.gauge("vigil_control_connections", [], Double(services.connectionCount))
        for component in services.components((any DaemonComponent).self) {
            component.addMetrics(to: metrics, services: services)
        }
        metrics.endGauges(previous: previous)
        return metrics.page()
    }
}
