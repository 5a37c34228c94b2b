//! The real server binary as a child process.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// A server process; killed (SIGKILL) when dropped, so a failing test leaves nothing behind.
/// Its log goes nowhere unless `ONCEKEY_TEST_SERVER_LOGS` is set.
pub struct Process {
    pub child: Child,
    pub url: String,
}

fn command(db: &OsStr, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oncekey-server"));
    command
        .args(["--addr", "127.0.0.1:0"])
        .args(args)
        .arg("--db")
        .arg(db);
    command
}

/// Starts the server with its stderr going to `stderr`, and reads its first line (empty when
/// it exited without one).
fn spawn(db: &OsStr, args: &[&str], stderr: Stdio) -> (Child, String) {
    let mut child = command(db, args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the server binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

impl Process {
    /// Starts the server on `db` with `args`, and reads its address from its first line.
    pub fn start(db: impl AsRef<OsStr>, args: &[&str]) -> Process {
        let logs = std::env::var_os("ONCEKEY_TEST_SERVER_LOGS").is_some();
        let (child, line) = spawn(
            db.as_ref(),
            args,
            if logs {
                Stdio::inherit()
            } else {
                Stdio::null()
            },
        );
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Process { child, url }
    }

    /// SIGKILL on Unix.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the server expecting it to refuse: its exit code and what it wrote on stderr.
pub fn refused(db: impl AsRef<OsStr>, args: &[&str]) -> (Option<i32>, String) {
    let (mut child, line) = spawn(db.as_ref(), args, Stdio::piped());
    if !line.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the server started: {line:?}");
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code(), stderr)
}
