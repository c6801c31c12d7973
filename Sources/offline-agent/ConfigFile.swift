import FoundationEssentials
import OfflineAgent
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The `sync --config` file, read fail-closed: an unknown key anywhere is a usage error
/// naming its path and the nearest valid key, a wrong type names its path, and an app
/// without a trusted key must say `"allowUnsigned": true` (top level or per app).
struct ConfigFile: Decodable {
    struct App: Decodable {
        var app: String
        var manifest: String
        var publicKey: String?
        var publicKeys: [String]?
        var allowUnsigned: Bool?
        /// The path of this app's TUF root file; wins over the top-level one.
        var trustedRoot: String?
        var profile: String?
        var manifestQuery: Bool?
        var report: String?
        /// The bearer token of this app's collector; wins over the top-level one.
        var reportToken: String?
        /// This app's trial setting (see `AgentConfiguration.maxTrialLaunches`).
        var maxTrialLaunches: Int?
        /// The origins this app's whitelist may name (`SyncOptions.allowedOrigins`).
        var allowedOrigins: [String]?
        /// Users and groups (names or ids) that may confirm, report bad and sync the app
        /// over D-Bus (`serve --dbus`, docs/DBUS.md).
        var dbusUsers: [String]?
        var dbusGroups: [String]?
    }

    var root: String
    var publicKey: String?
    var publicKeys: [String]?
    var allowUnsigned: Bool?
    /// The path of a TUF root file for apps that name none (`sync --trusted-root`).
    var trustedRoot: String?
    var network: NetworkPolicy?
    var profile: String?
    /// The fleet-report collector (`--report`); an app's own wins.
    var report: String?
    /// The collector's bearer token (`offline-server --report-token`); an app's own wins.
    var reportToken: String?
    /// Trials for every app of the file: N > 0 puts new versions on trial for N
    /// launches (a host that confirms), 0 turns trials off; absent: as the manifest asks.
    var maxTrialLaunches: Int?
    /// False: request the manifest URL as written, without `app` and `current` (a CDN-cached static manifest).
    var manifestQuery: Bool?
    var apps: [App]

    static let topKeys = ["root", "publicKey", "publicKeys", "allowUnsigned", "trustedRoot", "network", "profile", "maxTrialLaunches", "manifestQuery", "report", "reportToken", "apps"]
    static let appKeys = ["app", "manifest", "publicKey", "publicKeys", "allowUnsigned", "trustedRoot", "profile", "manifestQuery", "report", "reportToken", "maxTrialLaunches", "allowedOrigins", "dbusUsers", "dbusGroups"]

    /// One app as the file (and the command line) configures it.
    struct Entry {
        var app: String
        var manifest: URL
        /// Trusted keys (base64); empty only when the app explicitly allows unsigned manifests.
        var publicKeys: [String]
        var network: NetworkPolicy?
        var profile: String?
        /// Nil: as the command line says (appended unless `--no-manifest-query`).
        var manifestQuery: Bool?
        /// The fleet-report collector: the app's, the file's, else `--report`'s.
        var report: URL?
        /// The collector's bearer token: the app's, the file's, else `--report-token-file`'s.
        var reportToken: String?
        /// The app's own trial setting; nil: the file's, then `--max-trial-launches`.
        var maxTrialLaunches: Int?
        /// The origins the app's whitelist may name; nil: those of its installed whitelist.
        var allowedOrigins: [String]?
        /// The TUF root file's bytes (`trustedRoot`), which replace the keys.
        var trustedRoot: Data?
        /// Who may change the app over D-Bus, as the file names them.
        var dbusUsers: [String] = []
        var dbusGroups: [String] = []
    }

