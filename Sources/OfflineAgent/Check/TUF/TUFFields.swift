import FoundationEssentials

/// Typed reads of a TUF JSON object's fields; each failure is `metadata-invalid`
/// naming the field, so a malformed file says what is wrong with it.
package struct TUFFields: Sendable {
    package let members: [String: StrictJSON]
    /// Where these fields are, for messages (`root.roles.timestamp`).
    package let context: String

    package init(_ value: StrictJSON?, context: String) throws {
        guard case .object(let members)? = value else { throw TUFKey.invalid("\(context) must be an object") }
        self.members = members
        self.context = context
    }

    package func string(_ key: String) throws -> String {
        guard case .string(let text)? = members[key] else { throw TUFKey.invalid("\(context).\(key) must be a string") }
        return text
    }

    /// A JSON integer in `range` (python-tuf's ints are unbounded; ours are 64-bit,
    /// and larger ones are refused rather than wrapped).
    package func integer(_ key: String, in range: ClosedRange<Int64>) throws -> Int64 {
        guard case .number(let text)? = members[key], let value = Int64(text), range.contains(value) else {
            throw TUFKey.invalid("\(context).\(key) must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    package func optionalInteger(_ key: String, in range: ClosedRange<Int64>) throws -> Int64? {
        members[key] == nil ? nil : try integer(key, in: range)
    }

    package func bool(_ key: String) throws -> Bool {
        guard case .bool(let flag)? = members[key] else { throw TUFKey.invalid("\(context).\(key) must be true or false") }
        return flag
    }

    package func object(_ key: String) throws -> [String: StrictJSON] {
        guard case .object(let object)? = members[key] else { throw TUFKey.invalid("\(context).\(key) must be an object") }
        return object
    }

    package func strings(_ key: String) throws -> [String] {
        guard case .array(let elements)? = members[key] else { throw TUFKey.invalid("\(context).\(key) must be an array") }
        return try elements.map {
            guard case .string(let text) = $0 else { throw TUFKey.invalid("\(context).\(key) must hold strings") }
            return text
        }
    }

    /// `hashes`: algorithm → lower-case hex digest; at least one.
    package func hashes(_ key: String = "hashes") throws -> [String: String] {
        let object = try self.object(key)
        guard !object.isEmpty else { throw TUFKey.invalid("\(context).\(key) is empty") }
        return try object.mapValues {
            guard case .string(let text) = $0 else { throw TUFKey.invalid("\(context).\(key) must map algorithms to hex strings") }
            return text
        }
    }
}
