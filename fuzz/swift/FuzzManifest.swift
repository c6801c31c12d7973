import Foundation

/// libFuzzer target: `Manifest.decode` (the parse-from-bytes entry point: JSON,
/// versions, RFC 3339 times, field checks) on hostile bytes. A refusal must be one
/// `OfflineAgentError` with the manifest-invalid cause; an accepted manifest must
/// survive `validate` and an encode/decode round trip.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzManifest(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Data(bytes: data, count: size)
    let manifest: Manifest
    do {
        manifest = try Manifest.decode(body)
    } catch let error as OfflineAgentError {
        guard error.code == .manifest, error.cause == .manifestInvalid else { fatalError("refusal with \(error.cause): \(error)") }
        return 0
    } catch {
        fatalError("not an OfflineAgentError: \(error)")
    }
    _ = try? manifest.validate(forApp: "sample-app", installed: Version("1.0.0"), now: Date(timeIntervalSince1970: 1_800_000_000))
    // What the agent accepts, the publisher can write back (expires is written in whole seconds).
    var expected = manifest
    expected.expires = nil
    guard let encoded = try? JSONEncoder().encode(expected), var again = try? Manifest.decode(encoded) else {
        fatalError("accepted manifest does not round-trip")
    }
    again.expires = nil
    guard again == expected else { fatalError("round trip changed the manifest") }
    return 0
}
