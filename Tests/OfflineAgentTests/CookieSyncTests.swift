import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Cookie jars of sync profiles against a real loopback server that sets cookies on
/// the manifest and requires them for the package.
@Suite("Cookie profiles")
struct CookieSyncTests {
    /// The origin of a logged-in account: `/manifest?login=NAME` logs NAME in (a
    /// persistent `user` cookie and a session `sid`); packages need both cookies.
    static func loginOrigin(_ h: SyncHarness, version: String = "1.0.0") {
        let manifest = try! JSONSerialization.data(withJSONObject: h.full(version), options: [.sortedKeys])
        h.origin.setManifestReply { request in
            var headers: [(String, String)] = []
            if let login = request.query["login"] {
                headers.append(("Set-Cookie", "user=\(login); Max-Age=86400; Path=/; HttpOnly; SameSite=Lax"))
            }
            headers.append(("Set-Cookie", "sid=s-\(Self.login(request) ?? "anonymous"); Path=/"))
            return .ok([UInt8](manifest), headers: headers)
        }
        h.origin.override("\(version).zip") { request, bytes in
            let cookie = request.header("Cookie") ?? ""
            guard cookie.contains("user="), cookie.contains("sid=") else { return .status(403) }
            return Origin.serve(bytes, request: request)
        }
    }

    static func login(_ request: ScriptedServer.Request) -> String? {
        request.query["login"] ?? cookies(request)["user"]
    }

    /// The cookies a request carried, by name.
    static func cookies(_ request: ScriptedServer.Request) -> [String: String] {
        (request.header("Cookie") ?? "").split(separator: ";").reduce(into: [:]) { result, pair in
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if parts.count == 2 { result[String(parts[0])] = String(parts[1]) }
        }
    }

    static func sync(_ h: SyncHarness, login: String? = nil, profile: String? = nil) async throws -> CLI.Result {
        var manifest = h.origin.manifestURL.absoluteString
        if let login { manifest += "?login=\(login)" }
        var arguments = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", manifest, "--force", "--json"]
        if let profile { arguments += ["--profile", profile] }
        return try await CLI.run(arguments)
    }

    static func manifestRequests(_ h: SyncHarness) -> [ScriptedServer.Request] { h.origin.requests(for: "/manifest") }

    @Test("persistent cookies survive the process, session cookies do not; files are 0600")
    func persistence() async throws {
        let h = try SyncHarness()
        Self.loginOrigin(h)
        let first = try await Self.sync(h, login: "alice")
        #expect(first.status == 0, "\(first.stderr)")
        #expect(CLI.json(first.stdout)?["result"] as? String == "updated")
        // Within one run the session cookie is carried: the package needed both.
        let download = try #require(h.origin.requests(for: "/files/1.0.0.zip").last)
        #expect(Self.cookies(download) == ["user": "alice", "sid": "s-alice"])

        let jar = h.root.file("profiles/default/cookies.json")
        var info = stat()
        #expect(stat(jar, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(stat(h.root.file("profiles/default"), &info) == 0 && info.st_mode & 0o777 == 0o700)
        let saved = try String(contentsOfFile: jar, encoding: .utf8)
        #expect(saved.contains("\"user\"") && !saved.contains("\"sid\""))

        // A new process: the persistent cookie comes back, the session cookie is gone.
        let second = try await Self.sync(h)
        #expect(second.status == 0, "\(second.stderr)")
        let request = try #require(Self.manifestRequests(h).last)
        #expect(Self.cookies(request) == ["user": "alice"])
    }

