import OfflineAgent

extension ServerFault {
    /// The longest `latency` or `stall` a spec may ask for.
    static let maxDuration = Duration.seconds(600)

    /// Parses one `--fault` spec, strictly: `FAULT[@SCOPE][*COUNT]` where FAULT is
    ///
    /// - `latency=DURATION` and `stall=DURATION` — `500ms`, `2s` (1 ms … 600 s);
    /// - `status=CODE` or `status=CODE:retry-after=SECONDS` — CODE 400…599;
    /// - `truncate=FRACTION` — a decimal 0 ≤ f < 1 (`0`, `0.5`);
    /// - `corrupt=KIND` — KIND is the scope itself (`manifest`, `sig`, `package`, `patch`,
    ///   `any`), so `corrupt` takes no `@SCOPE`;
    /// - `reset-after=SIZE` — bytes, or with a `k`/`m` suffix KiB/MiB (`64k`);
    ///
    /// SCOPE is `manifest`, `sig`, `package`, `patch` or `any` (the default) and COUNT a
    /// positive integer (the first COUNT matching requests only).
    ///
    /// - Throws: `OfflineAgentError` (`usage`) naming the spec and what is wrong with it.
    public init(parsing spec: String) throws {
        func refuse(_ reason: String) -> ServerError {
            ServerError(.usage, "--fault '\(spec)': \(reason)", cause: .usage)
        }
        var rest = Substring(spec)
        var count: Int?
        if let star = rest.lastIndex(of: "*") {
            let text = rest[rest.index(after: star)...]
            guard let value = Self.integer(text), value > 0, value <= 1_000_000_000 else {
                throw refuse("count '*\(text)' must be a whole number from 1 to 1000000000")
            }
            count = value
            rest = rest[..<star]
        }
        var scope: ServerFaultScope?
        if let at = rest.lastIndex(of: "@") {
            let text = rest[rest.index(after: at)...]
            guard let value = ServerFaultScope(rawValue: String(text)) else {
                throw refuse("unknown scope '\(text)' (manifest, sig, package, patch or any)")
            }
            scope = value
            rest = rest[..<at]
        }
        guard let equals = rest.firstIndex(of: "=") else {
            throw refuse("expected NAME=VALUE (latency, status, truncate, corrupt, reset-after or stall)")
        }
        let name = rest[..<equals], value = rest[rest.index(after: equals)...]
        let kind: Kind
        switch name {
        case "latency", "stall":
            guard let duration = Self.duration(value) else {
                throw refuse("\(name) must be a duration from 1ms to 600s, such as 500ms or 2s")
            }
            kind = name == "latency" ? .latency(duration) : .stall(duration)
        case "status":
            let parts = value.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2, let code = Self.integer(parts[0]), parts[0].count == 3, (400...599).contains(code) else {
                throw refuse("status must be a code from 400 to 599, optionally followed by :retry-after=SECONDS")
            }
            var retryAfter: Int?
            if parts.count == 2 {
                let option = parts[1]
                guard option.hasPrefix("retry-after="), let seconds = Self.integer(option.dropFirst("retry-after=".count)),
                      seconds <= 1_000_000_000 else {
                    throw refuse("after the status code only ':retry-after=SECONDS' is allowed (whole seconds)")
                }
                retryAfter = seconds
            }
            kind = .status(code: code, retryAfter: retryAfter)
        case "truncate":
            guard let fraction = Self.fraction(value) else {
                throw refuse("truncate must be a decimal fraction from 0 up to (not including) 1, such as 0.5")
            }
            kind = .truncate(fraction: fraction)
        case "corrupt":
            guard let target = ServerFaultScope(rawValue: String(value)) else {
                throw refuse("corrupt must name what to corrupt: manifest, sig, package, patch or any")
            }
            guard scope == nil else { throw refuse("corrupt=KIND is its own scope: drop '@\(scope!.rawValue)'") }
            scope = target
            kind = .corrupt
        case "reset-after":
            guard let bytes = Self.size(value) else {
                throw refuse("reset-after must be a size in bytes, or with a k or m suffix (KiB, MiB), such as 64k")
            }
            kind = .resetAfter(bytes: bytes)
        default:
            throw refuse("unknown fault '\(name)' (latency, status, truncate, corrupt, reset-after or stall)")
        }
        self.init(kind, scope: scope ?? .any, count: count)
    }

    /// Plain ASCII digits (no sign, no spaces), at most 10 of them.
    private static func integer(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.count <= 10, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(text)
    }

    /// `NUMBERms` or `NUMBERs`, within 1 ms … `maxDuration`.
    private static func duration(_ text: Substring) -> Duration? {
        let duration: Duration
        if text.hasSuffix("ms"), let value = integer(text.dropLast(2)) {
            duration = .milliseconds(value)
        } else if text.hasSuffix("s"), let value = integer(text.dropLast()) {
            duration = .seconds(value)
        } else {
            return nil
        }
        return duration >= .milliseconds(1) && duration <= maxDuration ? duration : nil
    }

    /// `0`, or `0.` followed by 1…9 digits.
    private static func fraction(_ text: Substring) -> Double? {
        if text == "0" { return 0 }
        guard text.hasPrefix("0."), let digits = integer(text.dropFirst(2)) else { return nil }
        let places = text.count - 2
        guard places <= 9 else { return nil }
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        return Double(digits) / scale
    }

    /// Bytes, KiB (`k`) or MiB (`m`), up to 1 TiB.
    private static func size(_ text: Substring) -> Int? {
        var digits = text, unit = 1
        switch text.last {
        case "k", "K": unit = 1 << 10; digits = text.dropLast()
        case "m", "M": unit = 1 << 20; digits = text.dropLast()
        default: break
        }
        guard let value = integer(digits) else { return nil }
        let (bytes, overflow) = value.multipliedReportingOverflow(by: unit)
        return overflow || bytes > 1 << 40 ? nil : bytes
    }
}
