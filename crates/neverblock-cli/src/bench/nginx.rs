//! nginx as a peer of the HTTP benchmarks, when installed: a configuration written for the run
//! (its prefix a temporary directory), started in the foreground as a child (`-g 'daemon off;'`).
//!
//! The configuration is the one a tuned deployment would use for the job: `worker_processes` as
//! many as neverblock's loops, each with its own `reuseport` listener (as neverblock's loops
//! have), `access_log off`, `sendfile on` with `tcp_nopush`, keep-alive for as many requests as a
//! run sends; the hello answer is `return 200 "hello, world\n"` (13 bytes, `text/plain`). In front
//! of an application: `proxy_pass` over kept-alive upstream connections (`keepalive 128`), answers
//! streamed as they come (`proxy_buffering off`: each download holds its application worker, as
//! through neverblock), X-Accel-Redirect to `/files/` served from an internal location. Over TLS:
//! an `ssl` listener alone with the run's certificate and key, `ssl_protocols TLSv1.2 TLSv1.3` and
//! the default ciphers, sessions resumed from tickets (`ssl_session_tickets on`) or the
//! `ssl_session_cache shared` (sendfile does nothing there: nginx has no kernel TLS here). For
//! HTTP/2 (`bench h2`) the listener takes the `http2` parameter: ALPN `h2` over TLS, and in
//! cleartext HTTP/2 by prior knowledge alone (nginx before 1.25.1 has no `http2 on;`, which
//! would also keep HTTP/1.1 there; the parameter still works, deprecated, after it).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use super::servers::{self, Content, ServerChild, TempDir};

/// nginx's prefix directory for one server: configuration, pid file, logs, temporary files.
pub(crate) type Prefix = TempDir;

/// Where nginx is looked for when it is not on `PATH` (Debian installs it in /usr/sbin).
const SBIN: &str = "/usr/sbin/nginx";

/// The nginx binary, if installed.
fn binary() -> Option<&'static str> {
    let runs = |program: &str| Command::new(program).arg("-v").output().is_ok_and(|o| o.status.success());
    ["nginx", SBIN].into_iter().find(|program| runs(program))
}

/// Starts nginx with `workers` worker processes serving `content`, or `None` (and a note) when it
/// is not installed.
pub(crate) fn start(content: Content<'_>, workers: usize) -> Option<anyhow::Result<ServerChild>> {
    start_speaking(content, workers, false)
}

/// The same, speaking HTTP/2 (`http2` on its listener) when `http2`.
pub(crate) fn start_speaking(content: Content<'_>, workers: usize, http2: bool) -> Option<anyhow::Result<ServerChild>> {
    let Some(nginx) = binary() else {
        eprintln!("note: nginx peer skipped: `nginx` is not installed (apt-get install nginx)");
        return None;
    };
    Some(start_with(nginx, content, workers, http2))
}

fn start_with(nginx: &str, content: Content<'_>, workers: usize, http2: bool) -> anyhow::Result<ServerChild> {
    let addr = servers::free_port()?;
    let prefix = TempDir::new(&format!("nginx-{}", addr.port()))?;
    let conf = prefix.0.join("nginx.conf");
    std::fs::write(&conf, config(&prefix.0, addr, content, workers, http2))?;
    let mut command = Command::new(nginx);
    command.arg("-p").arg(&prefix.0).arg("-c").arg(&conf).arg("-e").arg(prefix.0.join("error.log"));
    command.args(["-g", "daemon off;"]);
    ServerChild::silent(&mut command, "nginx", addr, Some(prefix))
}

