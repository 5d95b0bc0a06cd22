import VigilLifecycle
/// The directory part of `path`, as `NSString.deletingLastPathComponent`
/// gives it ("/a/b/c" → "/a/b", "/a" → "/", "a" → ""), without Foundation.
public func parentDirectory(of path: String) -> String {
    var trimmed = Substring(path)
    while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
    guard let slash = trimmed.lastIndex(of: "/") else { return "" }
    var parent = trimmed[..<slash]
    while parent.count > 1 && parent.hasSuffix("/") { parent = parent.dropLast() }
    return parent.isEmpty ? "/" : String(parent)
}

/// Four lower-case hex digits, as `String(format: "%04x", value)`.
public func hex4<T: BinaryInteger>(_ value: T) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}
