import Crypto
import Foundation
import OfflineAgent
import OfflinePublish

/// `GET /dashboard`: one HTML page an operator reads at a glance, rendered on the server
/// with the chart as inline SVG and one style element, so it needs no script, font or
/// stylesheet from anywhere (it works on an air-gapped network, and its
/// `Content-Security-Policy` forbids loading any, and any style but that element's).
///
/// Per app: a halt banner with its reason; the gray switch, devices, offline hit ratio
/// and bytes saved; adoption over time (a line per version, `AdoptionSeries`); and per
/// version its stage, devices on it now, updates, failures, success rate, top failure
/// causes, rollbacks and bytes saved. Every figure is also in a `data-` attribute with
/// the value `/stats` gives, so a script (or a test) reads the same numbers.
///
/// The page asks the browser to reload it every `refreshSeconds` (60): an open tab costs
/// the server one render a minute at most.
struct DashboardPage {
    /// One app's figures.
    struct App: Sendable {
        var stats: AppStats
        var adoption: AdoptionSeries
    }

    static let refreshSeconds = 60
    /// Allows the page's own style element, by its hash, and nothing else: no script, no
    /// fetch, no other style (a `style` attribute or element a report smuggled in could
    /// otherwise paint over the halt banner), no framing.
    static let contentSecurityPolicy =
        "default-src 'none'; style-src '\(styleHash)'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// `sha256-BASE64` of the style element's text, as CSP names an allowed inline style.
    static let styleHash = "sha256-" + Data(SHA256.hash(data: Data(style.utf8))).base64EncodedString()

    var apps: [App]
    var generated: Date
    /// The publish directory's TUF metadata that expires soon (`DashboardPage+Metadata`).
    var metadataWarnings: [MetadataExpiryWarning] = []

    /// The whole document.
    func render() -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta http-equiv="refresh" content="\(Self.refreshSeconds)">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>offline-server fleet</title>
            <style>\(Self.style)</style>
            </head><body>
            <header><h1>Fleet</h1><p class="generated">\(Self.escape(RFC3339.string(from: generated))) · reloads every \(Self.refreshSeconds) s</p></header>

            """
        html += metadataSection()
        if apps.isEmpty { html += "<p class=\"empty\">No app is published in this directory yet.</p>\n" }
        for app in apps { html += section(app) }
        html += "</body></html>\n"
        return html
    }

    private func section(_ app: App) -> String {
        let stats = app.stats
        let name = Self.escape(stats.app)
        var html = """
            <section class="app" id="app-\(name)" data-app="\(name)" data-events="\(stats.events)" data-devices="\(stats.devices)" \
            data-rollout="\(stats.rollout.map(String.init) ?? "")" data-latest="\(Self.escape(stats.latest ?? ""))" \
            data-bytes-saved="\(stats.bytesSaved)" data-bytes-downloaded="\(stats.bytesDownloaded)" \
            data-offline-hits="\(stats.offlineHits)" data-offline-hit-ratio="\(stats.offlineHitRatio.map { String($0) } ?? "")">
            <h2>\(name)</h2>

            """
        for version in stats.versions where version.halted {
            html += """
                <p class="halt" data-halted-version="\(Self.escape(version.version))"><strong>Rollout of \(Self.escape(version.version)) halted.</strong> \
                \(Self.escape(version.reason ?? "stage 0"))</p>

