import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The stable random device id kept in `<root>/device-id`.
public enum DeviceID {
    /// Reads the root's id, creating it on first use.
    public static func load(root: String) throws -> String {
        let path = "\(FileSystem.absolute(root))/device-id"
        if let data = FileManager.default.contents(atPath: path),
           let text = String(data: data, encoding: .utf8)?.trimmingWhitespace(), !text.isEmpty {
            return text
        }
        do {
            try FileManager.default.createDirectory(atPath: FileSystem.absolute(root), withIntermediateDirectories: true)
            let id = UUID().uuidString.lowercased()
            // link() refuses to replace: two first uses agree on whichever id won.
            let (fd, temp) = try FileSystem.makeTemporaryFile(in: FileSystem.absolute(root), prefix: ".device-id.")
            defer { unlink(temp) }
            do {
                defer { close(fd) }
                try FileDescriptor.writeAll(fd, Array(id.utf8))
                guard fsync(fd) == 0 else { throw POSIXFailure("fsync \(temp)") }
            }
            _ = link(temp, path)
        } catch {
            throw OfflineAgentError(.install, "cannot create device id", path: path, underlying: error as? POSIXFailure)
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw OfflineAgentError(.install, "cannot read device id", path: path)
        }
        return text.trimmingWhitespace()
    }
}
