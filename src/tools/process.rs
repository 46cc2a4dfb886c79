//! What every process flower starts (Bash commands, hooks, MCP stdio servers) has in
//! common: the process groups of those running now, the environment they inherit and
//! the descriptors they do not.
//!
//! Commands run in process groups of their own, so nothing else stops them when flower
//! dies without unwinding (SIGTERM, SIGHUP, a double Ctrl-C): the signal handler kills
//! what is registered here. The registry is a value handed to the tools and the signal
//! handlers, not a global, so two runtimes in one process keep their commands apart.
//!
//! A child inherits flower's environment minus its secrets ([`withheld_names`], which
//! the settings resolve from their snapshot of the environment, into
//! [`SandboxPolicy::withheld_env`](super::sandbox::SandboxPolicy::withheld_env)): an
//! agent that reads its environment must not find the API key there. `FLOWER_PASS_ENV`
//! keeps named ones; the variables a child gets on purpose (a settings file's `env`, an
//! MCP server's own `env`) are set after the removal, explicitly. And it inherits no
//! descriptor but 0, 1 and 2 ([`close_inherited_descriptors`]).

use std::sync::{Arc, Mutex, MutexGuard};

/// A shared set of process group ids. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct ProcessGroups(Arc<Mutex<Vec<i32>>>);

impl ProcessGroups {
    pub fn new() -> Self {
        ProcessGroups::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<i32>> {
        // A panic elsewhere must not keep commands alive: use the data anyway.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a running command's group.
    pub fn add(&self, pgid: i32) {
        self.lock().push(pgid);
    }

    /// The command was reaped (or killed): its group is not ours to kill any more.
    pub fn remove(&self, pgid: i32) {
        self.lock().retain(|&p| p != pgid);
    }

    /// How many commands are running.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Kills (SIGKILL) the process group of every command still running. For a process
    /// about to die: a build or a server the agent started would outlive flower.
    pub fn kill_all(&self) {
        // A group id of 0 or 1 would reach this process's own group or, through
        // kill(-1), every process: never registered, never signalled.
        for pgid in self.lock().drain(..).filter(|&g| g > 1) {
            // SAFETY: killpg only sends a signal; every pgid here belongs to a shell this
            // process spawned (it is removed as soon as the shell is reaped).
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

/// A command's process group while its shell is not reaped: registered with the
/// signal handlers, killed on drop unless disarmed (a dropped call leaves nothing
/// running). Never group 0 or 1. Bash commands and hooks use it.
pub struct GroupGuard {
    pgid: Option<i32>,
    groups: ProcessGroups,
}

impl GroupGuard {
    pub fn new(pgid: Option<i32>, groups: &ProcessGroups) -> Self {
        let pgid = pgid.filter(|&g| g > 1);
        if let Some(pgid) = pgid {
            groups.add(pgid);
        }
        GroupGuard {
            pgid,
            groups: groups.clone(),
        }
    }

    /// The shell was reaped: its group is not ours to kill any more.
    pub fn disarm(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            self.groups.remove(pgid);
        }
    }

    pub fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            self.groups.remove(pgid);
            // SAFETY: killpg only sends a signal; pgid is the id of the group this call
            // created (the shell's pid, not yet reaped, so not reused).
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Parts of a variable's name that mark a secret, compared case-insensitively:
/// codex's default excludes (`KEY`, `SECRET`, `TOKEN`) and more.
pub const SECRET_NAME_PARTS: [&str; 7] = [
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
];

/// Variables that hold secrets under other names: a PostgreSQL store's URL (with its
/// password), headers sent with every request (often an authorization), the test
/// suite's database.
pub const SECRET_NAMES: [&str; 3] = [
    "FLOWER_STORE",
    "ANTHROPIC_CUSTOM_HEADERS",
    "FLOWER_TEST_POSTGRES_URL",
];

/// Variables that lead to a key without holding one: an agent's socket signs or
/// decrypts with the user's keys for whoever connects (ssh, gpg, the desktop keyring
/// behind the session bus), a Kerberos ticket cache is a credential file.
pub const AGENT_SOCKETS: [&str; 6] = [
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "GNOME_KEYRING_CONTROL",
    "DBUS_SESSION_BUS_ADDRESS",
    "KRB5CCNAME",
];

/// Whether a variable is withheld from children by its name.
pub fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAMES.contains(&upper.as_str())
        || AGENT_SOCKETS.contains(&upper.as_str())
        || SECRET_NAME_PARTS.iter().any(|p| upper.contains(p))
}

/// Whether a value carries a password in a URL (`scheme://user:password@host`), as a
/// database URL under any name does.
fn url_with_password(value: &[u8]) -> bool {
    let text = String::from_utf8_lossy(value);
    text.split("://").skip(1).any(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        authority
            .rsplit_once('@')
            .is_some_and(|(userinfo, _)| userinfo.contains(':'))
    })
}

/// The variables of `vars` (flower's environment) that the processes it starts do not
/// inherit: a secret by its name ([`secret_name`]), a URL with a password in its value,
/// or a copy of such a value (8 bytes or longer) inside its value, unless `passed`
/// (names or `*` patterns) names it. Sorted.
pub fn withheld_names<'a>(
    vars: impl Iterator<Item = (&'a str, &'a str)>,
    passed: &[String],
) -> Vec<String> {
    let vars: Vec<(&str, &str)> = vars.collect();
    let secret = |name: &str, value: &str| secret_name(name) || url_with_password(value.as_bytes());
    let values: Vec<&str> = vars
        .iter()
        .filter(|(n, v)| secret(n, v) && v.len() >= 8)
        .map(|(_, v)| *v)
        .collect();
    let mut out: Vec<String> = vars
        .iter()
        .filter(|(n, v)| secret(n, v) || values.iter().any(|s| v.contains(s)))
        .filter(|(n, _)| !passed.iter().any(|p| name_matches(p, n)))
        .map(|(n, _)| n.to_string())
        .collect();
    out.sort();
    out
}

/// Whether `name` matches `pattern` (`*`: any run of characters).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| name_matches(tail, &rest[i..]))
        }
    }
}

