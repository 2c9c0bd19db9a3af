//! The servers the benchmarks measure, each a child process stopped on drop: neverblock's
//! (`serve`, `serve --upstream`, `delay-server`, or the hello handler of `bench serve-hello`),
//! nginx (a configuration written for the run), Go's net/http, may_minihttp and the Python
//! application behind the proxies (peers from `peers/`); and where they run: which CPUs the server
//! gets and which the load generator gets.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustix::thread::CpuSet;

use super::certificates::CertFiles;
use super::{nginx, peers};

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What a server answers, and over what.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Content<'a> {
    /// `hello, world\n` to every request, as `text/plain`.
    Hello,
    /// The files under a directory.
    Files(&'a Path),
    /// The files under `root` over HTTPS alone (TLS 1.2 and 1.3, no cleartext listener), with the
    /// certificate and key `cert`.
    FilesOverTls { root: &'a Path, cert: &'a CertFiles },
    /// Everything from the application at `upstream`, a reverse proxy in front of it: its
    /// X-Sendfile answers (neverblock) and X-Accel-Redirect ones under `/files/` (nginx) are sent
    /// from `files`.
    Proxy { upstream: SocketAddr, files: &'a Path },
}

/// A server under test, running; stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub(crate) struct ServerChild {
    child: Child,
    pub(crate) addr: SocketAddr,
    /// Kept open: a server that prints more than its first line must not meet a closed pipe.
    _stdout: Option<ChildStdout>,
    /// Kept open: a peer that watches its standard input ends when this process does, however it
    /// ends.
    _stdin: Option<ChildStdin>,
    /// Removed after the server stops (nginx's configuration and logs).
    _dir: Option<nginx::Prefix>,
    /// A server this one stands in front of (a proxy's application): measured with it, stopped
    /// after it.
    companion: Option<Box<ServerChild>>,
}

