import Logging

/// The log of `offline-server`'s one-shot subcommands (`copy-reports`, `reenrol`):
/// warnings and errors on stderr, so their one line of output stays the answer.
enum CommandLogging {
    static func warningsOnly() {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .warning
            return handler
        }
    }
}
