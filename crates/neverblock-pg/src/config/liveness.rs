//! How a TCP connection to the server notices that the server, or the network to it, is
//! gone: keepalive probes on an idle connection, and optionally a limit on how long sent
//! data may stay unacknowledged. libpq's `keepalives*` and `tcp_user_timeout` settings.

use std::time::Duration;

use neverblock::net::KeepAlive;

/// The keepalive a connection gets unless told otherwise: the first probe after 30 s of
/// silence, then one every 10 s, the connection dropped after 3 unanswered (about a minute
/// after the server vanished, where the system's default would take over two hours).
pub(crate) const DEFAULT_KEEPALIVE: KeepAlive =
    KeepAlive { idle: Duration::from_secs(30), interval: Duration::from_secs(10), retries: 3 };

/// A TCP connection's liveness settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Liveness {
    /// Whether keepalive probes go out (`keepalives=1`, the default).
    pub(crate) keepalives: bool,
    pub(crate) keepalive: KeepAlive,
    /// `TCP_USER_TIMEOUT`: none unless asked for (the system's retransmission limit).
    pub(crate) user_timeout: Option<Duration>,
}

impl Default for Liveness {
    fn default() -> Liveness {
        Liveness { keepalives: true, keepalive: DEFAULT_KEEPALIVE, user_timeout: None }
    }
}

impl Liveness {
    /// The keepalive to set, if any.
    pub(crate) fn keepalive(&self) -> Option<KeepAlive> {
        self.keepalives.then_some(self.keepalive)
    }

    /// Applies `key=value` if the key is one of these settings; `None` if it is not.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        let number = |what: &str| value.parse::<u32>().map_err(|_| format!("bad {what} {value:?}: a whole number"));
        let set = match key {
            "keepalives" => match value {
                "1" | "0" => {
                    self.keepalives = value == "1";
                    Ok(())
                }
                _ => Err(format!("bad keepalives {value:?}: 1 (on) or 0 (off)")),
            },
            "keepalives_idle" => number("keepalives_idle (seconds)")
                .and_then(|s| positive(key, s))
                .map(|s| self.keepalive.idle = Duration::from_secs(s.into())),
            "keepalives_interval" => number("keepalives_interval (seconds)")
                .and_then(|s| positive(key, s))
                .map(|s| self.keepalive.interval = Duration::from_secs(s.into())),
            "keepalives_count" => {
                number("keepalives_count").and_then(|n| positive(key, n)).map(|n| self.keepalive.retries = n)
            }
            "tcp_user_timeout" => number("tcp_user_timeout (milliseconds)")
                .map(|ms| self.user_timeout = (ms > 0).then(|| Duration::from_millis(ms.into()))),
            _ => return None,
        };
        Some(set)
    }
}

/// `n`, refused when zero: the kernel takes no zero for these.
fn positive(key: &str, n: u32) -> Result<u32, String> {
    if n == 0 {
        Err(format!("{key} must be at least 1"))
    } else {
        Ok(n)
    }
}
