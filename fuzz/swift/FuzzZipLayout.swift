/// libFuzzer target: the zip layout reader as the splitter, the skeleton and the view
/// use it on unverified bytes: `ZipCentralDirectory.storedData` (the central directory,
/// then each entry's local header and data range), and every local header the bytes
/// hold from offset 0 on, walked as the splitter walks a patch's output (header, plain
/// stored rule, data), in memory. A refusal must be one `OfflineAgentError` of the
/// extract phase; a located entry must lie inside the bytes and be plain stored.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzZipLayout(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let read: (UInt64, Int) throws -> [UInt8] = { offset, count in
        guard offset < UInt64(bytes.count), count > 0 else { return [] }
        let start = Int(offset)
        return Array(bytes[start..<(start + min(count, bytes.count - start))])
    }
    do {
        let located = try ZipCentralDirectory.storedData(size: UInt64(size), path: "fuzz", read: read)
        for item in located ?? [] {
            guard item.start <= UInt64(size), UInt64(item.entry.size) <= UInt64(size) - item.start else {
                fatalError("entry \(item.index) located past the end")
            }
            guard item.entry.notPlainStored == nil else {
                fatalError("entry \(item.index) located but not plain stored")
            }
        }
    } catch let error as OfflineAgentError {
        guard error.code == .extract else { fatalError("refusal in phase \(error.code): \(error)") }
    } catch {
        fatalError("not an OfflineAgentError: \(error)")
    }
    // The splitter's walk: local headers back to back until another record.
    var offset = 0
    while bytes.count - offset >= ZipCentralDirectory.LocalHeader.size {
        guard let header = ZipCentralDirectory.LocalHeader(Array(bytes[offset..<(offset + ZipCentralDirectory.LocalHeader.size)])) else { break }
        guard header.notPlainStored == nil else { break }
        let (next, overflow) = offset.addingReportingOverflow(header.length + Int(header.size))
        guard !overflow, next > offset, next <= bytes.count else { break }
        offset = next
    }
    return 0
}
