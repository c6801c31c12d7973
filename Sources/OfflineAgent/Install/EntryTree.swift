import FoundationEssentials

/// The directories and files an archive would create, as a tree of nodes.
///
/// Each entry name is added one component at a time, looking up only that
/// component under its parent, so building the tree costs time linear in the
/// names' bytes, whatever their depth. Components are matched case-insensitively and
/// up to Unicode canonical equivalence (Swift's `String` equality), so two names that
/// one file system would keep apart and another would merge are caught here.
struct EntryTree: Sendable {
    enum Kind: Sendable {
        /// A directory only implied by deeper names.
        case impliedDirectory
        /// A directory with an entry of its own.
        case directory
        case file
    }

    struct Node: Sendable {
        /// The component exactly as the archive spells it.
        var name: String
        var parent: Int
        var kind: Kind
    }

    /// Why a name cannot join the tree.
    enum Conflict: Error, Sendable {
        /// The same name twice.
        case duplicate
        /// Spelled differently from `existing` only in case or Unicode normalisation.
        case caseOrNormalisation(existing: String)
        /// `path` is both a file and a directory.
        case fileAndDirectory(path: String)
    }

    private struct Key: Hashable {
        var parent: Int
        /// Lowercased; `String` hashing and equality already fold canonical equivalence.
        var folded: String
    }

    /// Node 0 is the destination directory itself.
    private(set) var nodes: [Node] = [Node(name: "", parent: -1, kind: .directory)]
    private var index: [Key: Int] = [:]

    static let root = 0

    /// Adds an entry's components and returns the node of the entry.
    mutating func add(_ components: [String], isDirectory: Bool) throws(Conflict) -> Int {
        var node = Self.root
        for (position, component) in components.enumerated() {
            let last = position == components.count - 1
            let kind: Kind = !last ? .impliedDirectory : isDirectory ? .directory : .file
            let key = Key(parent: node, folded: component.lowercased())
            guard let existing = index[key] else {
                nodes.append(Node(name: component, parent: node, kind: kind))
                node = nodes.count - 1
                index[key] = node
                continue
            }
            let found = nodes[existing]
            // Byte comparison: `==` on String would call NFC and NFD spellings equal.
            guard found.name.utf8.elementsEqual(component.utf8) else {
                throw .caseOrNormalisation(existing: path(of: existing))
            }
            switch (found.kind, kind) {
            case (.file, _), (.impliedDirectory, .file), (.directory, .file):
                if found.kind == .file, kind == .file { throw .duplicate }
                throw .fileAndDirectory(path: path(of: existing))
            case (.directory, .directory):
                throw .duplicate
            case (.impliedDirectory, .directory):
                nodes[existing].kind = .directory
            case (_, .impliedDirectory):
                break
            }
            node = existing
        }
        return node
    }

    func isDirectory(_ node: Int) -> Bool { nodes[node].kind != .file }

    /// The path of a node relative to the destination, for messages.
    func path(of node: Int) -> String {
        var parts: [String] = []
        var current = node
        while current > Self.root {
            parts.append(nodes[current].name)
            current = nodes[current].parent
        }
        return parts.reversed().joined(separator: "/")
    }

    /// Every node in depth-first preorder (parents before children, subtrees
    /// contiguous), and each node's position in that order.
    func preorder() -> (order: [Int], rank: [Int]) {
        var children = Array(repeating: [Int](), count: nodes.count)
        for node in nodes.indices.dropFirst() { children[nodes[node].parent].append(node) }
        var order: [Int] = []
        order.reserveCapacity(nodes.count)
        var rank = Array(repeating: 0, count: nodes.count)
        var stack = [Self.root]
        while let node = stack.popLast() {
            rank[node] = order.count
            order.append(node)
            stack.append(contentsOf: children[node].reversed())
        }
        return (order, rank)
    }
}
