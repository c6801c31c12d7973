// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "offline-agent",
    platforms: [.macOS(.v14)],
    products: [
        // The device engine host apps embed: check, download, patch, install, resolve.
        .library(name: "OfflineAgent", targets: ["OfflineAgent"]),
        // The loopback server that fronts packages for web views, in-process.
        .library(name: "OfflineServe", targets: ["OfflineServe"]),
        // The operator's toolkit: publish versions, patches and signed manifests.
        .library(name: "OfflinePublish", targets: ["OfflinePublish"]),
        // The reference manifest server over a publish directory.
        .library(name: "OfflineServer", targets: ["OfflineServer"]),
        .executable(name: "offline-agent", targets: ["offline-agent"]),
        .executable(name: "offline-publish", targets: ["offline-publish"]),
        .executable(name: "offline-server", targets: ["offline-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.100.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // serve's WebSocket pass-through: TLS to wss origins (already linked through AsyncHTTPClient)
        // and the HTTPTypes codec of Hummingbird's HTTP/1 channel (already linked through Hummingbird).
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.29.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.24.0"),
        // No default traits: FullFoundation (URL-encoded form dates) and ConfigurationSupport
        // (swift-configuration) would link full Foundation, and with it ICU, into the device binary.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0", traits: []),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        // Both servers record through swift-metrics into a registry of their own, exported by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // `swift package generate-documentation` (scripts/docs.sh); a command plugin, linked into nothing.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // SQLite for offline-server's fleet reports (links the system libsqlite3); never in a device target.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // PostgreSQL for offline-server's fleet reports when several instances share one store
        // (--reports-db postgres://…); never in a device target.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // MARK: C

        // Hardened BSDIFF40 applier: every failure is a return code, never a process exit.
        .target(
            name: "CBspatch",
            path: "CBspatch",
            linkerSettings: [.linkedLibrary("bz2"), .linkedLibrary("pthread")]
        ),
        // Native bsdiff (suffix sorting by libdivsufsort), for the publisher only.
        .target(
            name: "COfflineBsdiff",
            path: "Sources/COfflineBsdiff",
            linkerSettings: [.linkedLibrary("divsufsort"), .linkedLibrary("bz2")]
        ),
        // libzip's entry points, loaded with dlopen on first use (why: include/clibzip.h).
        .target(name: "COfflineLibzip", path: "Sources/COfflineLibzip"),
        // GNU libc calls that Swift's Glibc module doesn't expose (syncfs, mkostemp).
        .target(name: "COfflineShims", path: "Sources/COfflineShims"),
        // sd-bus (libsystemd) for the D-Bus service, loaded with dlopen by `serve --dbus`
        // only (why: include/cofflinesdbus.h): not a .systemLibrary, whose pkg-config libs
        // would link libsystemd into every run of the throttled `sync`.
        .target(name: "COfflineSDBus", path: "Sources/COfflineSDBus"),
        .systemLibrary(
            name: "COfflineZlib",
            path: "Sources/COfflineZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),

        // MARK: Device

        .target(
            name: "OfflineAgent",
            dependencies: [
                "CBspatch", "COfflineLibzip", "COfflineZlib", "COfflineShims",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // NIOThreadPool: the agent's threads for blocking work.
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // HTTP plumbing both servers share: ranges, validators, file identity, service running.
        .target(
            name: "OfflineHTTP",
            dependencies: [
                "OfflineAgent",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .target(
            name: "OfflineServe",
            dependencies: [
                "OfflineAgent", "OfflineHTTP",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                // OriginProxy: the mirrored origins' upstream connections (NIO's HTTP/1 client codec).
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // Mirror WebSockets: the page's upgrade, the origin's connection, the frames between.
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),

        // The D-Bus service `serve --dbus` hosts (docs/DBUS.md).
        .target(
            name: "OfflineDBus",
            dependencies: [
                "OfflineAgent", "COfflineSDBus",
                .product(name: "Logging", package: "swift-log"),
                // NIOThreadPool: lifecycle marks wait for the app's lock off the cooperative pool.
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),

        // MARK: Publisher and reference server

        .target(
            name: "OfflinePublish",
            dependencies: [
                "OfflineAgent", "COfflineBsdiff", "COfflineZlib", "COfflineShims",
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "OfflineServer",
            dependencies: [
                "OfflineAgent", "OfflinePublish", "OfflineHTTP",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),

        // MARK: Tools

        // What the three command-line tools share: error reporting and exit statuses.
        .target(
            name: "CommandSupport",
            dependencies: [
                "OfflineAgent",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "offline-agent",
            dependencies: [
                "OfflineAgent", "OfflineServe", "OfflineDBus", "CommandSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                // serve: NIOSingletons, to size the event loop group for one loopback client.
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "offline-publish",
            dependencies: [
                "OfflineAgent", "OfflinePublish", "CommandSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "offline-server",
            dependencies: [
                "OfflineAgent", "OfflinePublish", "OfflineServer", "CommandSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // MARK: Tests

        // Servers, fixtures and process helpers every test target shares.
        .target(
            name: "TestSupport",
            dependencies: [
                "OfflineAgent", "OfflineServe", "OfflinePublish", "COfflineZlib",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "OfflineAgentTests",
            dependencies: [
                "OfflineAgent", "OfflinePublish", "TestSupport", "CBspatch", "COfflineZlib",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        .testTarget(
            name: "OfflineServeTests",
            dependencies: [
                "OfflineAgent", "OfflineServe", "OfflinePublish", "TestSupport",
                // MirrorWebSocketTests: a WebSocket echo origin of its own.
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "OfflinePublishTests",
            dependencies: ["OfflineAgent", "OfflinePublish", "TestSupport", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "OfflineServerTests",
            dependencies: ["OfflineAgent", "OfflinePublish", "OfflineServer", "TestSupport", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // The three tools run as processes, the way cron, systemd and operators run them.
        .testTarget(
            name: "EndToEndTests",
            // offline-agent itself, for SyncCommonFormTests (its cron fast path against ArgumentParser);
            // NIOCore for the core count serve's event loops follow (StartupCLITests).
            dependencies: ["OfflineAgent", "OfflinePublish", "TestSupport", "offline-agent",
                           .product(name: "NIOCore", package: "swift-nio")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
