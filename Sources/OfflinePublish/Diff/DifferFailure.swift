import COfflineBsdiff
import Foundation
import OfflineAgent

/// The status code returned by the C differ, kept as the underlying cause so callers
/// can tell I/O failures from memory exhaustion or oversized inputs.
struct DifferFailure: Error, Sendable, CustomStringConvertible {
    let status: cbsdiff_status

    var description: String {
        switch status {
        case CBSDIFF_ERR_IO: "I/O error"
        case CBSDIFF_ERR_NOMEM: "out of memory"
        case CBSDIFF_ERR_BZIP2: "bzip2 error"
        case CBSDIFF_ERR_ARGUMENT: "invalid argument"
        case CBSDIFF_ERR_TOO_LARGE: "input too large"
        default: "cbsdiff status \(status.rawValue)"
        }
    }
}
