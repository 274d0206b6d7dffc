//! systemd's notification protocol, for a unit with `Type=notify`: `READY=1` once every sink
//! is ready for the first time, `STATUS=` with what `/ready` says (shown by `systemctl
//! status`), `WATCHDOG=1` while the shards report (when the unit sets `WatchdogSec=`), and
//! `STOPPING=1` when a drain begins. Without `NOTIFY_SOCKET` in the environment it does
//! nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use tracing::warn;

/// The link to systemd.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    /// How often to send `WATCHDOG=1`: half the unit's `WatchdogSec=`.
    watchdog: Option<Duration>,
    next_watchdog: Instant,
    ready_sent: bool,
    stopping_sent: bool,
    status: String,
    failed: bool,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` (a path, or `@name` for an abstract socket) and `WATCHDOG_USEC`
    /// (taken only when `WATCHDOG_PID` is unset or this process); `None` outside systemd.
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|_| {
                std::env::var("WATCHDOG_PID")
                    .ok()
                    .and_then(|p| p.parse::<u32>().ok())
                    .is_none_or(|p| p == std::process::id())
            })
            .map(Duration::from_micros);
        match Notifier::new(&path, watchdog) {
            Ok(n) => Some(n),
            Err(e) => {
                warn!("NOTIFY_SOCKET {}: {e}", path.to_string_lossy());
                None
            }
        }
    }

    /// Notifies `path`; `WATCHDOG=1` every half of `watchdog`.
    pub fn new(path: &std::ffi::OsStr, watchdog: Option<Duration>) -> std::io::Result<Notifier> {
        use std::os::unix::ffi::OsStrExt as _;
        let bytes = path.as_bytes();
        let to = match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt as _;
                SocketAddr::from_abstract_name(name)?
            }
            None => SocketAddr::from_pathname(path)?,
        };
        Ok(Notifier {
            socket: UnixDatagram::unbound()?,
            to,
            watchdog: watchdog.map(|w| w / 2).filter(|w| !w.is_zero()),
            next_watchdog: Instant::now(),
            ready_sent: false,
            stopping_sent: false,
            status: String::new(),
            failed: false,
        })
    }

    fn send(&mut self, text: &str) {
        if let Err(e) = self.socket.send_to_addr(text.as_bytes(), &self.to)
            && !self.failed
        {
            // Once: a notify socket that went away is not worth a line per second.
            self.failed = true;
            warn!("notifying systemd: {e}");
        }
    }

    /// One turn of the control thread: `not_ready` as `/ready` has it, `healthy` as
    /// `/health` would answer.
    pub fn turn(&mut self, now: Instant, not_ready: &[String], healthy: bool) {
        let status = if not_ready.is_empty() {
            "ready".to_owned()
        } else {
            format!("not ready: {}", not_ready.join("; "))
        };
        let mut message = String::new();
        if not_ready.is_empty() && !self.ready_sent && !self.stopping_sent {
            self.ready_sent = true;
            message.push_str("READY=1\n");
        }
        if status != self.status {
            // One line: a newline would end the field.
            message.push_str("STATUS=");
            message.push_str(&status.replace('\n', " "));
            message.push('\n');
            self.status = status;
        }
        if let Some(every) = self.watchdog
            && healthy
            && now >= self.next_watchdog
        {
            self.next_watchdog = now + every;
            message.push_str("WATCHDOG=1\n");
        }
        if !message.is_empty() {
            self.send(&message);
        }
    }

    /// A drain began.
    pub fn stopping(&mut self) {
        if !self.stopping_sent {
            self.stopping_sent = true;
            self.send("STOPPING=1\nSTATUS=draining\n");
        }
    }

    /// When the next `WATCHDOG=1` is due, if the unit has a watchdog.
    pub fn next_due(&self) -> Option<Instant> {
        self.watchdog.map(|_| self.next_watchdog)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn messages(socket: &UnixDatagram) -> Vec<String> {
        socket.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn ready_once_status_on_change_watchdog_while_healthy_and_stopping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        let mut n = Notifier::new(path.as_os_str(), Some(Duration::from_secs(2))).unwrap();
        let t0 = Instant::now();
        let down = vec!["sink \"m\": MQTT broker not connected".to_owned()];
        n.turn(t0, &down, true);
        assert_eq!(
            messages(&systemd),
            ["STATUS=not ready: sink \"m\": MQTT broker not connected\nWATCHDOG=1\n"]
        );
        // Nothing new, and the watchdog not due yet (every half of 2 s): nothing sent.
        n.turn(t0 + Duration::from_millis(500), &down, true);
        assert!(messages(&systemd).is_empty());
        n.turn(t0 + Duration::from_millis(1_100), &[], true);
        assert_eq!(messages(&systemd), ["READY=1\nSTATUS=ready\nWATCHDOG=1\n"]);
        // Not healthy: no watchdog ping, and READY=1 is not sent twice.
        n.turn(t0 + Duration::from_millis(2_500), &down, false);
        n.turn(t0 + Duration::from_millis(3_000), &[], false);
        assert_eq!(
            messages(&systemd),
            [
                "STATUS=not ready: sink \"m\": MQTT broker not connected\n",
                "STATUS=ready\n"
            ]
        );
        n.stopping();
        n.stopping();
        assert_eq!(messages(&systemd), ["STOPPING=1\nSTATUS=draining\n"]);
        assert_eq!(n.next_due(), Some(t0 + Duration::from_millis(2_100)));
    }
}
