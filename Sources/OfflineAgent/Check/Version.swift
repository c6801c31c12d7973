
/// A package version: dotted decimal numbers (`1`, `1.4`, `2.10.3.1`), at most 8
/// components of 0…999 999 999 each, compared numerically with missing components
/// counting as 0 (`1.4` == `1.4.0` < `1.10`).
public struct Version: Sendable, Hashable, Comparable, Codable, LosslessStringConvertible {
    /// The components as written (trailing zeros kept, so `description` round-trips).
    public let components: [Int]

    /// Parses dotted decimal text; nil for anything else (signs, spaces, empty parts, over 8 components or 9 digits).
    public init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...8).contains(parts.count) else { return nil }
        var components: [Int] = []
        for part in parts {
            // Digits only: no signs, spaces, letters or empty parts.
            guard (1...9).contains(part.utf8.count), part.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
                  let value = Int(part) else { return nil }
            components.append(value)
        }
        self.components = components
    }

    /// The format, as error messages state it.
    public static let format =
        "a version is dotted decimal numbers, 1 to 8 components of at most 9 digits (1.4, 2.10.3); no letters or suffixes such as -beta.1"

    /// The version as written, trailing zeros kept.
    public var description: String { components.map(String.init).joined(separator: ".") }

    /// Components without trailing zeros: equal versions have equal normal forms.
    private var normalized: ArraySlice<Int> {
        var end = components.count
        while end > 0, components[end - 1] == 0 { end -= 1 }
        return components[0..<end]
    }

    /// Equal when the numbers are, missing components counting as 0 (`1.4` == `1.4.0`).
    public static func == (lhs: Version, rhs: Version) -> Bool { lhs.normalized == rhs.normalized }

    /// Hashes the normal form, so equal versions hash alike.
    public func hash(into hasher: inout Hasher) { hasher.combine(Array(normalized)) }

    /// Compares component by component, numerically.
    public static func < (lhs: Version, rhs: Version) -> Bool {
        for i in 0..<max(lhs.components.count, rhs.components.count) {
            let l = i < lhs.components.count ? lhs.components[i] : 0
            let r = i < rhs.components.count ? rhs.components[i] : 0
            if l != r { return l < r }
        }
        return false
    }

    /// Decodes a version string; anything `init?(_:)` rejects is a decoding error.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let version = Version(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "invalid version '\(text)': \(Version.format)"))
        }
        self = version
    }

    /// Encodes the version as its string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
