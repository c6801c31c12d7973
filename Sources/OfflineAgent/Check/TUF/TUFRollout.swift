import Crypto
import FoundationEssentials

/// An app's rollout file, `APP/rollout.json` (docs/PROTOCOL.md, "The halt key"): a TUF
/// target of the app's halt role (`APP.halt`, trusted for that one path), written by
/// `offline-publish halt` or `offline-server --halt-key` with a key that can do nothing
/// else. `{"app": APP, "manifest": SHA256, "role": ROLE, "version": V, "stage": N}`
/// narrows the staged rollout of the manifest with that SHA-256, as listed by version V of
/// the targets role ROLE, to at most N %. It never widens a stage, never changes what is
/// offered or installed, and never applies to another manifest or listing: any release
/// verb of the operator signs a new version of ROLE, which it no longer names.
package struct TUFRollout: Sendable, Equatable {
    package static let fileName = "rollout.json"
    /// The most a rollout file may be: a halt key's metadata cannot make a device
    /// download more than this for it.
    package static let cap: Int64 = 4096

    package let app: String
    /// The SHA-256 (lower-case hex) of the `APP/manifest.json` target it narrows.
    package let manifest: String
    /// The targets role whose metadata lists the manifest (`targets`, or the app's role).
    package let role: String
    /// That metadata's version.
    package let version: Int64
    package let stage: Int

    package init(app: String, manifest: String, role: String, version: Int64, stage: Int) {
        self.app = app
        self.manifest = manifest
        self.role = role
        self.version = version
        self.stage = stage
    }

    /// Reads a rollout file; unknown fields (a `reason`) are allowed.
    ///
    /// - Throws: `manifest-invalid` naming what is wrong.
    package init(_ bytes: some Collection<UInt8>) throws {
        func invalid(_ reason: String) -> OfflineAgentError { OfflineAgentError(.manifest, "rollout.json: \(reason)", cause: .manifestInvalid) }
        guard let json = try? StrictJSON.parse(bytes), case .object(let fields) = json else { throw invalid("not a JSON object") }
        guard case .string(let app)? = fields["app"] else { throw invalid("app must be a string") }
        guard case .string(let manifest)? = fields["manifest"], manifest.utf8.count == 64, TUFKey.bytes(hex: manifest) != nil else {
            throw invalid("manifest must be a SHA-256 in hex")
        }
        guard case .string(let role)? = fields["role"] else { throw invalid("role must be a string") }
        guard case .number(let version)? = fields["version"], let version = Int64(version), version >= 1 else {
            throw invalid("version must be an integer of at least 1")
        }
        guard case .number(let text)? = fields["stage"], let stage = Int(text), (0...100).contains(stage) else {
            throw invalid("stage must be an integer in 0...100")
        }
        self.init(app: app, manifest: manifest.lowercased(), role: role, version: version, stage: stage)
    }

    /// `manifest` with its stage narrowed to this file's, when this file names `app`, the
    /// manifest whose target bytes are `manifestBytes`, and the role and version that list
    /// it (`listedBy`); else `manifest` unchanged. The narrowed stage is the lower of the
    /// two at `now`, as a fixed stage (a schedule would widen again by itself).
    package func narrow(_ manifest: Manifest, app: String, manifestBytes: [UInt8], listedBy: (role: String, version: Int64)?, now: Date) -> Manifest {
        guard self.app == app, self.manifest == SHA256.hash(data: manifestBytes).hex, let listedBy,
              listedBy.role == role, listedBy.version == version
        else { return manifest }
        var narrowed = manifest
        narrowed.stage = min(manifest.currentStage(at: now), stage)
        narrowed.stageSchedule = []
        return narrowed
    }
}
