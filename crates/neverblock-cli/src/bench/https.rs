//! https: `neverblock serve --tls-listen` beside nginx (`ssl` listener), h2o (`ssl` on its
//! listener) and Go's `http.ServeTLS` + `http.FileServer`, one worker each by default, the same certificate, key and
//! files for all, loaded over TLS 1.3 by neverblock's own load generator
//! ([`https_load`](super::https_load)):
//!
//! - full handshakes a second: a new connection for every request of the 13-byte file (connect,
//!   handshake, GET, read, close), no resumption, with an ECDSA P-256 and an RSA-2048 certificate;
//! - resumed handshakes a second: the same, each handshake resumed from a ticket the client got on
//!   an earlier connection (ECDSA), one that does not resume counted as a failure;
//! - requests a second for the 13-byte file over 100 kept-alive TLS connections;
//! - MB/s for a 1 MiB file over the same kept-alive connections.

use clap::Args;
use serde_json::{json, Value};

use super::certificates::{self, KeyType};
use super::downloads;
use super::http_hello::HELLO;
use super::https_load::{Handshakes, Tls};
use super::servers::{self, Content, TempDir};
use super::side_by_side::{self, Case, Contender, LoadArgs};
use super::{h2o, nginx, peers, report, Common, Row};

/// Options of `bench https`.
#[derive(Args, Debug)]
pub(crate) struct HttpsArgs {
    /// Server workers, one configuration each: neverblock's loops, nginx's worker processes, h2o's
    /// threads, Go's GOMAXPROCS.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize])]
    workers: Vec<usize>,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    common: Common,
}

/// The small file: its name holds the 13 bytes of `http-hello`.
const SMALL: &str = "hello.txt";
/// The large file, 1 MiB.
const LARGE: &str = "1mib.bin";
const LARGE_LEN: usize = 1 << 20;

/// One row of the table: a file, how often the load handshakes, and with which certificate.
struct Setup {
    file: &'static str,
    len: usize,
    handshakes: Handshakes,
    key: KeyType,
}

/// The rows, in the order they run.
const SETUPS: [Setup; 5] = [
    Setup { file: SMALL, len: HELLO.len(), handshakes: Handshakes::FullPerRequest, key: KeyType::EcdsaP256 },
    Setup { file: SMALL, len: HELLO.len(), handshakes: Handshakes::FullPerRequest, key: KeyType::Rsa2048 },
    Setup { file: SMALL, len: HELLO.len(), handshakes: Handshakes::ResumedPerRequest, key: KeyType::EcdsaP256 },
    Setup { file: SMALL, len: HELLO.len(), handshakes: Handshakes::PerConnection, key: KeyType::EcdsaP256 },
    Setup { file: LARGE, len: LARGE_LEN, handshakes: Handshakes::PerConnection, key: KeyType::EcdsaP256 },
];

pub(crate) fn run(args: HttpsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.workers.iter().all(|&w| w > 0), "--workers must be at least 1");
    let dir = TempDir::new("https")?;
    let root = dir.0.join("files");
    std::fs::create_dir(&root)?;
    std::fs::write(root.join(SMALL), HELLO)?;
    std::fs::write(root.join(LARGE), downloads::contents(LARGE_LEN as u64))?;
    let ecdsa = certificates::self_signed(&dir.0, KeyType::EcdsaP256)?;
    let rsa = certificates::self_signed(&dir.0, KeyType::Rsa2048)?;
    if args.common.peers {
        // Built now, not on the first start, which runs pinned to the server's CPUs.
        let _ = peers::go_http_server();
    }
    let mut rows = Vec::new();
    for setup in &SETUPS {
        let cert = match setup.key {
            KeyType::EcdsaP256 => &ecdsa,
            KeyType::Rsa2048 => &rsa,
        };
        let content = Content::FilesOverTls { root: &root, cert };
        let contenders = contenders(content, &args);
        for &workers in &args.workers {
            let path = format!("/{}", setup.file);
            let case = Case {
                bench: "https",
                path: &path,
                expect_len: setup.len as u64,
                workers,
                params: params(setup, workers, &args),
                tls: Some(Tls::new(setup.handshakes)),
            };
            let measured = side_by_side::measure(&case, &contenders, &args.load);
            rows.extend(measured.into_iter().map(|row| with_mb_per_s(row, setup)));
        }
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// The servers, each serving `content` (the files, over TLS with one certificate).
fn contenders<'a>(content: Content<'a>, args: &'a HttpsArgs) -> Vec<Contender<'a>> {
    let mut contenders = vec![Contender {
        name: "neverblock",
        start: Box::new(move |workers| Some(servers::neverblock(content, workers))),
    }];
    contenders.extend(args.load.baseline(move |bin, workers| servers::neverblock_at(bin, content, workers)));
    if args.common.peers {
        contenders.push(Contender { name: "nginx", start: Box::new(move |workers| nginx::start(content, workers)) });
        contenders.push(Contender { name: "h2o", start: Box::new(move |workers| h2o::start(content, workers)) });
        contenders
            .push(Contender { name: "go-net-http", start: Box::new(move |workers| servers::go(content, workers)) });
    }
    contenders
}

/// A row's parameters: what each request does (`connection`), the certificate, the file.
fn params(setup: &Setup, workers: usize, args: &HttpsArgs) -> Value {
    json!({
        "connection": setup.handshakes.label(),
        "cert": setup.key.label(),
        "file": setup.file,
        "tls": "1.3",
        "workers": workers,
        "connections": args.load.connections,
    })
}

/// The row, with the bytes a second its responses carried for the large file.
fn with_mb_per_s(row: Row, setup: &Setup) -> Row {
    if setup.file != LARGE {
        return row;
    }
    let rate = row.get("requests_per_s").unwrap_or(0.0);
    row.metric("mb_per_s", report::round(rate * setup.len as f64 / 1e6))
}
