import FoundationEssentials

extension Cookie {
    /// What a jar file must hold for the cookie to be used at all.
    /// The same rules `SetCookie` applies, so a jar it wrote always reads back.
    var isWellFormed: Bool {
        func clean(_ text: String) -> Bool { Cookie.isAllowedText(text) && !text.contains(";") }
        return !name.isEmpty && !name.contains("=") && !domain.isEmpty && path.hasPrefix("/")
            && clean(name) && clean(value) && clean(domain) && clean(path)
    }
}
