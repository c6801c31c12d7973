import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Raw TCP sockets on 127.0.0.1, the one copy the scripted servers and the hostile
/// clients share: a listener on a free port, and connections with bounded waits.
package enum LoopbackSocket {
    /// A listening socket on 127.0.0.1 (a free port) and its port.
    package static func listen(backlog: Int32) throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LocalHTTP.Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, backlog) == 0 else { close(fd); throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A socket connected to 127.0.0.1:`port`, with connect, send and receive bounded by
    /// `timeout` seconds; `receiveBuffer` shrinks the receive window (set before connecting).
    /// `address`: the IPv4 address to reach the server on (another of this machine's own
    /// addresses makes the server see a peer that is not loopback).
    package static func connect(port: Int, timeout: Int, receiveBuffer: Int32? = nil, address: String = "127.0.0.1") throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LocalHTTP.Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var time = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        guard start(fd, port: port, address: address) == 0 else {
            let failure = LocalHTTP.Failure(description: "connect: \(String(cString: strerror(errno)))")
            close(fd)
            throw failure
        }
        return fd
    }

    /// A non-blocking socket whose connection to `port` is under way, for filling a
    /// listener's accept queue.
    package static func connectNonBlocking(port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = start(fd, port: port)
        return fd
    }

    /// Sends every byte, never raising SIGPIPE; false when the peer is gone or the
    /// send timed out (`errno` says which).
    package static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    private static func start(_ fd: Int32, port: Int, address text: String = "127.0.0.1") -> Int32 {
        var address = loopback(port: port)
        address.sin_addr.s_addr = inet_addr(text)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return address
    }
}
