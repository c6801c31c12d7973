import Hummingbird
import OfflineAgent

/// What `serve` does with one request, decided from its head and the store alone
/// (`LocalRouter.route(_:)`), before anything is answered, counted or changed.
///
/// `LocalServerResponder` answers every route in one place; the decision itself counts
/// nothing and changes no state, so it can be read (and tested) on its own.
enum LocalRoute {
    /// A file of `pinned`'s version: `rest` (percent-encoded) names a file the version has.
    case file(LocalPin, rest: String, source: FileSource)
    /// A redirect the head alone decides: a directory asked for without its slash (301).
    case redirect(location: String, mirroredApp: String?)
    /// A version the kill switch or a bad mark turns off, asked for on the plain host:
    /// 302 to the network URL it stands for (404 when its whitelist names none).
    case network(LocalPin, rest: String, reason: FallbackReason)
    /// To the origin of a mirror host (`OriginProxy`); `fallback`: the app and reason when
    /// the kill switch or a missing file is why the package does not answer.
    case forward(MirrorOrigin, LocalMirrors.Snapshot, fallback: (app: String, reason: FallbackReason)?)
    /// A WebSocket upgrade on the mirror host of `origin`: relayed to the origin's
    /// WebSocket (`LocalServerChannel`, on a connection's first request), or refused with
    /// `refusal` when it is not a valid handshake (RFC 6455 §4.2.1).
    case webSocket(MirrorOrigin, refusal: LocalRefusal?)
    /// Refused before any file or origin is touched.
    case refuse(LocalRefusal)
    /// One of the server's own routes (`ControlRoute`).
    case control(ControlRoute)

    /// Where a package file is asked for.
    enum FileSource {
        /// On the plain host, as `/<app>/<rest>`.
        case plain
        /// On the mirror host of a whitelisted origin, at the origin's own path.
        case mirror
        /// A navigation to a single-page route on a mirror host, answered with the entry page.
        case entryPage
    }

    /// The plain host's own routes, which no app's files shadow, and the page's lifecycle
    /// control on either kind of host.
    enum ControlRoute {
        /// `GET /open?url=URL`; `launch`: the request may count a launch (`LocalRouter.mayCountLaunch`).
        case open(launch: Bool)
        /// `GET /session/restore?history=JSON`; `launch` as for `open`.
        case sessionRestore(launch: Bool)
        /// `GET /session/item?url=URL`: a restored entry, never a launch.
        case sessionItem
        case metrics
        case index
        /// `POST /.offline-agent/mark-good|mark-bad?app=NAME&version=V` from a page allowed
        /// to speak for `app`, about the version it runs.
        case mark(LocalMark, app: String, version: Version)
    }
}

/// A page's word on its version (`POST /.offline-agent/…`).
enum LocalMark: String {
    case good = "mark-good"
    case bad = "mark-bad"
}

/// A request `serve` refuses: the status, a one-line reason, and what it counts.
struct LocalRefusal: Sendable {
    var status: HTTPResponse.Status
    var text: String
    /// `Allow` for a 405.
    var allow: String? = nil
    /// The refusal is about the page's lifecycle control: answered in JSON.
    var json = false
    var counted: Counted = .nothing

    /// Counts the refusal in `metrics`, wherever it is answered.
    func count(in metrics: LocalServerMetrics) {
        switch counted {
        case .nothing: break
        case .forbiddenHost: metrics.recordForbiddenHost()
        case .file(let app): metrics.recordFile(app: app, code: Int(status.code))
        }
    }

    /// What a refusal adds to the metrics.
    enum Counted: Sendable {
        case nothing
        /// A `Host` the server does not answer for.
        case forbiddenHost
        /// A file response of `app` ("" when no app was named).
        case file(app: String)
    }
}
