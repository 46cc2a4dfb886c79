//! Errors keep their cause: the library's errors give the typed error behind them as
//! `source()` (the HTTP client's, SQLite's, PostgreSQL's, a parser's), and the binary
//! prints an error with its causes, each said once.

use crate::support::pipeline::{Project, text};
use crate::support::{FakeServer, Reply};
use flower::model::ModelError;
use flower::model::prices::PriceTable;
use flower::settings::{ConfigError, Environment, FileLayer, Flags, Settings};
use flower::stores::{PostgresStore, SqliteSessionStore, StoreError};
use std::error::Error;

/// A local port nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `flower once hi` in `project`, its stderr.
fn once(project: &Project, server: &FakeServer, extra: &[&str]) -> String {
    let mut args = vec!["once", "hi"];
    args.extend(extra);
    let out = project
        .command(server, &args)
        // A model that stays away is given up on at once (the default waits an hour).
        .env("FLOWER_MAX_OFFLINE_WAIT", "0.3")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

#[test]
fn a_refused_model_connection_prints_its_cause_once() {
    let project = Project::new();
    let server = FakeServer::with_handler(|_, _| Reply::text("never"));
    server.stop_accepting();
    let stderr = once(&project, &server, &[]);
    assert_eq!(
        stderr.matches("Can't reach the API server").count(),
        1,
        "{stderr}"
    );
    // The HTTP client's reason, from the bottom of its chain, once.
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_postgresql_store_that_is_down_prints_its_cause_once() {
    let project = Project::new();
    let server = FakeServer::with_handler(|_, _| Reply::text("never"));
    let url = format!(
        "postgres://flower@127.0.0.1:{}/flower?connect_timeout=5",
        closed_port()
    );
    let stderr = once(&project, &server, &["--store", &url]);
    assert!(stderr.contains("打不开存储"), "{stderr}");
    assert_eq!(
        stderr.matches("error connecting to server").count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    assert_eq!(server.request_count(), 0, "nothing is sent without a store");
}

#[test]
fn a_corrupt_sessions_db_names_the_file_and_sqlites_cause() {
    let project = Project::new();
    let server = FakeServer::with_handler(|_, _| Reply::text("never"));
    let runs = project.dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(runs.join("sessions.db"), b"garbage garbage garbage garbage").unwrap();
    let stderr = once(&project, &server, &[]);
    assert_eq!(
        stderr.matches("runs/sessions.db").count(),
        1,
        "names the file once: {stderr}"
    );
    assert_eq!(stderr.matches("不是 SQLite 数据库").count(), 1, "{stderr}");
    // SQLite's own words, from the typed source.
    assert_eq!(
        stderr.matches("file is not a database").count(),
        1,
        "{stderr}"
    );
    assert_eq!(server.request_count(), 0);
}

/// The typed cause of `error`'s source, when it is a `T`.
fn source_of<'a, T: Error + 'static>(error: &'a (dyn Error + 'static)) -> Option<&'a T> {
    error.source().and_then(|s| s.downcast_ref::<T>())
}

#[test]
fn sqlite_store_errors_keep_sqlites_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    std::fs::write(&db, b"garbage garbage garbage garbage").unwrap();
    let Err(error) = SqliteSessionStore::open(&db) else {
        panic!("a file that is not SQLite was opened")
    };
    assert!(matches!(error, StoreError::Database { .. }), "{error:?}");
    let sqlite = source_of::<rusqlite::Error>(&error).expect("SQLite's error as the source");
    assert_eq!(
        sqlite.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase)
    );
    assert!(error.to_string().contains(db.to_str().unwrap()), "{error}");
}

#[test]
fn a_postgresql_store_that_is_down_is_unavailable_by_the_drivers_error() {
    let url = format!("postgres://flower@127.0.0.1:{}/flower", closed_port());
    let Err(error) = PostgresStore::open(&url.parse().unwrap()) else {
        panic!("opened a store where no server listens")
    };
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(error.is_transient());
    let driver = source_of::<postgres::Error>(&error).expect("the driver's error as the source");
    let io = driver
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("an I/O cause");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
    let chain = flower::error::chain(&error);
    assert_eq!(chain.matches("Connection refused").count(), 1, "{chain}");
}

#[test]
fn model_and_configuration_errors_keep_their_cause() {
    // A base URL that is not a URL: the settings' error, the client's, the parser's.
    let Err(error) = Settings::resolve(
        &Flags::default(),
        &Environment::from_vars([
            ("ANTHROPIC_API_KEY", "k"),
            ("ANTHROPIC_BASE_URL", "not a url"),
        ]),
        &FileLayer::default(),
    ) else {
        panic!("a base URL that is not a URL was accepted")
    };
    assert!(matches!(error, ConfigError::Invalid { .. }), "{error:?}");
    let model = source_of::<ModelError>(&error).expect("the client's error as the source");
    assert!(matches!(model, ModelError::Config { .. }), "{model:?}");
    assert!(
        model.source().is_some(),
        "the URL parser's error under it: {model:?}"
    );
    let chain = flower::error::chain(&error);
    assert_eq!(chain.matches("不是 URL").count(), 1, "{chain}");

    // A price file that is not JSON keeps the parser's error.
    let error = PriceTable::from_json("{", "prices.json").unwrap_err();
    assert!(
        source_of::<serde_json::Error>(&error).is_some(),
        "{error:?}"
    );
}
