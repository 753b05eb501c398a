//! Tests that run in several processes: a test re-runs its own binary as a child in a role
//! (`PODKV_SITES_ROLE=role|heap`), and parent and child take turns by lines: the child says
//! a word on stdout (`<word>`), the parent answers with a line on the child's stdin.
//!
//! Children run with `PODKV_COHERENCE_EVICT=0`: under the model of non-coherent caches
//! each keeps what it cached and no line is evicted at random, so nothing but the store's
//! own SWcc calls moves a line (a dropped call fails for sure, not by chance).

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

const ENV_ROLE: &str = "PODKV_SITES_ROLE";

/// In a child: its role and the heap's path; `None` in the test's own process.
pub fn role() -> Option<(String, PathBuf)> {
    let spec = std::env::var(ENV_ROLE).ok()?;
    let (role, heap) = spec.split_once('|')?;
    Some((role.to_owned(), PathBuf::from(heap)))
}

/// A child process of the test.
pub struct Child {
    child: std::process::Child,
    lines: Lines<BufReader<ChildStdout>>,
    stdin: Option<ChildStdin>,
}

impl Child {
    /// Runs this test binary's `test` as `role` on `heap`.
    pub fn spawn(test: &str, role: &str, heap: &Path) -> Child {
        let mut child =
            super::dies_with_parent(&mut Command::new(std::env::current_exe().unwrap()))
                .args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(ENV_ROLE, format!("{role}|{}", heap.display()))
                .env("PODKV_COHERENCE_EVICT", "0")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let stdin = child.stdin.take();
        Child {
            child,
            lines,
            stdin,
        }
    }

    /// Reads the child's stdout until it says `word` (libtest may print the test's name on
    /// the same line first); returns what followed the word on its line.
    pub fn wait_for(&mut self, word: &str) -> String {
        let mark = format!("<{word}>");
        loop {
            match self.lines.next() {
                Some(Ok(line)) => {
                    if let Some(at) = line.find(&mark) {
                        return line[at + mark.len()..].trim().to_owned();
                    }
                }
                _ => panic!("the child ended before saying {word}"),
            }
        }
    }

    /// Lets the child go on past its next [`wait_go`].
    pub fn go(&mut self) {
        self.tell("go");
    }

    /// Sends the child one line (what its next [`wait_go`] returns).
    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the child's stdin is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Kills the child (SIGKILL) and waits for it to be gone.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Closes the child's stdin and waits for it to end well.
    pub fn succeed(mut self, what: &str) {
        drop(self.stdin.take());
        for _ in self.lines.by_ref() {}
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{what}: {status}");
    }
}

/// In a child: says `word` (and `rest` on its line).
pub fn say(word: &str, rest: &str) {
    println!("<{word}> {rest}");
    std::io::stdout().flush().unwrap();
}

/// In a child: waits for the parent's next line (or the end of its stdin) and returns it.
pub fn wait_go() -> String {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    line.trim().to_owned()
}
