import Glibc

/// A line for the app's log (vigild sends the app's stdout there). One
/// unbuffered `write(2)`: out of the process before it can be frozen or killed.
func say(_ line: String) {
    let bytes = Array("vigil-sensor-logger[\(getpid())]: \(line)\n".utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
}
