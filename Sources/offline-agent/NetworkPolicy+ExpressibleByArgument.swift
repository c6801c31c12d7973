import ArgumentParser
import OfflineAgent

// `--network auto|metered|unmetered`.
extension NetworkPolicy: ExpressibleByArgument {}
