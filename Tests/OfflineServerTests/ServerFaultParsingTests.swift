import Testing
import OfflineAgent
import OfflineServer

/// `--fault` specs, parsed strictly: every accepted form and what it means, and every
/// refused one with the `usage` cause and a reason naming the spec.
@Suite("ServerFault parsing")
struct ServerFaultParsingTests {
    static let valid: [(String, ServerFault)] = [
        ("latency=500ms", ServerFault(.latency(.milliseconds(500)))),
        ("latency=2s@manifest", ServerFault(.latency(.seconds(2)), scope: .manifest)),
        ("latency=600s", ServerFault(.latency(.seconds(600)))),
        ("status=503", ServerFault(.status(code: 503, retryAfter: nil))),
        ("status=503:retry-after=60@manifest", ServerFault(.status(code: 503, retryAfter: 60), scope: .manifest)),
        ("status=429:retry-after=0@sig*3", ServerFault(.status(code: 429, retryAfter: 0), scope: .sig, count: 3)),
        ("status=400*1", ServerFault(.status(code: 400, retryAfter: nil), count: 1)),
        ("status=599@any", ServerFault(.status(code: 599, retryAfter: nil), scope: .any)),
        ("truncate=0.5", ServerFault(.truncate(fraction: 0.5))),
        ("truncate=0", ServerFault(.truncate(fraction: 0))),
        ("truncate=0.999@package*2", ServerFault(.truncate(fraction: 0.999), scope: .package, count: 2)),
        ("corrupt=patch", ServerFault(.corrupt, scope: .patch)),
        ("corrupt=manifest*1", ServerFault(.corrupt, scope: .manifest, count: 1)),
        ("corrupt=any", ServerFault(.corrupt, scope: .any)),
        ("reset-after=64k", ServerFault(.resetAfter(bytes: 64 << 10))),
        ("reset-after=2M@package", ServerFault(.resetAfter(bytes: 2 << 20), scope: .package)),
        ("reset-after=0", ServerFault(.resetAfter(bytes: 0))),
        ("reset-after=1000@patch*5", ServerFault(.resetAfter(bytes: 1000), scope: .patch, count: 5)),
        ("stall=1s@patch", ServerFault(.stall(.seconds(1)), scope: .patch)),
        ("stall=250ms", ServerFault(.stall(.milliseconds(250)))),
    ]

    @Test("accepted specs", arguments: valid)
    func accepted(_ spec: String, _ expected: ServerFault) throws {
        #expect(try ServerFault(parsing: spec) == expected)
    }

    static let invalid: [(String, String)] = [
        ("", "expected NAME=VALUE"),
        ("latency", "expected NAME=VALUE"),
        ("jitter=1s", "unknown fault 'jitter'"),
        ("Latency=1s", "unknown fault 'Latency'"),
        ("latency=", "latency must be a duration"),
        ("latency=5", "latency must be a duration"),
        ("latency=0ms", "latency must be a duration"),
        ("latency=601s", "latency must be a duration"),
        ("latency=1.5s", "latency must be a duration"),
        ("latency=-1s", "latency must be a duration"),
        ("latency=1m", "latency must be a duration"),
        ("stall= 1s", "stall must be a duration"),
        ("status=200", "status must be a code from 400 to 599"),
        ("status=600", "status must be a code from 400 to 599"),
        ("status=0503", "status must be a code from 400 to 599"),
        ("status=abc", "status must be a code from 400 to 599"),
        ("status=503:", "only ':retry-after=SECONDS'"),
        ("status=503:retry-after=", "only ':retry-after=SECONDS'"),
        ("status=503:retry-after=-5", "only ':retry-after=SECONDS'"),
        ("status=503:retry-after=1.5", "only ':retry-after=SECONDS'"),
        ("status=503:retry=60", "only ':retry-after=SECONDS'"),
        ("status=503:retry-after=60:x", "status must be a code"),
        ("truncate=1", "truncate must be a decimal fraction"),
        ("truncate=1.0", "truncate must be a decimal fraction"),
        ("truncate=.5", "truncate must be a decimal fraction"),
        ("truncate=0.", "truncate must be a decimal fraction"),
        ("truncate=50%", "truncate must be a decimal fraction"),
        ("truncate=-0.5", "truncate must be a decimal fraction"),
        ("corrupt=zip", "corrupt must name what to corrupt"),
        ("corrupt=", "corrupt must name what to corrupt"),
        ("corrupt=patch@package", "corrupt=KIND is its own scope"),
        ("corrupt=patch@patch", "corrupt=KIND is its own scope"),
        ("reset-after=64kb", "reset-after must be a size"),
        ("reset-after=k", "reset-after must be a size"),
        ("reset-after=-1", "reset-after must be a size"),
        ("reset-after=2g", "reset-after must be a size"),
        ("reset-after=2000000M", "reset-after must be a size"),
        ("latency=1s@", "unknown scope ''"),
        ("latency=1s@full", "unknown scope 'full'"),
        ("latency=1s@Manifest", "unknown scope 'Manifest'"),
        ("latency=1s*0", "count '*0'"),
        ("latency=1s*", "count '*'"),
        ("latency=1s*-1", "count '*-1'"),
        ("latency=1s*two", "count '*two'"),
        ("latency=1s*3@manifest", "count '*3@manifest'"),
        ("latency=1s*99999999999", "count '*99999999999'"),
    ]

    @Test("refused specs: usage, with a reason naming the spec", arguments: invalid)
    func refused(_ spec: String, _ reason: String) {
        let error = #expect(throws: ServerError.self) { try ServerFault(parsing: spec) }
        #expect(error?.code == .usage && error?.cause == .usage)
        let description = error.map { "\($0)" } ?? ""
        #expect(description.contains("--fault '\(spec)': ") && description.contains(reason), "\(description)")
    }
}
