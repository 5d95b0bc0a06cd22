// USB HID accessories (hidraw): what a session of one adds to the byte
// session's requests (docs/protocol.md, "HID accessories"). Input reports
// arrive as the session's data, one record each (`SessionRecords`); an
// output report is a `write` of the session (its bytes, report id first,
// are one report).

/// Request: the accessory's HID report descriptor. Reply: `HIDReportReply`
/// with the descriptor as the frame's body.
/// Errors: `invalidArgument` (no such session held by this client, or not a
/// HID session), `invalidState` (waiting for its accessory).
public struct GetHIDReportDescriptor: Message, Equatable {
    public static let type = "hidReportDescriptor"
    public var session: Int
    public init(session: Int) { self.session = session }
}

/// Request: read feature report `reportID` (0 when the device numbers no
/// reports), with room for `length` bytes, the report id byte included (1 to
/// 16384). Reply: `HIDReportReply`, the report (report id first) as the body.
/// Errors as `GetHIDReportDescriptor`, and `deviceError` when the device refused.
public struct GetHIDFeatureReport: Message, Equatable {
    public static let type = "hidGetFeature"
    public static let lengths = 1...16_384
    public var session: Int
    public var reportID: Int
    public var length: Int
    public init(session: Int, reportID: Int, length: Int) {
        self.session = session
        self.reportID = reportID
        self.length = length
    }
}

/// Request: send a feature report: the frame's body, report id first (1 to
/// 16384 bytes). Reply: `HIDReportReply` with `length` the count the driver
/// took and no body. Errors as `GetHIDFeatureReport`.
public struct SetHIDFeatureReport: Message, Equatable {
    public static let type = "hidSetFeature"
    public var session: Int
    public init(session: Int) { self.session = session }
}

/// Reply to the HID requests: `length` bytes, in the frame's body when the
/// request reads.
public struct HIDReportReply: Message, Equatable {
    public static let type = "reply"
    public var length: Int
    public init(length: Int) { self.length = length }
}
