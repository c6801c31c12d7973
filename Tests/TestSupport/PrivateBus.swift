import Foundation

/// A `dbus-daemon` of a test's own, on a socket in a scratch directory, stopped with the
/// value. Every local user may connect (the tests call as `nobody` too). Without a
/// policy file, anyone may own any name and call anything (a session bus); with one,
/// the bus is a system bus: calls are denied unless a policy allows them, and the file
/// is included as the system bus includes `/usr/share/dbus-1/system.d`.
package final class PrivateBus: @unchecked Sendable {
    package let directory = TemporaryDirectory("bus")
    /// The bus's address, for DBUS_SESSION_BUS_ADDRESS or DBUS_SYSTEM_BUS_ADDRESS.
    package let address: String
    private let process: ChildProcess

    package init(policy: String? = nil) async throws {
        // Others reach the socket through the directory (mkdtemp makes it 0700).
        chmod(directory.path, 0o755)
        let rules = policy == nil
            ? #"<allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/>"#
            : """
              <deny own="*"/><deny send_type="method_call"/>
              <allow send_type="signal"/>
              <allow send_requested_reply="true" send_type="method_return"/>
              <allow send_requested_reply="true" send_type="error"/>
              <allow receive_type="method_call"/><allow receive_type="method_return"/>
              <allow receive_type="error"/><allow receive_type="signal"/>
              <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
              <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
              """
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>\(policy == nil ? "session" : "system")</type>
              <listen>unix:path=\(directory.file("socket"))</listen>
              <auth>EXTERNAL</auth>
              <policy context="default"><allow user="*"/>\(rules)</policy>
              \(policy.map { "<include>\($0)</include>" } ?? "")
            </busconfig>
            """
        try config.write(toFile: directory.file("bus.conf"), atomically: true, encoding: .utf8)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(directory.file("bus.conf"))", "--nofork", "--nopidfile", "--print-address"]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        self.process = process
        // The address line comes once the socket listens; EOF if the daemon refused its config.
        // Read on a thread of its own, not on the cooperative pool.
        let bytes = try await LocalHTTP.onThread { () -> [UInt8] in
            var bytes: [UInt8] = []
            // The address ends with its 32-hex-digit guid (a newline follows, or not, by version).
            func complete() -> Bool {
                guard let guid = String(decoding: bytes, as: UTF8.self).range(of: "guid=") else { return false }
                return String(decoding: bytes, as: UTF8.self)[guid.upperBound...].prefix(while: \.isHexDigit).count >= 32
            }
            while bytes.last != UInt8(ascii: "\n"), !complete() {
                let chunk = out.fileHandleForReading.readSomeRetryingInterrupts(limit: 1)  // blocking: LocalHTTP.onThread
                if chunk.isEmpty { break }
                bytes += chunk
            }
            return bytes
        }
        address = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard address.hasPrefix("unix:") else {
            kill(process.processIdentifier, SIGKILL)
            await process.exited()
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "dbus-daemon did not start"])
        }
    }

    deinit {
        // SIGKILL: a session dbus-daemon may outlive SIGTERM, and nothing of it is kept.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()  // blocking: reaping a SIGKILLed daemon, a moment
    }
}
