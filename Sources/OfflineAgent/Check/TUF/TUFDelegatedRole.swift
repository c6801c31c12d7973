import Crypto
import FoundationEssentials

/// A role that targets metadata delegates to (spec 4.5, `delegations.roles[]`): its
/// name, keys and threshold, whether it is terminating, and the target paths it is
/// trusted for, as glob patterns (`paths`) or SHA-256 prefixes of the path
/// (`path_hash_prefixes`), exactly one of the two.
package struct TUFDelegatedRole: Sendable, Equatable {
    package let name: String
    package let role: TUFRole
    /// A terminating role ends the search for a target it matches: roles after it are
    /// not consulted, whatever it lists.
    package let terminating: Bool
    package let paths: [String]?
    package let pathHashPrefixes: [String]?

    package init(name: String, role: TUFRole, terminating: Bool, paths: [String]) {
        self.name = name
        self.role = role
        self.terminating = terminating
        self.paths = paths
        pathHashPrefixes = nil
    }

    package init(_ fields: TUFFields) throws {
        name = try fields.string("name")
        guard !TUFMetadata.topLevelRoles.contains(name), !name.isEmpty else {
            throw TUFKey.invalid("\(fields.context).name '\(StrictJSON.printable(name))' is not a delegated role name")
        }
        role = try TUFRole(fields)
        terminating = try fields.bool("terminating")
        paths = fields.members["paths"] == nil ? nil : try fields.strings("paths")
        pathHashPrefixes = fields.members["path_hash_prefixes"] == nil ? nil : try fields.strings("path_hash_prefixes")
        guard (paths == nil) != (pathHashPrefixes == nil) else {
            throw TUFKey.invalid("\(fields.context) must have exactly one of paths and path_hash_prefixes")
        }
    }

    package var json: StrictJSON {
        guard case .object(var fields) = role.json else { return role.json }
        fields["name"] = .string(name)
        fields["terminating"] = .bool(terminating)
        if let paths { fields["paths"] = .array(paths.map(StrictJSON.string)) }
        if let pathHashPrefixes { fields["path_hash_prefixes"] = .array(pathHashPrefixes.map(StrictJSON.string)) }
        return .object(fields)
    }

    /// Whether this role is trusted for `target`, as python-tuf's `is_delegated_path`
    /// decides: a pattern matches when it has as many `/`-separated parts as the path and
    /// each part matches as `fnmatch` does (`*` never crosses a `/`); a hash prefix
    /// when the hex SHA-256 of the path's UTF-8 starts with it.
    package func matches(_ target: String) -> Bool {
        if let pathHashPrefixes {
            let hash = SHA256.hash(data: Data(target.utf8)).hex
            return pathHashPrefixes.contains { hash.hasPrefix($0) }
        }
        // Split on the scalar `/`, as Python's `str.split("/")`: never on Characters.
        let parts = target.pathSegments
        return (paths ?? []).contains { pattern in
            let patternParts = pattern.pathSegments
            return patternParts.count == parts.count
                && zip(parts, patternParts).allSatisfy { Self.fnmatch(Array($0.unicodeScalars), Array($1.unicodeScalars)) }
        }
    }

    /// Python's `fnmatch` on one path part: `*` any run, `?` one character, `[seq]` and
    /// `[!seq]` a class (ranges allowed, a `]` first is literal, an unclosed `[` is a
    /// literal). Iterative with one backtrack point: linear in the pattern times the name,
    /// whatever a hostile pattern holds.
    static func fnmatch(_ name: [Unicode.Scalar], _ pattern: [Unicode.Scalar]) -> Bool {
        var n = 0, p = 0
        var star: (pattern: Int, name: Int)?
        while n < name.count {
            if p < pattern.count {
                switch pattern[p] {
                case "*":
                    star = (p + 1, n)
                    p += 1
                    continue
                case "?":
                    p += 1
                    n += 1
                    continue
                case "[":
                    if let (matched, next) = matchClass(name[n], pattern, from: p) {
                        if matched {
                            p = next
                            n += 1
                            continue
                        }
                    } else if name[n] == "[" {
                        p += 1
                        n += 1
                        continue
                    }
                default:
                    if pattern[p] == name[n] {
                        p += 1
                        n += 1
                        continue
                    }
                }
            }
            guard let back = star else { return false }
            star = (back.pattern, back.name + 1)
            p = back.pattern
            n = back.name + 1
        }
        while p < pattern.count, pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }

    /// The class starting at `pattern[start]` (`[`): whether `c` is in it, and the index
    /// after its `]`; nil when no `]` closes it (then `[` is a literal, as in Python).
    private static func matchClass(_ c: Unicode.Scalar, _ pattern: [Unicode.Scalar], from start: Int) -> (Bool, Int)? {
        var i = start + 1
        var negate = false
        if i < pattern.count, pattern[i] == "!" {
            negate = true
            i += 1
        }
        var found = false
        var first = true
        while i < pattern.count {
            let low = pattern[i]
            if low == "]", !first { return (found != negate, i + 1) }
            first = false
            if i + 2 < pattern.count, pattern[i + 1] == "-", pattern[i + 2] != "]" {
                if low.value <= c.value, c.value <= pattern[i + 2].value { found = true }
                i += 3
            } else {
                if low == c { found = true }
                i += 1
            }
        }
        return nil
    }
}