    /// Reads and checks `path`; `fallbackKeys` are `--public-key`'s, `fallbackReport` and
    /// `fallbackReportToken` those of `--report` and `--report-token-file`.
    static func load(
        _ path: String, fallbackKeys: [String], allowUnsigned: Bool = false, fallbackReport: URL? = nil, fallbackReportToken: String? = nil,
        fallbackTrustedRoot: Data? = nil
    ) throws -> (file: ConfigFile, entries: [Entry]) {
        let data = try read(path)
        let keys: KeyProbe
        do {
            keys = try JSONDecoder().decode(KeyProbe.self, from: data)
        } catch DecodingError.typeMismatch {
            throw OfflineAgentError(.usage, "config file must hold a JSON object", path: path)
        } catch {
            throw OfflineAgentError(.usage, "config file is not valid JSON\(syntaxError(in: data))", path: path)
        }
        try checkKeys(keys, path: path)
        let file: ConfigFile
        do {
            file = try JSONDecoder().decode(ConfigFile.self, from: data)
        } catch let error as DecodingError {
            throw OfflineAgentError(.usage, describe(error), path: path)
        }
        // A relative root would mean whatever directory cron or systemd starts in.
        guard file.root.hasPrefix("/") else {
            let directory = FileSystem.parent(of: FileSystem.absolute(path))
            throw OfflineAgentError(
                .usage,
                "root '\(file.root)' is relative: give an absolute path (it is not read relative to the config file's directory \(directory), nor to the working directory)",
                path: path)
        }
        if let limit = file.maxTrialLaunches, limit < 0 {
            throw OfflineAgentError(.usage, "maxTrialLaunches must be 0 or more", path: path)
        }
        let fileKeys = (file.publicKey.map { [$0] } ?? []) + (file.publicKeys ?? [])
        let fileRoot = try file.trustedRoot.map { try SyncCommand.trustedRoot(file: $0, key: "trustedRoot") } ?? fallbackTrustedRoot
        let fileReport = try file.report.map { try reportURL($0, key: "report", path: path) } ?? fallbackReport
        // A token goes with the URL it was given for: the top-level one with the top-level
        // report, `--report-token-file` with `--report` (else with the file's report).
        let flagToken = (fallbackReport ?? fileReport) == fileReport ? fallbackReportToken : nil
        let fileToken = try file.reportToken.map { try reportToken($0, key: "reportToken", path: path) } ?? flagToken
        let entries = try file.apps.enumerated().map { index, entry in
            // Everything sync would refuse is refused here, so check-config catches it.
            guard AppName.isValid(entry.app) else {
                throw OfflineAgentError(
                    .usage, "apps[\(index)].app: invalid app name '\(entry.app)': 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit",
                    path: path)
            }
            if let first = file.apps.firstIndex(where: { $0.app == entry.app }), first < index {
                throw OfflineAgentError(
                    .usage, "apps[\(index)].app: '\(entry.app)' is listed twice (also apps[\(first)]): one entry per app", path: path)
            }
            if let invalid = OriginClaims.invalidEntries(entry.allowedOrigins ?? []).first {
                throw OfflineAgentError(
                    .usage, "apps[\(index)].allowedOrigins: '\(invalid)' is not an origin: give http(s)://host[:port]", path: path)
            }
            guard let url = URL(string: entry.manifest), WebAddress.webScheme(url.scheme) != nil else {
                throw OfflineAgentError(.usage, "apps[\(index)].manifest: invalid manifest URL '\(entry.manifest)'", path: path)
            }
            let appKeys = (entry.publicKey.map { [$0] } ?? []) + (entry.publicKeys ?? [])
            let keys = [appKeys, fileKeys, fallbackKeys].first { !$0.isEmpty } ?? []
            for (n, key) in keys.enumerated() {
                do { _ = try ManifestSignature.publicKey(base64: key) } catch {
                    throw OfflineAgentError(.usage, "app '\(entry.app)': trusted key \(n + 1) is not 32 bytes of base64", path: path)
                }
            }
            if let limit = entry.maxTrialLaunches, limit < 0 {
                throw OfflineAgentError(.usage, "apps[\(index)].maxTrialLaunches must be 0 or more", path: path)
            }
            // A TUF root replaces keys and allowUnsigned for the app (the app's own first).
            let trustedRoot = try entry.trustedRoot.map { try SyncCommand.trustedRoot(file: $0, key: "apps[\(index)].trustedRoot") } ?? fileRoot
            if keys.isEmpty, trustedRoot == nil, (entry.allowUnsigned ?? file.allowUnsigned ?? (allowUnsigned ? true : nil)) != true {
                throw OfflineAgentError(
                    .usage, "app '\(entry.app)' has no trusted key: give publicKey or publicKeys, or say \"allowUnsigned\": true", path: path)
            }
            let report = try entry.report.map { try reportURL($0, key: "apps[\(index)].report", path: path) } ?? fileReport
            let token = try entry.reportToken.map { try reportToken($0, key: "apps[\(index)].reportToken", path: path) }
            if token != nil, report == nil {
                throw OfflineAgentError(.usage, "apps[\(index)].reportToken: the app has no report URL to send it to", path: path)
            }
            return Entry(app: entry.app, manifest: url, publicKeys: keys, network: file.network, profile: entry.profile ?? file.profile,
                         manifestQuery: entry.manifestQuery ?? file.manifestQuery, report: report,
                         reportToken: token ?? (report == fileReport ? fileToken : nil), maxTrialLaunches: entry.maxTrialLaunches,
                         allowedOrigins: entry.allowedOrigins, trustedRoot: trustedRoot,
                         dbusUsers: entry.dbusUsers ?? [], dbusGroups: entry.dbusGroups ?? [])
        }
        // A token given for no URL any app reports to is a mistake worth naming.
        if file.reportToken != nil || fallbackReportToken != nil, fileToken == nil || !entries.contains(where: { $0.report != nil && $0.report == fileReport }) {
            let (key, url) = file.reportToken != nil ? ("reportToken", "the top-level report") : ("--report-token-file", "--report")
            throw OfflineAgentError(.usage, "\(key): no app reports to \(url) URL, the only one the token goes to", path: path)
        }
        try checkTokens(entries, path: path)
        return (file, entries)
    }

