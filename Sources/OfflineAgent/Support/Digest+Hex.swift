import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

extension Digest {
    package var hex: String { map { String(format: "%02x", $0) }.joined() }
}
