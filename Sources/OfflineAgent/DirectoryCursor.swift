import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An open directory of an `EntryTree` being written, moved from node to node.
///
/// It keeps the descriptors of the path from the root to the current node and, to
/// reach another node, climbs to their common ancestor and opens only the missing
/// components with `openat(O_NOFOLLOW)`, one at a time. Visiting nodes in preorder
/// therefore opens each directory about once: the cost is linear in the tree, never
/// a walk from the root by path string per entry. Descriptors held: at most the depth.
final class DirectoryCursor {
    private let tree: EntryTree
    private let rootFD: Int32
    /// (node, descriptor) from the root (not owned) to the current node.
    private var stack: [(node: Int, fd: Int32)]
    /// Each node's position in `stack`, or -1.
    private var position: [Int]

    init(tree: EntryTree, rootFD: Int32) {
        self.tree = tree
        self.rootFD = rootFD
        stack = [(EntryTree.root, rootFD)]
        position = Array(repeating: -1, count: tree.nodes.count)
        position[EntryTree.root] = 0
    }

    deinit {
        for (_, fd) in stack.dropFirst() { close(fd) }
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
            close(fd)
        }
        for next in missing.reversed() {
            let fd = openat(stack[stack.count - 1].fd, tree.nodes[next].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw POSIXFailure("open directory \(tree.path(of: next))") }
            position[next] = stack.count
            stack.append((next, fd))
        }
        return stack[stack.count - 1].fd
    }
}
