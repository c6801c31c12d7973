import Logging
import Synchronization

/// A `LogHandler` that keeps every message, for tests that check what a person is told.
final class RecordedLog: LogHandler, Sendable {
    private let lines = Mutex([(level: Logger.Level, message: String)]())
    var metadata: Logger.Metadata {
        get { [:] }
        set {}  // Metadata is not what these tests read.
    }
    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }

    subscript(metadataKey _: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }

    // swift-log's requirement in full: the source, file, function and line are not kept.
    func log(  // swiftlint:disable:this function_parameter_count
        level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
        file: String, function: String, line: UInt
    ) {
        lines.withLock { $0.append((level, message.description)) }
    }

    /// The messages logged at `level` or above.
    func messages(atLeast level: Logger.Level) -> [String] {
        lines.withLock { $0.filter { $0.level >= level }.map(\.message) }
    }

    /// A logger writing here.
    var logger: Logger { Logger(label: "test") { _ in self } }
}
