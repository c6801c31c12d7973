import ArgumentParser
import OfflineAgent

// `--network auto|metered|unmetered`.
//
// The value lists are spelled out instead of taken from ArgumentParser's defaults for a
// `CaseIterable` `RawRepresentable`: those reach the raw values through generic code
// and `String(describing:)`, whose runtime conformance lookups (each a scan of every
// conformance record in the binary) ran on every `sync`, help or not.
extension NetworkPolicy: ExpressibleByArgument {
    public static var allValueStrings: [String] { allCases.map(\.rawValue) }
    public static var allValueDescriptions: [String: String] { [:] }
    public static var defaultCompletionKind: CompletionKind { .list(allValueStrings) }
    public var defaultValueDescription: String { rawValue }
}
