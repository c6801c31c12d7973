import FoundationEssentials

/// The installed package a patch applies to, as the store keeps it: the zip itself
/// (packages with deflated entries, or no object store), or its skeleton read back
/// through the objects.
enum PatchBase: Sendable {
    case file(String)
    case view(PackageView)

    /// The package's size in bytes.
    var size: Int64 {
        switch self {
        case .file(let path): FileSystem.fileSize(path) ?? 0
        case .view(let view): view.size
        }
    }

    /// The SHA-256 of the whole package as it is now (a full read: only after a failure).
    func sha256() throws -> String {
        switch self {
        case .file(let path): try FileHasher.sha256(of: path)
        case .view(let view): try view.sha256()
        }
    }

    /// Applies `patch` to this package, producing `output` (see `Patcher.apply`).
    func apply(patch: String, to output: String, expectedSize: Int64?) throws {
        switch self {
        case .file(let path):
            try Patcher.apply(old: URL(fileURLWithPath: path), patch: URL(fileURLWithPath: patch),
                              to: URL(fileURLWithPath: output), expectedSize: expectedSize)
        case .view(let view):
            try Patcher.apply(view: view, patch: URL(fileURLWithPath: patch), to: URL(fileURLWithPath: output), expectedSize: expectedSize)
        }
    }
}