    @Test("profiles never see each other's cookies")
    func isolation() async throws {
        let h = try SyncHarness()
        Self.loginOrigin(h)
        #expect(try await Self.sync(h, login: "alice", profile: "alice").status == 0)
        #expect(try await Self.sync(h, login: "bob", profile: "bob").status == 0)
        #expect(try await Self.sync(h, profile: "alice").status == 0)
        #expect(Self.cookies(try #require(Self.manifestRequests(h).last)) == ["user": "alice"])
        #expect(try await Self.sync(h, profile: "bob").status == 0)
        #expect(Self.cookies(try #require(Self.manifestRequests(h).last)) == ["user": "bob"])
        // A profile nobody logged in with carries nothing.
        #expect(try await Self.sync(h, profile: "carol").status == 0)
        #expect(Self.manifestRequests(h).last?.header("Cookie") == nil)

        let listed = try await CLI.run(["cookies", "--root", h.root.path, "--profile", "alice", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let cookies = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(cookies.count == 1)
        #expect(cookies.first?["name"] as? String == "user")
        #expect(cookies.first?["httpOnly"] as? Bool == true)
        #expect(cookies.first?["sameSite"] as? String == "Lax")
        // Values are masked: listing a jar must not print credentials.
        #expect(!listed.stdout.contains("alice"))
        #expect(cookies.first?["value"] as? String == "***** (5 bytes)")
        let text = try await CLI.run(["cookies", "--root", h.root.path, "--profile", "bob"])
        #expect(text.status == 0 && text.stdout.contains("127.0.0.1/ user=*** (3 bytes)") && !text.stdout.contains("bob"), "\(text.stdout)")
    }

    @Test("a server expires a cookie with a past date: it is neither sent nor kept")
    func expiry() async throws {
        let h = try SyncHarness()
        let manifest = try JSONSerialization.data(withJSONObject: h.full("1.0.0"), options: [.sortedKeys])
        // First visit: two cookies. Next: the token is revoked. After that: nothing new.
        h.origin.setManifestReply { request in
            let sent = Self.cookies(request)
            let headers: [(String, String)] = sent.isEmpty
                ? [("Set-Cookie", "token=t1; Expires=Fri, 31 Dec 2099 23:59:59 GMT"), ("Set-Cookie", "keep=1; Max-Age=3600")]
                : sent["token"] != nil ? [("Set-Cookie", "token=gone; Expires=Thu, 01 Jan 1970 00:00:00 GMT")] : []
            return .ok([UInt8](manifest), headers: headers)
        }
        #expect(try await Self.sync(h).status == 0)
        #expect(try await Self.sync(h).status == 0)
        #expect(Self.cookies(Self.manifestRequests(h)[1]) == ["token": "t1", "keep": "1"])
        #expect(try await Self.sync(h).status == 0)
        #expect(Self.cookies(Self.manifestRequests(h)[2]) == ["keep": "1"])
        let saved = try String(contentsOfFile: h.root.file("profiles/default/cookies.json"), encoding: .utf8)
        #expect(!saved.contains("token"))
    }

    @Test("Secure cookies never travel over http")
    func secure() async throws {
        let h = try SyncHarness()
        let manifest = try JSONSerialization.data(withJSONObject: h.full("1.0.0"), options: [.sortedKeys])
        h.origin.setManifestReply { _ in .ok([UInt8](manifest), headers: [("Set-Cookie", "insecure=1; Secure; Max-Age=600")]) }
        // One the same host set over https earlier, as it would be on a device.
        let profile = try CookieProfile(root: h.root.path)
        let jar = CookieJar(file: profile.file)
        let host = try #require(h.origin.manifestURL.host)
        jar.store(setCookie: ["fromhttps=1; Secure; Max-Age=600", "plain=1; Max-Age=600"], from: URL(string: "https://\(host)/")!)
        try jar.save()
        #expect(try profile.read().count == 2)

        #expect(await h.sync().result == .updated)
        #expect(await h.sync().result == .upToDate)
        for request in Self.manifestRequests(h) { #expect(Self.cookies(request) == ["plain": "1"]) }
        // Still kept for https, and the Secure cookie offered over http was not taken.
        #expect(try profile.read().map(\.name) == ["fromhttps", "plain"])
    }

    @Test("a corrupt jar is set aside with a warning and the sync goes on")
    func corruptJar() async throws {
        let h = try SyncHarness()
        Self.loginOrigin(h)
        try FileManager.default.createDirectory(atPath: h.root.file("profiles/default"), withIntermediateDirectories: true)
        let jar = h.root.file("profiles/default/cookies.json")
        try Data("{\"format\": 1, \"cookies\": [{\"name\": ".utf8).write(to: URL(fileURLWithPath: jar))

        let listed = try await CLI.run(["cookies", "--root", h.root.path])
        #expect(listed.status == 1 && listed.stderr.contains("not a cookie jar"), "\(listed.stderr)")

        let result = try await Self.sync(h, login: "alice")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("unreadable cookie jar moved to"), "\(result.stderr)")
        let aside = try FileManager.default.contentsOfDirectory(atPath: h.root.file("profiles/default"))
            .filter { $0.hasPrefix("cookies.json.corrupt-") }
        #expect(aside.count == 1)
        #expect(try CookieProfile(root: h.root.path).read().map(\.name) == ["user"])
    }

    @Test("cookies --clear empties one profile; bad profile names are usage errors")
    func clear() async throws {
        let h = try SyncHarness()
        Self.loginOrigin(h)
        #expect(try await Self.sync(h, login: "alice").status == 0)
        #expect(try await Self.sync(h, login: "bob", profile: "bob").status == 0)
        let cleared = try await CLI.run(["cookies", "--root", h.root.path, "--clear"])
        #expect(cleared.status == 0, "\(cleared.stderr)")
        #expect(try CookieProfile(root: h.root.path).read().isEmpty)
        #expect(try CookieProfile(root: h.root.path, name: "bob").read().count == 1)
        #expect(try await CLI.run(["cookies", "--root", h.root.path]).stdout.contains("no cookies in profile 'default'"))
        #expect(try await Self.sync(h).status == 0)
        #expect(Self.manifestRequests(h).last?.header("Cookie") == nil)

        for arguments in [["cookies", "--root", h.root.path, "--profile", "../x"], ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall",
                          "--manifest", h.origin.manifestURL.absoluteString, "--force", "--profile", ".."]] {
            let refused = try await CLI.run(arguments)
            #expect(refused.status == 64 && refused.stderr.contains("invalid profile name"), "\(refused.stderr)")
        }
    }

    @Test("a jar that cannot be written costs a warning, not the sync; --clear waits for no sync")
    func unwritableAndBusy() async throws {
        let h = try SyncHarness()
        Self.loginOrigin(h)
        // The profile's directory cannot be made: a file stands where it should be.
        try FileManager.default.createDirectory(atPath: h.root.file("profiles"), withIntermediateDirectories: true)
        try Data("not a directory".utf8).write(to: URL(fileURLWithPath: h.root.file("profiles/default")))
        let result = try await Self.sync(h, login: "alice")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(CLI.json(result.stdout)?["result"] as? String == "updated")
        #expect(result.stderr.contains("cookies not saved: install: cannot write cookie jar"), "\(result.stderr)")

        // While a sync holds the root's lock, clearing a jar would race it: busy, 75.
        let lock = try RootLock(root: h.root.path)
        let busy = try await CLI.run(["cookies", "--root", h.root.path, "--profile", "bob", "--clear"])
        #expect(busy.status == 75, "\(busy.stderr)")
        withExtendedLifetime(lock) {}
    }

    @Test("sync --config: an app's profile wins over the file's, which wins over --profile")
    func configProfiles() async throws {
        let h = try SyncHarness()
        Self.loginOrigin(h)
        let manifest = h.origin.manifestURL.absoluteString + "?login=dave"
        let config = TemporaryDirectory("config")
        func write(_ object: [String: Any]) throws -> String {
            let path = config.file("agent.json")
            try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
            return path
        }
        let top = try write(["root": h.root.path, "allowUnsigned": true, "profile": "team", "apps": [["app": "mall", "manifest": manifest]]])
        #expect(try await CLI.run(["sync", "--config", top, "--force", "--profile", "ignored"]).status == 0)
        let own = try write(["root": h.root.path, "allowUnsigned": true, "profile": "team", "apps": [["app": "mall", "manifest": manifest, "profile": "dave"]]])
        #expect(try await CLI.run(["sync", "--config", own, "--force"]).status == 0)
        #expect(CookieProfile.names(root: h.root.path) == ["dave", "team"])
    }

    @Test("a cookie set by a redirect travels with the next hop")
    func redirects() async throws {
        let server = try ScriptedServer { request in
            switch request.path {
            case "/login": return .status(302, headers: [("Location", "/manifest"), ("Set-Cookie", "hop=1; Path=/")])
            case "/manifest": return request.header("Cookie") == "hop=1" ? .ok(Array("{}".utf8)) : .status(403)
            default: return .status(404)
            }
        }
        defer { server.stop() }
        let jar = CookieJar()
        let fetcher = HTTPFetcher(settings: NetworkSettings(), cookies: jar)
        do {
            let (response, url) = try await fetcher.get(URL(string: "\(server.baseURL)/login")!, headers: [], phase: .manifest)
            #expect(response.status.code == 200)
            #expect(url.path == "/manifest")
            #expect(jar.all().map(\.name) == ["hop"])
        } catch {
            await fetcher.shutdown()
            throw error
        }
        await fetcher.shutdown()
    }
}
