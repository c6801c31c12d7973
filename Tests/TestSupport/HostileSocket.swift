import OfflineAgent
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Raw client sockets for the hostile-client tests of `offline-agent serve`: every
/// step bounded by a timeout, failures reported as values, not thrown.
package enum HostileSocket {
    /// Raises this process's soft descriptor limit toward `wanted` (the hostile sockets
    /// and an in-process server share it); returns the limit in force.
    package static func raiseDescriptorLimit(to wanted: Int) -> Int {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < rlim_t(wanted) {
            // Raising the hard limit too needs privilege (CI runs as root); else up to it.
            var raised = rlimit(rlim_cur: rlim_t(wanted), rlim_max: max(limit.rlim_max, rlim_t(wanted)))
            if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &raised) != 0 {
                raised = rlimit(rlim_cur: min(rlim_t(wanted), limit.rlim_max), rlim_max: limit.rlim_max)
                setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &raised)
            }
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Int(clamping: limit.rlim_cur)
    }

    /// A socket connected to 127.0.0.1:`port`, with connect, send and receive bounded by `timeout` seconds; nil if it did not connect.
    package static func connect(port: Int, timeout: Int = 5) -> Int32? {
        try? LoopbackSocket.connect(port: port, timeout: timeout)
    }

    package static func send(_ fd: Int32, _ text: String) -> Bool {
        LoopbackSocket.sendAll(fd, Array(text.utf8))
    }

    /// Reads until the server closes the connection (true) or `deadline` passes (false);
    /// whatever the server sent first (a 503, a response) is returned too.
    package static func waitForClose(_ fd: Int32, until deadline: ContinuousClock.Instant) -> (closed: Bool, received: [UInt8]) {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while ContinuousClock.now < deadline {
            var time = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
            let n = recv(fd, &chunk, chunk.count, 0)
            if n == 0 { return (true, received) }
            if n > 0 {
                received += chunk[0..<n]
            } else if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                return (true, received)  // reset
            }
        }
        return (false, received)
    }

    /// One `GET /mall/index.html` with every step bounded by 2 s; nil when it got no whole response.
    package static func tryRequest(port: Int) -> LocalHTTP.Response? {
        guard let fd = connect(port: port, timeout: 2) else { return nil }
        defer { close(fd) }
        guard send(fd, "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n") else { return nil }
        let (closed, data) = waitForClose(fd, until: .now + .seconds(2))
        guard closed else { return nil }
        return try? LocalHTTP.parse(data)
    }
}
