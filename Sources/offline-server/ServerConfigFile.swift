import ArgumentParser
import Foundation

/// `offline-server --config FILE`: settings an operator keeps in a file rather than on
/// the command line (a token stays out of `ps`), as one JSON object. Unknown keys are
/// refused, so a misspelt rule is not silently ignored.
struct ServerConfigFile: Decodable {
    /// As `--reports-db`.
    var reportsDb: String?
    /// As `--auto-halt`.
    var autoHalt: String?
    /// As `--report-token`.
    var reportToken: String?
    /// As `--collector-secret`.
    var collectorSecret: String?

    init() {}

    init(path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read --config \(path)") }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ValidationError("--config \(path) is not a JSON object")
        }
        let known: Set<String> = ["reportsDb", "autoHalt", "reportToken", "collectorSecret"]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw ValidationError("--config \(path): unknown key '\(unknown)' (known: \(known.sorted().joined(separator: ", ")))")
        }
        do {
            self = try JSONDecoder().decode(Self.self, from: data)
        } catch {
            throw ValidationError("--config \(path): reportsDb, autoHalt, reportToken and collectorSecret must be strings")
        }
    }
}
