//! The table's migrations: plain SQL files per database under `migrations/`,
//! written for the default table name and renamed for another.

use crate::StoreError;

/// The table's default name.
pub const DEFAULT_TABLE: &str = "limit_store";

/// One migration: its version and its SQL for the default table name.
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) sql: &'static str,
}

/// Migrations for one database, in order.
pub(super) type Migrations = &'static [Migration];

#[cfg(feature = "sqlite")]
pub(super) const SQLITE: Migrations = &[
    Migration { version: 1, sql: include_str!("../../../migrations/sqlite/0001_limit_store.sql") },
    Migration { version: 2, sql: include_str!("../../../migrations/sqlite/0002_family.sql") },
];
#[cfg(feature = "postgres")]
pub(super) const POSTGRES: Migrations = &[
    Migration { version: 1, sql: include_str!("../../../migrations/postgres/0001_limit_store.sql") },
    Migration { version: 2, sql: include_str!("../../../migrations/postgres/0002_heap_only_updates.sql") },
    Migration { version: 3, sql: include_str!("../../../migrations/postgres/0003_family.sql") },
];
#[cfg(feature = "mysql")]
pub(super) const MYSQL: Migrations = &[
    Migration { version: 1, sql: include_str!("../../../migrations/mysql/0001_limit_store.sql") },
    Migration { version: 2, sql: include_str!("../../../migrations/mysql/0002_value_bytes.sql") },
    Migration { version: 3, sql: include_str!("../../../migrations/mysql/0003_family.sql") },
];

/// Refuses a table name that is not a plain identifier, so that it can be
/// put into SQL as is.
pub(super) fn check_table_name(table: &str) -> Result<String, StoreError> {
    let mut chars = table.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok || !rest_ok || table.len() > 48 {
        return Err(StoreError::setup(format!(
            "the table name {table:?} is not allowed: use letters, digits and _, starting with a letter \
             or _, at most 48 characters (the default is {DEFAULT_TABLE})"
        )));
    }
    Ok(table.to_owned())
}

/// The statements of `migration` for `table`, one at a time.
pub(super) fn statements(migration: &Migration, table: &str) -> Vec<String> {
    let without_comments: String =
        migration.sql.lines().map(|line| line.split("--").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    without_comments
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace(DEFAULT_TABLE, table))
        .collect()
}

/// The command that migrates `table` at `url_hint`: `--table` only when it
/// is not the default, so the command run as written makes that table.
fn migrate_command(table: &str, url_hint: &str) -> String {
    match table {
        DEFAULT_TABLE => format!("limit-store migrate --database-url {url_hint}"),
        _ => format!("limit-store migrate --database-url {url_hint} --table {table}"),
    }
}

/// The same in code: `.table(..)` only when it is not the default.
fn migrate_call(table: &str) -> String {
    match table {
        DEFAULT_TABLE => "DatabaseStore::builder(url).migrate()".to_owned(),
        _ => format!("DatabaseStore::builder(url).table({table:?}).migrate()"),
    }
}

/// The error for a table that a newer version's migrations have not reached.
pub(super) fn not_migrated(table: &str, url_hint: &str) -> StoreError {
    StoreError::setup(format!(
        "the table {table:?} lacks the `family` column this version writes: run `{}` \
         (or {}) to upgrade it; the upgrade \
         keeps every row, and instances of the older version keep counting meanwhile",
        migrate_command(table, url_hint),
        migrate_call(table)
    ))
}

/// The error for a database without the table.
pub(super) fn missing_table(table: &str, url_hint: &str) -> StoreError {
    StoreError::setup(format!(
        "the table {table:?} does not exist: run `{}` (or {}) first",
        migrate_command(table, url_hint),
        migrate_call(table)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migrate_hints_name_a_table_not_the_default() {
        let missing = missing_table("site_limits", "sqlite://x.db").to_string();
        assert!(missing.contains("--table site_limits"), "{missing}");
        assert!(missing.contains(r#".table("site_limits").migrate()"#), "{missing}");
        let missing = missing_table(DEFAULT_TABLE, "sqlite://x.db").to_string();
        assert!(!missing.contains("--table") && missing.contains("builder(url).migrate()"), "{missing}");
        let old = not_migrated("site_limits", "sqlite://x.db").to_string();
        assert!(old.contains(r#".table("site_limits").migrate()"#), "{old}");
    }

    #[test]
    fn table_names_are_checked() {
        assert!(check_table_name("limit_store").is_ok());
        assert!(check_table_name("_t2").is_ok());
        for bad in ["", "2t", "t;drop", "t-x", "t x", &"t".repeat(49)] {
            let err = check_table_name(bad).unwrap_err();
            assert!(err.is_setup() && err.to_string().contains("letters, digits"), "{err}");
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn statements_are_renamed_and_split() {
        let sql = statements(&POSTGRES[0], "rl");
        assert_eq!(sql.len(), 3);
        assert!(sql[0].starts_with("CREATE TABLE IF NOT EXISTS rl ("));
        assert!(sql[1].contains("rl_expires ON rl"));
        assert!(sql.iter().all(|s| !s.contains("limit_store")));
        let sql = statements(&POSTGRES[1], "rl");
        assert_eq!(sql.len(), 3);
        assert!(sql[0].starts_with("ALTER TABLE rl SET (fillfactor = 75,"), "{}", sql[0]);
        assert_eq!(sql[1..], ["DROP INDEX IF EXISTS rl_expires", "DROP INDEX IF EXISTS rl_generation"]);
        assert_eq!(statements(&POSTGRES[2], "rl"), ["ALTER TABLE rl ADD COLUMN IF NOT EXISTS family SMALLINT"]);
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn the_family_column_comes_with_its_index_on_sqlite() {
        assert_eq!(
            statements(&SQLITE[1], "rl"),
            [
                "ALTER TABLE rl ADD COLUMN family INTEGER",
                "CREATE INDEX IF NOT EXISTS rl_family ON rl (generation, expires_at, family)",
                "DROP INDEX IF EXISTS rl_generation",
            ]
        );
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn the_family_column_comes_with_its_index_on_mysql() {
        assert_eq!(
            statements(&MYSQL[2], "rl"),
            [
                "ALTER TABLE rl ADD COLUMN family SMALLINT NULL",
                "CREATE INDEX rl_family ON rl (generation, expires_at, family)",
                "DROP INDEX rl_generation ON rl",
            ]
        );
    }
}
