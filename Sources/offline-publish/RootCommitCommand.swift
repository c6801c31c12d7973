import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

/// `offline-publish root commit`.
struct RootCommitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "commit",
        abstract: "Check a signed root proposal as a device would and write it as metadata/N+1.root.json.")

    @Option(help: "The publish directory.") var out: String
    @Option(help: "The signed proposal.") var file: String
    @Option(help: "Then re-sign targets, snapshot and timestamp with this key (the new root's online key).") var key: String?
    @OptionGroup var lock: LockOptions

    func run() async throws {
        try await reportingFailures {
            let version = try TUFRootRotation.commit(publishDirectory: out, file: file, lockWait: try lock.wait())
            print("committed metadata/\(version).root.json")
            if let key {
                let versions = try TUFRepository.refresh(publishDirectory: out, keys: TUFKeys(all: try SigningKey(contentsOfFile: key)), now: Date())
                print("re-signed targets v\(versions.targets), snapshot v\(versions.snapshot), timestamp v\(versions.timestamp)")
            } else {
                print("re-sign targets, snapshot and timestamp with the new keys: the next publish or release verb does, or root commit --key")
            }
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
