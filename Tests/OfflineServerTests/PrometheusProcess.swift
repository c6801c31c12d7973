import Foundation
import OfflineAgent
import TestSupport

/// `prometheus` on a free loopback port, scraping one target every second.
final class PrometheusProcess: @unchecked Sendable {
    /// Debian's `prometheus`.
    static let binary = "/usr/bin/prometheus"
    let process: ChildProcess
    let port: Int

    private init(process: ChildProcess, port: Int) {
        self.process = process
        self.port = port
    }

    /// Starts Prometheus; it cannot take port 0, so a free port is found by binding and
    /// releasing one, and another is tried when Prometheus could not bind it.
    static func start(scraping target: Int, in dir: String) async throws -> PrometheusProcess {
        let config = "\(dir)/prometheus.yml"
        try """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: offline-server
                static_configs:
                  - targets: ['127.0.0.1:\(target)']
            """.write(toFile: config, atomically: true, encoding: .utf8)
        var lastError = ""
        for attempt in 0..<3 {
            let listener = try LoopbackListener()
            let port = listener.port
            listener.stop()
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [
                "--config.file=\(config)", "--storage.tsdb.path=\(dir)/tsdb-\(attempt)",
                "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn",
            ]
            let errors = "\(dir)/prometheus-\(attempt).log"
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            process.standardOutput = FileHandle.nullDevice
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
            try process.run()
            let running = PrometheusProcess(process: process, port: port)
            // Ready when /-/ready answers 200; a process that exits lost the port (or failed).
            let deadline = ContinuousClock.now + .seconds(180)  // a bound on a hang, not a speed
            while ContinuousClock.now < deadline, process.isRunning {
                if let ready = try? await PublishHTTP.fetch("http://127.0.0.1:\(port)/-/ready"), ready.status == 200 {
                    return running
                }
                try await Task.sleep(for: .milliseconds(200))
            }
            running.stop()
            lastError = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
        }
        throw OfflineAgentError(.serve, "prometheus did not start: \(lastError)")
    }

    /// Polls the instant-query API until `query` returns `value` (or the time is up);
    /// returns the last value seen (nil if none).
    func waitForValue(_ query: String, equal value: Double, within limit: Duration) async throws -> Double? {
        let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let deadline = ContinuousClock.now + limit
        var seen: Double?
        while ContinuousClock.now < deadline {
            let response = try await PublishHTTP.fetch("http://127.0.0.1:\(port)/api/v1/query?query=\(encoded)")
            if response.status == 200,
               let object = try JSONSerialization.jsonObject(with: response.body) as? [String: Any],
               let data = object["data"] as? [String: Any], let result = data["result"] as? [[String: Any]],
               let sample = result.first?["value"] as? [Any], let text = sample.last as? String {
                seen = Double(text)
                if seen == value { return seen }
            }
            try await Task.sleep(for: .milliseconds(250))
        }
        return seen
    }

    /// SIGTERM without waiting for the exit (the reaper thread sees it): called from `defer`,
    /// which cannot await, and nothing after needs Prometheus gone.
    func stop() {
        if process.isRunning { process.terminate() }
    }
}
