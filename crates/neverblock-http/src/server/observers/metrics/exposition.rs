//! The metrics page in Prometheus' text exposition format 0.0.4: `# HELP` and `# TYPE` lines, then
//! one sample a line.

use std::fmt::Write;

use super::counters::{Totals, BOUNDS, CLASSES, HANDSHAKE_OUTCOMES, METHODS, TLS_VERSIONS, UPSTREAM_ERRORS, VERSIONS};
use crate::server::ServerStats;
use neverblock::runtime::LoopStats;

/// The page's media type.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a page shows.
pub(super) struct Page<'a> {
    pub(super) totals: &'a Totals,
    pub(super) downloads: i64,
    pub(super) proxied_in_flight: i64,
    pub(super) server: Option<ServerStats>,
    pub(super) loops: &'a [LoopStats],
}

/// Starts a metric: its help and type lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    // Writing to a String cannot fail.
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{name}{labels} {value}");
}

impl Page<'_> {
    pub(super) fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let t = self.totals;
        if let Some(server) = self.server {
            family(&mut out, "neverblock_connections_open", "gauge", "Client connections open now.");
            sample(&mut out, "neverblock_connections_open", "", server.open);
            family(&mut out, "neverblock_connections_accepted_total", "counter", "Client connections accepted.");
            sample(&mut out, "neverblock_connections_accepted_total", "", server.accepted);
            let help = "Idle connections closed to free file descriptors.";
            family(&mut out, "neverblock_connections_shed_total", "counter", help);
            sample(&mut out, "neverblock_connections_shed_total", "", server.shed);
            let help = "Connections served, by the protocol they spoke.";
            family(&mut out, "neverblock_connections_served_total", "counter", help);
            let served = [("HTTP/1", server.http1_connections), ("HTTP/2", server.http2_connections)];
            for (protocol, n) in served {
                sample(&mut out, "neverblock_connections_served_total", &format!("{{protocol=\"{protocol}\"}}"), n);
            }
            let help = "Connections open now, by the protocol they speak.";
            family(&mut out, "neverblock_connections_serving", "gauge", help);
            for (protocol, n) in [("HTTP/1", server.http1_open), ("HTTP/2", server.http2_open)] {
                sample(&mut out, "neverblock_connections_serving", &format!("{{protocol=\"{protocol}\"}}"), n);
            }
        }
        let help = "Requests answered, by method and status class.";
        family(&mut out, "neverblock_http_requests_total", "counter", help);
        for (method, row) in METHODS.iter().zip(&t.requests) {
            for (class, &n) in (1..=CLASSES).zip(row).filter(|(_, &n)| n > 0) {
                sample(
                    &mut out,
                    "neverblock_http_requests_total",
                    &format!("{{method=\"{method}\",status=\"{class}xx\"}}"),
                    n,
                );
            }
        }
        let help = "Requests answered, by HTTP version (an HTTP/2 request is a stream).";
        family(&mut out, "neverblock_http_requests_by_version_total", "counter", help);
        for (version, n) in VERSIONS.iter().zip(t.by_version) {
            sample(&mut out, "neverblock_http_requests_by_version_total", &format!("{{version=\"{version}\"}}"), n);
        }
        let help = "Response body bytes sent (heads and chunk framing not counted).";
        family(&mut out, "neverblock_http_response_body_bytes_total", "counter", help);
        sample(&mut out, "neverblock_http_response_body_bytes_total", "", t.body_bytes);
        self.render_duration(&mut out);
        let help = "Files being sent (static files and X-Sendfile answers).";
        family(&mut out, "neverblock_downloads_in_flight", "gauge", help);
        sample(&mut out, "neverblock_downloads_in_flight", "", self.downloads);
        let help = "Requests sent to the upstream whose response has not been sent whole yet.";
        family(&mut out, "neverblock_proxy_requests_in_flight", "gauge", help);
        sample(&mut out, "neverblock_proxy_requests_in_flight", "", self.proxied_in_flight);
        family(&mut out, "neverblock_proxy_requests_total", "counter", "Requests sent to the upstream.");
        sample(&mut out, "neverblock_proxy_requests_total", "", t.proxied);
        let help = "Upstream failures: refused (nothing listens), reset, timeout, other.";
        family(&mut out, "neverblock_proxy_upstream_errors_total", "counter", help);
        for (kind, n) in UPSTREAM_ERRORS.iter().zip(t.upstream_errors) {
            sample(&mut out, "neverblock_proxy_upstream_errors_total", &format!("{{kind=\"{kind}\"}}"), n);
        }
        let help = "TLS handshakes, by how they ended, the version agreed on and whether they resumed a session.";
        family(&mut out, "neverblock_tls_handshakes_total", "counter", help);
        for (outcome, by_version) in HANDSHAKE_OUTCOMES.iter().zip(&t.handshakes) {
            for (version, by_resumed) in TLS_VERSIONS.iter().zip(by_version) {
                for (resumed, &n) in ["false", "true"].iter().zip(by_resumed).filter(|(_, &n)| n > 0) {
                    let labels = format!("{{outcome=\"{outcome}\",version=\"{version}\",resumed=\"{resumed}\"}}");
                    sample(&mut out, "neverblock_tls_handshakes_total", &labels, n);
                }
            }
        }
        if !self.loops.is_empty() {
            let help = "Live fibers (tasks) of each event loop.";
            self.per_loop(&mut out, "neverblock_fibers", "gauge", help, |stats| stats.tasks);
            let help = "Fibers ready to run on each event loop.";
            self.per_loop(&mut out, "neverblock_run_queue_length", "gauge", help, |stats| stats.runnable);
            let help = "Turns of each event loop longer than its stall warning: a fiber held the loop.";
            self.per_loop(&mut out, "neverblock_loop_stalls_total", "counter", help, |stats| stats.stalls);
            self.render_turns(&mut out);
        }
        out
    }

    /// A metric with a sample per loop, `value` of its stats.
    fn per_loop<V: std::fmt::Display>(
        &self,
        out: &mut String,
        name: &str,
        kind: &str,
        help: &str,
        value: impl Fn(&LoopStats) -> V,
    ) {
        family(out, name, kind, help);
        for stats in self.loops {
            sample(out, name, &format!("{{loop=\"{}\"}}", stats.index), value(stats));
        }
    }

    /// Each loop's turn lengths: the work between two polls, while its other fibers wait.
    fn render_turns(&self, out: &mut String) {
        let name = "neverblock_loop_turn_seconds";
        let help = "How long each event loop's turns took (the work between two polls; waiting is no part of it).";
        family(out, name, "histogram", help);
        for stats in self.loops {
            let index = stats.index;
            for (bound, cumulative) in stats.turns.buckets() {
                let le = bound.map_or_else(|| "+Inf".to_owned(), |bound| bound.as_secs_f64().to_string());
                sample(out, &format!("{name}_bucket"), &format!("{{loop=\"{index}\",le=\"{le}\"}}"), cumulative);
            }
            sample(out, &format!("{name}_sum"), &format!("{{loop=\"{index}\"}}"), stats.turns.sum().as_secs_f64());
            sample(out, &format!("{name}_count"), &format!("{{loop=\"{index}\"}}"), stats.turns.count());
        }
    }

    fn render_duration(&self, out: &mut String) {
        let name = "neverblock_http_request_duration_seconds";
        let help = "From a request's head arriving to its response's last byte going out.";
        family(out, name, "histogram", help);
        let mut cumulative = 0;
        for (bound, n) in BOUNDS.iter().map(|b| b.to_string()).chain(["+Inf".to_owned()]).zip(self.totals.buckets) {
            cumulative += n;
            sample(out, &format!("{name}_bucket"), &format!("{{le=\"{bound}\"}}"), cumulative);
        }
        sample(out, &format!("{name}_sum"), "", self.totals.duration_micros as f64 / 1e6);
        sample(out, &format!("{name}_count"), "", cumulative);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let mut totals = Totals::default();
        totals.buckets[0] = 2;
        totals.buckets[3] = 1;
        totals.buckets[BOUNDS.len()] = 1;
        totals.duration_micros = 2_500_000;
        let page = Page { totals: &totals, downloads: 0, proxied_in_flight: 0, server: None, loops: &[] }.render();
        assert!(page.contains("neverblock_http_request_duration_seconds_bucket{le=\"0.001\"} 2\n"), "{page}");
        assert!(page.contains("neverblock_http_request_duration_seconds_bucket{le=\"0.025\"} 3\n"), "{page}");
        assert!(page.contains("neverblock_http_request_duration_seconds_bucket{le=\"60\"} 3\n"), "{page}");
        assert!(page.contains("neverblock_http_request_duration_seconds_bucket{le=\"+Inf\"} 4\n"), "{page}");
        assert!(page.contains("neverblock_http_request_duration_seconds_sum 2.5\n"), "{page}");
        assert!(page.contains("neverblock_http_request_duration_seconds_count 4\n"), "{page}");
    }
}
