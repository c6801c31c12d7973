import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A named cookie jar under the root (`<root>/profiles/<name>/cookies.json`), so one
/// device can hold several accounts whose cookies never meet.
public struct CookieProfile: Sendable, Equatable {
    /// The profile used when none is named.
    public static let defaultName = "default"

    /// The profile's name.
    public let name: String
    /// The jar's file.
    public let file: String

    /// - Throws: `OfflineAgentError(.usage)` for a name that is not 1–64 of
    ///   `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
    public init(root: String, name: String = CookieProfile.defaultName) throws {
        guard Self.isValid(name) else {
            throw OfflineAgentError(.usage, "invalid profile name '\(name)' (1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit)")
        }
        self.name = name
        self.file = "\(root)/profiles/\(name)/cookies.json"
    }

    /// Whether `name` is 1–64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
    public static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        func alphanumeric(_ b: UInt8) -> Bool { (b >= 97 && b <= 122) || (b >= 65 && b <= 90) || (b >= 48 && b <= 57) }
        return alphanumeric(bytes[0]) && bytes.allSatisfy { alphanumeric($0) || $0 == 46 || $0 == 95 || $0 == 45 }
    }

    /// The profiles that have a jar under `root`, sorted.
    public static func names(root: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "\(root)/profiles")) ?? []
        return names.filter { isValid($0) && FileSystem.exists("\(root)/profiles/\($0)/cookies.json") }.sorted()
    }

    /// The jar as saved, for a sync: a missing file is an empty jar, and a file that
    /// cannot be read as one is moved aside (`cookies.json.corrupt-<time>`) so the
    /// sync goes on with an empty jar.
    ///
    /// - Returns: the jar, and a warning to log when a file was set aside.
    public func open(now: Date = Date()) -> (jar: CookieJar, warning: String?) {
        do {
            return (CookieJar(cookies: try read(now: now), file: file), nil)
        } catch {
            let aside = "\(file).corrupt-\(RFC3339.string(from: now))"
            let moved = rename(file, aside) == 0
            let warning = moved
                ? "profile '\(name)': unreadable cookie jar moved to \(aside); starting with no cookies (\(error))"
                : "profile '\(name)': unreadable cookie jar \(file) could not be moved aside; starting with no cookies (\(error))"
            return (CookieJar(file: file), warning)
        }
    }

    /// The unexpired cookies in the file (none when there is no file).
    ///
    /// - Throws: `OfflineAgentError(.install)` (the code of local state) when the file
    ///   cannot be read or is not a cookie jar.
    public func read(now: Date = Date()) throws -> [Cookie] {
        guard let data = FileManager.default.contents(atPath: file) else {
            if FileSystem.exists(file) { throw OfflineAgentError(.install, "cannot read cookie jar", path: file) }
            return []
        }
        let stored: Stored
        do { stored = try Store.decoder.decode(Stored.self, from: data) } catch {
            throw OfflineAgentError(.install, "not a cookie jar: \(error)", path: file)
        }
        guard stored.format == Stored.currentFormat else {
            throw OfflineAgentError(.install, "unknown cookie jar format \(stored.format)", path: file)
        }
        guard stored.cookies.allSatisfy(\.isWellFormed) else {
            throw OfflineAgentError(.install, "cookie jar holds a malformed cookie", path: file)
        }
        // Session cookies never reach the file; any that did are not trusted.
        return stored.cookies.filter { $0.isPersistent && !$0.isExpired(at: now) }
    }

    /// Removes the jar's file.
    public func clear() throws {
        guard unlink(file) == 0 || errno == ENOENT else {
            throw OfflineAgentError(.install, "cannot remove cookie jar", path: file, underlying: POSIXFailure("unlink \(file)"))
        }
    }

    /// Writes `cookies` as the jar at `file`: temp file, fsync, rename; mode 0600 in a
    /// 0700 directory, since cookies are credentials.
    static func write(_ cookies: [Cookie], to file: String) throws {
        let directory = FileSystem.parent(of: file)
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let data = try Store.encoder.encode(Stored(format: Stored.currentFormat, cookies: cookies))
            try FileSystem.writeAtomically(data, to: file, mode: 0o600)
        } catch let failure as POSIXFailure {
            let reason = failure.errno == ENOSPC ? "disk full writing cookie jar" : "cannot write cookie jar"
            throw OfflineAgentError(.install, reason, path: file, underlying: failure)
        } catch {
            throw OfflineAgentError(.install, "cannot write cookie jar: \(error)", path: file)
        }
    }

    private struct Stored: Codable {
        static let currentFormat = 1
        var format: Int
        var cookies: [Cookie]
    }
}
