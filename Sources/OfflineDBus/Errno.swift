#if canImport(Glibc)
import Glibc
#endif

/// `strerror` for sd-bus's negative errno returns.
enum Errno {
    static func describe(_ code: Int32) -> String {
        String(cString: strerror(code)) + " (errno \(code))"
    }
}
