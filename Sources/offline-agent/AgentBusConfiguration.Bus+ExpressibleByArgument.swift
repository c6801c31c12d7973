import ArgumentParser
import OfflineDBus

extension AgentBusConfiguration.Bus: ExpressibleByArgument {}
