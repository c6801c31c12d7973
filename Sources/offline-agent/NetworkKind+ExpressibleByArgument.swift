import ArgumentParser
import FoundationEssentials
import Logging
import OfflineAgent

extension NetworkKind: ExpressibleByArgument {}
