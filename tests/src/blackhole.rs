//! [`BlackHoleProxy`]: a plain TCP proxy that can black-hole its connections, both ways,
//! without closing them, as a network that drops every packet for a while does.
//!
//! Bytes pass through unread (any protocol; Iggy's binary one where it is used: the S3
//! handover tests and the chaos campaign cut one engine off from Iggy while its paths to the
//! broker and the store stay up). With the black hole on, nothing flows either way and nothing
//! is closed: bytes wait in the sockets, a side that closes is not seen by the other, and a new
//! connection is accepted but not taken upstream until it is off. Once it is off, everything
//! that waited flows on (as TCP's retransmissions deliver it after a real outage).
//!
//! Std threads, no async: one thread accepts, two threads per connection (one per direction).
//! Dropping the proxy closes every connection and joins every thread.

use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::HarnessError;
use crate::ports::{LOOPBACK, free_loopback_port};

/// How long connecting to the upstream may take.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Granularity of the waits that watch the black hole and the proxy being dropped.
const TICK: Duration = Duration::from_millis(5);
/// How long a read waits before the pump looks at the flags again.
const READ_TICK: Duration = Duration::from_millis(20);

/// A TCP proxy on a free loopback port whose connections can be black-holed (see the
/// [module docs](self)).
pub struct BlackHoleProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: SocketAddr,
    black_hole: AtomicBool,
    stop: AtomicBool,
    connections: AtomicU64,
    sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn holding(&self) -> bool {
        self.black_hole.load(Ordering::SeqCst) && !self.stopping()
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Keeps a handle of `socket` so that dropping the proxy can shut it down.
    fn keep(&self, socket: &TcpStream) {
        if let Ok(s) = socket.try_clone() {
            lock(&self.sockets).push(s);
        }
    }

    fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        if let Ok(handle) = thread::Builder::new()
            .name("blackhole-pump".to_owned())
            .spawn(f)
        {
            lock(&self.threads).push(handle);
        }
    }
}

impl fmt::Debug for BlackHoleProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlackHoleProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("black_hole", &self.is_black_hole())
            .field("connections", &self.connections())
            .finish()
    }
}

impl BlackHoleProxy {
    /// Starts a proxy to `upstream` on a free loopback port, passing bytes.
    pub fn start(upstream: SocketAddr) -> Result<BlackHoleProxy, HarnessError> {
        let listener = bind_loopback()?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("setting the black-hole proxy's listener", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the black-hole proxy's address", e))?;
        let shared = Arc::new(Shared {
            upstream,
            black_hole: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            sockets: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("blackhole-accept".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(|e| HarnessError::io("spawning the black-hole proxy thread", e))?;
        Ok(BlackHoleProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `host:port` clients connect to.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// Turns the black hole on (nothing flows, nothing is closed) or off (everything that
    /// waited flows on).
    pub fn black_hole(&self, on: bool) {
        self.shared.black_hole.store(on, Ordering::SeqCst);
    }

    /// Whether the black hole is on.
    pub fn is_black_hole(&self) -> bool {
        self.shared.black_hole.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Drop for BlackHoleProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for s in lock(&self.shared.sockets).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = lock(&self.shared.threads).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

fn bind_loopback() -> Result<TcpListener, HarnessError> {
    let mut last = None;
    for _ in 0..8 {
        let port = free_loopback_port()?;
        match TcpListener::bind((LOOPBACK, port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(HarnessError::io("binding the black-hole proxy port", e)),
        }
    }
    Err(HarnessError::io(
        "binding the black-hole proxy port",
        last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)),
    ))
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopping() {
        match listener.accept() {
            Ok((client, _)) => {
                if client.set_nonblocking(false).is_err() {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                shared.connections.fetch_add(1, Ordering::SeqCst);
                shared.keep(&client);
                let conn_shared = Arc::clone(shared);
                shared.spawn(move || link(client, &conn_shared));
            }
            Err(_) => thread::sleep(TICK),
        }
    }
}

/// One connection: waits out a black hole, connects upstream, then pumps both ways.
fn link(client: TcpStream, shared: &Arc<Shared>) {
    while shared.holding() {
        thread::sleep(TICK);
    }
    if shared.stopping() {
        return;
    }
    let Ok(upstream) = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT)
    else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    shared.keep(&upstream);
    let (Ok(client2), Ok(upstream2)) = (client.try_clone(), upstream.try_clone()) else {
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream.shutdown(Shutdown::Both);
        return;
    };
    let back = Arc::clone(shared);
    shared.spawn(move || pump(upstream2, client2, &back));
    pump(client, upstream, shared);
}

/// Copies `from` to `to` while the black hole is off; reads nothing while it is on. At the end
/// of either side, closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    if from.set_read_timeout(Some(READ_TICK)).is_ok() {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if shared.stopping() {
                break;
            }
            if shared.holding() {
                thread::sleep(TICK);
                continue;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free loopback port, one thread per connection.
    fn echo() -> Result<SocketAddr, HarnessError> {
        let listener = bind_loopback()?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("echo address", e))?;
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Ok(addr)
    }

    fn read_exact_within(s: &mut TcpStream, n: usize, within: Duration) -> io::Result<Vec<u8>> {
        s.set_read_timeout(Some(within))?;
        let mut out = vec![0u8; n];
        s.read_exact(&mut out)?;
        Ok(out)
    }

    #[test]
    fn passes_bytes_then_holds_them_then_lets_them_through() -> Result<(), HarnessError> {
        let proxy = BlackHoleProxy::start(echo()?)?;
        let io = |e| HarnessError::io("the test connection", e);
        let mut c = TcpStream::connect(proxy.addr()).map_err(io)?;
        c.write_all(b"one").map_err(io)?;
        assert_eq!(
            read_exact_within(&mut c, 3, Duration::from_secs(5)).map_err(io)?,
            b"one"
        );
        proxy.black_hole(true);
        // Let the pumps see the flag before writing.
        thread::sleep(Duration::from_millis(100));
        c.write_all(b"two").map_err(io)?;
        let held = read_exact_within(&mut c, 3, Duration::from_millis(300));
        assert!(held.is_err(), "nothing flows through the black hole");
        // A new connection is accepted and held too.
        let mut d = TcpStream::connect(proxy.addr()).map_err(io)?;
        d.write_all(b"new").map_err(io)?;
        proxy.black_hole(false);
        assert_eq!(
            read_exact_within(&mut c, 3, Duration::from_secs(5)).map_err(io)?,
            b"two"
        );
        assert_eq!(
            read_exact_within(&mut d, 3, Duration::from_secs(5)).map_err(io)?,
            b"new"
        );
        assert_eq!(proxy.connections(), 2);
        Ok(())
    }
}
