import Crypto
import Foundation
import Testing
@testable import OfflineAgent

/// The device code runs on FoundationEssentials, so what full Foundation used to do for
/// it (hex, percent-coding, trimming, path parts) is done by hand in `Support/`. Tests
/// may use full Foundation: each helper is checked against the Foundation call it
/// replaced, on a table of edge cases and on deterministic random text.
@Suite struct EssentialsParityTests {
    /// Texts that hit the edges: empty, `%` at the end, bad hex, non-UTF-8 escapes,
    /// Unicode white space, NUL, slashes in every position.
    static let edgeTexts: [String] = [
        "", " ", "%", "%4", "%41", "%zz", "a%2", "%C3%A9", "%C3", "%FF", "%e2%82%ac", "%00", "100%",
        "a b", "a+b", "a&b=c#d", "é", "€ ¥", "\u{0}", "\t\n x \r\n", "\u{A0}x\u{A0}", "\u{2028}x\u{3000}",
        "\u{85}x\u{200B}", "\u{FEFF}x", "~-._", "/", "//", "/a", "/a/", "a", "a/", "a/b", "a//b", "/a/b/",
        "a/b//", "./a", "../a/..", "/a/./b", "💥/🧨", "a/\u{0}b",
    ]

    /// Deterministic random text from a small alphabet rich in the characters that matter.
    static func randomTexts(count: Int, seed: UInt64, alphabet: [Character] = [
        "a", "Z", "0", "%", "2", "F", "f", "C", "3", "/", " ", "\t", "\n", ".", "~", "é", "\u{A0}", "+", "&", "💥",
    ]) -> [String] {
        var state = seed
        func next() -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int(truncatingIfNeeded: state >> 33)
        }
        return (0..<count).map { _ in String((0..<(next() % 12)).map { _ in alphabet[next() % alphabet.count] }) }
    }

    static let texts = edgeTexts + randomTexts(count: 400, seed: 7)

    @Test(arguments: [
        ([], ""), ([0], "00"), ([0x0F, 0x10], "0f10"), ([0xFF, 0xA5, 0x5A], "ffa55a"), (Array(0...255), nil),
    ] as [([UInt8], String?)])
    func hexMatchesFormatSpecifier(bytes: [UInt8], expected: String?) {
        let reference = bytes.map { String(format: "%02x", $0) }.joined()
        #expect(bytes.hex == reference)
        if let expected { #expect(bytes.hex == expected) }
    }

    @Test func digestHexIsTheWireForm() {
        let digest = SHA256.hash(data: Array("abc".utf8))
        #expect(digest.hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(digest.prefix(8).hex == "ba7816bf8f01cfea")
    }

    @Test func percentDecodingMatchesFoundation() {
        // Foundation drops a leading byte order mark while decoding; a path keeps its bytes.
        for text in Self.texts where text.percentDecoded?.hasPrefix("\u{FEFF}") != true {
            #expect(text.percentDecoded == text.removingPercentEncoding, "\(text.debugDescription)")
        }
        #expect("%EF%BB%BFindex.html".percentDecoded == "\u{FEFF}index.html")
    }

    @Test func percentEncodingMatchesFoundation() {
        var unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        unreserved.insert(charactersIn: "-._~")
        for text in Self.texts {
            #expect(text.percentEncodedUnreserved == text.addingPercentEncoding(withAllowedCharacters: unreserved),
                    "\(text.debugDescription)")
            #expect(text.percentEncodedUnreserved.percentDecoded == text)
        }
    }

    @Test func trimmingMatchesFoundation() {
        for text in Self.texts {
            #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespacesAndNewlines), "\(text.debugDescription)")
        }
    }

    /// NSString's path code traps on some inputs on Linux, so the path parts are checked
    /// against what it answers on Darwin, written out.
    @Test(arguments: [
        ("", ".", ""), ("/", "/", "/"), ("//", "/", "/"), ("/a", "/", "a"), ("/a/", "/", "a"), ("a", ".", "a"),
        ("a/", ".", "a"), ("a/b", "a", "b"), ("a//b", "a", "b"), ("/a/b/", "/a", "b"), ("a/b//", "a", "b"),
        ("./a", ".", "a"), ("../a/..", "../a", ".."), ("/a/./b", "/a/.", "b"), ("/x/y/z.json", "/x/y", "z.json"),
    ])
    func pathParts(path: String, parent: String, name: String) {
        #expect(FileSystem.parent(of: path) == parent)
        #expect(FileSystem.name(of: path) == name)
    }
}
