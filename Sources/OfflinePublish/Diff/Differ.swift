import COfflineBsdiff
import Foundation
import OfflineAgent

/// Makes BSDIFF40 patches natively (bsdiff 4.3 algorithm, libdivsufsort suffix sorting).
///
/// The patches are the ones bsdiff 4.3 makes (byte for byte, in our tests), so any
/// BSDIFF40 applier — Debian's `bspatch`, or this module's patcher — applies them.
public enum Differ {
    /// Writes a BSDIFF40 patch that turns the file at `old` into the file at `new`.
    ///
    /// The patch is written to a temporary file beside `patch`, flushed to disk and
    /// renamed over `patch`, so readers never see a partial patch; on failure nothing
    /// is left behind and an existing file at `patch` is untouched.
    ///
    /// This blocks the calling thread for the whole computation (about 20 s for a
    /// 21 MB → 84 MB bundle pair) and needs about 5× the old file's size, plus the new
    /// file's size, plus the patch's, plus ~25 MB in memory; run it off
    /// latency-sensitive threads.
    ///
    /// - Parameters:
    ///   - old: The previous version (under 2 GiB: the suffix array is 32-bit).
    ///   - new: The version the patch produces.
    ///   - patch: Where to write the patch.
    /// - Throws: `OfflineAgentError` with code `.publish` when an input cannot be read,
    ///   the patch cannot be written, memory runs out or the old file is too large.
    public static func makePatch(from old: URL, to new: URL, writingTo patch: URL) throws {
        for url in [old, new, patch] where !url.isFileURL {
            throw PublishError(.publish, "patch inputs and output must be file URLs", path: url.absoluteString)
        }
        var error = cbsdiff_error()
        let status = old.withUnsafeFileSystemRepresentation { oldPath in
            new.withUnsafeFileSystemRepresentation { newPath in
                patch.withUnsafeFileSystemRepresentation { patchPath -> cbsdiff_status in
                    guard let oldPath, let newPath, let patchPath else { return CBSDIFF_ERR_ARGUMENT }
                    return cbsdiff_create(oldPath, newPath, patchPath, &error)
                }
            }
        }
        guard status == CBSDIFF_OK else {
            // The C message already names the file concerned (old, new or patch).
            let message = withUnsafeBytes(of: error.message) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            throw PublishError(
                .publish,
                "cannot make patch: \(message.isEmpty ? "unknown error" : message)",
                path: patch.path,
                underlying: DifferFailure(status: status)
            )
        }
    }
}
