import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct ExtractCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extract",
        abstract: "Extract a package zip into a new directory, refusing hostile archives whole.",
        discussion: """
            DIR must not exist. The files are written into a temporary directory beside it and renamed \
            into place, so DIR appears whole or not at all; nothing is left behind when the archive is \
            refused. Like unzip, it does not wait for the disk unless --sync is given (sync installs always do).
            """
    )

    @Argument(help: "The package archive.") var zip: String
    @Argument(help: "The directory to create.") var dir: String
    @Option(help: "The most bytes the archive may expand to.") var maxBytes: Int64 = 1 << 30
    @Option(help: "The most entries the archive may hold.") var maxEntries: Int = 100_000
    @Flag(help: "Flush the files to disk before the final rename.") var sync = false

    func run() async throws {
        try await reportingFailures {
            try ZipExtractor.extract(
                archive: URL(fileURLWithPath: zip), to: URL(fileURLWithPath: dir),
                limits: ExtractionLimits(maxTotalBytes: maxBytes, maxEntries: maxEntries), durable: sync)
        }
    }
}