                """
        }
        html += """
            <dl class="summary">
            <div><dt>Gray switch</dt><dd>\(stats.rollout.map { "\($0) %" } ?? "—")</dd></div>
            <div><dt>Latest version</dt><dd>\(Self.escape(stats.latest ?? "—"))</dd></div>
            <div><dt>Devices reporting</dt><dd>\(stats.devices)</dd></div>
            <div><dt>Events</dt><dd>\(stats.events)</dd></div>
            <div><dt>Offline hit ratio</dt><dd>\(stats.offlineHitRatio.map(Self.percent) ?? "—")</dd></div>
            <div><dt>Bytes saved by patches</dt><dd>\(Self.bytes(stats.bytesSaved))</dd></div>
            <div><dt>Bytes downloaded</dt><dd>\(Self.bytes(stats.bytesDownloaded))</dd></div>
            </dl>
            <h3>Adoption</h3>
            \(chart(app))
            <h3>Versions</h3>
            <table class="versions"><thead><tr><th>Version</th><th>Stage</th><th>Devices now</th><th>Updates</th><th>Failures</th>\
            <th>Success rate</th><th>Top failure causes</th><th>Rollbacks</th><th>Bytes saved</th></tr></thead><tbody>

            """
        for version in stats.versions {
            let causes = version.topFailures.map { "\(Self.escape($0.errorCode ?? "none")) × \($0.count)" }.joined(separator: ", ")
            let stage = version.stage.map { version.halted ? "halted (0 %)" : "\($0) %" } ?? "—"
            html += """
                <tr class="\(version.halted ? "halted" : "")" data-version="\(Self.escape(version.version))" data-devices="\(version.devices)" \
                data-updated="\(version.updated)" data-failed="\(version.failed)" data-rolled-back="\(version.rolledBack)" \
                data-success-rate="\(version.successRate.map { String($0) } ?? "")" data-bytes-saved="\(version.bytesSaved)" \
                data-stage="\(version.stage.map(String.init) ?? "")" data-halted="\(version.halted)">\
                <td>\(Self.escape(version.version))</td><td>\(stage)</td><td>\(version.devices)</td><td>\(version.updated)</td>\
                <td>\(version.failed)</td><td>\(version.successRate.map(Self.percent) ?? "—")</td><td>\(causes.isEmpty ? "—" : causes)</td>\
                <td>\(version.rolledBack)</td><td>\(Self.bytes(version.bytesSaved))</td></tr>

                """
        }
        if let other = stats.otherVersions {
            html += """
                <tr class="other" data-other-versions="\(other.versions)" data-devices="\(other.devices)" \
                data-updated="\(other.updated)" data-failed="\(other.failed)" data-rolled-back="\(other.rolledBack)" \
                data-bytes-saved="\(other.bytesSaved)"><td>\(other.versions) older versions</td><td>—</td><td>\(other.devices)</td>\
                <td>\(other.updated)</td><td>\(other.failed)</td><td>—</td><td>—</td><td>\(other.rolledBack)</td>\
                <td>\(Self.bytes(other.bytesSaved))</td></tr>

                """
        }
        html += "</tbody></table>\n</section>\n"
        return html
    }

    // MARK: The chart

    private static let palette = ["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f"]

    private func chart(_ app: App) -> String {
        // A line per version the table lists (the table is bounded, so is the chart).
        var adoption = app.adoption
        let listed = Set(app.stats.versions.map(\.version))
        adoption.lines = adoption.lines.filter { listed.contains($0.key) }
        guard !adoption.lines.isEmpty else { return "<p class=\"empty\">No device has reported an update yet.</p>" }
        let width = 720.0, height = 240.0, left = 48.0, right = 150.0, top = 12.0, bottom = 28.0
        let plotWidth = width - left - right, plotHeight = height - top - bottom
        let peak = max(1, adoption.peak)
        let steps = Double(AdoptionSeries.buckets - 1)
        var svg = """
            <svg class="adoption" role="img" aria-label="devices per version over time" viewBox="0 0 \(Int(width)) \(Int(height))" \
            width="\(Int(width))" height="\(Int(height))" xmlns="http://www.w3.org/2000/svg" data-peak="\(adoption.peak)">
            <line x1="\(left)" y1="\(top + plotHeight)" x2="\(left + plotWidth)" y2="\(top + plotHeight)" class="axis"/>
            <line x1="\(left)" y1="\(top)" x2="\(left)" y2="\(top + plotHeight)" class="axis"/>
            <text x="\(left - 6)" y="\(top + 4)" text-anchor="end">\(peak)</text>
            <text x="\(left - 6)" y="\(top + plotHeight)" text-anchor="end">0</text>
            <text x="\(left)" y="\(height - 8)">\(Self.escape(Self.time(adoption.fromMillis)))</text>
            <text x="\(left + plotWidth)" y="\(height - 8)" text-anchor="end">\(Self.escape(Self.time(adoption.toMillis)))</text>

