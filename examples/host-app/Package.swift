// swift-tools-version:6.1
// A host app that embeds offline-agent the way an app developer would: by version,
// from the project's git URL. `scripts/test-host-app.sh` builds and runs it in CI
// against a tagged clone of this repository (a SwiftPM mirror for the URL below).
import PackageDescription

let package = Package(
    name: "host-app",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/offline-agent/offline-agent.git", from: "0.1.0"),
    ],
    targets: [
        .executableTarget(
            name: "host-app",
            dependencies: [
                // The device engine: sync, resolve, lifecycle.
                .product(name: "OfflineAgent", package: "offline-agent"),
                // The loopback server, run in-process for a web view (`--serve`).
                .product(name: "OfflineServe", package: "offline-agent"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
