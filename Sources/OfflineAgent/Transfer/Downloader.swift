import AsyncHTTPClient
import Crypto
import FoundationEssentials
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

/// Streams a file to `<directory>/<sha256>`, hashing on the fly and never writing
/// past the declared size. An interrupted download stays as `<sha256>.part` and is
/// resumed by the next run with `Range` + `If-Range`.
struct Downloader: Sendable {
    let fetcher: HTTPFetcher
    let directory: String
    /// Where hashing and the resume record's write run, off the cooperative pool.
    let pool: BlockingPool
    /// Receives every body byte as it arrives, kept or not, so failures are counted too.
    var counter: ByteCounter?

    /// Resume information kept beside a partial download.
    private struct PartialInfo: Codable {
        var url: String
        var validator: String?
    }

    func path(for target: DownloadTarget) -> String { "\(directory)/\(target.key)" }

    /// Downloads `target` (or reuses a complete verified copy) and returns its path and the bytes transferred.
    ///
    /// What an earlier run kept is never fetched again from byte 0 while the server honours
    /// ranges: a whole file whose hash matches is taken without a request; a whole file
    /// without a hash to check (`target.sha256` nil) asks for its last byte under `If-Range`,
    /// so a `206` proves the server still has the same bytes; a prefix asks for the rest.
    func fetch(_ target: DownloadTarget, progress: @escaping @Sendable (Int64, Int64, Int64) -> Void) async throws -> (path: String, transferred: Int64) {
        let final = path(for: target)
        let part = final + ".part"
        let infoPath = part + ".json"
        if FileSystem.fileSize(final) == target.size {
            if let sha256 = target.sha256 {
                if try await pool.run(.download, { try? FileHasher.sha256(of: final) }) == sha256 { return (final, 0) }
            } else if target.size > 0, partialInfo(infoPath)?.url == target.url.absoluteString {
                // Complete but unchecked (its caller checks what it decodes to): confirmed as a whole part below.
                try? FileSystem.renameDurably(final, to: part)
            }
        }
        FileSystem.remove(final)
        var transferred: Int64 = 0
        var digest: String?
        // Two rounds at most: a resume the server can't honour restarts from 0 once.
        for attempt in 0..<2 {
            let info = partialInfo(infoPath)
            var existing = FileSystem.fileSize(part) ?? 0
            // Every byte arrived before the run stopped (the body's end, the rename or the
            // install did not happen). Its hash is its identity, whichever URL it came from.
            if attempt == 0, existing == target.size, target.size > 0, let sha256 = target.sha256 {
                let whole = try await pool.run(.download) { try? FileHasher.sha256(of: part) }
                if whole == sha256 {
                    progress(target.size, target.size, target.size)
                    digest = whole
                    break
                }
                // Every byte, and not the right ones: nothing in it is worth keeping.
                existing = 0
            }
            // Resume only a prefix of the same URL's file, never longer than the file.
            if attempt > 0 || existing > target.size || info?.url != target.url.absoluteString { existing = 0 }
            // Whole without a hash to check: its last byte under If-Range tells it is still the server's file.
            if existing == target.size, target.size > 0 { existing = target.size - 1 }
            var headers: [(String, String)] = []
            if existing > 0 {
                headers.append(("Range", "bytes=\(existing)-"))
                if let validator = info?.validator { headers.append(("If-Range", validator)) }
            }
            let (response, _) = try await fetcher.get(target.url, headers: headers, phase: .download)
            let offset: Int64
            switch response.status.code {
            case 200:
                offset = 0
                try Self.checkContentLength(response, expected: target.size, url: target.url)
            case 206 where existing > 0:
                // The range must be exactly the missing tail: start where the part ends, end at size - 1.
                guard let range = ContentRange(response.headers.first(name: "Content-Range")),
                      range.start == existing, range.end == target.size - 1, range.total == nil || range.total == target.size else {
                    FileSystem.remove(part)
                    if attempt == 0 { continue }
                    throw OfflineAgentError(.download, "server sent a mismatched Content-Range", cause: .protocolViolation,
                                            path: target.url.absoluteString)
                }
                offset = existing
                try Self.checkContentLength(response, expected: target.size - existing, url: target.url)
            case 416 where attempt == 0:
                FileSystem.remove(part)
                continue
            case 206, 416:
                throw OfflineAgentError(.download, "server answered \(response.status.code) to a request it was not asked",
                                        cause: .protocolViolation, path: target.url.absoluteString)
            default:
                throw OfflineAgentError(.download, "server answered \(response.status.code)", cause: .httpStatus, path: target.url.absoluteString)
            }
            let validator = response.headers.first(name: "ETag").flatMap { $0.hasPrefix("W/") ? nil : $0 }
                ?? response.headers.first(name: "Last-Modified")
            let record = try JSONEncoder().encode(PartialInfo(url: target.url.absoluteString, validator: validator))
            // Not flushed, as the part it describes is not: a power cut that loses or empties
            // it only costs the resume (the part is fetched again from byte 0).
            try await pool.run(.download) { try FileSystem.writeAtomically(record, to: infoPath, durable: false) }
            let (count, hash) = try await stream(response, to: part, offset: offset, target: target, progress: progress)
            transferred += count
            digest = hash
            break
        }
        guard let digest, FileSystem.fileSize(part) == target.size else {
            throw OfflineAgentError(.download, "download incomplete", cause: .protocolViolation, path: target.url.absoluteString)
        }
        if let expected = target.sha256, digest != expected {
            FileSystem.remove(part)
            FileSystem.remove(infoPath)
            throw OfflineAgentError(.download, "sha256 mismatch: got \(digest), expected \(expected)", cause: .hashMismatch,
                                    path: target.url.absoluteString)
        }
        // Not flushed: the install flushes what it keeps once, before its swap, and a
        // package it replaces by its skeleton first never reaches the disk. A file under
        // this name is hashed again before any reuse (or, without a hash, confirmed and its
        // output checked), so a power cut that left it short costs a download, not a version.
        guard rename(part, final) == 0 else {
            throw OfflineAgentError(.download, "cannot keep the download", cause: .io, path: final, underlying: POSIXFailure("rename \(part)"))
        }
        // A file without a hash keeps its validator: a run stopped before its caller used it
        // confirms it with one byte instead of fetching it again.
        if target.sha256 != nil { FileSystem.remove(infoPath) }
        return (final, transferred)
    }

