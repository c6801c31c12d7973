import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

/// `offline-publish root propose`.
struct RootProposeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "propose",
        abstract: "Write the next root of a publish directory to a staging file, unsigned.",
        discussion: """
            Roles not named keep their keys and threshold. --ROLE-key names a public key file \
            (FILE.pub from keygen), repeated for several; it replaces the role's keys. A threshold \
            not given stays, lowered to the number of keys.
            """
    )

    @Option(help: "The publish directory.") var out: String
    @Option(help: "The staging file to write the proposal to.") var file: String
    @Option(help: "A public key file (FILE.pub) for the root role (repeat for several).") var rootKey: [String] = []
    @Option(help: "How many root keys must sign.") var rootThreshold: Int?
    @Option(help: "A public key file for the targets role (repeat for several).") var targetsKey: [String] = []
    @Option(help: "How many targets keys must sign.") var targetsThreshold: Int?
    @Option(help: "A public key file for the snapshot role (repeat for several).") var snapshotKey: [String] = []
    @Option(help: "How many snapshot keys must sign.") var snapshotThreshold: Int?
    @Option(help: "A public key file for the timestamp role (repeat for several).") var timestampKey: [String] = []
    @Option(help: "How many timestamp keys must sign.") var timestampThreshold: Int?
    @Option(help: "How long the new root is valid: a duration like 365d (default), or an RFC 3339 time.") var expires: String?

    func run() async throws {
        try await reportingFailures {
            var changes: [String: TUFRootRotation.RoleChange] = [:]
            for (role, files, threshold) in [
                ("root", rootKey, rootThreshold), ("targets", targetsKey, targetsThreshold),
                ("snapshot", snapshotKey, snapshotThreshold), ("timestamp", timestampKey, timestampThreshold),
            ] where !files.isEmpty || threshold != nil {
                changes[role] = TUFRootRotation.RoleChange(
                    keys: files.isEmpty ? nil : try files.map(TUFRootRotation.publicKey(file:)), threshold: threshold)
            }
            let until = try RootCommand.until(expires ?? "365d")
            let version = try TUFRootRotation.propose(publishDirectory: out, file: file, changes: changes, expires: until)
            print("proposed root v\(version) in \(file), expires \(RFC3339.string(from: until)); now each holder runs offline-publish root sign --file \(file) --key KEY")
        }
    }
}
