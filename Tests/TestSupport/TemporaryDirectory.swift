import OfflineAgent
import Foundation
import Testing

/// A scratch directory removed when the value is dropped.
package final class TemporaryDirectory: @unchecked Sendable {
    package let path: String
    package var url: URL { URL(fileURLWithPath: path) }

    package init(_ label: String = "test") {
        let base = FileManager.default.temporaryDirectory.path
        var template = Array("\(base)/offline-agent-\(label)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    package func file(_ name: String) -> String { "\(path)/\(name)" }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
