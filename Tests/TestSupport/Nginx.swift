import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real nginx (Debian `nginx-light`) on a loopback port, for the tests that need
/// static or caching infrastructure the project does not write itself.
///
/// Everything lives in a temporary prefix: the generated `nginx.conf`, the pid file,
/// `error.log`, the temp and cache directories, and `access.log` in the `cdn` format
/// (`$request|$status|$http_range|$http_if_range|$http_if_none_match|$upstream_cache_status|$body_bytes_sent`)
/// that `accessLog()` parses. `stop()` kills it; call it on every path (`defer`).
package final class Nginx: @unchecked Sendable {
    /// One line of `access.log`.
    package struct LogLine: Sendable, CustomStringConvertible {
        package var method: String
        package var target: String
        package var status: Int
        package var range: String
        package var ifRange: String
        package var ifNoneMatch: String
        /// `HIT`, `MISS`, `EXPIRED`, `REVALIDATED`, … behind `proxy_cache`; empty otherwise.
        package var cacheStatus: String
        package var bytesSent: Int64

        /// The target's path, without the query.
        package var path: String { String(target.prefix { $0 != "?" }) }
        package var description: String { "\(method) \(target) \(status) range=\(range) if-range=\(ifRange) inm=\(ifNoneMatch) cache=\(cacheStatus)" }
    }

    package static let binary = "/usr/sbin/nginx"
    /// Why nginx cannot run here, or nil when it can (tests skip with this message).
    package static var missing: String? {
        FileManager.default.isExecutableFile(atPath: binary) ? nil : "nginx is not installed (apt-get install nginx-light; scripts/install-deps.sh does)"
    }

    package let prefix: String
    package let port: Int
    private let process: ChildProcess

    package var baseURL: String { "http://127.0.0.1:\(port)" }
    package var accessLogPath: String { "\(prefix)/access.log" }

    /// Starts nginx with `server` as the body of its one `server {}` block (the
    /// `listen` line is added) and `http` as extra `http {}` directives, `{prefix}` in
    /// either standing for the temporary prefix; returns once it accepts connections. A port taken between choosing and binding is retried.
    package init(server: String, http: String = "") async throws {
        var lastError = "nginx did not start"
        for _ in 0..<3 {
            let prefix = NSTemporaryDirectory() + "offline-nginx-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: "\(prefix)/temp", withIntermediateDirectories: true)
            let port = try Self.freePort()
            let config = Self.config(
                prefix: prefix, port: port, server: server.replacingOccurrences(of: "{prefix}", with: prefix),
                http: http.replacingOccurrences(of: "{prefix}", with: prefix))
            try Data(config.utf8).write(to: URL(fileURLWithPath: "\(prefix)/nginx.conf"))
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = ["-p", prefix, "-c", "\(prefix)/nginx.conf", "-e", "\(prefix)/error.log"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            // A bound on an nginx that never listens, not a speed (a loaded machine starts slowly).
            if await Self.waitForListening(port: port, process: process, within: 120) {
                self.prefix = prefix
                self.port = port
                self.process = process
                return
            }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            await process.exited()
            lastError = "nginx did not start: " + ((try? String(contentsOfFile: "\(prefix)/error.log", encoding: .utf8)) ?? "no error log")
            try? FileManager.default.removeItem(atPath: prefix)
        }
        throw LocalHTTP.Failure(description: lastError)
    }

    /// Kills nginx (master and workers: the workers leave with their master) and removes its
    /// prefix, on a thread of its own: it is called from `defer` and `deinit`, which cannot
    /// await, and its wait (up to 5 s) must not hold a cooperative thread.
    package func stop() {
        Thread.detachNewThread { [process, prefix] in
            if process.isRunning {
                // SIGTERM is nginx's fast shutdown; SIGKILL if it lingers.
                kill(process.processIdentifier, SIGTERM)
                let deadline = Date().addingTimeInterval(5)
                while process.isRunning, Date() < deadline { usleep(20_000) }
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            }
            process.waitUntilExit()
            try? FileManager.default.removeItem(atPath: prefix)
        }
    }

    /// The access log so far (nginx writes each line when its request ends).
    package func accessLog() -> [LogLine] {
        let text = (try? String(contentsOfFile: accessLogPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 7 else { return nil }
            let request = fields[0].split(separator: " ").map(String.init)
            guard request.count >= 2 else { return nil }
            func value(_ text: String) -> String { text == "-" ? "" : text }
            return LogLine(
                method: request[0], target: request[1], status: Int(fields[1]) ?? 0, range: value(fields[2]),
                ifRange: value(fields[3]), ifNoneMatch: value(fields[4]), cacheStatus: value(fields[5]),
                bytesSent: Int64(fields[6]) ?? 0)
        }
    }

    /// The error log, for failure messages.
    package func errorLog() -> String { (try? String(contentsOfFile: "\(prefix)/error.log", encoding: .utf8)) ?? "" }

    private static func config(prefix: String, port: Int, server: String, http: String) -> String {
        // Workers of a root master run as `nobody` unless told otherwise: they could not
        // write the cache in our temp prefix.
        let user = getuid() == 0 ? "user root;\n" : ""
        return """
            \(user)daemon off;
            master_process on;
            worker_processes 1;
            pid \(prefix)/nginx.pid;
            error_log \(prefix)/error.log info;
            events { worker_connections 64; }
            http {
                default_type application/octet-stream;
                types { application/json json; application/zip zip; application/gzip gz; }
                log_format cdn '$request|$status|$http_range|$http_if_range|$http_if_none_match|$upstream_cache_status|$body_bytes_sent';
                access_log \(prefix)/access.log cdn;
                client_body_temp_path \(prefix)/temp/body;
                proxy_temp_path \(prefix)/temp/proxy;
                fastcgi_temp_path \(prefix)/temp/fastcgi;
                uwsgi_temp_path \(prefix)/temp/uwsgi;
                scgi_temp_path \(prefix)/temp/scgi;
                sendfile off;
            \(http)
                server {
                    listen 127.0.0.1:\(port);
                    server_name localhost;
            \(server)
                }
            }

            """
    }

    /// A port the kernel just handed out and released (another process may still take it: retried).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LocalHTTP.Failure(description: "socket") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw LocalHTTP.Failure(description: "bind 127.0.0.1:0") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func waitForListening(port: Int, process: ChildProcess, within seconds: Double) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, process.isRunning {
            // A loopback connect is answered (or refused) at once by the kernel.
            if let fd = try? LocalHTTP.connect(port: port) {
                close(fd)
                return true
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }
}