    /// A `reportToken` value: checked as the collector checks it, never echoed.
    private static func reportToken(_ text: String, key: String, path: String) throws -> String {
        guard ReportToken.isValid(text) else { throw OfflineAgentError(.usage, "\(key): must be \(ReportToken.rule)", path: path) }
        return text
    }

    /// One collector, one token: its queue records one (the last sync's).
    private static func checkTokens(_ entries: [Entry], path: String) throws {
        for (index, entry) in entries.enumerated() {
            guard let report = entry.report,
                  let first = entries.firstIndex(where: { $0.report == report }), first < index,
                  entries[first].reportToken != entry.reportToken else { continue }
            throw OfflineAgentError(
                .usage,
                "apps[\(index)].reportToken differs from apps[\(first)]'s for the same report URL \(report.absoluteString): give one collector one token",
                path: path)
        }
    }

    /// The file's bytes; a failure says why (missing, a directory, not a regular file, no permission).
    private static func read(_ path: String) throws -> Data {
        // O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular file is read.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = errno == ENOENT ? "no such file" : String(cString: strerror(errno)).lowercased()
            throw OfflineAgentError(.usage, "cannot read config file: \(reason)", path: path)
        }
        var st = stat()
        let statted = fstat(descriptor, &st) == 0
        close(descriptor)
        if FileSystem.isDirectory(path) { throw OfflineAgentError(.usage, "cannot read config file: it is a directory", path: path) }
        guard statted, st.st_mode & S_IFMT == S_IFREG else {
            throw OfflineAgentError(.usage, "cannot read config file: not a regular file", path: path)
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw OfflineAgentError(.usage, "cannot read config file", path: path)
        }
        return data
    }

    /// Where a syntax error is, as ` at line L, column C: what`, from the strict reader's
    /// byte offset (JSONDecoder names no position); empty when it finds none.
    static func syntaxError(in data: Data) -> String {
        let failure: StrictJSON.Failure
        do {
            _ = try StrictJSON.parse(data)
            return ""
        } catch {
            failure = error
        }
        let before = data.prefix(failure.offset)
        let line = before.reduce(1) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
        let lineStart = before.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? data.startIndex
        // Columns count characters, not bytes, as editors show them.
        let column = String(decoding: data[lineStart..<(data.startIndex + failure.offset)], as: UTF8.self).count + 1
        return " at line \(line), column \(column): \(failure.message)"
    }

    /// A `report` value: an http or https URL.
    private static func reportURL(_ text: String, key: String, path: String) throws -> URL {
        guard let url = URL(string: text), WebAddress.webScheme(url.scheme) != nil, url.host != nil else {
            throw OfflineAgentError(.usage, "\(key): invalid report URL '\(text)': give an http or https URL", path: path)
        }
        return url
    }

    private static func checkKeys(_ keys: KeyProbe, path: String) throws {
        try unknown(in: keys.top, allowed: topKeys, prefix: "", path: path)
        for (index, app) in keys.apps.enumerated() {
            guard let app else { continue }  // the decoder names the wrong type
            try unknown(in: app, allowed: appKeys, prefix: "apps[\(index)].", path: path)
        }
    }

    private static func unknown(in keys: [String], allowed: [String], prefix: String, path: String) throws {
        for key in keys.sorted() where !allowed.contains(key) {
            let nearest = allowed.min { distance(key, $0) < distance(key, $1) } ?? ""
            throw OfflineAgentError(.usage, "unknown key '\(prefix)\(key)' (did you mean '\(nearest)'?)", path: path)
        }
    }

    /// The keys the file spells, top level and per app, read before the typed decode so an
    /// unknown key is named even when a known one has the wrong type (no JSONSerialization
    /// in FoundationEssentials).
    private struct KeyProbe: Decodable {
        var top: [String]
        /// Per element of `apps`: its keys, nil when it is not an object.
        var apps: [[String]?] = []

        private struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        /// Any JSON value, consumed and dropped.
        private struct Skip: Decodable {
            init(from decoder: any Decoder) throws {}
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: AnyKey.self)
            top = container.allKeys.map(\.stringValue)
            guard var list = try? container.nestedUnkeyedContainer(forKey: AnyKey(stringValue: "apps")) else { return }
            while !list.isAtEnd {
                if let app = try? list.nestedContainer(keyedBy: AnyKey.self) {
                    apps.append(app.allKeys.map(\.stringValue))
                } else {
                    apps.append(nil)
                    _ = try list.decode(Skip.self)
                }
            }
        }
    }

    /// Levenshtein distance, case-insensitive: enough to suggest a key.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a.lowercased()), b = Array(b.lowercased())
        var row = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var previous = row[0]
            row[0] = i
            for j in 1...max(b.count, 1) where !b.isEmpty {
                let current = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
                previous = current
            }
        }
        return row[b.count]
    }

    /// A decoding error as one line naming the key path, never the decoder's dump.
    static func describe(_ error: DecodingError) -> String {
        func keyPath(_ path: [any CodingKey]) -> String {
            path.reduce("") { text, key in
                if let index = key.intValue { return "\(text)[\(index)]" }
                return text.isEmpty ? key.stringValue : "\(text).\(key.stringValue)"
            }
        }
        switch error {
        case .typeMismatch(let type, let context):
            return "\(keyPath(context.codingPath)): expected \(name(of: type))"
        case .valueNotFound(let type, let context):
            return "\(keyPath(context.codingPath)): expected \(name(of: type)), found null"
        case .keyNotFound(let key, let context):
            return "missing key '\(keyPath(context.codingPath + [key]))'"
        case .dataCorrupted(let context):
            let where_ = keyPath(context.codingPath)
            if context.codingPath.last?.stringValue == "network" { return "\(where_): expected \"auto\", \"metered\" or \"unmetered\"" }
            return where_.isEmpty ? "config file is not valid JSON" : "\(where_): invalid value"
        @unknown default:
            return "invalid config file"
        }
    }

    private static func name(of type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type: "an integer"
        case is [Any].Type, is [String].Type, is [App].Type: "a list"
        case is [String: Any].Type, is App.Type: "an object"
        default: "\(type)"
        }
    }
}
