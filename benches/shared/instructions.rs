//! Instruction counts of a `flower` process under callgrind (#46 item 2): robust on a
//! loaded machine where wall and CPU times are not. The count splits into the bytes
//! copied (`memcpy`/`memmove`: the request body is concatenated from the history's
//! stored bytes and written out) and the rest, flower's own work.

use std::path::Path;
use std::process::Command;

/// What callgrind counted in one process.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counted {
    /// Every instruction.
    pub total: u64,
    /// Instructions in `memcpy`/`memmove` (any variant): copying bytes.
    pub copying: u64,
}

impl Counted {
    pub fn own(&self) -> u64 {
        self.total - self.copying
    }
}

/// Runs `cmd` under `valgrind --tool=callgrind` (writing into `dir`); what it counted.
/// `None` (with the reason printed) when valgrind is absent or the run failed.
/// `FLOWER_BENCH_CALLGRIND_DIR=DIR` keeps each profile there as `callgrind.LABEL.out`
/// (for `callgrind_annotate`).
pub fn callgrind(cmd: &Command, dir: &Path, label: &str) -> Option<Counted> {
    let out_file = dir.join("callgrind.out");
    let mut wrapped = Command::new("valgrind");
    wrapped
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg("--dump-line=no")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env_clear()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    for (name, value) in cmd.get_envs() {
        if let Some(value) = value {
            wrapped.env(name, value);
        }
    }
    if let Some(cwd) = cmd.get_current_dir() {
        wrapped.current_dir(cwd);
    }
    match wrapped.status() {
        Ok(status) if status.success() => {}
        Ok(status) => {
            println!("  callgrind: flower exited with {status}");
            return None;
        }
        Err(e) => {
            println!("  callgrind: skipped: no valgrind ({e})");
            return None;
        }
    }
    let text = std::fs::read_to_string(&out_file).ok()?;
    if let Some(keep) = std::env::var_os("FLOWER_BENCH_CALLGRIND_DIR") {
        let _ = std::fs::copy(
            &out_file,
            Path::new(&keep).join(format!("callgrind.{label}.out")),
        );
    }
    let _ = std::fs::remove_file(&out_file);
    Some(parse(&text))
}

/// Self costs by function from a callgrind profile (`--dump-line=no`: each cost line
/// is `[position] Ir`; the line after `calls=` is a call's inclusive cost, not self).
fn parse(text: &str) -> Counted {
    let mut names: std::collections::HashMap<String, String> = Default::default();
    let mut counted = Counted::default();
    let mut current_copies = false;
    let mut skip_next = false;
    let mut summary = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cfn=") {
            if let Some((id, name)) = rest.split_once(' ') {
                names.insert(id.to_string(), name.to_string());
            }
            continue;
        }
        if let Some(n) = line
            .strip_prefix("summary: ")
            .or_else(|| line.strip_prefix("totals: "))
        {
            summary = n.trim().parse::<u64>().ok();
            continue;
        }
        if let Some(rest) = line.strip_prefix("fn=") {
            let name = match rest.split_once(' ') {
                Some((id, name)) => {
                    names.insert(id.to_string(), name.to_string());
                    name.to_string()
                }
                None => names.get(rest).cloned().unwrap_or_else(|| rest.to_string()),
            };
            current_copies = name.contains("memcpy") || name.contains("memmove");
            continue;
        }
        if line.starts_with("calls=") {
            skip_next = true;
            continue;
        }
        let first = line.chars().next().unwrap_or(' ');
        if !(first.is_ascii_digit() || first == '+' || first == '-' || first == '*') {
            continue;
        }
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let ir: u64 = line
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        counted.total += ir;
        if current_copies {
            counted.copying += ir;
        }
    }
    // The profile's own total, when it states one (the same sum, unless a line was
    // misread).
    if let Some(total) = summary {
        counted.total = counted.total.max(total);
    }
    counted
}
