//! Running the real `flower` binary: one builder for every test that spawns it, so
//! that each run starts from the same cleared environment (no model settings or
//! proxies of the person running the tests), pointed at a fake server or at none.
//!
//! ```ignore
//! let out = Flower::new(&["once", "hi", "--json"])
//!     .server(&server)
//!     .dir(&dir)
//!     .attempts(1)
//!     .output();
//! ```

use super::FakeServer;
use super::fake::CLEARED;
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// `flower ARGS`, being set up.
pub struct Flower {
    cmd: Command,
}

impl Flower {
    /// `flower ARGS` with the model's settings cleared: without [`Flower::server`] it
    /// has no credential, as a read-only command needs none.
    pub fn new<S: AsRef<OsStr>>(args: &[S]) -> Flower {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flower"));
        for name in CLEARED {
            cmd.env_remove(name);
        }
        cmd.args(args);
        Flower { cmd }
    }

    /// Pointed at the fake server (its URL and the fake key).
    pub fn server(mut self, server: &FakeServer) -> Flower {
        server.configure(&mut self.cmd);
        self
    }

    /// Run in `dir` (the workspace).
    pub fn dir(mut self, dir: impl AsRef<Path>) -> Flower {
        self.cmd.current_dir(dir.as_ref());
        self
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Flower {
        self.cmd.env(name, value);
        self
    }

    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Flower {
        self.cmd.envs(vars);
        self
    }

    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> Flower {
        self.cmd.env_remove(name);
        self
    }

    /// `FLOWER_MAX_ATTEMPTS`: 1 makes a failure show at once.
    pub fn attempts(self, n: u32) -> Flower {
        self.env("FLOWER_MAX_ATTEMPTS", n.to_string())
    }

    /// `FLOWER_BASE_DELAY=0`: retries without waiting.
    pub fn no_delay(self) -> Flower {
        self.env("FLOWER_BASE_DELAY", "0")
    }

    /// `NO_COLOR=1`: plain text, as the tests compare it.
    pub fn no_color(self) -> Flower {
        self.env("NO_COLOR", "1")
    }

    /// `HOME`: where `~/` and the user's settings file are.
    pub fn home(self, home: impl AsRef<Path>) -> Flower {
        self.env("HOME", home.as_ref())
    }

    /// No standard input (nobody at the terminal).
    pub fn stdin_null(mut self) -> Flower {
        self.cmd.stdin(Stdio::null());
        self
    }

    /// `flower` with no arguments yet (add them to the [`Flower::command`]).
    pub fn bin() -> Flower {
        Flower::new::<&str>(&[])
    }

    /// The command, for what the builder does not cover (stdio, `spawn`).
    pub fn command(self) -> Command {
        self.cmd
    }

    /// Runs it to the end, output captured.
    pub fn output(mut self) -> Output {
        self.cmd.output().expect("run flower")
    }

    /// Starts it with stdout and stderr discarded.
    pub fn spawn_quiet(mut self) -> Child {
        self.cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn flower")
    }
}
