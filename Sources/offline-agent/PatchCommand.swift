import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct PatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "patch",
        abstract: "Apply a BSDIFF40 patch, like bspatch: OLD + PATCH -> NEW.",
        discussion: """
            NEW is written to a temporary file and renamed into place only on success. Like bspatch, \
            it is not flushed to disk first unless --sync is given (installs always flush).
            """
    )

    @Argument(help: "The file the patch applies to.") var old: String
    @Argument(help: "The BSDIFF40 patch.") var patch: String
    @Argument(help: "Where to write the result.") var new: String
    @Option(help: "Refuse the patch unless it produces exactly this many bytes.") var expectedSize: Int64?
    @Flag(help: "Flush NEW to disk before the final rename.") var sync = false

    func run() async throws {
        try await reportingFailures {
            try Patcher.apply(
                old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: patch),
                to: URL(fileURLWithPath: new), expectedSize: expectedSize, durable: sync)
        }
    }
}
