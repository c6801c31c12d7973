import Crypto
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Maps whitelisted URLs to files of active versions (`docs/PROTOCOL.md`, "Using a package").
public struct Resolver: Sendable {
    /// The store whose active versions answer.
    public let store: Store
    /// The device id that places this device in each app's rollout.
    public let deviceID: String

    /// A resolver over `store` for the device `deviceID` (see `DeviceID.load(root:)`).
    public init(store: Store, deviceID: String) {
        self.store = store
        self.deviceID = deviceID
    }

    /// `1 + (first 4 bytes of SHA-256("<device id>:<app>") as big-endian) mod 100`.
    public static func rolloutBucket(deviceID: String, app: String) -> Int {
        let digest = Array(SHA256.hash(data: Data("\(deviceID):\(app)".utf8)))
        let value = UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
        return 1 + Int(value % 100)
    }

    /// Resolves `url` against every app of the store; the longest matching whitelist prefix wins.
    ///
    /// An origin belongs to one app (`docs/PROTOCOL.md`, "Who claims an origin"): when the
    /// active whitelists of two apps name the URL's origin (a root from before the rule),
    /// neither answers for it and the URL goes to the network.
    public func resolve(_ url: URL) -> Resolution {
        resolve(url, among: activeApps())
    }

    /// Every app of the store with an active version, as `resolve` weighs it: the record,
    /// the bad mark and the kill switch (`fallbackReason`), read from the root now.
    public func activeApps() -> [ResolvableApp] {
        let lifecycle = Lifecycle(store: store)
        return store.apps().compactMap { app in
            guard let installed = store.active(app) else { return nil }
            return ResolvableApp(
                app: app, installed: installed, bad: lifecycle.isBad(app, installed.version),
                fallback: fallbackReason(app: app, installed: installed))
        }
    }

    /// `resolve(_:)` over `apps`, an `activeApps()` reading the caller keeps while the
    /// files it came from are unchanged: only the file `url` names is looked up on disk.
    public func resolve(_ url: URL, among apps: [ResolvableApp]) -> Resolution {
        guard let target = ParsedURL(url) else { return .network(.notWhitelisted, app: nil) }
        let targetOrigin = OriginClaims.origin(of: url.absoluteString)
        var best: (app: ResolvableApp, rest: String, length: Int)?
        var claimants = 0
        for app in apps {
            if let targetOrigin, OriginClaims.origins(of: app.installed.whitelist).contains(targetOrigin) { claimants += 1 }
            for entry in app.installed.whitelist {
                guard let prefix = ParsedURL(string: entry), let rest = target.rest(after: prefix) else { continue }
                if best == nil || prefix.path.count > best!.length {
                    best = (app, rest, prefix.path.count)
                }
            }
        }
        guard let best, claimants <= 1 else { return .network(.notWhitelisted, app: nil) }
        let app = best.app.app, installed = best.app.installed
        guard !best.app.bad else { return .network(.badVersion, app: app) }
        if let reason = best.app.fallback { return .network(reason, app: app) }
        let directory = store.versionDirectory(app, installed.version)
        guard let path = Self.file(at: best.rest, in: directory) else { return .network(.missingFile, app: app) }
        return .file(ResolvedFile(app: app, version: installed.version, path: path, versionDirectory: directory, relativePath: best.rest))
    }

    /// Why the active version `installed` of `app` is not used offline at all, or nil
    /// when it is: `docs/PROTOCOL.md`'s rules 1 and 2, the kill switch every way of serving a
    /// package applies (`resolve`, and each response of `offline-agent serve`).
    ///
    /// - `belowMiniVersion`: the version is below the higher of its record's `miniVersion`
    ///   and the last trusted manifest's (`checkStatePath(app:)`);
    /// - `outsideRollout`: this device's bucket is above the record's `rollout`.
    public func fallbackReason(app: String, installed: InstalledVersion) -> FallbackReason? {
        guard installed.version >= store.effectiveMiniVersion(app, record: installed) else { return .belowMiniVersion }
        guard Self.rolloutBucket(deviceID: deviceID, app: app) <= installed.rollout else { return .outsideRollout }
        return nil
    }

    /// The file besides the version record whose contents `fallbackReason` reads (the
    /// app's check state, with the last known `miniVersion`): a cache of its answer is
    /// stale once either file changes.
    public func checkStatePath(app: String) -> String {
        store.checkStatePath(app)
    }

    /// The regular file a percent-encoded relative path names inside `directory`, or nil when
    /// it does not exist or would leave the directory (`..`, NUL, symlinks).
    public static func file(at encodedRest: String, in directory: String) -> String? {
        guard let decoded = encodedRest.percentDecoded else { return nil }
        var rest = decoded
        if rest.isEmpty || rest.endsWithSlash { rest += "index.html" }
        // Bytes, not Characters: a separator inside a grapheme cluster is still one to the kernel.
        guard !rest.containsByte(0), !rest.containsByte(UInt8(ascii: "\\")), !rest.startsWithSlash else { return nil }
        let components = rest.pathSegments
        guard components.allSatisfy({ !$0.isEmpty && !$0.isDotSegment }) else { return nil }
        // lstat every component: the extractor never makes symlinks, so any found is hostile.
        var path = directory
        for (position, component) in components.enumerated() {
            path += "/\(component)"
            var st = stat()
            guard lstat(path, &st) == 0 else { return nil }
            let type = st.st_mode & S_IFMT
            if type == S_IFLNK { return nil }
            // The last by position: a directory may share the file's name (`docs/api/docs`).
            if position == components.count - 1 { guard type == S_IFREG else { return nil } }
        }
        return path
    }
}
