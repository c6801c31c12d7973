import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// An open directory of an `EntryTree` being written, moved from node to node.
///
/// It keeps the descriptors of the path from the root to the current node and, to
/// reach another node, climbs to their common ancestor and opens only the missing
/// components with `openat(O_NOFOLLOW)`, one at a time. Visiting nodes in preorder
/// therefore opens each directory about once: the cost is linear in the tree, never
/// a walk from the root by path string per entry. Descriptors stay bounded however
/// deep the tree: below `keptLevels` only every 16th level keeps its descriptor open,
/// and a closed level is reopened from the nearest open one (at most 15 `openat`).
final class DirectoryCursor {
    /// Levels whose descriptors always stay open: every real package fits.
    static let keptLevels = 32

    private let tree: EntryTree
    /// (node, descriptor or -1 when closed) from the root (not owned) to the current node.
    private var stack: [(node: Int, fd: Int32)]
    /// Each node's position in `stack`, or -1.
    private var position: [Int]

    init(tree: EntryTree, rootFD: Int32) {
        self.tree = tree
        stack = [(EntryTree.root, rootFD)]
        position = Array(repeating: -1, count: tree.nodes.count)
        position[EntryTree.root] = 0
    }

    deinit {
        for (_, fd) in stack.dropFirst() where fd >= 0 { close(fd) }
    }

    /// A descriptor of the directory `node`, valid until the next move.
    func move(to node: Int) throws -> Int32 {
        var missing: [Int] = []
        var current = node
        while position[current] < 0 {
            missing.append(current)
            current = tree.nodes[current].parent
        }
        while stack.count - 1 > position[current] {
            let (dropped, fd) = stack.removeLast()
            position[dropped] = -1
            if fd >= 0 { close(fd) }
        }
        if stack[stack.count - 1].fd < 0 { try reopenTop() }
        for next in missing.reversed() {
            let fd = openat(stack[stack.count - 1].fd, tree.nodes[next].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw POSIXFailure("open directory \(tree.path(of: next))") }
            releaseTopIfDeep()
            position[next] = stack.count
            stack.append((next, fd))
        }
        return stack[stack.count - 1].fd
    }

    /// Closes the top level's descriptor before going deeper, unless it is one kept open.
    private func releaseTopIfDeep() {
        let level = stack.count - 1
        guard level > Self.keptLevels, level % 16 != 0 else { return }
        close(stack[level].fd)
        stack[level].fd = -1
    }

    /// Reopens the top level from the nearest level above it that is still open.
    private func reopenTop() throws {
        let top = stack.count - 1
        var open = top
        while stack[open].fd < 0 { open -= 1 }
        var fd = stack[open].fd
        for level in (open + 1)...top {
            let next = openat(fd, tree.nodes[stack[level].node].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if level - 1 > open { close(fd) }
            guard next >= 0 else { throw POSIXFailure("open directory \(tree.path(of: stack[level].node))") }
            fd = next
        }
        stack[top].fd = fd
    }
}