/// The configuration: `workers` processes on `addr`, answering `content` (in HTTP/2 when
/// `http2`), everything it writes under `prefix`.
fn config(prefix: &Path, addr: SocketAddr, content: Content<'_>, workers: usize, http2: bool) -> String {
    let prefix = prefix.display();
    let listen = listen(addr, content, http2);
    let (upstream, location) = match content {
        Content::Hello => (String::new(), "location / { return 200 \"hello, world\\n\"; }".to_owned()),
        Content::Files(root) | Content::FilesOverTls { root, .. } => {
            (String::new(), format!("root {};", root.display()))
        }
        Content::Proxy { upstream, files } => (
            format!("upstream app {{ server {upstream}; keepalive 128; }}"),
            format!(
                "location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
        }}
        location /files/ {{ internal; alias {}/; }}",
                files.display()
            ),
        ),
    };
    format!(
        "worker_processes {workers};
worker_rlimit_nofile 20000;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 10000; }}
http {{
    access_log off;
    default_type text/plain;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000000;
    keepalive_timeout 75s;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    {upstream}
    server {{
        {listen}
        {location}
    }}
}}
"
    )
}

/// The server's `listen` line: in cleartext, or over TLS with its certificate, versions and
/// session resumption; with the `http2` parameter when `http2`.
fn listen(addr: SocketAddr, content: Content<'_>, http2: bool) -> String {
    let http2 = if http2 { " http2" } else { "" };
    let Content::FilesOverTls { cert, .. } = content else { return format!("listen {addr}{http2} reuseport;") };
    format!(
        "listen {addr} ssl{http2} reuseport;
        ssl_certificate {};
        ssl_certificate_key {};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on;",
        cert.cert.display(),
        cert.key.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::certificates::CertFiles;

    #[test]
    fn the_configuration_names_the_workers_the_port_and_what_to_answer() {
        let addr: SocketAddr = "127.0.0.1:8089".parse().unwrap();
        let hello = config(Path::new("/tmp/p"), addr, Content::Hello, 2, false);
        assert!(hello.contains("worker_processes 2;"));
        assert!(hello.contains("listen 127.0.0.1:8089 reuseport;"));
        assert!(hello.contains(r#"return 200 "hello, world\n";"#), "{hello}");
        let files = config(Path::new("/tmp/p"), addr, Content::Files(Path::new("/srv/files")), 1, false);
        assert!(files.contains("root /srv/files;") && files.contains("sendfile on;"), "{files}");
        let upstream: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let proxy =
            config(Path::new("/tmp/p"), addr, Content::Proxy { upstream, files: Path::new("/srv/f") }, 1, false);
        assert!(proxy.contains("upstream app { server 127.0.0.1:9000; keepalive 128; }"), "{proxy}");
        assert!(proxy.contains("proxy_pass http://app;") && proxy.contains("proxy_buffering off;"), "{proxy}");
        assert!(proxy.contains("location /files/ { internal; alias /srv/f/; }"), "{proxy}");
        let cert = CertFiles { cert: "/tmp/c/ecdsa.crt".into(), key: "/tmp/c/ecdsa.key".into() };
        let over_tls = Content::FilesOverTls { root: Path::new("/srv/files"), cert: &cert };
        let tls = config(Path::new("/tmp/p"), addr, over_tls, 1, false);
        assert!(tls.contains("listen 127.0.0.1:8089 ssl reuseport;") && tls.contains("root /srv/files;"), "{tls}");
        assert!(
            tls.contains("ssl_certificate /tmp/c/ecdsa.crt;") && tls.contains("ssl_certificate_key /tmp/c/ecdsa.key;")
        );
        assert!(tls.contains("ssl_session_tickets on;") && tls.contains("ssl_session_cache shared:"), "{tls}");
        let h2 = config(Path::new("/tmp/p"), addr, over_tls, 1, true);
        assert!(h2.contains("listen 127.0.0.1:8089 ssl http2 reuseport;"), "{h2}");
        let h2c = config(Path::new("/tmp/p"), addr, Content::Files(Path::new("/srv/files")), 1, true);
        assert!(h2c.contains("listen 127.0.0.1:8089 http2 reuseport;"), "{h2c}");
    }
}