impl ServerChild {
    /// Starts `command`, whose first line on stdout holds its URL (`http://ADDR/` or
    /// `https://ADDR/`).
    pub(crate) fn announced(command: &mut Command, name: &str) -> anyhow::Result<ServerChild> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("start {name}"))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let addr =
            announced_addr(&line).with_context(|| format!("{name} did not print its URL (it printed {line:?})"))?;
        let stdin = child.stdin.take();
        let server =
            ServerChild { child, addr, _stdout: Some(stdout.into_inner()), _stdin: stdin, _dir: None, companion: None };
        server.wait_listening(name)?;
        Ok(server)
    }

    /// Starts `command`, which listens on `addr` and says nothing.
    pub(crate) fn silent(
        command: &mut Command,
        name: &str,
        addr: SocketAddr,
        dir: Option<nginx::Prefix>,
    ) -> anyhow::Result<ServerChild> {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("start {name}"))?;
        let server = ServerChild { child, addr, _stdout: None, _stdin: None, _dir: dir, companion: None };
        server.wait_listening(name)?;
        Ok(server)
    }

    /// Waits until a connection to the server succeeds.
    fn wait_listening(&self, name: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if std::net::TcpStream::connect(self.addr).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{name} did not listen on {} within {START_TIMEOUT:?}", self.addr);
            }
            neverblock::sleep(Duration::from_millis(20));
        }
    }

    /// This server with `behind` (the application it proxies to) as part of it: their CPU time
    /// counts together, and `behind` stops after this one.
    pub(crate) fn in_front_of(mut self, behind: ServerChild) -> ServerChild {
        self.companion = Some(Box::new(behind));
        self
    }

    /// The server's URL, `http://ADDR/` (the cleartext servers').
    pub(crate) fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The server process's resident memory, in bytes.
    pub(crate) fn rss(&self) -> anyhow::Result<u64> {
        super::status_bytes_of(&self.child.id().to_string(), "VmRSS:").context("VmRSS in the server's status")
    }

    /// CPU time the server (its process and its direct children: nginx's workers; and the server
    /// it stands in front of) has used.
    pub(crate) fn cpu_time(&self) -> Duration {
        let pid = self.child.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let pids = std::iter::once(pid).chain(children.split_whitespace().filter_map(|p| p.parse().ok()));
        let own: Duration = pids.map(process_cpu_time).sum();
        own + self.companion.as_ref().map_or(Duration::ZERO, |behind| behind.cpu_time())
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            neverblock::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address in the first `http://ADDR/` or `https://ADDR/` URL of a server's announcement
/// (`serving DIR on https://127.0.0.1:4433/ with 1 loop`).
fn announced_addr(line: &str) -> Option<SocketAddr> {
    let (before, rest) = line.split_once("://")?;
    let scheme = before.rsplit(|c: char| !c.is_ascii_alphabetic()).next()?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    rest.split('/').next()?.parse().ok()
}

/// CPU time the whole machine has spent busy (every CPU's user, system, interrupt and steal time
/// from `/proc/stat`): beside the server's and this process's, it shows what else ran meanwhile.
pub(crate) fn machine_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu = stat.lines().next().unwrap_or_default();
    // user nice system idle iowait irq softirq steal: all but idle and iowait were busy.
    let ticks: Vec<u64> = cpu.split_whitespace().skip(1).take(8).filter_map(|t| t.parse().ok()).collect();
    let busy: u64 = ticks.iter().enumerate().filter(|(i, _)| !matches!(i, 3 | 4)).map(|(_, t)| t).sum();
    Duration::from_secs_f64(busy as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// CPU time this process has used.
pub(crate) fn own_cpu_time() -> Duration {
    process_cpu_time(std::process::id())
}

/// User and system time of one process, from `/proc/PID/stat` (zero if it is gone).
fn process_cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces, so it is skipped by its parenthesis):
    // state is field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = rest.split_whitespace().skip(11).take(2).filter_map(|t| t.parse::<u64>().ok()).sum();
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// Starts neverblock's server: the hello handler, `neverblock serve` over a directory, or
/// `neverblock serve --upstream` in front of an application.
pub(crate) fn neverblock(content: Content<'_>, workers: usize) -> anyhow::Result<ServerChild> {
    neverblock_at(&std::env::current_exe()?, content, workers)
}

/// The same server from the `neverblock` binary at `bin` (another build, to compare).
pub(crate) fn neverblock_at(bin: &Path, content: Content<'_>, workers: usize) -> anyhow::Result<ServerChild> {
    let mut command = Command::new(bin);
    match content {
        Content::Hello => command.args(["bench", "serve-hello", "--listen", "127.0.0.1:0"]),
        Content::Files(dir) => command.arg("serve").arg(dir).args(["--listen", "127.0.0.1:0"]),
        Content::FilesOverTls { root, cert } => command
            .arg("serve")
            .arg(root)
            .args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&cert.cert)
            .arg("--tls-key")
            .arg(&cert.key),
        Content::Proxy { upstream, files } => command
            .args(["serve", "--upstream", &format!("http://{upstream}")])
            .arg("--x-sendfile-root")
            .arg(files)
            .args(["--listen", "127.0.0.1:0"]),
    };
    command.args(["--workers", &workers.to_string()]);
    ServerChild::announced(&mut command, "neverblock")
}

/// `bin delay-server` on a free port, answering after `delay` with `threads` loops (default one
/// per core); started with [`ServerChild::announced`], as it prints its URL.
pub(crate) fn delay_server(bin: &Path, delay: Duration, threads: Option<usize>) -> Command {
    let mut command = Command::new(bin);
    command.args(["delay-server", "--port", "0", "--delay", &format!("{}ms", delay.as_millis())]);
    if let Some(threads) = threads {
        command.args(["--threads", &threads.to_string()]);
    }
    command
}

/// Starts Go's net/http peer with `GOMAXPROCS = workers`, or `None` (and a note) when Go is not
/// installed or the peer does not build.
pub(crate) fn go(content: Content<'_>, workers: usize) -> Option<anyhow::Result<ServerChild>> {
    go_speaking(content, workers, false)
}

/// The same, speaking HTTP/2 in cleartext too (by prior knowledge) when `h2c`; over TLS it
/// speaks HTTP/2 to clients that offer `h2` either way.
pub(crate) fn go_speaking(content: Content<'_>, workers: usize, h2c: bool) -> Option<anyhow::Result<ServerChild>> {
    let Some(binary) = peers::go_http_server() else {
        eprintln!("note: go peer skipped: `go` is not installed or the peer did not build");
        return None;
    };
    let mut command = Command::new(binary);
    command.args(["-listen", "127.0.0.1:0"]).env("GOMAXPROCS", workers.to_string());
    if h2c {
        command.arg("-h2c");
    }
    match content {
        Content::Hello => {}
        Content::Files(dir) => {
            command.arg("-dir").arg(dir);
        }
        Content::FilesOverTls { root, cert } => {
            command.arg("-dir").arg(root).arg("-tls-cert").arg(&cert.cert).arg("-tls-key").arg(&cert.key);
        }
        Content::Proxy { .. } => return Some(Err(anyhow::anyhow!("Go's net/http peer is not a proxy"))),
    }
    Some(ServerChild::announced(&mut command, "go net/http"))
}

