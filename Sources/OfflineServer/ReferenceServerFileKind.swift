/// What a published file is, as the reference server's metrics label it (`kind`).
public enum ReferenceServerFileKind: String, Sendable, CaseIterable {
    /// A full package, `V.zip` or `V.zip.gz`.
    case full
    /// A patch, `A-B.bsdiff`.
    case patch
    /// The static manifest's signature, `manifest.json.sig`.
    case sig
    /// A manifest: the static `manifest.json`, and (for bytes sent) the manifests
    /// `/manifest` and `/NAME/manifest` answer.
    case manifest

    /// The kind of a file name the server hands out; nil for any other name
    /// (`state.json`, leftovers), which the server answers 404.
    init?(fileName name: String) {
        guard ReferenceServerResponder.contentType(ofServableFile: name) != nil else { return nil }
        if name.hasSuffix(".bsdiff") {
            self = .patch
        } else if name.hasSuffix(".sig") {
            self = .sig
        } else if name.hasSuffix(".zip") || name.hasSuffix(".zip.gz") {
            self = .full
        } else {
            self = .manifest
        }
    }
}
