/// What `Store.install(_:app:packageSha256:manifest:via:limits:trialLaunches:notice:)`
/// builds a version from. Either way the tree is links to the store's objects, made by
/// the extractor's builder after its checks, and the package is kept for the next patch.
enum InstallSource: Sendable {
    /// A verified package file: its entries are checked and extracted (libzip) into
    /// objects; the zip, or its skeleton when it is plain stored, is kept.
    case archive(String)
    /// A streamed patch's output, verified against `packageSha256`: its objects are in
    /// `ObjectStore` already, the splitter holds its skeleton and each entry's object.
    case streamed(PatchedPackageSplitter, ObjectStore)
}
