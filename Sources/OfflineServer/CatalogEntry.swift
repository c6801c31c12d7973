import Foundation
import OfflineAgent
import OfflinePublish
#if canImport(Glibc)
import Glibc
#endif

/// One app of the publish directory, as of one version of its `state.json`.
struct CatalogEntry: Sendable {
    let state: PublishState
    /// Every manifest the app can answer with, rendered once per state change:
    /// per route, the full-package one (key nil) and one per patch base.
    let manifests: [ManifestRoute: [Version?: RenderedManifest]]
    /// Strong ETags of the files `state.json` describes (by name): their SHA-256.
    let fileTags: [String: String]

    func manifest(route: ManifestRoute, current: Version?) -> RenderedManifest? {
        guard let byBase = manifests[route] else { return nil }
        if let current, let patched = byBase[current] { return patched }
        return byBase[nil]
    }
}
