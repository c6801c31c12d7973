import ArgumentParser
import Foundation
import Logging
import OfflineAgent

extension NetworkKind: ExpressibleByArgument {}
