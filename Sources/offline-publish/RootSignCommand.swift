import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

/// `offline-publish root sign`.
struct RootSignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Add a key holder's signature to a root proposal.")

    @Option(help: "The proposal (from root propose).") var file: String
    @Option(help: "The Ed25519 private key file of a current or proposed root key.") var key: String

    func run() async throws {
        try await reportingFailures {
            let fingerprint = try TUFRootRotation.sign(file: file, key: try SigningKey(contentsOfFile: key))
            print("signed \(file) with \(fingerprint)")
        }
    }
}
