/// One fault `offline-server --fault` injects, for testing clients against a misbehaving
/// server: what goes wrong, on which requests, and how many times.
///
/// Spec syntax (see `init(parsing:)`): `FAULT[@SCOPE][*COUNT]`, e.g.
/// `status=503:retry-after=60@manifest*3`, `truncate=0.5@package`, `corrupt=patch`.
public struct ServerFault: Sendable, Equatable {
    /// What the server does wrong.
    public enum Kind: Sendable, Equatable {
        /// Waits this long before sending the response head.
        case latency(Duration)
        /// Answers this status (400…599) instead of the real response, with a
        /// `Retry-After: SECONDS` header when given.
        case status(code: Int, retryAfter: Int?)
        /// Sends the real head (its `Content-Length` included), then closes the
        /// connection after this fraction (0 ≤ f < 1) of the body.
        case truncate(fraction: Double)
        /// Inverts one byte in the middle of the body (XOR 0xFF), length unchanged.
        case corrupt
        /// Sends this many bytes of the body, then resets the connection (TCP RST).
        case resetAfter(bytes: Int)
        /// Pauses this long half way through the body, then sends the rest.
        case stall(Duration)

        /// The name a spec and the `fault` label of `offline_server_faults_total` use.
        public var name: String {
            switch self {
            case .latency: "latency"
            case .status: "status"
            case .truncate: "truncate"
            case .corrupt: "corrupt"
            case .resetAfter: "reset-after"
            case .stall: "stall"
            }
        }

        /// Faults acting on a body already under way (the others act before the head).
        var actsOnBody: Bool {
            switch self {
            case .latency, .status: false
            case .truncate, .corrupt, .resetAfter, .stall: true
            }
        }
    }

    /// What goes wrong.
    public var kind: Kind
    /// The requests it aims at (`any` by default).
    public var scope: ServerFaultScope
    /// Only the first `count` matching requests get the fault, later ones are healthy;
    /// nil: every matching request.
    public var count: Int?

    /// A fault of `kind` on requests of `scope`, the first `count` of them (nil: all).
    public init(_ kind: Kind, scope: ServerFaultScope = .any, count: Int? = nil) {
        self.kind = kind
        self.scope = scope
        self.count = count
    }
}
