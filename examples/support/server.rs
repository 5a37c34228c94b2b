//! The reference server as a child process, for the benchmarks in `examples/`: an in-memory
//! database on a free loopback port, killed when dropped.

use std::process::{Child, Command, Stdio};

pub struct Server {
    child: Child,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Server {
    /// Starts the binary at `bin` and waits for its `listening on` line.
    pub fn start(bin: &str) -> Server {
        let mut child = Command::new(bin)
            .args(["--addr", "127.0.0.1:0", "--db", ":memory:"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("the server's first line");
        let url = line.trim().trim_start_matches("listening on ").to_owned();
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
