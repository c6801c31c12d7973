import FoundationEssentials
import Logging
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Whether the current connection is metered, as NetworkManager sees it, read with
/// `nmcli -t -f GENERAL.STATE,GENERAL.METERED device show` (found on `PATH`).
///
/// nmcli prints one block per device, blank-line separated, e.g.
/// `GENERAL.STATE:100 (connected)` and `GENERAL.METERED:yes (guessed)`; the metered
/// values are `yes`, `no`, `yes (guessed)`, `no (guessed)` and `unknown`. Following
/// NetworkManager's advice, a guessed yes counts as metered. The device is on a metered
/// network when every connected device (state 100) with a known value is metered; one
/// unmetered connected device makes it unmetered.
public enum MeteredNetwork {
    /// The kind nmcli reports, or nil (with the reason) when it cannot be read: no
    /// nmcli, NetworkManager not running, no connected device, an unknown value.
    public static func read(timeout: Duration = .seconds(2)) -> Result<NetworkKind, Unreadable> {
        guard let output = run(["nmcli", "-t", "-f", "GENERAL.STATE,GENERAL.METERED", "device", "show"], timeout: timeout) else {
            return .failure(Unreadable(reason: "nmcli did not answer (NetworkManager not installed or not running)"))
        }
        return parse(output)
    }

    /// Why the metered state could not be read.
    public struct Unreadable: Error, Sendable, CustomStringConvertible {
        /// In words.
        public var reason: String
        /// The reason, in words.
        public var description: String { reason }
    }

    /// `read()`, falling back to unmetered with one log line when it fails.
    public static func detect(logger: Logger) -> NetworkKind {
        switch read() {
        case .success(let kind):
            logger.debug("network: \(kind.rawValue) (NetworkManager)")
            return kind
        case .failure(let error):
            logger.warning("network auto: cannot read whether the connection is metered (\(error.reason)); assuming unmetered")
            return .unmetered
        }
    }

    /// nmcli's terse output, as described above.
    static func parse(_ output: String) -> Result<NetworkKind, Unreadable> {
        var kinds: [NetworkKind] = []
        for block in output.split(separator: "\n", omittingEmptySubsequences: false).split(whereSeparator: { String($0).trimmingWhitespace().isEmpty }) {
            var connected = false
            var metered: NetworkKind?
            for line in block {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let key = line[..<colon], value = String(line[line.index(after: colon)...]).trimmingWhitespace()
                if key == "GENERAL.STATE" { connected = value.hasPrefix("100") }
                if key == "GENERAL.METERED" {
                    switch value {
                    case "yes", "yes (guessed)": metered = .metered
                    case "no", "no (guessed)": metered = .unmetered
                    default: metered = nil
                    }
                }
            }
            if connected, let metered { kinds.append(metered) }
        }
        guard !kinds.isEmpty else { return .failure(Unreadable(reason: "no connected device with a known metered state")) }
        return .success(kinds.contains(.unmetered) ? .unmetered : .metered)
    }

    /// Runs `arguments` (the first found on PATH) and returns its stdout when it exits 0
    /// within `timeout`; a process that overstays is killed.
    static func run(_ arguments: [String], timeout: Duration) -> String? {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { return nil }
        // Not inherited by processes other threads spawn meanwhile (the child gets a dup2 copy).
        for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawnp(&pid, arguments[0], &actions, nil, argv, environ)
        close(pipeFDs[1])
        defer { close(pipeFDs[0]) }
        guard spawned == 0 else { return nil }
        let deadline = ContinuousClock.now + timeout
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var timedOut = false
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else {
                timedOut = true
                break
            }
            var poller = pollfd(fd: pipeFDs[0], events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(min(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1, 60_000))
            let ready = poll(&poller, 1, milliseconds)
            if ready < 0, errno == EINTR { continue }
            guard ready > 0 else { continue }
            let count = Glibc.read(pipeFDs[0], &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            output += buffer[..<count]
            // A bounded answer: nmcli prints a few lines per device.
            if output.count > 1 << 20 {
                timedOut = true
                break
            }
        }
        if timedOut { kill(pid, SIGKILL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        // WIFEXITED and WEXITSTATUS are macros Swift does not import.
        guard !timedOut, status & 0x7f == 0, (status >> 8) & 0xff == 0 else { return nil }
        return String(decoding: output, as: UTF8.self)
    }
}
