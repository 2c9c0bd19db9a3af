//! http_static: requests a second for a small file (13 bytes) and a 1 MiB file served by
//! `neverblock serve`, beside nginx (`sendfile on`), h2o (`file.dir`) and Go's `http.FileServer`
//! with the same number of workers, over 100 keep-alive connections from neverblock's own load
//! generator.

use clap::Args;
use serde_json::json;

use super::downloads;
use super::http_hello::HELLO;
use super::servers::{self, Content, TempDir};
use super::side_by_side::{self, Case, Contender, LoadArgs};
use super::{h2o, nginx, peers, report, Common};

/// Options of `bench http-static`.
#[derive(Args, Debug)]
pub(crate) struct StaticArgs {
    /// Server workers, one configuration each: neverblock's loops, nginx's worker processes, h2o's
    /// threads, Go's GOMAXPROCS.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    workers: Vec<usize>,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    common: Common,
}

/// The files served: name and contents.
fn files() -> [(&'static str, Vec<u8>); 2] {
    [("hello.txt", HELLO.as_bytes().to_vec()), ("1mib.bin", downloads::contents(1 << 20))]
}

pub(crate) fn run(args: StaticArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.workers.iter().all(|&w| w > 0), "--workers must be at least 1");
    let dir = TempDir::new("http-static")?;
    let files = files();
    for (name, contents) in &files {
        std::fs::write(dir.0.join(name), contents)?;
    }
    let root = dir.0.as_path();
    let mut contenders = vec![Contender {
        name: "neverblock",
        start: Box::new(|workers| Some(servers::neverblock(Content::Files(root), workers))),
    }];
    contenders.extend(args.load.baseline(|bin, workers| servers::neverblock_at(bin, Content::Files(root), workers)));
    if args.common.peers {
        let _ = peers::go_http_server();
        contenders
            .push(Contender { name: "nginx", start: Box::new(|workers| nginx::start(Content::Files(root), workers)) });
        contenders
            .push(Contender { name: "h2o", start: Box::new(|workers| h2o::start(Content::Files(root), workers)) });
        contenders.push(Contender {
            name: "go-file-server",
            start: Box::new(|workers| servers::go(Content::Files(root), workers)),
        });
    }
    let mut rows = Vec::new();
    for (name, contents) in &files {
        for &workers in &args.workers {
            let path = format!("/{name}");
            let case = Case {
                bench: "http-static",
                path: &path,
                expect_len: contents.len() as u64,
                workers,
                params: json!({"file": name, "bytes": contents.len(), "workers": workers, "connections": args.load.connections}),
                tls: None,
            };
            rows.extend(side_by_side::measure(&case, &contenders, &args.load));
        }
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}
