import FoundationEssentials

extension Resolver {
    /// The origins `offline-agent serve` mirrors: every origin (scheme, host, port) an
    /// active version's whitelist names and `MirrorOrigin` can mirror.
    public func mirroredOrigins() -> Set<MirrorOrigin> {
        Self.mirroredOrigins(of: store.apps().compactMap { store.active($0) })
    }

    /// The origins the whitelists of `versions` (the active ones) name that `MirrorOrigin` can mirror.
    static func mirroredOrigins(of versions: [InstalledVersion]) -> Set<MirrorOrigin> {
        var origins: Set<MirrorOrigin> = []
        for installed in versions {
            for prefix in installed.whitelist {
                guard let url = ParsedURL(string: prefix),
                      let origin = MirrorOrigin(scheme: url.scheme, host: url.host, port: url.port) else { continue }
                origins.insert(origin)
            }
        }
        return origins
    }

    /// Where a web view loads `url` through `serve` listening on `servePort`: the same
    /// path, query and fragment on the mirror host of its origin
    /// (`http://h5.example.com.localhost:8421/shop/?q#f`), or nil when no active
    /// whitelist names the URL's origin (then load `url` itself). The mirror serves
    /// whitelisted files from the package and forwards everything else to the origin,
    /// so the URL is right whatever the kill switch says.
    public func mirrorURL(for url: URL, servePort: Int) -> String? {
        guard let origin = MirrorOrigin(url: url), mirroredOrigins().contains(origin) else { return nil }
        return origin.mirrorURL(for: url, servePort: servePort)
    }

    /// `mirrorURL(for:servePort:)` over `apps`, an `activeApps()` reading the caller keeps.
    public func mirrorURL(for url: URL, servePort: Int, among apps: [ResolvableApp]) -> String? {
        guard let origin = MirrorOrigin(url: url), Self.mirroredOrigins(of: apps.map(\.installed)).contains(origin) else { return nil }
        return origin.mirrorURL(for: url, servePort: servePort)
    }
}
