/// Text a device supplied (USB descriptor strings, udev properties, names):
/// kept as it came, bounded in length, and escaped wherever it is logged, so
/// that a serial number holding a BEL, a newline or a right-to-left override
/// cannot ring a terminal, forge a log line or reorder what a person reads.
public enum DeviceText {
    /// The most of one device string kept, in UTF-8 bytes (USB string
    /// descriptors hold at most 126 UTF-16 units; udev properties are longer).
    public static let maxBytes = 255

    /// `text` cut to at most `maxBytes` UTF-8 bytes, at a character boundary.
    public static func bounded(_ text: String, maxBytes: Int = maxBytes) -> String {
        guard text.utf8.count > maxBytes else { return text }
        var result = ""
        var bytes = 0
        for character in text {
            bytes += character.utf8.count
            guard bytes <= maxBytes else { break }
            result.append(character)
        }
        return result
    }

    /// `text` for a log line: control characters (C0, DEL, C1), format
    /// characters (bidi overrides and isolates, zero-width ones), line or
    /// paragraph separators, private-use and unassigned code points become
    /// `\u{HEX}`, and a backslash `\\`, so what is logged is unambiguous and
    /// inert. Everything else is kept.
    public static func escaped(_ text: String) -> String {
        escaped(text, quote: false)
    }

    /// `escaped`, in double quotes (a quote inside becomes `\"`): for values
    /// that may be empty or hold spaces.
    public static func quoted(_ text: String) -> String {
        "\"" + escaped(text, quote: true) + "\""
    }

    private static func escaped(_ text: String, quote: Bool) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .unassigned, .privateUse:
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            default:
                if scalar == "\\" || (quote && scalar == "\"") { result += "\\" }
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
