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

    /// `<dir>/enrol-refused`: when the collector last answered `404` to `POST /enrol` (it
    /// enrols nobody: an older collector, or one without a token), in seconds since 1970.
    private var enrolRefusedPath: String { "\(directory)/enrol-refused" }

    /// Whether the collector refused enrolment less than a day before `now` (a clock set
    /// back past the mark does not count): the sender then does not ask at every flush.
    package func enrolmentRefusedRecently(now: Date) -> Bool {
        guard let data = FileManager.default.contents(atPath: enrolRefusedPath),
              let at = Double(String(decoding: data, as: UTF8.self).trimmingWhitespace()) else { return false }
        let elapsed = now.timeIntervalSince1970 - at
        return elapsed >= 0 && elapsed < 86_400
    }

    /// Records when the collector refused enrolment (nil: it enrols now, the mark goes).
    package func rememberEnrolmentRefused(at time: Date?) throws {
        guard let time else {
            unlink(enrolRefusedPath)
            return
        }
        try prepare()
        try FileSystem.writeAtomically(Data(String(Int64(time.timeIntervalSince1970)).utf8), to: enrolRefusedPath)
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