    /// The resume record beside a partial download, if it is readable.
    private func partialInfo(_ path: String) -> PartialInfo? {
        (try? Data(contentsOf: URL(fileURLWithPath: path))).flatMap { try? JSONDecoder().decode(PartialInfo.self, from: $0) }
    }

    /// Writes the body at `offset` of `part`, cutting it at `target.size`, under the minimum-speed watchdog.
    private func stream(
        _ response: HTTPClientResponse, to part: String, offset: Int64, target: DownloadTarget,
        progress: @escaping @Sendable (Int64, Int64, Int64) -> Void
    ) async throws -> (transferred: Int64, sha256: String) {
        // The hash covers the kept prefix too, so a resumed file is checked whole.
        let seed = try await pool.run(.download) {
            var seed = SHA256()
            if offset > 0 { try FileHasher.update(&seed, with: part, upTo: offset) }
            return seed
        }
        let fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            throw OfflineAgentError(.download, "cannot open partial file", cause: .io, path: part, underlying: POSIXFailure("open"))
        }
        defer { close(fd) }
        guard ftruncate(fd, off_t(offset)) == 0, lseek(fd, off_t(offset), SEEK_SET) == off_t(offset) else {
            throw OfflineAgentError(.download, "cannot prepare partial file", cause: .io, path: part, underlying: POSIXFailure("ftruncate"))
        }
        let meter = TransferMeter()
        let settings = fetcher.settings
        let url = target.url.absoluteString
        let prefixHash = seed
        let counter = self.counter
        let pool = self.pool
        return try await withThrowingTaskGroup(of: (Int64, String)?.self) { group in
            // The kept prefix shows at once, so a display can say where it resumes from.
            if offset > 0 { progress(offset, target.size, offset) }
            group.addTask {
                var hasher = BackgroundHasher(seed: prefixHash, pool: pool)
                var written = offset
                do {
                    for try await chunk in response.body {
                        let allowed = target.size - written
                        let count = Int64(chunk.readableBytes)
                        counter?.add(count)
                        // Within the chunk by construction: 0 <= allowed, and count is its length.
                        let kept = chunk.getSlice(at: chunk.readerIndex, length: Int(min(count, allowed)))!
                        try kept.withUnsafeReadableBytes { try Self.writeAll(fd, $0, path: part) }
                        try await hasher.update(kept)
                        written += min(count, allowed)
                        meter.add(min(count, allowed))
                        progress(written, target.size, offset)
                        if count > allowed {
                            // Never write more than `size`: the body is cut and the file refused.
                            ftruncate(fd, 0)
                            throw OfflineAgentError(.download, "server sent more than the \(target.size) bytes announced",
                                                    cause: .protocolViolation, path: url)
                        }
                    }
                } catch let error as OfflineAgentError {
                    throw error
                } catch {
                    throw OfflineAgentError(.download, "transfer failed after \(written) of \(target.size) bytes: \(HTTPFetcher.describe(error))",
                                            cause: Self.cause(ofTransferError: error), path: url)
                }
                if written < target.size {
                    throw OfflineAgentError(.download, "truncated body: \(written) of \(target.size) bytes", cause: .protocolViolation, path: url)
                }
                let digest = try await hasher.finalize()
                meter.finish()
                return (written - offset, digest)
            }
            group.addTask {
                try await meter.watch(minimum: settings.minimumBytesPerSecond, window: settings.speedWindow, url: url)
                return nil
            }
            while let value = try await group.next() {
                if let value {
                    group.cancelAll()
                    return value
                }
            }
            throw OfflineAgentError(.download, "transfer ended without a result", path: url)
        }
    }

    /// A `Content-Length` must be plain digits and equal what the manifest (and range) promise.
    private static func checkContentLength(_ response: HTTPClientResponse, expected: Int64, url: URL) throws {
        guard let header = response.headers.first(name: "Content-Length") else { return }
        guard let length = ContentRange.integer(header[...]) else {
            throw OfflineAgentError(.download, "server announced an invalid Content-Length", cause: .protocolViolation, path: url.absoluteString)
        }
        guard length == expected else {
            throw OfflineAgentError(.download, "server announces \(length) bytes, manifest says \(expected)",
                                    cause: .protocolViolation, path: url.absoluteString)
        }
    }

    /// A body that stopped: a deadline, a body cut short of its length (the HTTP
    /// contract broken), or the network.
    private static func cause(ofTransferError error: any Error) -> OfflineAgentError.Cause {
        if let error = error as? HTTPClientError, [.readTimeout, .connectTimeout, .deadlineExceeded].contains(error) { return .timeout }
        return error is HTTPParserError ? .protocolViolation : .network
    }

    private static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        do { try FileDescriptor.writeAll(fd, bytes) } catch {
            throw OfflineAgentError(.download, error.isDiskFull ? "disk full while downloading" : "cannot write download",
                                    cause: error.isDiskFull ? .diskFull : .io, path: path, underlying: error)
        }
    }
}
