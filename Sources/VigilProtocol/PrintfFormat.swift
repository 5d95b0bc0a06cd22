import Glibc

/// C's printf formatting: what Foundation's `String(format:)` used for
/// numbers and clock times, so vigilctl's text and the timeline's SVG stay
/// the same byte for byte without Foundation (issue 32). One copy for both.
public func cFormat(_ format: String, _ arguments: any CVarArg...) -> String {
    var size = 128
    while true {
        var buffer = [CChar](repeating: 0, count: size)
        let needed = withVaList(arguments) { vsnprintf(&buffer, size, format, $0) }
        guard needed >= 0 else { return "" }
        if Int(needed) < size { return String(decoding: buffer[..<Int(needed)].map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        size = Int(needed) + 1
    }
}
