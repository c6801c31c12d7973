import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The events waiting for one collector: `<root>/reports/<key>/`, where `key` is a
/// hash of the URL (kept in `url`).
///
/// Crash safety (`kill -9` at any instant):
/// - an event is one line appended to `queue-<segment>.jsonl` and fsync'd before
///   `append` returns; a torn last line (no newline) is cut off by the next append
///   and never read;
/// - what was delivered is a byte offset in `state.json`, replaced atomically only
///   after the collector acknowledged: a crash mid-post resends the batch (the
///   collector de-duplicates by id), never skips it — at-least-once, in order;
/// - a full queue drops its oldest events by moving the offset (counted in `dropped`);
/// - the acknowledged prefix is cut off by writing the rest to the next segment
///   before `state.json` names it, so either the old or the new file is the queue.
///
/// Appends and state changes hold `<dir>/lock` (milliseconds), so a sync, `serve`
/// and a lifecycle command may append to one queue at once.
package struct ReportQueue: Sendable {
    /// The queue's directory.
    package let directory: String
    /// Where its events go.
    package let url: URL
    /// Events kept; past it the oldest are dropped.
    package let maxEvents: Int

    private static let newline = UInt8(ascii: "\n")
    /// An acknowledged prefix at least this long (and half the file) is cut off.
    private static let compactionBytes = 64 << 10

    /// `<root>/reports`.
    package static func directory(root: String) -> String { "\(FileSystem.absolute(root))/reports" }

    /// The queue of `url` under `root` (created by the first append).
    package init(root: String, url: URL, maxEvents: Int) {
        let key = SHA256.hash(data: Array(url.absoluteString.utf8)).prefix(8).hex
        self.init(directory: "\(Self.directory(root: root))/\(key)", url: url, maxEvents: maxEvents)
    }

    private init(directory: String, url: URL, maxEvents: Int) {
        self.directory = directory
        self.url = url
        self.maxEvents = max(1, maxEvents)
    }

    /// Every queue under `root`, in a stable order.
    package static func all(root: String, maxEvents: Int) -> [ReportQueue] {
        let base = directory(root: root)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: base) else { return [] }
        return names.sorted().compactMap { name in
            guard let data = FileManager.default.contents(atPath: "\(base)/\(name)/url"),
                  let url = URL(string: String(decoding: data, as: UTF8.self)) else { return nil }
            return ReportQueue(directory: "\(base)/\(name)", url: url, maxEvents: maxEvents)
        }
    }

    private var statePath: String { "\(directory)/state.json" }
    private func segmentPath(_ segment: Int) -> String { "\(directory)/queue-\(segment).jsonl" }

    // MARK: - Writing

    /// Appends `events` durably, dropping the oldest past `maxEvents`.
    package func append(_ events: [ReportEvent]) throws {
        guard !events.isEmpty else { return }
        try prepare()
        let lock = try LifecycleLock(path: "\(directory)/lock")
        defer { withExtendedLifetime(lock) {} }
        var state = loadState()
        let path = segmentPath(state.segment)
        let created = !FileSystem.exists(path)
        let fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw POSIXFailure("open \(path)") }
        defer { close(fd) }
        try cutTornTail(fd, path: path)
        var bytes: [UInt8] = []
        for event in events {
            bytes += try event.line()
            bytes.append(Self.newline)
        }
        do { try FileDescriptor.writeAll(fd, bytes) } catch { throw POSIXFailure("write \(path)", errno: error.errno) }
        guard fsync(fd) == 0 else { throw POSIXFailure("fsync \(path)") }
        if created { try FileSystem.sync(directory) }
        let data = contents(path)
        state.offset = min(state.offset, data.count)
        let ends = lineEnds(data, from: state.offset)
        if ends.count > maxEvents {
            let drop = ends.count - maxEvents
            state.offset = ends[drop - 1]
            state.dropped += drop
            try save(state, data: data)
        }
    }

    /// The directory and its `url` file.
    func prepare() throws {
        guard !FileSystem.exists("\(directory)/url") else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileSystem.writeAtomically(Data(url.absoluteString.utf8), to: "\(directory)/url")
    }

    /// A line a crash cut short is dropped, so the next line starts on its own.
    private func cutTornTail(_ fd: Int32, path: String) throws {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw POSIXFailure("fstat \(path)") }
        guard st.st_size > 0 else { return }
        var last: UInt8 = 0
        guard pread(fd, &last, 1, st.st_size - 1) == 1 else { throw POSIXFailure("read \(path)") }
        guard last != Self.newline else { return }
        let data = contents(path)
        let keep = (data.lastIndex(of: Self.newline).map { $0 + 1 }) ?? 0
        guard ftruncate(fd, off_t(keep)) == 0 else { throw POSIXFailure("truncate \(path)") }
    }

    // MARK: - Sending

    /// Up to `limit` events from the head of the queue, in a body of at most 1 MiB; nil when empty.
    package func batch(limit: Int) throws -> ReportBatch? {
        guard FileSystem.exists(statePath) || FileSystem.exists(segmentPath(0)) else { return nil }
        let lock = try LifecycleLock(path: "\(directory)/lock")
        defer { withExtendedLifetime(lock) {} }
        let state = loadState()
        let data = contents(segmentPath(state.segment))
        var start = min(state.offset, data.count)
        var lines: [[UInt8]] = []
        var size = 16
        var end = start
        for lineEnd in lineEnds(data, from: start) {
            let line = Array(data[start..<(lineEnd - 1)])
            guard lines.isEmpty || (lines.count < max(1, limit) && size + line.count + 1 <= ReportSettings.maxBodyBytes) else { break }
            if !line.isEmpty { lines.append(line) }
            size += line.count + 1
            start = lineEnd
            end = lineEnd
        }
        guard !lines.isEmpty else { return nil }
        return ReportBatch(base: state.base, segment: state.segment, end: state.base + end, lines: lines)
    }

    /// Moves the queue's start past `batch`: the collector took it (`rejected` false)
    /// or refused it for good (400, 413: counted, never resent).
    package func acknowledge(_ batch: ReportBatch, rejected: Bool) throws {
        let lock = try LifecycleLock(path: "\(directory)/lock")
        defer { withExtendedLifetime(lock) {} }
        var state = loadState()
        let data = contents(segmentPath(state.segment))
        state.offset = min(state.offset, data.count)
        // Positions are absolute, so a segment cut meanwhile (drops) changes nothing.
        let end = min(batch.end - state.base, data.count)
        guard end > state.offset else { return }
        let count = lineEnds(data[..<end], from: state.offset).count
        if rejected { state.rejected += count } else { state.delivered += count }
        state.offset = end
        state.failures = 0
        state.nextAttempt = nil
        try save(state, data: data)
    }

    /// Records a failed delivery: no attempt before `until`.
    package func recordFailure(until: Date) throws {
        let lock = try LifecycleLock(path: "\(directory)/lock")
        defer { withExtendedLifetime(lock) {} }
        var state = loadState()
        state.failures += 1
        state.nextAttempt = until.timeIntervalSince1970
        try writeState(state)
    }

    /// Lifts the backoff (the failure count stays): what failed may be fixed now, as a changed token is.
    package func retryNow() throws {
        let lock = try LifecycleLock(path: "\(directory)/lock")
        defer { withExtendedLifetime(lock) {} }
        var state = loadState()
        guard state.nextAttempt != nil else { return }
        state.nextAttempt = nil
        try writeState(state)
    }

    // MARK: - Reading

    /// The queue's state (a fresh one when there is none).
    package func loadState() -> ReportQueueState {
        guard let data = FileManager.default.contents(atPath: statePath),
              let state = try? JSONDecoder().decode(ReportQueueState.self, from: data) else { return ReportQueueState() }
        return state
    }

    /// Events waiting to be sent.
    package func pending() -> Int {
        let state = loadState()
        let data = contents(segmentPath(state.segment))
        return lineEnds(data, from: min(state.offset, data.count)).count
    }

    private func contents(_ path: String) -> [UInt8] {
        FileManager.default.contents(atPath: path).map(Array.init) ?? []
    }

    /// The positions just past each complete line from `offset` on.
    private func lineEnds(_ data: some Collection<UInt8>, from offset: Int) -> [Int] {
        var ends: [Int] = []
        var index = offset
        for byte in data.dropFirst(offset) {
            index += 1
            if byte == Self.newline { ends.append(index) }
        }
        return ends
    }

    /// Writes `state`; first cuts the acknowledged prefix off into the next segment when it is long.
    private func save(_ state: ReportQueueState, data: [UInt8]) throws {
        var state = state
        let old = state.segment
        if state.offset > 0, state.offset == data.count || (state.offset >= Self.compactionBytes && state.offset * 2 >= data.count) {
            let rest = Array(data[state.offset...])
            if rest.isEmpty {
                // A crash may have left a half-made next segment: it must not become the queue.
                unlink(segmentPath(old + 1))
            } else {
                try FileSystem.writeAtomically(Data(rest), to: segmentPath(old + 1))
            }
            state.segment = old + 1
            state.base += state.offset
            state.offset = 0
        }
        try writeState(state)
        if state.segment != old { unlink(segmentPath(old)) }
    }

    private func writeState(_ state: ReportQueueState) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        try FileSystem.writeAtomically(try encoder.encode(state), to: statePath)
    }
}
