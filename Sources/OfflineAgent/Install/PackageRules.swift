import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The rules every package obeys, checked one entry at a time: safe names within the
/// length and depth limits, no two names a file system could merge, only regular
/// files and directories, and caps on the entry count and total bytes.
///
/// The device's extractor checks archives with it and `publish` checks source trees
/// with it, so the publisher can never write a package that devices refuse. Each
/// check costs time linear in the bytes of the name it is given.
package struct PackageRules: Sendable {
    /// Why an entry breaks a rule: one line naming the entry when there is one.
    package struct Violation: Error, Sendable {
        package var reason: String
    }

    /// What an entry is, as far as the rules care.
    package enum EntryType: Sendable {
        case file
        case directory
        case symbolicLink
        /// A device, fifo or socket.
        case special

        /// The type of a Unix `st_mode`; nil when no type bits are set.
        package init?(mode: mode_t) {
            switch mode & S_IFMT {
            case 0: return nil
            case S_IFREG: self = .file
            case S_IFDIR: self = .directory
            case S_IFLNK: self = .symbolicLink
            default: self = .special
            }
        }
    }

    package let limits: ExtractionLimits
    /// The entries admitted so far.
    private(set) var tree = EntryTree()
    private(set) var entryCount = 0
    private(set) var totalBytes: Int64 = 0

    package init(limits: ExtractionLimits) {
        self.limits = limits
    }

    /// Refuses more entries than `limits.maxEntries` (`count` may be known up front).
    package func check(entryCount count: Int) throws(Violation) {
        guard count <= limits.maxEntries else {
            throw Violation(reason: "\(count) entries exceed the limit of \(limits.maxEntries)")
        }
    }

    /// Checks one entry's name and adds it to the tree; a trailing `/` makes a directory.
    ///
    /// - Returns: the entry's node in `tree` and whether it is a directory.
    package mutating func admit(_ name: String) throws(Violation) -> (node: Int, isDirectory: Bool) {
        try check(entryCount: entryCount + 1)
        let (components, isDirectory) = try Self.split(name, limits: limits)
        let node: Int
        do {
            node = try tree.add(components, isDirectory: isDirectory)
        } catch {
            switch error {
            case .duplicate:
                throw Violation(reason: "duplicate entry '\(Self.quoted(name))'")
            case .caseOrNormalisation(let existing):
                throw Violation(reason: "duplicate entry '\(Self.quoted(name))': differs from '\(Self.quoted(existing))' only in case or Unicode normalisation")
            case .fileAndDirectory(let path):
                throw Violation(reason: "'\(Self.quoted(path))' is both a file and a directory")
            }
        }
        entryCount += 1
        return (node, isDirectory)
    }

    /// Refuses links and special files, and a type that contradicts the name's form.
    package static func check(type: EntryType, of name: String, isDirectory: Bool) throws(Violation) {
        switch type {
        case .file:
            guard !isDirectory else { throw Violation(reason: "entry '\(quoted(name))' is a file named like a directory") }
        case .directory:
            guard isDirectory else { throw Violation(reason: "entry '\(quoted(name))' is a directory named like a file") }
        case .symbolicLink:
            throw Violation(reason: "entry '\(quoted(name))' is a symbolic link")
        case .special:
            throw Violation(reason: "entry '\(quoted(name))' is a device, fifo or socket")
        }
    }

    /// Adds a file's size to the total, refusing a total above `limits.maxTotalBytes`.
    package mutating func add(bytes size: Int64) throws(Violation) {
        let (sum, overflow) = totalBytes.addingReportingOverflow(size)
        guard size >= 0, !overflow, sum <= limits.maxTotalBytes else {
            throw Violation(reason: "entries expand past the limit of \(limits.maxTotalBytes) bytes")
        }
        totalBytes = sum
    }

    /// Splits an entry name into safe components, or throws why it is unsafe.
    ///
    /// The length limits are checked first, on bytes, so an absurd name costs no more
    /// than reading it once.
    package static func split(_ name: String, limits: ExtractionLimits) throws(Violation) -> (components: [String], isDirectory: Bool) {
        guard !name.isEmpty else { throw Violation(reason: "empty entry name") }
        let bytes = name.utf8.count
        guard bytes <= limits.maxNameBytes else {
            throw Violation(reason: "entry name '\(quoted(name))' is \(bytes) bytes long, above the limit of \(limits.maxNameBytes)")
        }
        // Bytes, not Characters: a separator inside a grapheme cluster is still one to the kernel.
        guard !name.containsByte(0) else { throw Violation(reason: "entry name contains NUL") }
        guard !name.containsByte(UInt8(ascii: "\\")) else { throw Violation(reason: "entry name '\(quoted(name))' contains a backslash") }
        guard !name.startsWithSlash else { throw Violation(reason: "absolute entry name '\(quoted(name))'") }
        let isDirectory = name.endsWithSlash
        var components = name.pathSegments.map(String.init)
        if isDirectory { components.removeLast() }
        guard components.count <= limits.maxDepth else {
            throw Violation(reason: "entry name '\(quoted(name))' is \(components.count) levels deep, above the limit of \(limits.maxDepth)")
        }
        for component in components {
            if component.isEmpty { throw Violation(reason: "entry name '\(quoted(name))' has an empty component") }
            if component.isDotSegment { throw Violation(reason: "entry name '\(quoted(name))' contains '\(component)'") }
            guard component.utf8.count <= limits.maxComponentBytes else {
                throw Violation(reason: "entry name '\(quoted(name))' has a component of \(component.utf8.count) bytes, above the limit of \(limits.maxComponentBytes)")
            }
        }
        return (components, isDirectory)
    }

    /// A name short enough for a one-line reason: long ones keep their start and end.
    package static func quoted(_ name: String) -> String {
        guard name.utf8.count > 160 else { return name }
        return "\(name.prefix(80))…\(name.suffix(40))"
    }
}
