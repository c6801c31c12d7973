import FoundationEssentials

/// The Public Suffix List (publicsuffix.org): names under which anyone may register
/// a domain (`com`, `co.uk`, `github.io`). A cookie whose `Domain` is one of them
/// would reach every site below it, so RFC 6265 §5.3 step 5 refuses it.
///
/// Read from the system's copy (Debian package `publicsuffix`); where there is none,
/// only the list's implicit rule holds: a single label is a public suffix.
public struct PublicSuffixList: Sendable {
    static let systemPath = "/usr/share/publicsuffix/public_suffix_list.dat"

    /// Loaded on first use: only a `Domain` attribute needs it.
    public static let system = PublicSuffixList(path: systemPath) ?? PublicSuffixList(text: "")

    private var rules: Set<String> = []
    /// `*.ck` kept as `ck`: every direct child of it is a suffix.
    private var wildcards: Set<String> = []
    /// `!www.ck` kept as `www.ck`: not a suffix despite a wildcard.
    private var exceptions: Set<String> = []

    init?(path: String) {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        self.init(text: String(decoding: data, as: UTF8.self))
    }

    /// Parses the list's format: one rule per line, `//` comments; a rule is the
    /// first white-space-free word of its line.
    public init(text: String) {
        for line in text.split(whereSeparator: \.isNewline) {
            guard let word = line.split(whereSeparator: \.isWhitespace).first, !word.hasPrefix("//") else { continue }
            let rule = word.lowercased()
            if rule.hasPrefix("!") {
                exceptions.insert(String(rule.dropFirst()))
            } else if rule.hasPrefix("*.") {
                wildcards.insert(String(rule.dropFirst(2)))
            } else {
                rules.insert(rule)
            }
        }
    }

    /// Whether `domain` (lower-case, no leading or trailing dot) is itself a public suffix.
    public func isPublicSuffix(_ domain: String) -> Bool {
        if exceptions.contains(domain) { return false }
        if rules.contains(domain) { return true }
        guard let dot = domain.firstIndex(of: ".") else { return true }  // the implicit "*" rule
        return wildcards.contains(String(domain[domain.index(after: dot)...]))
    }
}
