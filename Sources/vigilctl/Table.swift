/// A plain-text table with columns padded to their widest cell; lines carry
/// no trailing blanks, so long reasons in the last column pad nothing.
struct Table {
    var headers: [String]
    var rows: [[String]] = []

    var text: String {
        let widths = headers.indices.map { column in
            rows.reduce(headers[column].count) { max($0, $1[column].count) }
        }
        return ([headers] + rows).map { cells in
            cells.indices.map { column in
                cells[column].padding(to: widths[column])
            }
            .joined(separator: "  ")
            .trimmingTrailingSpaces()
        }
        .joined(separator: "\n")
    }
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }

    func trimmingTrailingSpaces() -> String {
        String(self[..<(lastIndex { $0 != " " }.map(index(after:)) ?? startIndex)])
    }
}
