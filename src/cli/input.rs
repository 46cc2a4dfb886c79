//! Reading lines from the terminal while the engine runs.
//!
//! One thread owns stdin and hands out lines through a channel, so a reader that gets
//! cancelled (an `AskUser` interrupted by Ctrl-C) never swallows the next line.

use flower::engine::Asker;
use flower::future::BoxFuture;
use std::io::{BufRead, IsTerminal};
use std::sync::{Arc, OnceLock};
use tokio::sync::{Mutex, mpsc};

/// Whether stdin is a terminal (someone can answer questions).
pub fn interactive() -> bool {
    std::io::stdin().is_terminal()
}

/// Lines typed on stdin; `None` once stdin is closed.
pub struct Lines {
    receiver: Mutex<mpsc::UnboundedReceiver<String>>,
}

impl Lines {
    /// The process-wide line reader (started on first use).
    pub fn shared() -> Arc<Lines> {
        static LINES: OnceLock<Arc<Lines>> = OnceLock::new();
        LINES
            .get_or_init(|| {
                let (sender, receiver) = mpsc::unbounded_channel();
                std::thread::spawn(move || {
                    let stdin = std::io::stdin();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match stdin.lock().read_line(&mut line) {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {
                                let text = line.trim_end_matches(['\n', '\r']).to_string();
                                if sender.send(text).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
                Arc::new(Lines {
                    receiver: Mutex::new(receiver),
                })
            })
            .clone()
    }

    /// The next line, or `None` at end of input.
    pub async fn next(&self) -> Option<String> {
        self.receiver.lock().await.recv().await
    }
}

/// Prints `question` and a `> ` prompt on stderr, then waits for a line.
pub async fn ask_line(question: &str) -> Option<String> {
    // The live status line stays away while the user types (and is taken off now).
    super::render::pause(true);
    let clear = if std::io::stderr().is_terminal() {
        "\r\x1b[2K"
    } else {
        ""
    };
    super::out::err!("{clear}\n{question}\n> ");
    let line = Lines::shared().next().await;
    super::render::pause(false);
    line
}

/// `AskUser` on the terminal.
pub struct TerminalAsker;

impl Asker for TerminalAsker {
    fn ask<'a>(&'a self, question: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(ask_line(question))
    }
}

/// What is asked after a Ctrl-C.
pub const AFTER_INTERRUPT: &str =
    "已打断。直接回车 = 接着做;也可以说一句话给它(再按一次 Ctrl-C 退出)";

/// After a Ctrl-C: ask for a line on the terminal.
pub fn after_interrupt() -> flower::engine::InterruptPrompt {
    Arc::new(|| Box::pin(ask_line(AFTER_INTERRUPT)))
}