/// Starts the may_minihttp peer (hello only) with `workers` scheduler threads, or `None` (and a
/// note) when it cannot be built here.
pub(crate) fn minihttp(workers: usize) -> Option<anyhow::Result<ServerChild>> {
    let binary = peers::minihttp_binary()?;
    let addr = match free_port() {
        Ok(addr) => addr,
        Err(e) => return Some(Err(e)),
    };
    let mut command = Command::new(binary);
    command.arg(addr.to_string()).arg(workers.to_string());
    Some(ServerChild::announced(&mut command, "may_minihttp"))
}

/// A loopback address with a port nobody listens on now (the kernel's pick, released for the
/// server that is told to take it).
pub(crate) fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Which CPUs the server and the load generator run on, and how many threads the load generator
/// uses.
///
/// A server with fewer workers than there are CPUs gets the first `workers` CPUs to itself and the
/// load generator the others, a thread per CPU (on 2 cores, one worker: one core each), so both
/// sides have what they were given and nothing more. A server with a worker per CPU (or more)
/// shares every CPU with the load generator, which then runs a thread per CPU, as `wrk -t` does.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub(crate) server: Option<CpuSet>,
    pub(crate) load: Option<CpuSet>,
    pub(crate) load_threads: usize,
}

impl Placement {
    pub(crate) fn for_workers(workers: usize) -> Placement {
        let cpus = allowed_cpus();
        if workers < cpus.len() {
            Placement {
                server: Some(set_of(&cpus[..workers])),
                load: Some(set_of(&cpus[workers..])),
                load_threads: cpus.len() - workers,
            }
        } else {
            Placement { server: None, load: None, load_threads: cpus.len().max(1) }
        }
    }

    /// How it reads in a row: `server 0, load 1` or `shared`.
    pub(crate) fn describe(&self) -> String {
        match (&self.server, &self.load) {
            (Some(server), Some(load)) => format!("server cpu {}, load cpu {}", list(server), list(load)),
            _ => "shared".to_owned(),
        }
    }
}

/// Runs `f` with this thread pinned to `cpus` (when given), then lets it run anywhere it could
/// before: children started and threads made in `f` keep the pinning.
pub(crate) fn pinned<T>(cpus: Option<&CpuSet>, f: impl FnOnce() -> T) -> T {
    let Some(cpus) = cpus else { return f() };
    let before = rustix::thread::sched_getaffinity(None).ok();
    if let Err(e) = rustix::thread::sched_setaffinity(None, cpus) {
        eprintln!("note: could not pin to CPUs {}: {e}", list(cpus));
    }
    let value = f();
    if let Some(before) = before {
        let _ = rustix::thread::sched_setaffinity(None, &before);
    }
    value
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).collect(),
        Err(_) => (0..neverblock::runtime::available_threads()).collect(),
    }
}

fn set_of(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    cpus.iter().for_each(|&cpu| set.set(cpu));
    set
}

fn list(set: &CpuSet) -> String {
    (0..CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).map(|cpu| cpu.to_string()).collect::<Vec<_>>().join("+")
}

/// A directory removed when dropped.
#[derive(Debug)]
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// A fresh directory under the system's temporary directory, readable by all (nginx's workers
    /// run as another user).
    pub(crate) fn new(name: &str) -> anyhow::Result<TempDir> {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("neverblock-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::announced_addr;

    #[test]
    fn the_address_is_read_from_the_first_http_or_https_url_of_the_announcement() {
        let addr = |line: &str| announced_addr(line).map(|a| a.to_string());
        let check = [
            ("http://127.0.0.1:8080/\n", Some("127.0.0.1:8080")),
            ("https://127.0.0.1:4433/\n", Some("127.0.0.1:4433")),
            ("serving /tmp/x on https://127.0.0.1:4433/ with 1 loop (Ctrl-C stops)", Some("127.0.0.1:4433")),
            ("serving on http://[::1]:80/ and https://[::1]:443/ with 2 loops", Some("[::1]:80")),
            ("ftp://127.0.0.1:21/", None),
            ("serving on localhost:8080", None),
            ("", None),
        ];
        for (line, expected) in check {
            assert_eq!(addr(line).as_deref(), expected, "{line:?}");
        }
    }
}
