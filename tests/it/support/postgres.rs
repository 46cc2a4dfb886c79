//! The PostgreSQL that `.ci/postgres.sh` starts, for the tests that need one.
//!
//! `FLOWER_TEST_POSTGRES_URL` names it; without it those tests skip and print why, so
//! `cargo test` alone still passes on a laptop. Each caller gets its own schema
//! (`search_path` in the URL), so tests running in parallel never see each other.

pub const URL_VAR: &str = "FLOWER_TEST_POSTGRES_URL";

/// The server's URL, or `None` (the calling test counted as skipped, see
/// [`super::skip`]; a failure when `FLOWER_TEST_REQUIRE` lists `postgres`).
pub fn url() -> Option<String> {
    let url = std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty());
    if url.is_none() {
        super::skip::skip(
            super::skip::POSTGRES,
            &format!("{URL_VAR} is not set (.ci/run starts a server and sets it)"),
        );
    }
    url
}

/// A URL whose objects land in a new, empty schema, or `None` without a server.
pub fn fresh_url() -> Option<String> {
    url().map(|base| schema_in(&base))
}

/// `base` with a new, empty schema of its own as the `search_path`.
pub fn schema_in(base: &str) -> String {
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    // Created from a plain thread: the blocking client must not run inside a runtime.
    let created = {
        let base = base.to_string();
        let schema = schema.clone();
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&base, postgres::NoTls)?;
            client.batch_execute(&format!("CREATE SCHEMA {schema}"))
        })
        .join()
        .unwrap()
    };
    created.unwrap_or_else(|e| panic!("{URL_VAR}={base}: cannot create a schema: {e}"));
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-csearch_path%3D{schema}")
}

/// Runs SQL against the schema of `url` (from [`fresh_url`]), from a plain thread.
pub fn execute(url: &str, sql: &str) {
    let url = url.to_string();
    let sql = sql.to_string();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client.batch_execute(&sql).unwrap();
    })
    .join()
    .unwrap();
}
