/// A failure inside the daemon, with a message fit for the log and for clients.
struct DaemonError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
