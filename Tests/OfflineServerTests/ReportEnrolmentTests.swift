import Foundation
import Logging
import OfflineAgent
import OfflinePublish
@testable import OfflineServer
import TestSupport
import Testing

/// Row 3 of issue 38, as an attacker tries it: a report speaks only for the device that
/// sent it. Devices enrol with the fleet token and get a credential of their own; with
/// enrolment required, made-up ids, the shared token and another device's credential move
/// no figure, only JSON is taken, and one flooding device is held back alone.
@Suite("Fleet reports: enrolment, device credentials, JSON only, rate limit")
struct ReportEnrolmentTests {
    typealias C = FleetReportClient
    static let token = "fleet-T0ken"

    /// One request with curl: status and body.
    static func request(
        _ url: String, contentType: String? = "application/json", headers: [String] = [], body: Data
    ) async throws -> C.Answer {
        let file = NSTemporaryDirectory() + "enrol-\(UUID().uuidString).json"
        try body.write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        var arguments = ["-sS", "--max-time", "120", "-X", "POST", "-D", "-"]
        if let contentType { arguments += ["-H", "Content-Type: \(contentType)"] }
        for header in headers { arguments += ["-H", header] }
        arguments += ["--data-binary", "@" + file, "-w", "\n%{http_code}", url]
        let result = try await CLI.run(arguments, executable: "/usr/bin/curl")
        #expect(result.status == 0, "curl: \(result.stderr)")
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        return C.Answer(status: status, body: lines.joined(separator: "\n"))
    }

