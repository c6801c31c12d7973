import ArgumentParser
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Runs a command body, turning a product's error (any ``CommandFailure``) into a one-line
/// reason on stderr and the exit status of its code (1 failed, 64 usage, 75 busy), never a trap.
///
/// - Parameter tool: the program name that prefixes the line, as Unix tools do.
@discardableResult
public func reportingFailures<T>(tool: String, _ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as any CommandFailure {
        printError("\(tool): \(error.messageLine)")
        throw ExitCode(error.exitStatus)
    }
}

/// Writes one line to standard error, unbuffered.
public func printError(_ line: String) {
    fputs(line + "\n", stderr)
}
