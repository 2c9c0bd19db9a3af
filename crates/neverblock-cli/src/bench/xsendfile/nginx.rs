//! nginx in front of the same application, as the bench's peer when installed: one worker, the
//! application's `X-Accel-Redirect: /files/…` answers sent from an internal location, streamed
//! answers passed on with `proxy_buffering off` (each download holds its application worker, as
//! through neverblock), kept-alive upstream connections (`keepalive 128`).

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};

use super::{Process, Scratch};

/// Where Debian installs nginx, when it is not on `PATH`.
const SBIN: &str = "/usr/sbin/nginx";

/// Starts nginx with `workers` workers in front of the application on `app_port`, serving `root`'s
/// files to `X-Accel-Redirect`; `None` (and a note) when nginx is not installed.
pub(in crate::bench) fn start(
    root: &Path,
    app_port: &str,
    workers: usize,
) -> Option<anyhow::Result<(Process, Scratch, SocketAddr)>> {
    let runs = |program: &str| Command::new(program).arg("-v").output().is_ok_and(|o| o.status.success());
    let Some(nginx) = ["nginx", SBIN].into_iter().find(|p| runs(p)) else {
        eprintln!("note: the nginx rows are skipped: nginx is not installed (apt-get install nginx)");
        return None;
    };
    Some(start_with(nginx, root, app_port, workers))
}

fn start_with(
    nginx: &str,
    root: &Path,
    app_port: &str,
    workers: usize,
) -> anyhow::Result<(Process, Scratch, SocketAddr)> {
    let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let prefix = Scratch(std::env::temp_dir().join(format!("neverblock-xsendfile-nginx-{}", addr.port())));
    std::fs::create_dir_all(prefix.0.join("tmp"))?;
    let conf = prefix.0.join("nginx.conf");
    std::fs::write(&conf, config(&prefix.0, root, app_port, addr, workers))?;
    let child = Command::new(nginx)
        .arg("-p")
        .arg(&prefix.0)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(prefix.0.join("error.log"))
        .args(["-g", "daemon off;"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let process = Process { child, _stdin: None };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        anyhow::ensure!(std::time::Instant::now() < deadline, "nginx did not listen on {addr} within 10 s");
        neverblock::run(|| neverblock::sleep(std::time::Duration::from_millis(20)));
    }
    Ok((process, prefix, addr))
}

fn config(prefix: &Path, root: &Path, app_port: &str, addr: SocketAddr, workers: usize) -> String {
    let (prefix, root) = (prefix.display(), root.display());
    format!(
        "worker_processes {workers};
worker_rlimit_nofile 20000;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 10000; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {prefix}/tmp;
    proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp;
    uwsgi_temp_path {prefix}/tmp;
    scgi_temp_path {prefix}/tmp;
    upstream app {{ server 127.0.0.1:{app_port}; keepalive 128; }}
    server {{
        listen {addr};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
        }}
        location /files/ {{ internal; alias {root}/; }}
    }}
}}
"
    )
}
