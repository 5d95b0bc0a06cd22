/// A plain-text table with columns padded to their widest cell; the last
/// column is left ragged so long reasons do not pad every line.
struct Table {
    var headers: [String]
    var rows: [[String]] = []

    var text: String {
        let widths = headers.indices.map { column in
            rows.reduce(headers[column].count) { max($0, $1[column].count) }
        }
        return ([headers] + rows).map { cells in
            cells.indices.map { column in
                column == cells.count - 1 ? cells[column] : cells[column].padding(to: widths[column])
            }
            .joined(separator: "  ")
        }
        .joined(separator: "\n")
    }
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}
