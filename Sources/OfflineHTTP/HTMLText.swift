/// Text written into HTML by the servers (`serve`'s `/open` page, `offline-server`'s
/// dashboard), from values a client or a publisher chose.
package enum HTMLText {
    /// `text` for HTML text and quoted attributes, escaped per Unicode scalar: a walk by
    /// `Character` sees `"` followed by a combining scalar (U+200D, U+0301) as one
    /// cluster that is not `"`, and wrote the quote raw, out of the attribute.
    package static func escape(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out.append(contentsOf: "&amp;".unicodeScalars)
            case "<": out.append(contentsOf: "&lt;".unicodeScalars)
            case ">": out.append(contentsOf: "&gt;".unicodeScalars)
            case "\"": out.append(contentsOf: "&quot;".unicodeScalars)
            case "'": out.append(contentsOf: "&#39;".unicodeScalars)
            default: out.append(scalar)
            }
        }
        return String(out)
    }
}