            """
        let halted = Set(app.stats.versions.filter(\.halted).map(\.version))
        let versions = adoption.lines.keys.sorted { AppStats.VersionStats.newestFirst(.init(version: $0), .init(version: $1)) }
        for (index, version) in versions.enumerated() {
            guard let line = adoption.lines[version] else { continue }
            let colour = halted.contains(version) ? "#d62728" : Self.palette[index % Self.palette.count]
            let points = line.enumerated().map { step, devices in
                let x = left + plotWidth * Double(step) / steps
                let y = top + plotHeight * (1 - Double(devices) / Double(peak))
                return String(format: "%.1f,%.1f", x, y)
            }.joined(separator: " ")
            let dash = halted.contains(version) ? " stroke-dasharray=\"6 3\"" : ""
            svg += """
                <polyline class="line" data-version="\(Self.escape(version))" data-last="\(line.last ?? 0)" points="\(points)" \
                fill="none" stroke="\(colour)" stroke-width="2"\(dash)/>
                <rect x="\(left + plotWidth + 12)" y="\(top + Double(index) * 18)" width="12" height="12" fill="\(colour)"/>
                <text x="\(left + plotWidth + 30)" y="\(top + Double(index) * 18 + 10)">\(Self.escape(version))\(halted.contains(version) ? " (halted)" : "") · \(line.last ?? 0)</text>

                """
        }
        return svg + "</svg>"
    }

    // MARK: Formatting

    private static let style = """
        body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}\
        h1{margin:0}h2{margin:1.2em 0 .3em;border-bottom:1px solid #ccc}h3{margin:.8em 0 .3em;font-size:1em}\
        .generated{color:#666;margin:.2em 0}.halt{background:#fde8e8;border:1px solid #d62728;color:#8b1111;padding:.5em .8em}\
        .summary{display:flex;flex-wrap:wrap;gap:.4em 1.6em;margin:.4em 0}.summary dt{color:#666;font-size:.85em}.summary dd{margin:0;font-weight:600}\
        table{border-collapse:collapse}th,td{border-bottom:1px solid #e4e4e4;padding:.25em .6em;text-align:right}\
        th:first-child,td:first-child,td:nth-child(7){text-align:left}tr.halted td{color:#8b1111;background:#fdf3f3}\
        svg text{font-size:11px;fill:#444}svg .axis{stroke:#999}.empty{color:#666}\
        .expiry{background:#fff4e0;border:1px solid #e08a00;color:#6b4100;padding:.5em .8em}
        """

    /// `text` for HTML text and quoted attributes, escaped per Unicode scalar: a walk by
    /// `Character` sees `"` followed by a combining scalar (U+200D, U+0301) as one
    /// cluster that is not `"`, and wrote the quote raw, out of the attribute.
    static func escape(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out.append(contentsOf: "&amp;".unicodeScalars)
            case "<": out.append(contentsOf: "&lt;".unicodeScalars)
            case ">": out.append(contentsOf: "&gt;".unicodeScalars)
            case "\"": out.append(contentsOf: "&quot;".unicodeScalars)
            case "'": out.append(contentsOf: "&#39;".unicodeScalars)
            default: out.append(scalar)
            }
        }
        return String(out)
    }

    private static func percent(_ ratio: Double) -> String { String(format: "%.1f %%", ratio * 100) }

    private static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count), unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f", value) + " " + units[unit]
    }

    private static func time(_ millis: Int64) -> String {
        RFC3339.string(from: Date(timeIntervalSince1970: Double(millis) / 1000))
    }
}
