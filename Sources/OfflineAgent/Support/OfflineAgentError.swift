import FoundationEssentials

/// The one error type of the engine: a phase code, a one-line reason, the path
/// involved (when there is one) and the underlying cause.
public struct OfflineAgentError: Error, Sendable, CustomStringConvertible {
    /// The phase that failed. The CLI maps these to exit statuses.
    public enum Code: String, Sendable, Codable {
        /// Fetching or validating the manifest (HTTP, JSON, signature, version rules).
        case manifest
        /// Downloading a package or patch (HTTP, size, hash, disk space).
        case download
        /// Applying a BSDIFF40 patch.
        case patch
        /// Extracting a package archive.
        case extract
        /// Installing, activating, rolling back or reading local state.
        case install
        /// Another process holds the root's lock.
        case busy
        /// Invalid arguments or configuration given by the caller.
        case usage
        /// Building or publishing packages.
        case publish
        /// Running the loopback package server (`offline-agent serve`).
        case serve
        /// Confirming, marking bad, rolling back, holding or clearing bad marks
        /// (`mark-good`, `mark-bad`, `rollback`, `hold`, `forget-bad`) refused by the
        /// app's state (nothing installed, nothing kept, a version marked bad).
        case lifecycle
    }

    /// Why it failed: a stable, documented code (`docs/PROTOCOL.md`, "Error codes"),
    /// finer than the phase. `sync --json` prints it as `errorCode`.
    public enum Cause: String, Sendable, Codable, CaseIterable {
        // Manifest
        /// The manifest or its signature could not be fetched (status, transport).
        case manifestUnavailable = "manifest-unavailable"
        /// The manifest body breaks a rule of the protocol (a field, a duplicated key, a size).
        case manifestInvalid = "manifest-invalid"
        /// A trusted key is configured and the manifest carries no signature.
        case signatureMissing = "signature-missing"
        /// The signature does not verify with any trusted key.
        case signatureInvalid = "signature-invalid"
        /// The manifest offers a version below the installed one.
        case downgrade
        /// The manifest's `epoch` is below the highest epoch this device accepted (a
        /// replay of a manifest from before a recovery).
        case epochRollback = "epoch-rollback"
        /// The manifest's `expires` instant has passed.
        case expired
        /// The manifest is for another app.
        case wrongApp = "wrong-app"
        /// The manifest's whitelist names an origin the device config does not allow the app
        /// (`allowedOrigins`, by default the origins of its installed whitelist).
        case originNotAllowed = "origin-not-allowed"
        /// The manifest's whitelist names an origin another installed app holds.
        case originClaimed = "origin-claimed"
        // TUF metadata (docs/PROTOCOL.md, "TUF repository")
        /// TUF metadata is malformed: not its role's fields, an unknown key type, a
        /// float, an unsupported `spec_version`.
        case metadataInvalid = "metadata-invalid"
        /// TUF metadata is older than metadata this device already trusts (a replay or rollback).
        case metadataReplay = "metadata-replay"
        /// TUF metadata (root, timestamp, snapshot or targets) has expired.
        case metadataExpired = "metadata-expired"
        /// Fewer distinct trusted keys signed TUF metadata than its role's threshold.
        case thresholdNotMet = "threshold-not-met"
        /// A new root is not the next version, or is not signed by the thresholds of
        /// both the trusted root and itself, or more than 32 rotations were offered.
        case rootChainBroken = "root-chain-broken"
        /// TUF metadata disagrees with what the metadata naming it says (a version or a
        /// hash in timestamp or snapshot): files of different releases mixed.
        case metadataMismatch = "metadata-mismatch"
        /// A file is longer than the length its metadata gives, or than the fixed cap
        /// for metadata without one.
        case lengthExceeded = "length-exceeded"
        /// The manifest, a package or a patch is not a target of the trusted targets
        /// metadata, or is listed with another length or hash.
        case targetUnlisted = "target-unlisted"
        // Transfer
        /// The server could not be reached (refused, unreachable, name not resolved, reset).
        case network
        /// An exchange did not finish within its deadline.
        case timeout
        /// The server answered a status the protocol does not allow here.
        case httpStatus = "http-status"
        /// The server broke the HTTP contract (a 304 nobody asked for, a wrong range, a short body).
        case protocolViolation = "protocol-violation"
        /// A size (declared or received) is above the configured cap or absurd.
        case tooLarge = "too-large"
        /// Downloaded or patched bytes do not hash to the manifest's SHA-256.
        case hashMismatch = "hash-mismatch"
        /// Not enough disk space for the plan, or a write hit ENOSPC/EDQUOT.
        case diskFull = "disk-full"
        // Patch and extract
        /// A BSDIFF40 patch is malformed or does not fit its base.
        case patchInvalid = "patch-invalid"
        /// The archive is damaged (bad central directory, CRC error, unreadable entry).
        case archiveCorrupt = "archive-corrupt"
        /// The archive tries something no package may do (zip-slip, links, bombs,
        /// duplicate or over-long names, too many entries).
        case hostileArchive = "hostile-archive"
        // Local
        /// A local file system operation failed (not disk space).
        case io
        /// Local state is missing, unreadable or inconsistent.
        case stateInvalid = "state-invalid"
        /// A lifecycle step named a version that is not the active one (a page still
        /// running a version a sync replaced): nothing changed.
        case versionMismatch = "version-mismatch"
        /// Another process holds the root's lock.
        case busy
        /// Invalid arguments or configuration.
        case usage
        /// A publishing step failed.
        case publish
        /// `serve` cannot listen on its address (in use, not on this machine, not permitted).
        case listenFailed = "listen-failed"
        /// The sync's task was cancelled, or its agent shut down, before it finished;
        /// the installed version is as it was.
        case cancelled
        /// Anything not classified above.
        case unexpected

        /// The cause used when a throw site names none.
        public static func `default`(for code: Code) -> Cause {
            switch code {
            case .manifest: .manifestInvalid
            case .download: .network
            case .patch: .patchInvalid
            case .extract: .archiveCorrupt
            case .install: .io
            case .busy: .busy
            case .usage: .usage
            case .publish: .publish
            case .serve: .listenFailed
            case .lifecycle: .stateInvalid
            }
        }
    }

    /// The phase that failed.
    public let code: Code
    /// Why it failed, as a stable code.
    public let cause: Cause
    /// One line saying what went wrong, for people.
    public let reason: String
    /// The file or URL concerned, when there is one.
    public let path: String?
    /// The error that caused this one, when there is one.
    public let underlying: (any Error & Sendable)?

    /// An error of phase `code`.
    ///
    /// - Parameters:
    ///   - code: The phase that failed.
    ///   - reason: One line for people.
    ///   - cause: The stable code; the phase's default when nil.
    ///   - path: The file or URL concerned.
    ///   - underlying: The error that caused this one.
    public init(_ code: Code, _ reason: String, cause: Cause? = nil, path: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.cause = cause ?? .default(for: code)
        self.reason = reason
        self.path = path
        self.underlying = underlying
    }

    /// `phase: reason (path): underlying`, one line.
    public var description: String {
        var text = "\(code.rawValue): \(reason)"
        if let path { text += " (\(path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }
}
