import OfflineAgent
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Builds and reads directory trees deeper than PATH_MAX through descriptors
/// (paths that long cannot be named in one system call).
package enum DeepTree {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// Creates `components` as nested directories under `base` (which must exist) and a
    /// file `file` holding `contents` at the bottom.
    package static func make(under base: String, components: [String], file: String = "leaf.txt", contents: String = "leaf") throws {
        var fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(description: "open \(base): errno \(errno)") }
        for component in components {
            if mkdirat(fd, component, 0o755) != 0, errno != EEXIST {
                close(fd)
                throw Failure(description: "mkdirat \(component): errno \(errno)")
            }
            let next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(fd)
            guard next >= 0 else { throw Failure(description: "openat \(component): errno \(errno)") }
            fd = next
        }
        defer { close(fd) }
        let out = openat(fd, file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard out >= 0 else { throw Failure(description: "create \(file): errno \(errno)") }
        defer { close(out) }
        do { try FileDescriptor.writeAll(out, Array(contents.utf8)) } catch {
            throw Failure(description: "write \(file): errno \(error.errno)")
        }
    }

    /// The text of `file` at the bottom of `components` under `base`, or nil.
    package static func read(_ base: String, components: [String], file: String) throws -> String? {
        var fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        for component in components {
            let next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(fd)
            guard next >= 0 else { return nil }
            fd = next
        }
        defer { close(fd) }
        let input = openat(fd, file, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { return nil }
        defer { close(input) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        guard let n = try? buffer.withUnsafeMutableBytes({ try FileDescriptor.read(input, into: $0.baseAddress!, count: $0.count) }) else {
            return nil
        }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }

    /// How many descriptors this process has open.
    package static func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }
}
