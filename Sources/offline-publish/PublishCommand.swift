import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Package a directory of built web files as a new version of an app.",
        discussion: """
            Writes into OUT/APP/: VERSION.zip (stored entries, sorted names, fixed timestamps: \
            identical input gives identical bytes), VERSION.zip.gz, BSDIFF40 patches FROM-VERSION.bsdiff \
            from the last 3 published versions, a static manifest.json (the gzip-compressed full \
            package, URLs relative to it) with manifest.json.sig when --key is given, and state.json. \
            Host OUT on any static server, or serve it with offline-server.

            Settings not given (mini version, whitelist, rollout, network type, expiry) keep their \
            previous values; a first publish defaults to: mini version = VERSION, rollout 100, \
            network type any, no expiry, epoch 0. A whitelist is required (given now or kept): without one \
            devices would install the package and serve none of it. --key FILE signs the manifest; \
            publishing unsigned needs --unsigned (devices then need --allow-unsigned). For an app \
            delegated to its own key (`delegate`), --key is that key and --snapshot-key the key of the \
            TUF snapshot and timestamp roles.

            --trial-launches N asks devices to keep this version on trial: unless the page or its host \
            confirms it (offline-agent mark-good, or POST /.offline-agent/mark-good through serve) within \
            N launches, it is rolled back. Without it the version is good once installed. Each version \
            asks for itself (docs/PUBLISHING.md, "Trials"). VERSION must be greater than the latest (unless \
            --epoch N is above the latest's epoch: the recovery from a version published too high), and an \
            expiry that has already passed (given or kept) is refused: no device would accept it.

            --stage (default 100) or --stage-schedule starts a staged rollout: devices whose bucket is \
            above the stage keep their version. Steer it later with `stage`, `set`, `revert`, \
            `promote` and `history` (docs/PUBLISHING.md, "Running a release").

            The source tree is checked first with the rules devices apply to packages (no names \
            differing only in case or Unicode normalisation, no links or special files, no backslashes, \
            names within 1024 bytes, components within 255 bytes, at most 64 levels, 100 000 files and \
            1 GiB); a refusal names the offending path. Nothing in OUT changes unless the whole \
            publish succeeds.
            """
    )

    @Option(help: "The app name ([a-z0-9][a-z0-9._-]{0,63}).") var app: String
    @Option(help: "The new version (dotted decimal, greater than the latest).") var version: String
    @Option(help: "The directory of built web files (the app root).") var source: String
    @Option(help: "The publish directory.") var out: String
    @Option(help: "The lowest version still allowed to be used offline.") var miniVersion: String?
    @Option(help: "A URL prefix the package serves (repeat for several).") var whitelist: [String] = []
    @Option(help: "Share of devices (0-100) allowed to use the package offline.") var rollout: Int?
    @Option(help: "any, or wifi to download only on unmetered networks.") var networkType: String?
    @Option(help: "RFC 3339 time after which manifests must not be trusted, or 'never'.") var expires: String?
    @Option(help: "Ed25519 private key file (from keygen) to sign manifest.json with.") var key: String?
    @Option(help: "TUF: the snapshot and timestamp key, when --key is the app's delegated key (default: --key).") var snapshotKey: String?
    @Flag(help: "Publish without a signature (no --key): devices must then sync with --allow-unsigned.") var unsigned = false
    @Option(help: "Ask devices to keep this version on trial for N launches, rolled back unless confirmed (default: no trial).")
    var trialLaunches: Int?
    @Option(help: "Make the static manifest's URLs absolute: BASE_URL/APP/FILE.") var baseUrl: String?
    @Option(help: "The entry page (a file of the package, e.g. index.html) that single-page routes get on a mirrored origin.")
    var fallback: String?
    @Option(help: "Staged rollout: share of devices (0-100) that may take this version (default 100).") var stage: Int?
    @Option(help: "Staged rollout in time after publishing: PERCENT@OFFSET,... (e.g. 5@0h,25@24h,100@72h; units s m h d).")
    var stageSchedule: String?
    @Option(help: "The release epoch (default: the latest's). A higher epoch may publish a version below the latest; it never goes down.")
    var epoch: Int?
    @Flag(help: "Publish a source with no entry page at its root (no index.html, no --fallback file): files other pages load, not a site.")
    var noEntryPage = false
    @OptionGroup var lock: LockOptions

    func run() async throws {
        try await reportingFailures {
            let result = try Publisher.publish(try options())
            let release = result.release
            print("published \(result.state.app) \(release.version) to \(result.appDirectory)")
            print("  \(release.packageFile)  \(release.size) bytes  sha256 \(release.sha256)")
            print("  \(release.gzipFile)  \(release.gzipSize) bytes  sha256 \(release.gzipSha256)")
            for patch in result.patches {
                print("  \(patch.file)  \(patch.size) bytes  sha256 \(patch.sha256)")
            }
            print("  \(Publisher.manifestFile)\(result.signaturePath == nil ? "" : " + \(Publisher.signatureFile)")")
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }

    private func options() throws -> PublishOptions {
        func usage(_ reason: String) -> PublishError { PublishError(.usage, reason) }
        guard let version = Version(version) else { throw usage("invalid version '\(self.version)': \(Version.format)") }
        if key == nil, !unsigned {
            throw usage("no --key: give --key FILE (offline-publish keygen makes one) to sign the manifest, or --unsigned to publish without a signature")
        }
        if key != nil, unsigned { throw usage("--unsigned cannot be combined with --key") }
        var options = PublishOptions(
            app: app, version: version, sourceDirectory: source, publishDirectory: out,
            whitelist: whitelist.isEmpty ? nil : whitelist, rollout: rollout, baseURL: baseUrl, fallback: fallback)
        options.trialLaunches = trialLaunches
        options.epoch = epoch
        options.lockWait = try lock.wait()
        options.requireWhitelist = true
        options.requireEntryPage = !noEntryPage
        if let miniVersion {
            guard let parsed = Version(miniVersion) else { throw usage("invalid mini version '\(miniVersion)': \(Version.format)") }
            options.miniVersion = parsed
        }
        if let networkType {
            guard let parsed = Manifest.NetworkType(rawValue: networkType) else {
                throw usage("network type must be 'any' or 'wifi', not '\(networkType)'")
            }
            options.networkType = parsed
        }
        if let expires {
            if expires == "never" {
                options.expires = .never
            } else {
                guard let date = RFC3339.date(from: expires) else { throw usage("--expires '\(expires)' is not an RFC 3339 time") }
                guard date > Date() else { throw usage("--expires \(expires) has already passed: no device would accept the manifest") }
                options.expires = .at(date)
            }
        }
        options.stage = stage
        if let stageSchedule {
            guard let steps = ManifestStageStep.parseSchedule(stageSchedule) else {
                throw usage("--stage-schedule '\(stageSchedule)' is not PERCENT@OFFSET,... (e.g. 5@0h,25@24h,100@72h)")
            }
            options.stageSchedule = steps
        }
        if let key { options.signingKey = try SigningKey(contentsOfFile: key) }
        if snapshotKey != nil, key == nil { throw usage("--snapshot-key goes with --key") }
        options.snapshotKey = try snapshotKey.map(SigningKey.init(contentsOfFile:))
        return options
    }
}
