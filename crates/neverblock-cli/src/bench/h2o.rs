//! h2o as a peer of the static-file benchmarks (`http-static`, `https`, `h2`), when installed
//! (Debian's `h2o`): a configuration written for the run into a temporary directory, started in
//! the foreground as a child.
//!
//! The configuration is what a tuned deployment would use: `num-threads` as many as neverblock's
//! loops, `file.dir` on the files (h2o shares an open file among the requests of one event-loop
//! iteration), no access log. Over TLS: the run's certificate and key, TLS 1.2 and 1.3, sessions
//! resumed as h2o does by default (tickets and its cache), OCSP stapling off (a self-signed
//! certificate has no responder to ask); HTTP/2 by ALPN there, and by prior knowledge in
//! cleartext, with no setting. Started as root, h2o changes to `nobody` unless told otherwise; the
//! configuration says `user: nobody` then, as nginx's workers run, so the peer serves as a
//! deployment would, never as root (the benchmarks' files and directories are readable by all).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use super::servers::{self, Content, ServerChild, TempDir};

/// Whether h2o is installed.
fn installed() -> bool {
    Command::new("h2o").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Starts h2o with `workers` threads serving `content`, or `None` (and a note) when it is not
/// installed.
pub(crate) fn start(content: Content<'_>, workers: usize) -> Option<anyhow::Result<ServerChild>> {
    if !installed() {
        eprintln!("note: h2o peer skipped: `h2o` is not installed (apt-get install h2o)");
        return None;
    }
    Some(start_installed(content, workers))
}

fn start_installed(content: Content<'_>, workers: usize) -> anyhow::Result<ServerChild> {
    let addr = servers::free_port()?;
    let dir = TempDir::new(&format!("h2o-{}", addr.port()))?;
    let conf = dir.0.join("h2o.conf");
    let as_root = rustix::process::geteuid().is_root();
    std::fs::write(&conf, config(&dir.0, addr, content, workers, as_root)?)?;
    let mut command = Command::new("h2o");
    command.arg("-c").arg(&conf);
    ServerChild::silent(&mut command, "h2o", addr, Some(dir))
}

/// The configuration: `workers` threads on `addr` serving the files of `content`, its error log
/// under `dir`; `user: nobody` when started `as_root`.
fn config(dir: &Path, addr: SocketAddr, content: Content<'_>, workers: usize, as_root: bool) -> anyhow::Result<String> {
    let (root, tls) = match content {
        Content::Files(root) => (root, String::new()),
        Content::FilesOverTls { root, cert } => (
            root,
            format!(
                "
  ssl:
    certificate-file: {}
    key-file: {}
    minimum-version: TLSv1.2
    ocsp-update-interval: 0",
                cert.cert.display(),
                cert.key.display()
            ),
        ),
        Content::Hello | Content::Proxy { .. } => anyhow::bail!("the h2o peer serves files only"),
    };
    let user = if as_root { "user: nobody\n" } else { "" };
    Ok(format!(
        "num-threads: {workers}
{user}error-log: {}
listen:
  host: {}
  port: {}{tls}
hosts:
  default:
    paths:
      /:
        file.dir: {}
",
        dir.join("error.log").display(),
        addr.ip(),
        addr.port(),
        root.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::certificates::CertFiles;

    #[test]
    fn the_configuration_names_the_threads_the_port_the_files_and_the_user() {
        let addr: SocketAddr = "127.0.0.1:8089".parse().unwrap();
        let files = config(Path::new("/tmp/p"), addr, Content::Files(Path::new("/srv/files")), 2, true).unwrap();
        assert!(files.starts_with("num-threads: 2\nuser: nobody\nerror-log: /tmp/p/error.log\n"), "{files}");
        assert!(files.contains("  host: 127.0.0.1\n  port: 8089\nhosts:"), "{files}");
        assert!(files.contains("        file.dir: /srv/files\n"), "{files}");
        assert!(!files.contains("access-log"), "no access log: {files}");
        let not_root = config(Path::new("/tmp/p"), addr, Content::Files(Path::new("/srv/files")), 1, false).unwrap();
        assert!(!not_root.contains("user:"), "only root can change user: {not_root}");
        let cert = CertFiles { cert: "/tmp/c/ecdsa.crt".into(), key: "/tmp/c/ecdsa.key".into() };
        let over_tls = Content::FilesOverTls { root: Path::new("/srv/files"), cert: &cert };
        let tls = config(Path::new("/tmp/p"), addr, over_tls, 1, true).unwrap();
        assert!(
            tls.contains(
                "  port: 8089\n  ssl:\n    certificate-file: /tmp/c/ecdsa.crt\n    key-file: /tmp/c/ecdsa.key\n"
            ),
            "{tls}"
        );
        assert!(config(Path::new("/tmp/p"), addr, Content::Hello, 1, true).is_err());
    }
}