/// Removes the `withheld` variables ([`withheld_names`]) from what `cmd` inherits.
/// Call it before setting the variables the child gets on purpose: those stay.
pub fn withhold(cmd: &mut tokio::process::Command, withheld: &[String]) {
    for name in withheld {
        cmd.env_remove(name);
    }
}

/// Between fork and exec: every descriptor above 2 is closed at the exec (marked
/// close-on-exec), so that a child inherits none of flower's (a descriptor flower was
/// started with, one a library user left inheritable). Descriptors the sandbox and the
/// standard library still need until the exec stay open until then.
pub fn close_inherited_descriptors() -> std::io::Result<()> {
    // SAFETY: close_range only changes this (forked) process's descriptor flags.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked == 0 {
        return Ok(());
    }
    // Before Linux 5.11: one fcntl per descriptor up to the limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct given; fcntl only changes flags.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let top = i32::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20);
        for fd in 3..top {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_that_hold_secrets() {
        for name in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "gh_token",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "FLOWER_STORE",
            "SSH_AUTH_SOCK",
            "GPG_AGENT_INFO",
        ] {
            assert!(secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "FLOWER_SANDBOX", "GIT_AUTHOR_NAME", "LANG"] {
            assert!(!secret_name(name), "{name}");
        }
        assert!(url_with_password(b"postgres://u:pw@db:5432/x"));
        assert!(url_with_password(b"x https://a:b@h/p"));
        assert!(!url_with_password(b"postgres://u@db/x"));
        assert!(!url_with_password(b"https://h/p?a=b:c@d"));
        assert!(!url_with_password(b"/usr/bin:/bin"));
    }

    #[test]
    fn withheld_names_and_what_passes() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("ANTHROPIC_API_KEY", "sk-ant-0123456789"),
            ("COPY", "x sk-ant-0123456789"),
            ("DATABASE_URL", "postgres://u:p@h/d"),
            ("GH_TOKEN", "short"),
            ("NPM_TOKEN", "npm-token-value"),
        ];
        let passed = ["GH_*".to_string()];
        assert_eq!(
            withheld_names(vars.iter().copied(), &passed),
            ["ANTHROPIC_API_KEY", "COPY", "DATABASE_URL", "NPM_TOKEN"]
        );
    }

    #[test]
    fn patterns() {
        assert!(name_matches("GITHUB_TOKEN", "GITHUB_TOKEN"));
        assert!(!name_matches("GITHUB_TOKEN", "GITHUB_TOKENS"));
        assert!(name_matches("NPM_*", "NPM_TOKEN"));
        assert!(name_matches("*_TOKEN", "GH_TOKEN"));
        assert!(name_matches("A*B*C", "AxxBxC"));
        assert!(!name_matches("A*B*C", "AxxBx"));
    }
}
