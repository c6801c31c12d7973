import CoreMetrics
import Prometheus
import Synchronization

/// One server's metrics: a `PrometheusCollectorRegistry` of its own and the swift-metrics
/// factory that records into it.
///
/// Never the process-wide `MetricsSystem`: a host app embedding a server may have
/// bootstrapped its own backend, and one process (a test run, an app with two servers)
/// may run several servers, each of whose `/metrics` must show its own counts only. So
/// every metric is made with the explicit `factory:` initialisers of swift-metrics.
package final class ServerMetricsRegistry: Sendable {
    /// What records into this registry; pass it to `Counter(label:dimensions:factory:)` and kin.
    package let factory: PrometheusMetricsFactory
    private let registry: PrometheusCollectorRegistry
    /// `# HELP` text by family name: swift-metrics has no place for it, so it is added on export.
    private let help: [String: String]

    package init(help: [String: String]) {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        self.factory = PrometheusMetricsFactory(registry: registry)
        self.help = help
    }

    /// The counter `name` with these labels (created at 0 on first use, the same series after).
    ///
    /// Kept once made: swift-prometheus validates the name and labels and looks the series
    /// up under its lock on every make, about 3 % of `serve`'s CPU time for a served file
    /// (`perf record` under `bench/serve.sh`'s load).
    package func counter(_ name: String, _ dimensions: [(String, String)] = []) -> CoreMetrics.Counter {
        let key = Series(name: name, labels: dimensions.flatMap { [$0.0, $0.1] })
        if let counter = counters.withLock({ $0[key] }) { return counter }
        let counter = CoreMetrics.Counter(label: name, dimensions: dimensions, factory: factory)
        counters.withLock { $0[key] = counter }
        return counter
    }

    /// A series: a family's name and its label names and values, in order.
    private struct Series: Hashable {
        var name: String
        var labels: [String]
    }

    /// Every counter made, by series (as many as the registry itself holds).
    private let counters = Mutex<[Series: CoreMetrics.Counter]>([:])

    /// The gauge `name` with these labels, moved with `increment`/`decrement`.
    package func meter(_ name: String, _ dimensions: [(String, String)] = []) -> Meter {
        Meter(label: name, dimensions: dimensions, factory: factory)
    }

    /// The Prometheus text exposition (format 0.0.4) of every series, as swift-prometheus
    /// writes it, with each family's `# HELP` line added and families and their samples
    /// sorted by name, so two scrapes of the same counts read the same.
    package func exposition() -> String {
        var families: [(name: String, lines: [Substring])] = []
        let text = registry.emitToString()
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let name = line.dropFirst(7).prefix { $0 != " " }
                families.append((String(name), [line]))
            } else if !line.hasPrefix("#"), !families.isEmpty {
                families[families.count - 1].lines.append(line)
            }
        }
        var out = ""
        out.reserveCapacity(text.utf8.count + help.count * 80)
        for family in families.sorted(by: { $0.name < $1.name }) {
            if let help = help[family.name] { out += "# HELP \(family.name) \(help)\n" }
            out += family.lines[0] + "\n"
            for sample in family.lines.dropFirst().sorted() { out += sample + "\n" }
        }
        return out
    }

    /// The current value of one series as exported; 0 for a series never recorded.
    ///
    /// Read back from the exposition itself (swift-prometheus has no getter), so what the
    /// server's accessors report is exactly what a scrape sees.
    package func value(_ name: String, _ labels: [(String, String)] = []) -> Double {
        let prefix = Self.seriesPrefix(name, labels)
        for line in registry.emitToString().split(separator: "\n") where line.hasPrefix(prefix) {
            return Double(String(line.dropFirst(prefix.count))) ?? 0
        }
        return 0
    }

    /// `name{k="v",…} `: how swift-prometheus starts a sample line, labels in the order given.
    private static func seriesPrefix(_ name: String, _ labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return name + " " }
        let rendered = labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",")
        return "\(name){\(rendered)} "
    }

    /// A label value as the text format escapes it: backslash, quote, line feed.
    private static func escape(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out
    }
}
