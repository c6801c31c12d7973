import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension ReportQueue {
    /// `<dir>/credential`: this device's own credential at this queue's collector, from
    /// its `POST /enrol` (JSON `{"credential":…,"device":…}`, mode 0600). It belongs to
    /// this one URL, like the token.
    private var credentialPath: String { "\(directory)/credential" }

    /// The recorded credential; nil when there is none or it is not well formed.
    package func credential() -> ReportCredential? {
        guard let data = FileManager.default.contents(atPath: credentialPath),
              let credential = try? JSONDecoder().decode(ReportCredential.self, from: data), credential.isValid else { return nil }
        return credential
    }

    /// Records `credential` (nil removes it): replaced atomically, mode 0600, fsync'd.
    package func remember(credential: ReportCredential?) throws {
        guard let credential else {
            unlink(credentialPath)
            return
        }
        try prepare()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try FileSystem.writeAtomically(try encoder.encode(credential), to: credentialPath, mode: 0o600)
    }
}
