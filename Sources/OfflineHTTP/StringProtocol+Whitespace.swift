import OfflineAgent

extension StringProtocol where SubSequence == Substring {
    package func trimmingWhitespace() -> Substring {
        let s = self[...]
        guard let first = s.firstIndex(where: { $0 != " " && $0 != "\t" }) else { return s[s.endIndex...] }
        let last = s.lastIndex(where: { $0 != " " && $0 != "\t" })!
        return s[first...last]
    }
}
