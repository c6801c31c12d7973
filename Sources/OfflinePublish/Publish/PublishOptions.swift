import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// What to publish and how to describe it.
///
/// The app-wide settings (`miniVersion`, `whitelist`, `rollout`, `networkType`,
/// `expires`) are kept from the previous publish when left nil / `.keep`.
public struct PublishOptions: Sendable {
    /// What to do with the `expires` of the app.
    public enum Expiry: Sendable, Equatable {
        /// Keep the previous value (none on a first publish).
        case keep
        /// No expiry.
        case never
        /// Manifests must not be trusted after this time.
        case at(Date)
    }

    public var app: String
    public var version: Version
    /// The directory of built web files: the app root of the package.
    public var sourceDirectory: String
    /// The publish directory; the app's files go to `<publishDirectory>/<app>/`.
    public var publishDirectory: String
    /// nil: the previous value, or `version` on a first publish.
    public var miniVersion: Version?
    /// nil: the previous value, or empty on a first publish.
    public var whitelist: [String]?
    /// nil: the previous value, or 100 on a first publish.
    public var rollout: Int?
    /// nil: the previous value, or `.any` on a first publish.
    public var networkType: Manifest.NetworkType?
    public var expires: Expiry
    /// Signs the static `manifest.json` (writes `manifest.json.sig`) when set.
    public var signingKey: SigningKey?
    /// TUF: signs snapshot and timestamp when `signingKey` is an app's delegated key
    /// (`offline-publish delegate`); nil: `signingKey` signs them.
    public var snapshotKey: SigningKey?
    /// Makes the static manifest's URLs absolute: `<baseURL>/<app>/<file>`. By
    /// default they are relative to the manifest (`1.2.0.zip.gz`).
    public var baseURL: String?
    /// How many previous versions get a patch to the new one.
    public var patchBaseCount: Int
    /// The limits the source tree is checked against: the device's defaults, since a
    /// package above them is one devices refuse (lowered by tests).
    public var limits: ExtractionLimits
    /// The entry page single-page routes get on a mirrored origin (the manifest's
    /// `fallback`, e.g. `index.html`): a file of the package. nil: the previous value
    /// (none on a first publish).
    public var fallback: String?
    /// This version's trial request (`publish --trial-launches N`): devices keep it on
    /// trial for N launches and roll it back unless the host confirms it. nil or 0: no
    /// trial, good once installed. Not kept for later versions: each asks for itself.
    public var trialLaunches: Int?
    /// Refuse a publish whose whitelist (given or kept) is empty: such a package is
    /// installed by every device and served by none (the CLI sets it).
    public var requireWhitelist = false
    /// The staged rollout of the new version: the share of devices (0–100) that may
    /// take it; nil: 100. A new version starts its own rollout, so nothing is kept.
    public var stage: Int?
    /// The staged rollout as steps after the publish time (`5@0h,25@24h,100@72h`);
    /// exclusive with `stage`.
    public var stageSchedule: [ManifestStageStep]?
    /// The release epoch (`--epoch`); nil: the latest release's. Never below it; above
    /// it, `version` may be lower than the latest (the recovery from a version published
    /// too high, docs/PUBLISHING.md "Recovering from a version published too high").
    public var epoch: Int?
    /// The publish time the manifest carries (`publishedAt`) and the revision records.
    public var now: Date = Date()
    /// The operator's reason, recorded in the revision (`history`).
    public var reason: String?
    /// Publish the exact bytes of this existing package instead of zipping
    /// `sourceDirectory` (`revert`, `promote`); its SHA-256 must be `packageSha256`.
    package var existingPackage: (path: String, sha256: String)?
    /// The verb recorded in the revision.
    package var verb = "publish"
    /// How long to wait for another verb holding the app's `PublishLock` before failing
    /// with `.busy` naming it.
    public var lockWait: Duration = PublishLock.defaultWait
    /// Refuse a source without an entry page at its root: `index.html`, or the
    /// `fallback` when one is given (the CLI sets it; `publish --no-entry-page` clears it).
    public var requireEntryPage = false

    public init(
        app: String, version: Version, sourceDirectory: String, publishDirectory: String,
        miniVersion: Version? = nil, whitelist: [String]? = nil, rollout: Int? = nil,
        networkType: Manifest.NetworkType? = nil, expires: Expiry = .keep, signingKey: SigningKey? = nil,
        baseURL: String? = nil, patchBaseCount: Int = 3, limits: ExtractionLimits = ExtractionLimits(), fallback: String? = nil
    ) {
        self.app = app
        self.version = version
        self.sourceDirectory = sourceDirectory
        self.publishDirectory = publishDirectory
        self.miniVersion = miniVersion
        self.whitelist = whitelist
        self.rollout = rollout
        self.networkType = networkType
        self.expires = expires
        self.signingKey = signingKey
        self.baseURL = baseURL
        self.patchBaseCount = patchBaseCount
        self.limits = limits
        self.fallback = fallback
    }
}
