//! `pg-select1 --via-pgbouncer`: the fibered `select 1` rows through a
//! throwaway PgBouncer (transaction pooling, so the statement cache is off),
//! beside the same rows straight to the server with the cache off too, so the
//! ratio between the two is the hop alone.

use anyhow::Context;
use neverblock_pg::throwaway::pgbouncer::PgBouncer;
use neverblock_pg::Config;

use super::{report, select1_fibered, Row, Select1Args};

/// For each loop count and mode (lent, shared): a row straight to `server`
/// with the cache off (`-uncached`), and one through PgBouncer (`-pgbouncer`)
/// with its `vs_direct_ratio` to the first. `row` names and measures a row.
pub(super) fn rows(server: &Config, args: &Select1Args, row: &dyn Fn(&str, f64) -> Row) -> anyhow::Result<Vec<Row>> {
    let pgbouncer = PgBouncer::start(server).context("--via-pgbouncer starts a throwaway PgBouncer")?;
    eprintln!("note: started a throwaway PgBouncer (transaction pooling) in {}", pgbouncer.dir().display());
    let (direct, bounced) = (server.clone().statement_cache_capacity(0), pgbouncer.config());
    let mut rows = Vec::new();
    for &threads in &args.threads {
        for (mode, shared) in [("neverblock", false), ("neverblock-shared", true)] {
            let loops = if threads == 1 { String::new() } else { format!("-{threads}loops") };
            let straight = select1_fibered(&direct, args, shared, threads)?;
            let hop = select1_fibered(&bounced, args, shared, threads)?;
            rows.push(row(&format!("{mode}-uncached{loops}"), straight).metric("threads", threads));
            let ratio = if straight > 0.0 { report::round(hop / straight) } else { 0.0 };
            let through = row(&format!("{mode}-pgbouncer{loops}"), hop);
            rows.push(through.metric("threads", threads).metric("vs_direct_ratio", ratio));
        }
    }
    Ok(rows)
}
