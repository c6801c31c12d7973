import Foundation

/// libFuzzer target: `ZipCentralDirectory.rawNames` (end record, zip64 locator and
/// record, central directory entries) on a hostile archive file. A refusal must be
/// one `OfflineAgentError` of the extract phase.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzZipCentralDirectory(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let path = FuzzFile.path
    guard FileManager.default.createFile(atPath: path, contents: Data(bytes: data, count: size)) else {
        fatalError("cannot write \(path)")
    }
    do {
        let names = try ZipCentralDirectory.rawNames(of: path)
        guard names.allSatisfy({ $0.count <= 0xFFFF }) else { fatalError("name longer than a zip allows") }
    } catch let error as OfflineAgentError {
        guard error.code == .extract else { fatalError("refusal in phase \(error.code): \(error)") }
    } catch {
        fatalError("not an OfflineAgentError: \(error)")
    }
    return 0
}

enum FuzzFile {
    static let path: String = {
        let base = FileManager.default.isWritableFile(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        return "\(base)/zip-fuzz-\(getpid()).zip"
    }()
}