    /// `POST /enrol` for `device` with `token`: the credential's `Authorization` value.
    static func enrol(_ base: String, _ device: String, token: String = token) async throws -> String {
        let answer = try await request(base + "/enrol", headers: ["Authorization: Bearer \(token)"], body: Data(#"{"device":"\#(device)"}"#.utf8))
        #expect(answer.status == 200, "\(answer.body)")
        let json = String(answer.body.split(separator: "\r\n\r\n", maxSplits: 1).last ?? "")
        let credential = try JSONDecoder().decode(ReportCredential.self, from: Data(json.utf8))
        #expect(credential.device == device)
        return credential.authorization
    }

    static func configuration(_ dir: String, database: String, key: SigningKey? = nil) -> ReferenceServer.Configuration {
        var configuration = ReferenceServer.Configuration(directory: dir, port: 0, signingKey: key, reportsDatabase: database)
        configuration.reportToken = token
        configuration.collectorSecret = dir + "/collector-secret"
        return configuration
    }

    static func databases() -> [String] { PostgresTestDatabase.isAvailable ? ["sqlite", "postgres"] : ["sqlite"] }

    @Test("with enrolment on, 20 fabricated failed devices (shared token, no token, or another device's credential) halt nothing; one device's 1000 failures count once; real devices still halt it",
          arguments: databases())
    func fabricatedDevicesCannotHalt(_ kind: String) async throws {
        let dir = try PublishFixtures.temporaryDirectory("enrol-halt")
        defer { PublishFixtures.cleanUp(dir) }
        let key = SigningKey.generate()
        try AutoHaltTests.publishStaged(dir, key: key, stage: 40)
        let postgres = kind == "postgres" ? try await PostgresTestDatabase("enrolhalt") : nil
        defer { postgres?.drop() }
        let database = postgres?.url ?? dir + "/reports.sqlite"
        let inside = AutoHaltTests.devices("in", inStage: true, stage: 40, count: 40)
        let fabricated = inside[20..<40].map { C.event("failed", device: $0, version: "2.0.0", ["errorCode": "hash-mismatch"]) }

        // Before enrolment was required: the shared token stores 20 made-up failures (no auto-halt then).
        let before = try await ReferenceServer(configuration: Self.configuration(dir, database: database, key: key)).start()
        #expect(try await C.post(before.baseURL, try C.body(fabricated), headers: ["Authorization: Bearer \(Self.token)"]).receipt?.accepted == 20)
        await before.stop()

        var configuration = Self.configuration(dir, database: database, key: key)
        configuration.requireEnrolment = true
        configuration.autoHalt = try AutoHaltRules(parsing: "failure-rate>25%,min-devices=8,window=1h")
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let base = server.baseURL
        let fresh = { inside[20..<40].map { C.event("failed", device: $0, version: "2.0.0", ["errorCode": "network"]) } }
        // The shared token, no token, a made-up credential: 401, nothing stored.
        for headers in [["Authorization: Bearer \(Self.token)"], [], ["Authorization: Device \(inside[20]):\(String(repeating: "ab", count: 32))"]] {
            let refused = try await C.post(base, try C.body(fresh()), headers: headers)
            #expect(refused.status == 401, "\(headers): \(refused.body)")
        }
        // A real device's credential does not speak for another id, not even among its own events.
        let attacker = try await Self.enrol(base, inside[0])
        let forged = try await C.post(base, try C.body([C.event("failed", device: inside[0], version: "2.0.0")] + fresh()), headers: ["Authorization: \(attacker)"])
        #expect(forged.status == 400 && forged.body.contains("its own device only"), "\(forged.body)")
        // Nor does it enrol, or work, under another id: the credential is bound to the id.
        let stolen = try #require(ReportCredential(authorization: attacker))
        let replayed = ReportCredential(device: inside[21], credential: stolen.credential).authorization
        #expect(try await C.post(base, try C.body([fresh()[1]]), headers: ["Authorization: \(replayed)"]).status == 401)
        // Enrolment itself needs the fleet token.
        let noToken = try await Self.request(base + "/enrol", headers: ["Authorization: Bearer wrong"], body: Data(#"{"device":"x-1"}"#.utf8))
        #expect(noToken.status == 401)

        // Eight real devices install it: were the 20 stored made-up failures counted, 20 of 28 would halt it.
        for device in inside[1...8] {
            let authorization = try await Self.enrol(base, device)
            let installed = try await C.post(base, try C.body([C.event("updated", device: device, version: "2.0.0", ["via": "full"])]), headers: ["Authorization: \(authorization)"])
            #expect(installed.receipt?.accepted == 1, "\(installed.body)")
        }
        // The attacker's device sends 1000 failures of its own: one device, 1 of 9.
        for _ in 0..<2 {
            let flood = (0..<500).map { _ in C.event("failed", device: inside[0], version: "2.0.0", ["errorCode": "network"]) }
            #expect(try await C.post(base, try C.body(flood), headers: ["Authorization: \(attacker)"]).receipt?.accepted == 500)
        }
        #expect(try AutoHaltTests.state(dir).stage == 40, "made-up or repeated failures halted the rollout")
        // Real devices fail: the second makes it 3 of 11 = 27 % > 25 %, halted.
        for device in inside[9...10] {
            let authorization = try await Self.enrol(base, device)
            let failed = try await C.post(base, try C.body([C.event("failed", device: device, version: "2.0.0", ["errorCode": "network"])]), headers: ["Authorization: \(authorization)"])
            #expect(failed.receipt?.accepted == 1)
        }
        let halted = try AutoHaltTests.state(dir)
        #expect(halted.stage == 0)
        #expect(halted.revisions?.last?.reason.contains("3 of 11 devices in the stage failed") == true, "\(String(describing: halted.revisions?.last?.reason))")
    }

    @Test("a credential speaks for its id byte for byte: an id Swift's == calls equal (K and the Kelvin sign U+212A) is another device, refused",
          arguments: databases())
    func canonicallyEqualIDIsAnotherDevice(_ kind: String) async throws {
        let dir = try PublishFixtures.temporaryDirectory("enrol-kelvin")
        defer { PublishFixtures.cleanUp(dir) }
        let key = SigningKey.generate()
        try AutoHaltTests.publishStaged(dir, key: key, stage: 40)
        let postgres = kind == "postgres" ? try await PostgresTestDatabase("enrolkelvin") : nil
        defer { postgres?.drop() }
        var configuration = Self.configuration(dir, database: postgres?.url ?? dir + "/reports.sqlite", key: key)
        configuration.requireEnrolment = true
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let base = server.baseURL
        // An id of four K's: canonical equivalence makes 16 strings "equal" to it, each a
        // distinct device row (and rollout bucket) in SQL, which compares bytes.
        let device = "KKKK-1", authorization = try await Self.enrol(base, device)
        for variant in ["\u{212A}KKK-1", "KK\u{212A}K-1", "\u{212A}\u{212A}\u{212A}\u{212A}-1"] {
            #expect(variant == device && Array(variant.utf8) != Array(device.utf8))
            let forged = try await C.post(base, try C.body([C.event("failed", device: variant, version: "2.0.0")]), headers: ["Authorization: \(authorization)"])
            #expect(forged.status == 400 && forged.body.contains("its own device only"), "\(variant.unicodeScalars.map(\.value)): \(forged.status) \(forged.body)")
        }
        let own = try await C.post(base, try C.body([C.event("failed", device: device, version: "2.0.0")]), headers: ["Authorization: \(authorization)"])
        #expect(own.receipt?.accepted == 1, "\(own.body)")
        #expect(try await C.stats(base)["devices"] as? Int == 1, "one credential counted as several devices")
    }

    @Test("only application/json: text/plain, form posts and no Content-Type get 415 on /report and /enrol, nothing stored, no CORS header")
    func jsonOnly() async throws {
        let dir = try PublishFixtures.temporaryDirectory("json-only")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        // An open collector: the case a cross-site page could reach with no token at all.
        try await C.withServer(database: dir + "/reports.sqlite") { server in
            let body = try C.body([C.event("failed", version: "2.0.0")])
            for type in ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", nil] {
                for path in ["/report", "/enrol"] {
                    let refused = try await Self.request(server.baseURL + path, contentType: type, headers: ["Origin: http://evil.example"], body: body)
                    #expect(refused.status == 415, "\(path) \(type ?? "none"): \(refused.body)")
                    #expect(!refused.body.lowercased().contains("access-control-allow"))
                }
            }
            #expect(try await C.stats(server.baseURL)["events"] as? Int == 0)
            let accepted = try await Self.request(server.baseURL + "/report", contentType: "application/json; charset=utf-8", headers: ["Origin: http://evil.example"], body: body)
            #expect(accepted.status == 200 && !accepted.body.lowercased().contains("access-control-allow"), "\(accepted.body)")
        }
    }

    /// SQL run on the reports database `store` (SQLite path or PostgreSQL URL).
    static func sql(_ store: String, _ script: String) async throws {
        if store.hasPrefix("postgres") {
            try await PostgresTestDatabase.psql(store, script)
        } else {
            let code = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.executescript(sys.argv[2]); db.commit()"
            let result = try await CLI.run(["-c", code, store, script], executable: "/usr/bin/python3")
            try #require(result.status == 0, "\(result.stderr)")
        }
    }

    @Test("each id enrols once: device A holding the fleet token gets 409 for enrolled B, cannot post as B; `offline-server reenrol` lets B enrol again; ids that reported with their credential before the upgrade stay enrolled",
          arguments: databases())
    func enrolOnce(_ kind: String) async throws {
        let dir = try PublishFixtures.temporaryDirectory("enrol-once")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let postgres = kind == "postgres" ? try await PostgresTestDatabase("enrol_once") : nil
        defer { postgres?.drop() }
        let database = postgres?.url ?? dir + "/reports.sqlite"
        let configuration = Self.configuration(dir, database: database)
        let executable = try #require(PublishFixtures.builtExecutable("offline-server"))
        let first = try await ReferenceServer(configuration: configuration).start()
        let a = try #require(ReportCredential(authorization: try await Self.enrol(first.baseURL, "kiosk-a")))
        let b = try await Self.enrol(first.baseURL, "kiosk-b")
        let askB = { (base: String) in
            try await Self.request(base + "/enrol", headers: ["Authorization: Bearer \(Self.token)"], body: Data(#"{"device":"kiosk-b"}"#.utf8))
        }
        // A holds the fleet token, as every device does, and asks for B's credential.
        let stolen = try await askB(first.baseURL)
        #expect(stolen.status == 409 && stolen.body.contains("offline-server reenrol --device kiosk-b"), "\(stolen.status) \(stolen.body)")
        #expect(!stolen.body.contains(try #require(ReportCredential(authorization: b)).credential))
        // A's credential speaks for A only: under B's id (401), or naming B in its events (400).
        let asB = try C.body([C.event("failed", device: "kiosk-b", ["errorCode": "network"])])
        #expect(try await C.post(first.baseURL, asB, headers: ["Authorization: Device kiosk-b:\(a.credential)"]).status == 401)
        #expect(try await C.post(first.baseURL, asB, headers: ["Authorization: \(a.authorization)"]).status == 400)
        #expect(try await C.stats(first.baseURL)["events"] as? Int == 0)
        // The operator lets B (reset, replaced) enrol again: the same credential, once more.
        let released = try await CLI.run(["reenrol", "--database", database, "--device", "kiosk-b"], executable: executable)
        #expect(released.status == 0 && released.stdout == "kiosk-b may enrol again\n", "\(released.stdout)\(released.stderr)")
        #expect(try await Self.enrol(first.baseURL, "kiosk-b") == b)
        #expect(try await askB(first.baseURL).status == 409)
        let usage = try await CLI.run(["reenrol", "--database", database, "--device", "kiosk b"], executable: executable)
        #expect(usage.status == 64 && usage.stderr.split(separator: "\n").count == 1, "\(usage.stderr)")
        // A fleet enrolled before enrolment was recorded: kiosk-a reported with its credential, kiosk-c never did.
        #expect(try await C.post(first.baseURL, try C.body([C.event("usage", device: "kiosk-a")]), headers: ["Authorization: \(a.authorization)"]).status == 200)
        _ = try await Self.enrol(first.baseURL, "kiosk-c")
        await first.stop()
        let record = postgres == nil ? "DELETE FROM grdb_migrations WHERE identifier = 'v9';" : "DELETE FROM offline_server_migrations WHERE name = 'v9';"
        try await Self.sql(database, "DROP TABLE enrolled_devices;" + record)
        let upgraded = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await upgraded.stop() } }
        let again = try await Self.request(upgraded.baseURL + "/enrol", headers: ["Authorization: Bearer \(Self.token)"], body: Data(#"{"device":"kiosk-a"}"#.utf8))
        #expect(again.status == 409, "an id that reported with its credential stays enrolled: \(again.body)")
        _ = try await Self.enrol(upgraded.baseURL, "kiosk-c")
    }

    /// A collector with the fleet token over app `fleet` in `dir`, each device limited to `limit`.
    static func limitedServer(_ dir: String, _ limit: ReportRateLimit) async throws -> RunningReferenceServer {
        try C.publishFleet(dir)
        var configuration = Self.configuration(dir, database: dir + "/reports.sqlite")
        configuration.deviceRateLimit = limit
        return try await ReferenceServer(configuration: configuration).start()
    }

    @Test("/enrol and reports with the shared token are limited per claimed device id, not per source: another id still gets through")
    func claimedIDLimits() async throws {
        let dir = try PublishFixtures.temporaryDirectory("claimed-limit")
        defer { PublishFixtures.cleanUp(dir) }
        let server = try await Self.limitedServer(dir, ReportRateLimit(burst: 2, perMinute: 1))
        defer { Task { await server.stop() } }
        let bearer = ["Authorization: Bearer \(Self.token)"]
        let statuses = { (device: String) in
            var seen: [Int] = []
            for _ in 0..<3 { seen.append(try await C.post(server.baseURL, try C.body([C.event("usage", device: device)]), headers: bearer).status) }
            return seen
        }
        #expect(try await statuses("kiosk-x") == [200, 200, 429])
        #expect(try await statuses("kiosk-y") == [200, 200, 429])
        var enrolments: [Int] = []
        for _ in 0..<3 {
            enrolments.append(try await Self.request(server.baseURL + "/enrol", headers: bearer, body: Data(#"{"device":"kiosk-x"}"#.utf8)).status)
        }
        #expect(enrolments == [200, 409, 429])
        #expect(try await Self.request(server.baseURL + "/enrol", headers: bearer, body: Data(#"{"device":"kiosk-y"}"#.utf8)).status == 200)
    }

    @Test("one enrolled device flooding gets 429 with Retry-After; another device's reports still land")
    func perDeviceLimit() async throws {
        let dir = try PublishFixtures.temporaryDirectory("rate-limit")
        defer { PublishFixtures.cleanUp(dir) }
        let server = try await Self.limitedServer(dir, ReportRateLimit(burst: 3, perMinute: 1))
        defer { Task { await server.stop() } }
        let flooder = try await Self.enrol(server.baseURL, "flooder")
        var limited: C.Answer?
        // Bounded: the burst is 3, so a 429 comes within a few posts (a token a minute refills).
        for _ in 0..<20 {
            let answer = try await Self.request(server.baseURL + "/report", headers: ["Authorization: \(flooder)"], body: try C.body([C.event("usage", device: "flooder")]))
            if answer.status == 429 { limited = answer; break }
            #expect(answer.status == 200)
        }
        let refused = try #require(limited)
        let retryAfter = refused.body.split(separator: "\r\n").first { $0.lowercased().hasPrefix("retry-after:") }
        let seconds = try #require(retryAfter.flatMap { Int($0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) })
        #expect((1...60).contains(seconds))
        let other = try await Self.enrol(server.baseURL, "quiet")
        let landed = try await C.post(server.baseURL, try C.body([C.event("usage", device: "quiet")]), headers: ["Authorization: \(other)"])
        #expect(landed.receipt?.accepted == 1)
    }

    @Test("hostile Authorization values are 401, stored nothing; an open collector ignores a credential it cannot check")
    func hostileAuthorization() async throws {
        let dir = try PublishFixtures.temporaryDirectory("hostile-authorization")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let server = try await ReferenceServer(configuration: Self.configuration(dir, database: dir + "/reports.sqlite")).start()
        defer { Task { await server.stop() } }
        let good = try #require(ReportCredential(authorization: try await Self.enrol(server.baseURL, "kiosk-7")))
        let body = try C.body([C.event("updated", device: "kiosk-7", ["via": "full"])])
        let hostile = [
            "Device", "Device ", "Device kiosk-7", "Device kiosk-7:", "Device :\(good.credential)",
            "Device kiosk-7:\(good.credential.dropLast())", "Device kiosk-7:\(good.credential)0",
            "Device kiosk-7:\(good.credential.uppercased())", "Device kiosk-7:\(String(repeating: "g", count: 64))",
            "Device kiosk 7:\(good.credential)", "Device \(String(repeating: "k", count: 129)):\(good.credential)",
            "Device kiosk-8:\(good.credential)", "Bearer \(good.credential)", "Device kiosk-7:\(good.credential) x",
        ]
        for value in hostile {
            let answer = try await C.post(server.baseURL, body, headers: ["Authorization: \(value)"])
            #expect(answer.status == 401, "\(value): \(answer.status) \(answer.body)")
        }
        #expect(try await C.stats(server.baseURL)["events"] as? Int == 0)
        #expect(try await C.post(server.baseURL, body, headers: ["Authorization: \(good.authorization)"]).receipt?.accepted == 1)
        // The enrolment body is checked too.
        for asked in [#"{}"#, #"{"device":""}"#, #"{"device":"a b"}"#, #"{"device":42}"#, "not json", #"{"device":"\#(String(repeating: "x", count: 129))"}"#] {
            let refused = try await Self.request(server.baseURL + "/enrol", headers: ["Authorization: Bearer \(Self.token)"], body: Data(asked.utf8))
            #expect(refused.status == 400, "\(asked): \(refused.body)")
        }
        let tooBig = try await Self.request(server.baseURL + "/enrol", headers: ["Authorization: Bearer \(Self.token)"], body: Data(repeating: 0x20, count: 5000))
        #expect(tooBig.status == 413)
        // An open collector (no token, no secret): the header proves nothing and is not needed.
        let open = try await ReferenceServer(configuration: .init(directory: dir, port: 0, reportsDatabase: dir + "/open.sqlite")).start()
        defer { Task { await open.stop() } }
        #expect(try await C.post(open.baseURL, body, headers: ["Authorization: \(good.authorization)"]).receipt?.accepted == 1)
        #expect(try await Self.request(open.baseURL + "/enrol", headers: ["Authorization: Bearer \(Self.token)"], body: Data(#"{"device":"a"}"#.utf8)).status == 404)
    }

    @Test("the limiter: a burst, then refills at its rate; memory bounded, oldest keys forgotten first")
    func limiterBuckets() {
        let limiter = ReportRateLimiter(ReportRateLimit(burst: 2, perMinute: 6), maxTracked: 8)
        let start = ContinuousClock.now
        #expect(limiter.take("a", now: start) == nil && limiter.take("a", now: start) == nil)
        #expect(limiter.take("a", now: start) == 10)
        #expect(limiter.take("a", now: start + .seconds(10)) == nil)
        #expect(limiter.take("a", now: start + .seconds(10)) == 10)
        for index in 0..<100 { _ = limiter.take("k\(index)", now: start + .seconds(20 + index)) }
        #expect(limiter.tracked <= 8)
        // "a" was the oldest: forgotten, so a full bucket again; the newest keys are kept.
        #expect(limiter.take("a", now: start + .seconds(200)) == nil && limiter.take("a", now: start + .seconds(200)) == nil)
        #expect(limiter.take("k99", now: start + .seconds(200)) == nil && limiter.take("k99", now: start + .seconds(200)) == nil)
    }

    @Test("the agent enrols on its first send, keeps the credential 0600, sends it; after a new secret it enrols again; 429's Retry-After is honoured")
    func senderEnrols() async throws {
        let dir = try PublishFixtures.temporaryDirectory("sender-enrol")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        var configuration = Self.configuration(dir, database: dir + "/reports.sqlite")
        configuration.requireEnrolment = true
        // Three enrolments of one id below (200, 409, 200 after `reenrol`), each taking from its bucket.
        configuration.deviceRateLimit = ReportRateLimit(burst: 4, perMinute: 1)
        let first = try await ReferenceServer(configuration: configuration).start()
        let root = dir + "/device"
        let url = URL(string: first.baseURL + "/report")!
        let queue = ReportQueue(root: root, url: url, maxEvents: 1000)
        let device = try DeviceID.load(root: root)
        func queueEvent() throws {
            try queue.append([ReportEvent(time: Date(), device: device, app: "fleet", event: .updated, version: "2.0.0", via: "full")])
        }
        var settings = ReportSettings()
        settings.deadline = .seconds(60)  // a bound on a hang: two shared cores
        settings.backoff = Backoff(base: 1, cap: 3600, jitter: 0)
        let sender = ReportSender(root: root, settings: settings, network: NetworkSettings(), clock: { Date() }, pool: BlockingPool())
        try queueEvent()
        try queue.remember(token: Self.token)
        #expect(await sender.flush().delivered == 1)
        let credential = try #require(queue.credential())
        #expect(credential.device == device)
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: queue.directory + "/credential")[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o600)
        #expect(try await C.stats(first.baseURL)["events"] as? Int == 1)

        // The device loses its credential (a reset): its id is enrolled, so the collector answers 409 and the token
        // gets 401. Nothing is lost, the queue backs off, and the warning names the way out.
        try queue.remember(credential: nil)
        try queueEvent()
        let log = RecordedLog()
        let locked = ReportSender(root: root, settings: settings, network: NetworkSettings(), clock: { Date() }, logger: log.logger, pool: BlockingPool())
        let refused = await locked.flush()
        #expect(refused.delivered == 0 && refused.failed == [url.absoluteString] && queue.pending() == 1)
        let warnings = log.messages(atLeast: .warning)
        #expect(warnings.contains { $0.contains("offline-server reenrol --device \(device)") && $0.contains("1 events stay queued") }, "\(warnings)")
        #expect(queue.credential() == nil)
        try queue.recordFailure(until: Date(timeIntervalSince1970: 0))

        // A collector that refused enrolment earlier (marked) and requires it now: the 401 to the token enrols at once
        // (the device lost its credential, so the operator lets its id enrol again).
        #expect(try await ReportEnrolment.release(device: device, database: dir + "/reports.sqlite", logger: Logger(label: "test")))
        try queue.remember(credential: nil)
        try queue.rememberEnrolmentRefused(at: Date())
        try queueEvent()
        #expect(await sender.flush().delivered == 2)
        #expect(queue.credential() == credential && !queue.enrolmentRefusedRecently(now: Date()))
        #expect(try await C.stats(first.baseURL)["events"] as? Int == 3)
        await first.stop()

        // A new secret (the old file gone): the old credential is refused, the sender enrols again and delivers.
        try FileManager.default.removeItem(atPath: dir + "/collector-secret")
        configuration.port = first.port
        configuration.deviceRateLimit = ReportRateLimit(burst: 1, perMinute: 1)
        let second = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await second.stop() } }
        try queueEvent()
        #expect(await sender.flush().delivered == 1)
        let renewed = try #require(queue.credential())
        #expect(renewed.device == device && renewed.credential != credential.credential)
        #expect(try await C.stats(second.baseURL)["events"] as? Int == 4)
        // The burst of 1 is spent on the second server (a refused credential takes none of it): the next report gets 429, kept, and the queue waits out Retry-After.
        try queueEvent()
        let asked = Date().timeIntervalSince1970
        let limited = await sender.flush()
        #expect(limited.delivered == 0 && queue.pending() == 1)
        let next = try #require(queue.loadState().nextAttempt)
        #expect(next - asked > 20, "Retry-After not honoured: \(next - asked) s")
    }

    @Test("a collector that answers 409 to the enrolment and 401 to the token gets one POST /enrol in that flush, not a second; the event stays queued")
    func enrolledAlreadyAsksOnce() async throws {
        // Enrolment required, this id enrolled before (its credential lost): every /enrol is
        // 409, every report without a credential 401. The 401 must not enrol again.
        let collector = try ScriptedServer { request in request.path == "/enrol" ? .status(409) : .status(401) }
        defer { collector.stop() }
        let dir = try PublishFixtures.temporaryDirectory("enrol-409")
        defer { PublishFixtures.cleanUp(dir) }
        let root = dir + "/device"
        let url = URL(string: collector.baseURL + "/report")!
        let queue = ReportQueue(root: root, url: url, maxEvents: 1000)
        let device = try DeviceID.load(root: root)
        try queue.append([ReportEvent(time: Date(), device: device, app: "fleet", event: .updated, version: "2.0.0", via: "full")])
        try queue.remember(token: Self.token)
        var settings = ReportSettings()
        settings.deadline = .seconds(60)  // a bound on a hang: two shared cores
        let sender = ReportSender(root: root, settings: settings, network: NetworkSettings(), clock: { Date() }, pool: BlockingPool())
        let flush = await sender.flush()
        #expect(flush.delivered == 0 && flush.failed == [url.absoluteString] && queue.pending() == 1)
        #expect(collector.requests.map(\.path) == ["/enrol", "/report"], "\(collector.requests.map(\.path))")
        #expect(queue.credential() == nil)
    }

    @Test("offline-server: a collector without a token is refused at start unless --open-collector; the secret is made 0600 beside the database; --require-enrolment needs the token")
    func openCollectorIsExplicit() async throws {
        let dir = try PublishFixtures.temporaryDirectory("open-collector")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let executable = try #require(PublishFixtures.builtExecutable("offline-server"))
        for arguments in [["--reports-db", dir + "/a.sqlite"], ["--auto-halt", "failure-rate>5%"]] {
            let refused = try await CLI.run(["--dir", dir, "--port", "0"] + arguments, executable: executable)
            #expect(refused.status == 64 && refused.stderr.contains("--open-collector"), "\(arguments): \(refused.stderr)")
        }
        let enrolOnly = try await CLI.run(["--dir", dir, "--port", "0", "--require-enrolment"], executable: executable)
        #expect(enrolOnly.status == 64 && enrolOnly.stderr.contains("needs --report-token"), "\(enrolOnly.stderr)")
        // No collector asked for: it serves, reports off.
        let plain = try await OfflineServerProcess(arguments: ["--dir", dir, "--reports-db", dir + "/open.sqlite", "--open-collector"])
        let body = try C.body([C.event("updated", ["via": "full"])])
        #expect(try await C.post(plain.baseURL, body).receipt?.accepted == 1)
        await plain.stop()
        let quiet = try await OfflineServerProcess(arguments: ["--dir", dir])
        #expect(try await C.post(quiet.baseURL, body).status == 404)
        await quiet.stop()
        // Outside the publish directory, as a secret inside it is warned about.
        let db = TemporaryDirectory("enrol-secret-db")
        let enrolling = try await OfflineServerProcess(arguments: ["--dir", dir, "--reports-db", db.file("reports.sqlite"), "--report-token", Self.token])
        let secret = db.file("collector-secret")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: secret)[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o600)
        let authorization = try await Self.enrol(enrolling.baseURL, "kiosk-1")
        #expect(try await C.post(enrolling.baseURL, try C.body([C.event("updated", device: "kiosk-1", ["via": "full"])]), headers: ["Authorization: \(authorization)"]).receipt?.accepted == 1)
        await enrolling.stop()
        // A secret others may read is refused at start.
        chmod(secret, 0o644)
        let leaky = try await CLI.run(["--dir", dir, "--port", "0", "--reports-db", db.file("reports.sqlite"), "--report-token", Self.token], executable: executable)
        // One line of the server's own (not `offline-agent serve`'s, not swift-argument-parser's `Error:`), exit 1.
        let told = leaky.stderr.split(separator: "\n").filter { $0.contains("collector secret") }
        #expect(leaky.status == 1, "\(leaky.stderr)")
        #expect(told == ["offline-server: reports: the collector secret may be read by other users: chmod 600 \(secret) (\(secret))"], "\(leaky.stderr)")
    }
}
