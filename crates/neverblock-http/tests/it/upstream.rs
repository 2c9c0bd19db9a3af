//! The application behind the proxy in the tests: `peers/python/upstream_app.py` (standard library
//! only), started on a port of its own and killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

/// The application's source, in the repository's peers.
const APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../peers/python/upstream_app.py");

/// A running application, and the port it listens on.
pub(crate) struct Upstream {
    child: Child,
    /// Held open: the application ends when its standard input does.
    _stdin: ChildStdin,
    pub(crate) port: u16,
}

impl Upstream {
    /// The application serving files under `root`, on a free port.
    pub(crate) fn start(root: &Path) -> Upstream {
        Upstream::on_port(root, 0)
    }

    /// The application on `port` (0: a free one).
    pub(crate) fn on_port(root: &Path, port: u16) -> Upstream {
        let mut child = Command::new("python3")
            .arg(APP)
            .arg("--root")
            .arg(root)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python3 upstream_app.py (python3 must be installed)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port =
            line.trim().strip_prefix("listening on http://127.0.0.1:").and_then(|p| p.strip_suffix('/')?.parse().ok());
        let port = port.unwrap_or_else(|| panic!("the application says where it listens: {line:?}"));
        let stdin = child.stdin.take().unwrap();
        Upstream { child, _stdin: stdin, port }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the application at once (SIGKILL), as a crash would.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
