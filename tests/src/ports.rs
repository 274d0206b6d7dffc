//! Loopback ports: pick a free one, and check who listens on one.

use std::collections::BTreeSet;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::HarnessError;

/// The loopback address every harness server listens on.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Ports this process has handed out, never handed out twice: the kernel may give the same
/// port to two `bind(0)` calls once the first socket is closed, and two servers started in
/// parallel would then race for it.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// How many `bind(0)` attempts before giving up on finding a port not handed out yet.
const ATTEMPTS: usize = 256;

/// Asks the kernel for a free loopback port: binds `127.0.0.1:0`, reads the port, and closes the
/// socket again so a server can bind it. A port already handed out by this process is skipped.
///
/// Another process (or an outgoing connection) can still take the port before the server binds
/// it; the servers then fail with "address in use" and the harness retries with a new port, and
/// readiness is checked on the server's own socket (see [`listener_owned_by`]).
pub fn free_loopback_port() -> Result<u16, HarnessError> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    // Keep rejected listeners open so the kernel does not offer their ports again.
    let mut held = Vec::new();
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind((LOOPBACK, 0))
            .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the port of 127.0.0.1:0", e))?
            .port();
        if handed_out.insert(port) {
            return Ok(port);
        }
        held.push(listener);
    }
    Err(HarnessError::InvalidOption(format!(
        "no loopback port left that this process has not used ({} handed out)",
        handed_out.len()
    )))
}

/// Whether a TCP connection to `addr` succeeds within `timeout`.
pub fn accepts_tcp(addr: SocketAddr, timeout: Duration) -> bool {
    TcpStream::connect_timeout(&addr, timeout).is_ok()
}

/// Whether process `pid` owns a TCP socket listening on `port` (IPv4 or IPv6), read from
/// Linux `/proc`. `None` when `/proc` cannot tell (not Linux, or not readable).
///
/// This tells "our server is up" apart from "some other process listens on that port".
pub fn listener_owned_by(pid: u32, port: u16) -> Option<bool> {
    let mut inodes = BTreeSet::new();
    let mut readable = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = fs::read_to_string(table) {
            readable = true;
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if !readable {
        return None;
    }
    if inodes.is_empty() {
        return Some(false);
    }
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let owned = fds.filter_map(Result::ok).any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|inode| inode.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    });
    Some(owned)
}

/// Inodes of sockets in LISTEN state (`0A`) on `port` in a `/proc/net/tcp{,6}` table.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    let port_hex = format!("{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let state = fields.get(3)?;
            let inode = fields.get(9)?;
            let (_, local_port) = local.rsplit_once(':')?;
            (local_port.eq_ignore_ascii_case(&port_hex) && *state == "0A")
                .then(|| inode.parse().ok())
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_listening_inodes_by_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0\n   1: 0100007F:1F90 0100007F:AB49 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0\n   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0\n";
        assert_eq!(listening_inodes(table, 8080), vec![4242]);
        assert_eq!(listening_inodes(table, 8081), vec![4444]);
        assert!(listening_inodes(table, 9000).is_empty());
    }

    #[test]
    fn ports_are_not_handed_out_twice() {
        let ports: BTreeSet<u16> = (0..50)
            .map(|_| free_loopback_port())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn sees_its_own_listener() {
        let Ok(listener) = TcpListener::bind((LOOPBACK, 0)) else {
            return;
        };
        let Ok(addr) = listener.local_addr() else {
            return;
        };
        if let Some(owned) = listener_owned_by(std::process::id(), addr.port()) {
            assert!(owned);
        }
        drop(listener);
        if let Some(owned) = listener_owned_by(std::process::id(), addr.port()) {
            assert!(!owned);
        }
    }
}
