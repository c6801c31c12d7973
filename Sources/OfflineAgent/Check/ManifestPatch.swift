/// One entry of a manifest's `patches` list: a BSDIFF40 patch to the manifest's
/// `version` from `baseVersion` (PROTOCOL.md, "The manifest").
///
/// A static manifest lists patches from several recent versions beside the full
/// package, so that one file served to every device still lets each device
/// download only its own delta (the Sparkle appcast idea).
public struct ManifestPatch: Sendable, Equatable, Codable {
    /// The version whose package the patch applies to.
    public var baseVersion: Version
    /// The patch file: absolute `http(s)` or relative to the manifest URL.
    public var url: String
    /// Exact byte length of the patch file.
    public var size: Int64
    /// Lowercase hex SHA-256 of the patch file.
    public var sha256: String

    /// A patch from `baseVersion`: its URL (relative to the manifest), size and SHA-256.
    public init(baseVersion: Version, url: String, size: Int64, sha256: String) {
        self.baseVersion = baseVersion
        self.url = url
        self.size = size
        self.sha256 = sha256
    }

    /// More entries than this refuse the manifest: publishers keep patches from the
    /// last few versions, and an agent must not walk an unbounded list.
    public static let maxCount = 32
}
