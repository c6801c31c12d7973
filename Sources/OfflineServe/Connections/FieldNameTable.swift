/// Field names matched in any case against a fixed table of lowercased names, on their
/// bytes, with no string made: the fields a raw head (`LocalRawRequest`) or a forwarded
/// message (`ForwardedHeaders`) singles out, looked up for every field of every request.
struct FieldNameTable<Kind: Sendable>: Sendable {
    private let entries: [(name: StaticString, kind: Kind)]

    /// A table of `entries`, their names lowercased.
    init(_ entries: [(name: StaticString, kind: Kind)]) {
        self.entries = entries
    }

    /// What the field named by `name` is; nil for a name the table does not have.
    func kind(of name: UnsafeRawBufferPointer) -> Kind? {
        for entry in entries where name.equalsIgnoringASCIICase(entry.name) { return entry.kind }
        return nil
    }
}

extension UnsafeRawBufferPointer {
    /// Whether these bytes are `lowercase` in any ASCII case.
    func equalsIgnoringASCIICase(_ lowercase: StaticString) -> Bool {
        guard count == lowercase.utf8CodeUnitCount else { return false }
        let expected = lowercase.utf8Start
        for index in 0..<count where self[index] != expected[index] {
            let byte = self[index]
            guard byte >= UInt8(ascii: "A"), byte <= UInt8(ascii: "Z"), byte | 0x20 == expected[index] else { return false }
        }
        return true
    }
}
