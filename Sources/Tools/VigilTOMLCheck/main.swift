// vigil-toml-check: parses TOML with VigilTOML and prints the result as JSON,
// tagged the way toml-test does ({"type": "integer", "value": "42"}), or the
// error ({"error": ..., "line": ..., "column": ...}, exit status 1).
//
//   vigil-toml-check FILE        one document from a file ("-" or nothing: stdin)
//   vigil-toml-check --batch     documents on stdin, each a 4-byte little-endian
//                                length and its bytes; one JSON line out for each
//
// The differential test against Python's tomllib drives it (Tests/python/test_toml_differential.py).
import Glibc
import VigilTOML

func json(_ string: String) -> String {
    var out = "\""
    for scalar in string.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        default:
            if scalar.value < 0x20 || scalar.value == 0x7F {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}

func json(_ value: TOMLValue) -> String {
    func tagged(_ type: String, _ value: String) -> String { "{\"type\":\"\(type)\",\"value\":\(json(value))}" }
    switch value {
    case .string(let string): return tagged("string", string)
    case .integer(let integer): return tagged("integer", String(integer))
    case .float(let float): return tagged("float", float.description)
    case .boolean(let bool): return tagged("bool", bool ? "true" : "false")
    case .dateTime(let dateTime):
        let type = switch (dateTime.date != nil, dateTime.time != nil, dateTime.offsetMinutes != nil) {
        case (true, true, true): "datetime"
        case (true, true, false): "datetime-local"
        case (true, false, _): "date-local"
        default: "time-local"
        }
        return tagged(type, dateTime.description)
    case .array(let array): return "[" + array.map(json).joined(separator: ",") + "]"
    case .table(let table): return json(table)
    }
}

func json(_ table: TOMLTable) -> String {
    "{" + table.keys.map { key in json(key) + ":" + (table[key].map(json) ?? "null") }.joined(separator: ",") + "}"
}

func check(_ bytes: [UInt8]) -> (String, Bool) {
    do {
        return (json(try TOMLDocument.parse(bytes)), true)
    } catch {
        return ("{\"error\":\(json(error.message)),\"line\":\(error.line),\"column\":\(error.column)}", false)
    }
}

func readAll(_ fd: Int32) -> [UInt8] {
    var data: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0, errno == EINTR { continue }
        guard count > 0 else { return data }
        data += buffer[0..<count]
    }
}

func emit(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { buffer in
        var offset = 0
        while offset < buffer.count {
            let written = write(1, buffer.baseAddress! + offset, buffer.count - offset)
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { exit(2) }
            offset += written
        }
    }
}

let arguments = CommandLine.arguments.dropFirst()
if arguments.first == "--batch" {
    let input = readAll(0)
    var offset = 0
    while offset + 4 <= input.count {
        let length = (0..<4).reduce(0) { $0 | Int(input[offset + $1]) << (8 * $1) }
        offset += 4
        guard offset + length <= input.count else { break }
        emit(check(Array(input[offset..<(offset + length)])).0)
        offset += length
    }
} else {
    let path = arguments.first ?? "-"
    let fd = path == "-" ? 0 : open(path, O_RDONLY)
    guard fd >= 0 else {
        emit("{\"error\":\(json("cannot open \(path)"))}")
        exit(2)
    }
    let (output, ok) = check(readAll(fd))
    emit(output)
    exit(ok ? 0 : 1)
}
