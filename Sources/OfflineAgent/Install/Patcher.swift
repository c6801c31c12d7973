import CBspatch
import FoundationEssentials

/// Applies BSDIFF40 (bsdiff 4.3) patches with the hardened C applier in `CBspatch`:
/// bounded memory, every hostile input refused with a reason, and the output
/// written to a temporary file that is renamed into place only on success.
public enum Patcher {
    /// Applies a BSDIFF40 patch to `old`, producing `new`.
    ///
    /// `new` is replaced atomically (temporary file in its directory, fsync, rename) and is
    /// left untouched on failure; `old` may be the same file as `new`.
    /// - Parameters:
    ///   - old: the file the patch applies to.
    ///   - patch: the BSDIFF40 file.
    ///   - new: where the result goes.
    ///   - expectedSize: when given, the patch is refused unless its header says it
    ///     produces exactly this many bytes (checked before any work is done).
    ///   - durable: fsync `new` before the rename. Without it the rename is still atomic,
    ///     but a power loss may leave a short file: for tools, like `bspatch`, not installs.
    /// - Throws: `OfflineAgentError(.patch, reason, path: patch, underlying: PatchFailure)`.
    public static func apply(old: URL, patch: URL, to new: URL, expectedSize: Int64? = nil, durable: Bool = true) throws {
        if let expectedSize, expectedSize < 0 {
            throw failure(PatchFailure(status: PatchFailure.argument, message: "expected size \(expectedSize) is negative"),
                          patch: patch)
        }
        var error = cbspatch_error()
        let status = old.withUnsafeFileSystemRepresentation { oldPath in
            patch.withUnsafeFileSystemRepresentation { patchPath in
                new.withUnsafeFileSystemRepresentation { newPath in
                    cbspatch_apply_flags(oldPath, patchPath, newPath, expectedSize ?? -1, durable ? 0 : CBSPATCH_NO_SYNC, &error)
                }
            }
        }
        guard status == CBSPATCH_OK else { throw failure(status, error, patch: patch) }
    }

    /// Applies a patch to an installed package read through `view` (skeleton plus
    /// objects) instead of a file; otherwise exactly `apply(old:patch:to:)`.
    static func apply(view: PackageView, patch: URL, to new: URL, expectedSize: Int64? = nil) throws {
        if let expectedSize, expectedSize < 0 {
            throw failure(PatchFailure(status: PatchFailure.argument, message: "expected size \(expectedSize) is negative"),
                          patch: patch)
        }
        var error = cbspatch_error()
        let context = Unmanaged.passUnretained(view).toOpaque()
        let status = withExtendedLifetime(view) {
            patch.withUnsafeFileSystemRepresentation { patchPath in
                new.withUnsafeFileSystemRepresentation { newPath in
                    cbspatch_apply_reader({ context, buffer, length, offset in
                        // Called from cbspatch's threads; the view outlives the call (withExtendedLifetime).
                        let view = Unmanaged<PackageView>.fromOpaque(context!).takeUnretainedValue()
                        return Int64(view.read(into: buffer!, count: length, at: offset))
                    }, context, view.size, patchPath, newPath, expectedSize ?? -1, 0, &error)
                }
            }
        }
        guard status == CBSPATCH_OK else { throw failure(status, error, patch: patch) }
    }

    /// Applies a patch to an installed package read through `view`, handing the new
    /// package to `splitter` as it is made instead of writing it to a file: the store's
    /// streamed install. When the splitter stops the stream, the error carries
    /// `PatchFailure.stopped` and `splitter.stop` says why.
    static func apply(view: PackageView, patch: URL, into splitter: PatchedPackageSplitter, expectedSize: Int64? = nil) throws {
        if let expectedSize, expectedSize < 0 {
            throw failure(PatchFailure(status: PatchFailure.argument, message: "expected size \(expectedSize) is negative"),
                          patch: patch)
        }
        var error = cbspatch_error()
        let readContext = Unmanaged.passUnretained(view).toOpaque()
        let writeContext = Unmanaged.passUnretained(splitter).toOpaque()
        let status = withExtendedLifetime((view, splitter)) {
            patch.withUnsafeFileSystemRepresentation { patchPath in
                cbspatch_apply_reader_writer({ context, buffer, length, offset in
                    let view = Unmanaged<PackageView>.fromOpaque(context!).takeUnretainedValue()
                    return Int64(view.read(into: buffer!, count: length, at: offset))
                }, readContext, view.size, patchPath, { context, buffer, length in
                    // Called from the applying thread only, in order.
                    let splitter = Unmanaged<PatchedPackageSplitter>.fromOpaque(context!).takeUnretainedValue()
                    return splitter.feed(UnsafeRawBufferPointer(start: buffer, count: length)) ? 0 : 1
                }, writeContext, expectedSize ?? -1, &error)
            }
        }
        guard status == CBSPATCH_OK else { throw failure(status, error, patch: patch) }
    }

    /// Reads and validates the 32-byte header of a BSDIFF40 patch, without decoding anything.
    /// - Throws: `OfflineAgentError(.patch, ...)` with a `PatchFailure` for a missing file,
    ///   a bad magic, negative lengths or streams running past the end of the file.
    public static func header(of patch: URL) throws -> (controlLength: Int64, diffLength: Int64, newSize: Int64) {
        var error = cbspatch_error()
        var control: Int64 = 0, diff: Int64 = 0, size: Int64 = 0
        let status = patch.withUnsafeFileSystemRepresentation { path in
            cbspatch_read_header(path, &control, &diff, &size, &error)
        }
        guard status == CBSPATCH_OK else { throw failure(status, error, patch: patch) }
        return (control, diff, size)
    }

    private static func failure(_ status: cbspatch_status, _ error: cbspatch_error, patch: URL) -> OfflineAgentError {
        // The C side always NUL-terminates, but never trust a fixed buffer to be.
        let message = withUnsafeBytes(of: error.message) { raw -> String in
            let bytes = raw.prefix { $0 != 0 }
            return String(decoding: bytes, as: UTF8.self)
        }
        return failure(PatchFailure(status: Int32(bitPattern: status.rawValue), message: message), patch: patch)
    }

    private static func failure(_ cause: PatchFailure, patch: URL) -> OfflineAgentError {
        // A local I/O failure is not the patch's fault; everything else the C side refuses is.
        OfflineAgentError(.patch, cause.message.isEmpty ? "patch refused (\(cause.name))" : cause.message,
                          cause: cause.status == PatchFailure.io ? .io : .patchInvalid, path: patch.path, underlying: cause)
    }
}
