import OfflineAgent
import OfflinePublish
import AsyncHTTPClient
import Crypto
import Foundation
import Testing

/// HTTP for the publish and reference-server tests.
package enum PublishHTTP {
    /// A small HTTP response, fully read.
    package struct Response {
        package var status: Int
        var headers: [(String, String)]
        package var body: Data

        package func header(_ name: String) -> String? {
            headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
        }
    }

    /// GETs (or sends `method` to) a URL with AsyncHTTPClient, reading at most 64 MiB.
    package static func fetch(_ url: String, method: String = "GET", headers: [(String, String)] = []) async throws -> Response {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
        let body = try await response.body.collect(upTo: 64 << 20)
        return Response(
            status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
            body: Data(body.readableBytesView))
    }
}
