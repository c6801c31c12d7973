/// How the service answers a call: at once on the bus thread, or after work elsewhere
/// (the call is kept and answered from the bus thread when the work ends).
enum BusAnswer: Sendable {
    case now(Result<[BusValue], BusError>)
    case later(@Sendable () async -> Result<[BusValue], BusError>)
}
