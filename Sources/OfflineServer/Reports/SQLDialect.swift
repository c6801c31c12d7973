/// What differs between the two SQL databases the report stores run on, and nothing else:
/// the schema (`ReportSchema`) and the statements (`ReportSQL`) are written once, in SQL
/// both read alike, and take from here the few words that differ.
enum SQLDialect: Sendable {
    /// SQLite, through GRDB (`ReportStore`).
    case sqlite
    /// PostgreSQL, through PostgresNIO (`PostgresReportStore`).
    case postgres

    /// A stored 64-bit integer.
    var integer: String {
        switch self {
        case .sqlite: "INTEGER"
        case .postgres: "BIGINT"
        }
    }

    /// `events.seq`: a key the database gives each row, growing in insertion order.
    var sequenceKey: String {
        switch self {
        case .sqlite: "INTEGER PRIMARY KEY"
        case .postgres: "BIGSERIAL PRIMARY KEY"
        }
    }

    /// A yes/no column, and its no.
    var boolean: (type: String, no: String) {
        switch self {
        case .sqlite: ("INTEGER", "0")
        case .postgres: ("BOOLEAN", "false")
        }
    }

    /// After `CREATE TABLE (…)` of a table read only by its primary key: SQLite stores it
    /// in the key's own b-tree.
    var keyedTable: String {
        switch self {
        case .sqlite: " WITHOUT ROWID"
        case .postgres: ""
        }
    }

    /// `ALTER TABLE … ADD COLUMN`. PostgreSQL's runner may meet a column a step added
    /// before its record was written; GRDB's migrations are transactional, and SQLite has
    /// no `IF NOT EXISTS` here.
    var addColumn: String {
        switch self {
        case .sqlite: "ADD COLUMN"
        case .postgres: "ADD COLUMN IF NOT EXISTS"
        }
    }

    /// The sum of `expression` over a group, held at 2^63 − 1, as an integer: SQLite's
    /// `SUM` stops with an error past it, PostgreSQL's is a `numeric` that does not, and a
    /// migration that fails would keep the server from starting.
    func total(_ expression: String) -> String {
        switch self {
        case .sqlite: "CAST(MIN(TOTAL(\(expression)), \(Int64.max)) AS INTEGER)"
        case .postgres: "LEAST(SUM(\(expression)), \(Int64.max))::BIGINT"
        }
    }

    /// `sql`, written with `?` placeholders, in this dialect's: `?` for SQLite, `$1`, `$2`, …
    /// for PostgreSQL, in order. (The statements hold no `?` in a literal.)
    func render(_ sql: String) -> String {
        guard self == .postgres else { return sql }
        var rendered = ""
        rendered.reserveCapacity(sql.utf8.count + 16)
        var number = 0
        for character in sql {
            if character == "?" {
                number += 1
                rendered += "$\(number)"
            } else {
                rendered.append(character)
            }
        }
        return rendered
    }
}
