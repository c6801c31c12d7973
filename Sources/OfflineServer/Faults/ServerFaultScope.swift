/// Which requests a `ServerFault` is aimed at (`@SCOPE` in a `--fault` spec).
public enum ServerFaultScope: String, Sendable, CaseIterable {
    /// The manifests: `/manifest`, `/NAME/manifest` and the static `/NAME/manifest.json`.
    case manifest
    /// The static manifest's signature, `/NAME/manifest.json.sig`.
    case sig
    /// Full packages, `/NAME/V.zip` and `/NAME/V.zip.gz`.
    case package
    /// Patches, `/NAME/A-B.bsdiff`.
    case patch
    /// Every request but `/metrics` (the default).
    case any

    /// The scope a request path falls in: nil for `/metrics` (never faulted, so a test
    /// can always read the counts) and for paths that are none of the four kinds, which
    /// only `any` reaches.
    static func of(path: String) -> ServerFaultScope? {
        let segments = path.pathSegments.dropFirst()
        switch segments.count {
        case 1 where segments.first == "manifest", 2 where segments.last == "manifest":
            return .manifest
        case 2:
            switch ReferenceServerFileKind(fileName: String(segments.last!)) {
            case .full: return .package
            case .patch: return .patch
            case .sig: return .sig
            case .manifest: return .manifest
            case nil: return nil
            }
        default:
            return nil
        }
    }

    /// Whether a fault of this scope applies to a request of scope `request`
    /// (nil: a path of none of the four kinds). `/metrics` is filtered out before.
    func covers(_ request: ServerFaultScope?) -> Bool {
        self == .any || self == request
    }
}
