/// Who may confirm, report bad and sync one app over the bus, besides root and the
/// service's own user: the config's users and groups for that app, as ids.
public struct AppAccess: Sendable, Equatable {
    /// User ids allowed.
    public var users: Set<UInt32>
    /// Group ids allowed (a caller's primary or supplementary group).
    public var groups: Set<UInt32>

    /// Access for these user and group ids.
    public init(users: Set<UInt32> = [], groups: Set<UInt32> = []) {
        self.users = users
        self.groups = groups
    }

    func allows(uid: UInt32, gids: [UInt32]) -> Bool {
        users.contains(uid) || gids.contains(where: groups.contains)
    }
}
