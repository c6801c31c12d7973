import Foundation

/// libFuzzer target: `SetCookie.parse` (RFC 6265 §5.2 attributes, §5.3 storage
/// rules) and `CookieDate.parse` (§5.1.1 dates) on a hostile header line, for a
/// few request URLs. Whatever is accepted must respect the limits the parser promises.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSetCookie(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let header = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    for url in FuzzURLs.all {
        guard let cookie = SetCookie.parse(header, from: url, now: now, suffixes: FuzzURLs.suffixes) else { continue }
        guard !cookie.name.isEmpty, cookie.name.utf8.count + cookie.value.utf8.count <= SetCookie.maxNameValueBytes,
              cookie.path.hasPrefix("/"), !cookie.domain.isEmpty else { fatalError("bad cookie \(cookie)") }
        if let expires = cookie.expires, expires > now.addingTimeInterval(SetCookie.maxLifetime) {
            fatalError("expiry beyond the 400-day limit: \(expires)")
        }
        if cookie.secure, url.scheme != "https" { fatalError("Secure cookie set over http") }
    }
    if let date = CookieDate.parse(header), date < Date(timeIntervalSince1970: -11_644_473_600) {
        fatalError("cookie date before 1601: \(date)")
    }
    return 0
}

enum FuzzURLs {
    static let all = ["https://app.example.com/shop/cart.html", "http://localhost:8080/", "https://127.0.0.1/a/b/c"]
        .map { URL(string: $0)! }
    static let suffixes = PublicSuffixList(text: "com\nco.uk\n*.ck\n!www.ck\n")
}
