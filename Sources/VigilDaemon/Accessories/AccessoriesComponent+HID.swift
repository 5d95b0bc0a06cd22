import Glibc
import VigilHID
import VigilProtocol
import VigilStreams
import VigilSystem

/// HID accessories (hidraw nodes): a session is a record session of the
/// stream layer (one input report per record, `HIDEndpoint`); its writes are
/// output reports; feature reports and the report descriptor are requests.
/// No port keeper: a hidraw node holds no input for a reader that is not
/// there (each open file has its own queue), so a kept duplicate would save
/// nothing across a daemon's death.
extension AccessoriesComponent {
    func openHID<S: DaemonServices>(_ session: Int, node: String, streams: StreamSessions, services: isolated S) throws {
        let device = try HIDDevice.open(path: node)
        let endpoint = HIDEndpoint(device: device) { [unowned self] in self.hidDevices[session] = nil }
        hidDevices[session] = endpoint
        do {
            try streams.attach(endpoint, to: session, services: services)
        } catch {
            hidDevices[session] = nil
            device.close()
            throw error
        }
    }

    /// Whether the session has its device open (a serial port or a hidraw node).
    func isOpen(_ session: Int) -> Bool {
        ports[session] != nil || hidDevices[session] != nil
    }

    func handleHIDRequest<S: DaemonServices>(
        _ message: IncomingMessage, holder: SessionHolder, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        do throws(ProtocolError) {
            switch message.type {
            case GetHIDReportDescriptor.type:
                let request: GetHIDReportDescriptor = try message.decode()
                let device = try hidDevice(request.session, holder: holder, services: services)
                let descriptor = try hidCall { () throws(SystemError) in try device.reportDescriptor() }
                services.send(HIDReportReply(length: descriptor.count), id: message.id, body: descriptor, to: connection)
            case GetHIDFeatureReport.type:
                let request: GetHIDFeatureReport = try message.decode()
                guard (0...255).contains(request.reportID) else { throw ProtocolError(.invalidArgument, "reportID must be 0 to 255") }
                guard GetHIDFeatureReport.lengths.contains(request.length) else {
                    throw ProtocolError(.invalidArgument, "length must be \(GetHIDFeatureReport.lengths.lowerBound) to \(GetHIDFeatureReport.lengths.upperBound) (the report id byte included)")
                }
                let device = try hidDevice(request.session, holder: holder, services: services)
                let report = try hidCall { () throws(SystemError) in try device.featureReport(id: UInt8(request.reportID), length: request.length) }
                services.send(HIDReportReply(length: report.count), id: message.id, body: report, to: connection)
            case SetHIDFeatureReport.type:
                let request: SetHIDFeatureReport = try message.decode()
                guard GetHIDFeatureReport.lengths.contains(message.body.count) else {
                    throw ProtocolError(.invalidArgument, "a feature report is 1 to \(GetHIDFeatureReport.lengths.upperBound) bytes, its report id first")
                }
                let device = try hidDevice(request.session, holder: holder, services: services)
                let taken = try hidCall { () throws(SystemError) in try device.setFeatureReport(message.body) }
                services.logger.info("session \(request.session): feature report \(message.body[0]) sent (\(message.body.count) bytes)")
                services.send(HIDReportReply(length: taken), id: message.id, to: connection)
            default:
                throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)'")
            }
        } catch {
            throw ProtocolError(error.code, error.message, id: message.id)
        }
    }

    /// The open hidraw node of a session this holder holds.
    private func hidDevice<S: DaemonServices>(_ session: Int, holder: SessionHolder, services: isolated S) throws(ProtocolError) -> HIDDevice {
        guard table.sessions[session] != nil, services.component(StreamSessions.self)?.holder(of: session) == holder else {
            throw ProtocolError(.invalidArgument, "no accessory session \(session) is held by this client")
        }
        if let endpoint = hidDevices[session] { return endpoint.device }
        if ports[session] != nil { throw ProtocolError(.invalidArgument, "session \(session) is on a serial accessory, not a HID one") }
        throw ProtocolError(.invalidState, notOpenReason(session))
    }

    /// A refused ioctl: the device's (or its driver's) answer, as `deviceError`.
    private func hidCall<T>(_ call: () throws(SystemError) -> T) throws(ProtocolError) -> T {
        do {
            return try call()
        } catch {
            throw ProtocolError(.deviceError, "\(error)")
        }
    }
}
