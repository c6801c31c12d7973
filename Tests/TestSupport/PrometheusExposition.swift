/// A strict reader of the Prometheus text exposition format (version 0.0.4), written
/// from the format's description and independent of the exporter under test: every
/// non-comment line is `name{label="value",…} value`, every family is announced by one
/// `# TYPE` line before its samples, a family's lines are contiguous, no series repeats.
package struct PrometheusExposition: Sendable {
    package struct Sample: Sendable, Equatable {
        package var name: String
        package var labels: [String: String]
        package var value: Double
    }

    package struct Malformed: Error, CustomStringConvertible {
        package var description: String
    }

    /// Family name → type (`counter`, `gauge`, …), from the `# TYPE` lines.
    package private(set) var types: [String: String] = [:]
    /// Family name → help text, from the `# HELP` lines.
    package private(set) var help: [String: String] = [:]
    package private(set) var samples: [Sample] = []

    /// Parses `text`, throwing at the first line that breaks the format.
    package init(parsing text: String) throws {
        guard text.isEmpty || text.hasSuffix("\n") else { throw Malformed(description: "no line feed after the last line") }
        var finished: Set<String> = []
        var current: String?
        var series: Set<String> = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().enumerated() {
            let line = String(raw)
            func fail(_ why: String) -> Malformed { Malformed(description: "line \(index + 1) \(why): \(line)") }
            if line.isEmpty { continue }
            if line.hasPrefix("#") {
                let words = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
                guard words.count >= 3, words[0] == "#", words[1] == "TYPE" || words[1] == "HELP" else { continue }
                let name = words[2]
                guard Self.isMetricName(name) else { throw fail("bad family name") }
                if current != name, let current { finished.insert(current) }
                guard !finished.contains(name) else { throw fail("family lines not contiguous") }
                current = name
                if words[1] == "TYPE" {
                    guard words.count == 4, ["counter", "gauge", "histogram", "summary", "untyped"].contains(words[3]) else {
                        throw fail("bad type")
                    }
                    guard types[name] == nil else { throw fail("second TYPE") }
                    guard !samples.contains(where: { $0.name == name }) else { throw fail("TYPE after samples") }
                    types[name] = words[3]
                } else {
                    guard help[name] == nil else { throw fail("second HELP") }
                    help[name] = words.count == 4 ? words[3] : ""
                }
                continue
            }
            let sample = try Self.sample(line, fail: fail)
            guard let family = Self.family(of: sample.name, in: types) else { throw fail("sample before its TYPE") }
            guard family == current else { throw fail("sample outside its family's lines") }
            let key = sample.name + "{" + sample.labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            guard series.insert(key).inserted else { throw fail("series repeated") }
            samples.append(sample)
        }
    }

    /// The value of the series `name` with exactly these labels, nil if absent.
    package func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    /// The family a sample belongs to: its own name, or for histograms and summaries
    /// the name without `_bucket`, `_sum` or `_count`.
    private static func family(of name: String, in types: [String: String]) -> String? {
        if types[name] != nil { return name }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if let type = types[base], type == "histogram" || type == "summary" { return base }
        }
        return nil
    }

    private static func sample(_ line: String, fail: (String) -> Malformed) throws -> Sample {
        var rest = Substring(line)
        let name = String(rest.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") })
        guard isMetricName(name) else { throw fail("bad metric name") }
        rest = rest.dropFirst(name.count)
        var labels: [String: String] = [:]
        if rest.first == "{" {
            rest = rest.dropFirst()
            while rest.first != "}" {
                let label = String(rest.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") })
                guard isLabelName(label) else { throw fail("bad label name") }
                rest = rest.dropFirst(label.count)
                guard rest.hasPrefix("=\"") else { throw fail("label without =\"") }
                rest = rest.dropFirst(2)
                var value = ""
                while true {
                    guard let c = rest.first else { throw fail("unterminated label value") }
                    rest = rest.dropFirst()
                    if c == "\"" { break }
                    if c == "\\" {
                        guard let e = rest.first else { throw fail("dangling escape") }
                        rest = rest.dropFirst()
                        switch e {
                        case "\\": value.append("\\")
                        case "\"": value.append("\"")
                        case "n": value.append("\n")
                        default: throw fail("bad escape")
                        }
                    } else {
                        guard c != "\n" else { throw fail("raw line feed in label value") }
                        value.append(c)
                    }
                }
                guard labels.updateValue(value, forKey: label) == nil else { throw fail("label repeated") }
                if rest.first == "," { rest = rest.dropFirst() } else if rest.first != "}" { throw fail("expected , or }") }
            }
            rest = rest.dropFirst()
        }
        guard rest.first == " " else { throw fail("no space before the value") }
        let fields = rest.dropFirst().split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count == 1 || (fields.count == 2 && Int64(fields[1]) != nil) else { throw fail("bad value or timestamp") }
        let text = String(fields[0])
        let value: Double
        switch text {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default:
            guard let parsed = Double(text), parsed.isFinite,
                  text.allSatisfy({ $0.isASCII && ($0.isNumber || "+-.eE".contains($0)) }) else { throw fail("bad value") }
            value = parsed
        }
        return Sample(name: name, labels: labels, value: value)
    }

    private static func isMetricName(_ name: String) -> Bool {
        guard let first = name.first, first.isASCII, first.isLetter || first == "_" || first == ":" else { return false }
        return name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") }
    }

    private static func isLabelName(_ name: String) -> Bool {
        guard let first = name.first, first.isASCII, first.isLetter || first == "_" else { return false }
        return name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
    }
}
