// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "offline-agent",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "OfflineAgent", targets: ["OfflineAgent"]),
        .library(name: "OfflineHTTP", targets: ["OfflineHTTP"]),
        .executable(name: "offline-agent", targets: ["offline-agent"]),
        .executable(name: "offline-server", targets: ["offline-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.100.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        // Hardened BSDIFF40 applier: every failure is a return code, never a process exit.
        .target(
            name: "CBspatch",
            path: "CBspatch",
            cSettings: [.unsafeFlags(["-O2"])],
            linkerSettings: [.linkedLibrary("bz2"), .linkedLibrary("pthread")]
        ),
        // Native bsdiff (suffix sorting by libdivsufsort) for the publisher.
        .target(
            name: "CBsdiff",
            path: "Sources/CBsdiff",
            cSettings: [.unsafeFlags(["-O2"])],
            linkerSettings: [.linkedLibrary("divsufsort"), .linkedLibrary("bz2")]
        ),
        .systemLibrary(
            name: "CLibzip",
            path: "Sources/CLibzip",
            pkgConfig: "libzip",
            providers: [.apt(["libzip-dev"])]
        ),
        // GNU libc calls that Swift's Glibc module doesn't expose (syncfs, mkostemp).
        .target(name: "CShims", path: "Sources/CShims"),
        .systemLibrary(
            name: "CZlib",
            path: "Sources/CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .target(
            name: "OfflineAgent",
            dependencies: [
                "CBspatch", "CBsdiff", "CLibzip", "CZlib", "CShims",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ]
        ),
        // Hummingbird applications: the reference publish server and the loopback package server.
        .target(
            name: "OfflineHTTP",
            dependencies: [
                "OfflineAgent",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "offline-agent",
            dependencies: [
                "OfflineAgent", "OfflineHTTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "offline-server",
            dependencies: [
                "OfflineAgent", "OfflineHTTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "OfflineAgentTests",
            dependencies: [
                "OfflineAgent", "OfflineHTTP", "CBspatch", "CZlib",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
