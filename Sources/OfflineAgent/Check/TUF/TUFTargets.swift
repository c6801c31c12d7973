/// Targets metadata: every target path with its length and hashes.
package struct TUFTargets: Sendable {
    package let metadata: TUFMetadata
    package let targets: [String: TUFTargetFile]

    package init(_ bytes: some Collection<UInt8>) throws {
        metadata = try TUFMetadata(bytes, type: "targets")
        var targets: [String: TUFTargetFile] = [:]
        for (path, value) in try metadata.signed.object("targets") {
            targets[path] = try TUFTargetFile(TUFFields(value, context: "targets.\(StrictJSON.printable(path))"))
        }
        self.targets = targets
    }
}
