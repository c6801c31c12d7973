import ArgumentParser
import CommandSupport
import Foundation
import OfflineAgent
import OfflinePublish

struct KeygenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Create an Ed25519 key pair for signing manifests.",
        discussion: """
            Writes the private key to FILE (base64 of 32 raw bytes, mode 0600) and the public key \
            to FILE.pub, and prints the public key: configure agents with it, sign with \
            `publish --key FILE` or `offline-server --key FILE`.
            """
    )

    @Option(name: .customLong("out"), help: "Where to write the private key.") var file: String
    @Flag(help: "Replace an existing key file.") var force = false

    func run() async throws {
        try await reportingFailures {
            let key = SigningKey.generate()
            try key.write(to: file, overwrite: force)
            print(key.publicKeyBase64)
            // On stderr, so scripts reading the key from stdout are unchanged: signature
            // failures on a device name the fingerprints it trusts, to compare with this.
            printError("public key \(file).pub, fingerprint \(try KeyFingerprint.of(base64: key.publicKeyBase64)); give devices \(file).pub, never \(file)")
        }
    }
}
