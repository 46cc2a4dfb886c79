//! The Bash tool: exit codes, output capture and capping, timeouts and cancellation
//! killing the whole process group.

use flower::tools::bash::Bash;
use flower::tools::{Tool, ToolContext, ToolOutput};
use serde_json::{Value, json};
use std::fs;

use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

struct Env {
    _tmp: tempfile::TempDir,
    ctx: ToolContext,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let ws = fs::canonicalize(tmp.path()).unwrap();
    Env {
        ctx: ToolContext {
            workspace: ws.clone(),
            run_dir: ws.join("runs"),
            cancel: CancellationToken::new(),
            processes: flower::tools::ProcessGroups::new(),
            sandbox: Default::default(),
            env: Default::default(),
        },
        _tmp: tmp,
    }
}

async fn bash(e: &Env, input: Value) -> ToolOutput {
    Bash.call(&flower::content::ToolInput::of_tree(&input), &e.ctx)
        .await
}

/// Whether a process is gone (or a zombie waiting for its reaper).
fn dead(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// SIGKILL is delivered asynchronously; give the kernel a bounded moment.
fn wait_dead(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if dead(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[tokio::test]
async fn runs_in_the_workspace_and_captures_both_streams() {
    let e = env();
    let out = bash(
        &e,
        json!({"command": "pwd; echo out; echo err >&2; echo out2"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        format!("{}\nout\nerr\nout2\n", e.ctx.workspace.display())
    );
    let out = bash(&e, json!({"command": "true", "description": "nothing"})).await;
    assert_eq!(out, ToolOutput::ok("(no output)"));
}

#[tokio::test]
async fn a_non_zero_exit_is_an_error_with_its_code() {
    let e = env();
    let out = bash(&e, json!({"command": "echo failing; exit 3"})).await;
    assert!(out.is_error);
    assert_eq!(out.content, "failing\n\nExit code: 3");
    let out = bash(&e, json!({"command": "kill -9 $$"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("signal 9"), "{}", out.content);
}

#[tokio::test]
async fn stdin_is_empty() {
    let e = env();
    let out = bash(&e, json!({"command": "cat; echo done"})).await;
    assert_eq!(out.content, "done\n");
}

#[tokio::test]
async fn huge_output_keeps_head_and_tail_and_says_what_was_cut() {
    let e = env();
    let out = bash(&e, json!({"command": "seq 1 200000"})).await;
    assert!(!out.is_error);
    assert!(out.content.len() < 31_000, "{}", out.content.len());
    assert!(out.content.starts_with("1\n2\n3\n"));
    assert!(out.content.ends_with("199999\n200000\n"));
    assert!(out.content.contains("of output cut here"), "note");
    let total: usize = (1..=200_000).map(|i: u32| i.to_string().len() + 1).sum();
    assert!(
        out.content.contains(&format!("{total} bytes in total")),
        "says the full size"
    );
    // Endless output is bounded by the timeout and by memory alike.
    let out = bash(&e, json!({"command": "yes", "timeout": 500})).await;
    assert!(out.is_error);
    assert!(out.content.len() < 31_000);
    assert!(
        out.content.contains("timed out"),
        "{}",
        &out.content[out.content.len() - 200..]
    );
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let e = env();
    let out = bash(
        &e,
        json!({"command": "sleep 300 & echo $! > bg.pid; sleep 300", "timeout": 300}),
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.content.contains("timed out after 300 ms"),
        "{}",
        out.content
    );
    let pid: i32 = fs::read_to_string(e.ctx.workspace.join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_dead(pid), "the background child {pid} was killed too");
}

#[tokio::test]
async fn cancellation_kills_the_process_group_and_says_so() {
    let e = env();
    let fifo = e.ctx.workspace.join("started");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let cancel = e.ctx.cancel.clone();
    let fifo2 = fifo.clone();
    // Wait (on the FIFO, not on a clock) until the command runs, then cancel.
    let watcher = tokio::task::spawn_blocking(move || {
        let pid = fs::read_to_string(&fifo2).unwrap();
        cancel.cancel();
        pid.trim().parse::<i32>().unwrap()
    });
    let out = bash(
        &e,
        json!({"command": "sleep 300 & echo $! > started; sleep 300"}),
    )
    .await;
    assert!(out.is_error);
    assert!(out.content.contains("interrupted"), "{}", out.content);
    let pid = watcher.await.unwrap();
    assert!(wait_dead(pid), "the background child {pid} was killed too");
}

#[tokio::test]
async fn dropping_the_call_kills_the_process_group() {
    let e = env();
    let fifo = e.ctx.workspace.join("started");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = tokio::task::spawn_blocking(move || fs::read_to_string(&fifo).unwrap());
    let input = flower::content::ToolInput::of_tree(
        &json!({"command": "sleep 300 & echo $! > started; sleep 300"}),
    );
    let call = Bash.call(&input, &e.ctx);
    let pid: i32 = tokio::select! {
        _ = call => panic!("the command cannot finish by itself"),
        pid = reader => pid.unwrap().trim().parse().unwrap(),
    };
    assert!(
        wait_dead(pid),
        "the background child {pid} was killed when the call was dropped"
    );
}

#[tokio::test]
async fn a_background_process_does_not_hold_the_call() {
    let e = env();
    // Without the grace period this would wait for `sleep 300` to close the pipe.
    let out = bash(&e, json!({"command": "sleep 300 & echo $!"})).await;
    assert!(!out.is_error, "{}", out.content);
    let pid: i32 = out.content.trim().parse().unwrap();
    // It was left running, as a background job should be; clean it up.
    assert!(!dead(pid));
    // SAFETY: plain signal to a process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[tokio::test]
async fn timeout_is_clamped_and_inputs_are_checked() {
    let e = env();
    let out = bash(&e, json!({"command": "echo ok", "timeout": 99_999_999})).await;
    assert!(!out.is_error, "{}", out.content);
    for (input, field) in [
        (json!({}), "command"),
        (json!({"command": ["ls"]}), "command"),
        (json!({"command": "ls", "timeout": "soon"}), "timeout"),
        (json!({"command": "ls", "timeout": 0}), "timeout"),
        (json!({"command": "  "}), "command"),
    ] {
        let out = bash(&e, input.clone()).await;
        assert!(out.is_error, "{input}");
        assert!(out.content.contains(field), "{input}: {}", out.content);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn does_not_block_the_runtime() {
    let e = env();
    // On a single-threaded runtime, a ticker keeps running while the command waits.
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let t2 = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            t2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let out = bash(&e, json!({"command": "sleep 0.3; echo done"})).await;
    ticker.abort();
    assert_eq!(out.content, "done\n");
    assert!(ticks.load(std::sync::atomic::Ordering::Relaxed) > 0);
}
