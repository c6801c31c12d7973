import Foundation
import OfflinePublish

/// What `offline-server --timestamp-key K --timestamp-expires 1d` asks: keep the publish
/// directory's `metadata/timestamp.json` fresh with K, the timestamp key and only that
/// key (`TUFRepository.checkTimestampOnlyKey`), each new timestamp valid for `lifetime`.
public struct TimestampKeeping: Sendable {
    /// The default `lifetime`: a day, as `offline-publish timestamp` signs by default.
    public static let defaultLifetime: TimeInterval = 86_400
    /// The shortest `lifetime` taken: the server re-signs with half of it left.
    public static let minimumLifetime: TimeInterval = 2

    /// The timestamp role's private key.
    public var key: SigningKey
    /// How long each timestamp the server signs is valid, in seconds.
    public var lifetime: TimeInterval

    public init(key: SigningKey, lifetime: TimeInterval = defaultLifetime) {
        self.key = key
        self.lifetime = lifetime
    }
}
