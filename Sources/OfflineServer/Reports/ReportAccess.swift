import OfflineAgent

/// Who may post fleet reports (docs/PROTOCOL.md, "Enrolment"; docs/FLEET.md).
///
/// - No fleet token: an open collector, any sender is accepted (`--open-collector`).
/// - A fleet token (`--report-token`): reports with `Authorization: Bearer TOKEN`, and
///   `POST /enrol` hands each device a credential of its own (`secret`), which its
///   reports then carry as `Authorization: Device ID:CREDENTIAL`.
/// - `requireEnrolment`: only credentials; the shared token only enrols.
public struct ReportAccess: Sendable {
    /// The fleet's shared bearer token; nil: an open collector.
    public var fleetToken: String?
    /// Derives and checks device credentials; `/enrol` answers `404` without it.
    public var secret: CollectorSecret?
    /// Refuse reports sent with the shared token (`401`): only enrolled devices report.
    public var requireEnrolment = false
    /// Requests each authenticated device may send; nil: unlimited.
    public var deviceLimit: ReportRateLimit? = .perDevice

    /// An open collector, no rate limit on anyone.
    public init() {}

    public init(fleetToken: String?, secret: CollectorSecret?, requireEnrolment: Bool = false, deviceLimit: ReportRateLimit? = .perDevice) {
        self.fleetToken = fleetToken
        self.secret = secret
        self.requireEnrolment = requireEnrolment
        self.deviceLimit = deviceLimit
    }

    /// Who sent a report, as far as the collector can tell.
    enum Sender: Sendable, Equatable {
        /// An open collector: nobody was asked.
        case anyone
        /// The fleet's shared token: some device of the fleet, any of them.
        case fleet
        /// This device, by its own credential: the only one its events may name.
        case device(String)
    }

    /// Why a request is refused `401`.
    struct Refusal: Error, Sendable {
        var reason: String
    }

    /// The sender `authorization` (the header's value) proves, or why it proves none.
    func sender(authorization: String?) -> Result<Sender, Refusal> {
        // Without a secret (an open collector) a credential proves nothing and is not needed.
        if let secret, let authorization, let credential = ReportCredential(authorization: authorization) {
            // A changed secret voids every credential: the device enrols again.
            guard secret.verifies(credential) else { return .failure(.init(reason: "the device credential is not valid here: enrol again")) }
            return .success(.device(credential.device))
        }
        guard let fleetToken else { return .success(.anyone) }
        guard Self.bearerMatches(authorization, token: fleetToken) else {
            return .failure(.init(reason: "a report needs the device's credential or the collector's bearer token"))
        }
        guard !requireEnrolment else {
            return .failure(.init(reason: "this collector requires enrolment: POST /enrol with the fleet token, then send the device credential"))
        }
        return .success(.fleet)
    }

    /// `WWW-Authenticate` of a `401`.
    var challenge: String {
        requireEnrolment ? "Device realm=\"offline-server\"" : "Bearer realm=\"offline-server\", Device realm=\"offline-server\""
    }

    /// `Authorization: Bearer TOKEN` with exactly `token`, compared in time independent of
    /// where they differ, so the answer's timing does not reveal a prefix of the token.
    static func bearerMatches(_ header: String?, token: String) -> Bool {
        guard let header, header.count > 7, header.prefix(7).lowercased() == "bearer " else { return false }
        let given = Array(String(header.dropFirst(7)).trimmingWhitespace().utf8), wanted = Array(token.utf8)
        var difference = UInt8(given.count == wanted.count ? 0 : 1)
        for index in 0..<wanted.count { difference |= wanted[index] ^ (index < given.count ? given[index] : 0) }
        return difference == 0
    }
}
