import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent

/// The one-writer-at-a-time lock of an app in a publish directory: an exclusive `flock`
/// on `<publish dir>/.<app>.lock`, held by every verb (`publish`, `stage`, `set`,
/// `revert`, `promote`, auto-halt, the halt key's `halt`, `delegate`) from the read of `state.json` to its commit, so no
/// verb ever writes a state it read before another verb's commit.
///
/// The file is empty and stays: it is never content (a static host serving it serves
/// zero bytes), and removing it while held would let a second writer lock a new inode.
/// It sits beside the app directory, not in it, so a first publish (which creates the
/// app directory in one rename) is locked too. `flock`, not `fcntl`: a second holder in
/// the same process (auto-halt on two threads) is excluded as well.
public final class PublishLock: Sendable {
    /// How long a verb waits for another by default before giving up.
    public static let defaultWait: Duration = .seconds(60)

    /// The lock file's path for `app` in `publishDirectory`.
    public static func path(app: String, publishDirectory: String) -> String {
        "\(FileSystem.absolute(publishDirectory))/.\(app).lock"
    }

    let path: String
    private let fd: Int32

    /// Takes the lock, waiting at most `wait` for a holder to finish (printing one line on
    /// stderr naming it, once, when it must wait).
    ///
    /// - Throws: `.busy` naming the holder (its pid and command line, where `/proc/locks`
    ///   tells) when the wait ran out; `.publish` when the file cannot be opened.
    init(app: String, publishDirectory: String, wait: Duration = defaultWait) throws {
        let path = Self.path(app: app, publishDirectory: publishDirectory)
        // O_NOFOLLOW: a link planted in the directory must not make us create files elsewhere.
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            throw PublishError(.publish, "cannot open the publish lock", path: path, underlying: POSIXFailure("open"))
        }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: max(.zero, wait))
        var told = false
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let failure = POSIXFailure("flock")
            guard failure.errno == EWOULDBLOCK || failure.errno == EINTR else {
                close(fd)
                throw PublishError(.publish, "cannot lock the publish directory", path: path, underlying: failure)
            }
            let holder = Self.holder(of: fd)
            guard clock.now < deadline else {
                close(fd)
                throw PublishError(
                    .busy, "another verb holds the publish directory (\(holder ?? "holder unknown")); gave up after waiting \(wait)",
                    path: path)
            }
            if !told {
                told = true
                FileHandle.standardError.write(Data("waiting for the publish lock \(path), held by \(holder ?? "another process")\n".utf8))
            }
            usleep(20_000)
        }
        self.path = path
        self.fd = fd
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
    }

    /// Whether the lock is free right now, without waiting: nil when another holds it.
    static func tryTaking(app: String, publishDirectory: String) throws -> PublishLock? {
        do {
            return try PublishLock(app: app, publishDirectory: publishDirectory, wait: .zero)
        } catch let error as PublishError where error.code == .busy {
            return nil
        }
    }

    /// `pid N (offline-publish set)` for the process holding the flock on `fd`'s file,
    /// from `/proc/locks`; nil where that is not available.
    private static func holder(of fd: Int32) -> String? {
        var st = stat()
        guard fstat(fd, &st) == 0, let locks = FileSystem.readKernelFile("/proc/locks") else { return nil }
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters' lines carry "->".
        for line in locks.split(separator: "\n") where !line.contains("->") {
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK", let pid = Int32(fields[4]),
                  fields[5].split(separator: ":").last == Substring(String(st.st_ino)) else { continue }
            let command = ((try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data())
                .split(separator: 0).prefix(2).map { String(decoding: $0, as: UTF8.self) }
            let words = command.enumerated().compactMap { index, word in
                index == 0 ? FileSystem.name(of: word) : (word.hasPrefix("-") ? nil : word)
            }
            return words.isEmpty ? "pid \(pid)" : "pid \(pid) (\(words.joined(separator: " ")))"
        }
        return nil
    }
}
