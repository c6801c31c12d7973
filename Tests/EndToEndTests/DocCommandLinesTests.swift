import Foundation
import Testing
import TestSupport

/// Issue 39, row 14: every `offline-*` command line in the shell blocks of README.md and
/// docs/ parses with the real tool (its own argument parser and checks, run with
/// `OFFLINE_DRY_PARSE=1`, which parses and exits), and every repo-relative path those
/// blocks name exists: "every command in docs must work as written".
@Suite("Documented command lines")
struct DocCommandLinesTests {
    struct Line: CustomTestStringConvertible, Sendable {
        var file: String
        var number: Int
        var text: String
        var testDescription: String { "\(file):\(number)" }
    }

    static let tools = ["offline-agent", "offline-publish", "offline-server"]
    static let topDirectories = ["docs", "examples", "scripts", "fixtures", "packaging", "Sources", "Tests", "bench", "fuzz"]

    /// The lines of every `sh`/`bash`/`console`/`shell` block, continuations joined.
    static let lines: [Line] = {
        var files = ["README.md"]
        let docs = (try? FileManager.default.contentsOfDirectory(atPath: "\(Repo.root)/docs")) ?? []
        files += docs.filter { $0.hasSuffix(".md") }.sorted().map { "docs/\($0)" }
        var found: [Line] = []
        for file in files {
            guard let text = try? String(contentsOfFile: "\(Repo.root)/\(file)", encoding: .utf8) else { continue }
            var inShell = false, inBlock = false, pending = "", start = 0
            for (index, raw) in text.components(separatedBy: "\n").enumerated() {
                let trimmed = raw.trimmingCharacters(in: .whitespaces)
                if trimmed.hasPrefix("```") {
                    if inBlock {
                        inBlock = false
                        inShell = false
                    } else {
                        inBlock = true
                        inShell = ["sh", "bash", "console", "shell"].contains(String(trimmed.dropFirst(3)).trimmingCharacters(in: .whitespaces))
                    }
                    continue
                }
                guard inShell else { continue }
                if pending.isEmpty { start = index + 1 }
                if trimmed.hasSuffix("\\") {
                    pending += String(trimmed.dropLast()) + " "
                    continue
                }
                found.append(Line(file: file, number: start, text: pending + trimmed))
                pending = ""
            }
        }
        return found
    }()

    /// Shell words of `text` (quotes removed, a comment dropped); variables and command
    /// substitutions stand as `1`, a value every option that takes one accepts as text.
    static func words(_ text: String) -> [String] {
        var words: [String] = [], word = "", quote: Character?, any = false, depth = 0
        var chars = Array(text)[...]
        func flush() {
            if any { words.append(word) }
            word = ""
            any = false
        }
        while let c = chars.popFirst() {
            if depth > 0 {
                if c == "(" { depth += 1 } else if c == ")" { depth -= 1 }
                continue
            }
            if let q = quote {
                if c == q { quote = nil } else if c == "$", q == "\"" { word = "1"; skipVariable(&chars, &depth) } else { word.append(c) }
                continue
            }
            switch c {
            case "'", "\"": quote = c; any = true
            case " ", "\t": flush()
            case "#" where !any: return words
            case "$": word = "1"; any = true; skipVariable(&chars, &depth)
            case ";", "|", "&", ">", "<":
                flush()
                words.append(String(c))
            default: word.append(c); any = true
            }
        }
        flush()
        return words
    }

    private static func skipVariable(_ chars: inout ArraySlice<Character>, _ depth: inout Int) {
        if chars.first == "(" { chars.removeFirst(); depth = 1; return }
        if chars.first == "{" {
            while let c = chars.popFirst(), c != "}" {}
            return
        }
        while let c = chars.first, c.isLetter || c.isNumber || c == "_" { chars.removeFirst() }
    }

    /// Each invocation of a tool on `line`: its name and arguments, up to the next operator.
    static func invocations(_ line: String) -> [(tool: String, arguments: [String])] {
        var result: [(String, [String])] = []
        var segment: [String] = []
        func take() {
            var words = segment[...]
            while let first = words.first, first.contains("="), !first.hasPrefix("-") { words.removeFirst() }
            if let first = words.first, ["exec", "sudo", "time"].contains(first) { words.removeFirst() }
            if let tool = words.first.map({ String($0.split(separator: "/").last ?? "") }), tools.contains(tool) {
                result.append((tool, Array(words.dropFirst())))
            }
            segment = []
        }
        var redirected = false
        for word in words(line) {
            if [";", "|", "&"].contains(word) { take(); redirected = false; continue }
            if [">", "<"].contains(word) { redirected = true; continue }
            if redirected { redirected = false; continue }
            segment.append(word)
        }
        take()
        return result
    }

    /// `a.{b,c}` as the shell expands it (one group): `a.b`, `a.c`.
    static func braces(_ path: String) -> [String] {
        guard let open = path.firstIndex(of: "{"), let close = path[open...].firstIndex(of: "}") else { return [path] }
        let head = path[..<open], tail = path[path.index(after: close)...]
        return path[path.index(after: open)..<close].split(separator: ",").map { "\(head)\($0)\(tail)" }
    }

    static var commandLines: [Line] { lines.filter { !invocations($0.text).isEmpty } }

    @Test("the docs have command lines to check")
    func found() {
        #expect(Self.commandLines.count > 20, "\(Self.commandLines.count)")
    }

    @Test("every offline-* command line in README.md's and docs/'s shell blocks parses", arguments: commandLines)
    func parses(_ line: Line) async throws {
        for (tool, arguments) in Self.invocations(line.text) {
            let binary = tool == "offline-agent" ? CLI.binary : tool == "offline-publish" ? CLI.publisher : CLI.server
            let result = try await CLI.run(arguments, environment: ["OFFLINE_DRY_PARSE": "1"], executable: binary)
            #expect(result.status == 0, "\(line.file):\(line.number): \(tool) \(arguments.joined(separator: " ")): \(result.stderr)")
        }
    }

    @Test("every repo-relative path the shell blocks of README.md and docs/ name exists")
    func paths() {
        for line in Self.lines {
            for word in Self.words(line.text) {
                guard let top = word.split(separator: "/").first, Self.topDirectories.contains(String(top)), word.contains("/") else { continue }
                var path = word
                while let last = path.last, ",.:)".contains(last) { path.removeLast() }
                guard !path.contains("*"), !path.contains("1") || FileManager.default.fileExists(atPath: "\(Repo.root)/\(path)") else { continue }
                for expanded in Self.braces(path) {
                    #expect(FileManager.default.fileExists(atPath: "\(Repo.root)/\(expanded)"), "\(line.file):\(line.number): \(expanded)")
                }
            }
        }
    }
}
