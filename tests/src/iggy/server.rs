//! The stand-in's sockets: one thread accepts (and runs the periodic housekeeping), one thread
//! per connection reads frames with a short read timeout and answers them strictly in order
//! (the protocol is lockstep: one request in flight per connection). All protocol state sits
//! in one [`State`] behind a mutex; it is never held while writing to a socket.
//!
//! With a TLS configuration every accepted socket is wrapped in a rustls server session
//! (`StreamOwned`); the handshake happens on the connection's thread, on its first reads.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use iggy_binary_protocol::EvictionReason;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::handlers;
use super::state::State;
use super::wire::{self, FrameReader, ReadOutcome};
use crate::HarnessError;
use crate::ports::LOOPBACK;

/// Read timeout of the connection threads and sleep of the accept loop: how quickly they see
/// a stop, a stale heartbeat or a handover timeout.
const TICK: Duration = Duration::from_millis(10);
/// How long a reply write may block before the connection is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `kill_connections` waits for the killed connections to be cleaned up.
const KILL_WAIT: Duration = Duration::from_secs(5);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Open connections: a clone of each socket, to close it from outside.
    connections: Mutex<HashMap<u64, TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stop: AtomicBool,
    next_connection: AtomicU64,
    eviction_timeout: Duration,
    /// Serve TLS with this configuration (plain TCP without).
    tls: Option<Arc<ServerConfig>>,
}

/// A running listener with its threads; stops on drop.
#[derive(Debug)]
pub(crate) struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `127.0.0.1:0` and starts accepting (serving TLS when `tls` is given).
    pub(crate) fn start(
        state: State,
        eviction_timeout: Duration,
        tls: Option<Arc<ServerConfig>>,
    ) -> Result<Self, HarnessError> {
        let listener = TcpListener::bind((LOOPBACK, 0))
            .map_err(|e| HarnessError::io("binding the Iggy stand-in to 127.0.0.1:0", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the Iggy stand-in address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("making the Iggy stand-in listener non-blocking", e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            connections: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            next_connection: AtomicU64::new(1),
            eviction_timeout,
            tls,
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("iggy-standin-accept".into())
                .spawn(move || accept_loop(&listener, &shared))
                .map_err(|e| HarnessError::io("spawning the Iggy stand-in accept thread", e))?
        };
        Ok(Server {
            shared,
            addr,
            acceptor: Some(acceptor),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn connection_count(&self) -> usize {
        lock(&self.shared.connections).len()
    }

    pub(crate) fn stored_offset_requests(&self) -> u64 {
        lock(&self.shared.state).stored_offset_requests
    }

    pub(crate) fn poll_requests(&self) -> u64 {
        lock(&self.shared.state).poll_requests
    }

    pub(crate) fn logins(&self) -> u64 {
        lock(&self.shared.state).logins
    }

    pub(crate) fn refuse_transiently(&self, count: u32) {
        lock(&self.shared.state).transient_refusals = count;
    }

    pub(crate) fn refuse_stores(&self, on: bool) {
        lock(&self.shared.state).refuse_stores = on;
    }

    pub(crate) fn transient_refusals_left(&self) -> u32 {
        lock(&self.shared.state).transient_refusals
    }

    /// Closes every client socket at once, then waits (up to 5 s) until their threads have
    /// cleaned up: sessions ended, group members removed and groups rebalanced.
    pub(crate) fn kill_connections(&self) {
        let killed: Vec<u64> = {
            let connections = lock(&self.shared.connections);
            for stream in connections.values() {
                let _ = stream.shutdown(Shutdown::Both);
            }
            connections.keys().copied().collect()
        };
        let deadline = Instant::now() + KILL_WAIT;
        while Instant::now() < deadline {
            let connections = lock(&self.shared.connections);
            if killed.iter().all(|id| !connections.contains_key(id)) {
                return;
            }
            drop(connections);
            thread::sleep(TICK);
        }
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for stream in lock(&self.shared.connections).values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let threads: Vec<JoinHandle<()>> = lock(&self.shared.threads).drain(..).collect();
        for handle in threads {
            let _ = handle.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => spawn_connection(shared, stream),
            Err(e) if wire::is_timeout(&e) => {
                // Idle: complete handovers whose source drained or timed out, reap threads.
                lock(&shared.state).complete_handovers();
                reap_finished(shared);
                thread::sleep(TICK);
            }
            Err(_) => thread::sleep(TICK),
        }
    }
}

fn reap_finished(shared: &Shared) {
    let finished: Vec<JoinHandle<()>> = {
        let mut threads = lock(&shared.threads);
        let (done, running): (Vec<_>, Vec<_>) =
            threads.drain(..).partition(JoinHandle::is_finished);
        *threads = running;
        done
    };
    for handle in finished {
        let _ = handle.join();
    }
}

fn spawn_connection(shared: &Arc<Shared>, stream: TcpStream) {
    let id = shared.next_connection.fetch_add(1, Ordering::SeqCst);
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(TICK)).is_err()
        || stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err()
    {
        return;
    }
    let _ = stream.set_nodelay(true);
    lock(&shared.state).connect(id);
    lock(&shared.connections).insert(id, clone);
    let spawned = match &shared.tls {
        None => spawn_serve(shared, id, stream),
        Some(config) => ServerConnection::new(Arc::clone(config))
            .map_err(io::Error::other)
            .and_then(|conn| spawn_serve(shared, id, StreamOwned::new(conn, stream))),
    };
    match spawned {
        Ok(handle) => lock(&shared.threads).push(handle),
        Err(_) => {
            lock(&shared.state).disconnect(id);
            lock(&shared.connections).remove(&id);
        }
    }
}

fn spawn_serve<S: Read + Write + Send + 'static>(
    shared: &Arc<Shared>,
    id: u64,
    stream: S,
) -> io::Result<JoinHandle<()>> {
    let thread_shared = Arc::clone(shared);
    thread::Builder::new()
        .name(format!("iggy-standin-conn-{id}"))
        .spawn(move || serve(&thread_shared, id, stream))
}

/// Serves one connection (plain TCP or TLS over it) until the peer closes it, it sends an impossible frame size, a reply
/// cannot be written, or the server stops. Then the connection's session ends as on a real
/// disconnect (it leaves its groups).
fn serve(shared: &Shared, id: u64, mut stream: impl Read + Write) {
    if lock(&shared.state).legacy_framing {
        serve_legacy(shared, &mut stream);
        return;
    }
    let mut reader = FrameReader::default();
    while !shared.stop.load(Ordering::SeqCst) {
        match reader.read(&mut stream) {
            ReadOutcome::Frame(frame) => {
                let reply = handlers::handle(&mut lock(&shared.state), id, &frame);
                if let Some(reply) = reply
                    && stream
                        .write_all(&reply)
                        .and_then(|()| stream.flush())
                        .is_err()
                {
                    break;
                }
            }
            ReadOutcome::Idle => evict_if_stale(shared, id, &mut stream),
            ReadOutcome::Closed | ReadOutcome::BadSize(_) => break,
        }
    }
    lock(&shared.state).disconnect(id);
    let socket = lock(&shared.connections).remove(&id);
    if let Some(socket) = socket {
        let _ = socket.shutdown(Shutdown::Both);
    }
}

/// A server before 0.9: every 8 bytes read are a request head (length, code) it cannot take,
/// answered with the error head InvalidCommand (3), length 0; the connection closes once the
/// peer does or the server stops.
fn serve_legacy(shared: &Shared, stream: &mut (impl Read + Write)) {
    let mut head = [0u8; 8];
    let mut answer = Vec::with_capacity(8);
    answer.extend_from_slice(&3u32.to_le_bytes());
    answer.extend_from_slice(&0u32.to_le_bytes());
    while !shared.stop.load(Ordering::SeqCst) {
        match stream.read_exact(&mut head) {
            Ok(()) => {
                if stream
                    .write_all(&answer)
                    .and_then(|()| stream.flush())
                    .is_err()
                {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// The heartbeat check: a logged-in group member silent for longer than the eviction timeout
/// loses its session (and its group memberships) and gets an Eviction `StaleClient`. The
/// socket stays open, as on the server: a later request finds the connection logged out.
fn evict_if_stale(shared: &Shared, id: u64, stream: &mut impl Write) {
    let evicted = {
        let mut state = lock(&shared.state);
        if state.is_stale(id, shared.eviction_timeout) {
            state.unbind(id)
        } else {
            None
        }
    };
    if let Some(binding) = evicted {
        let _ = stream
            .write_all(&wire::eviction(binding.client, EvictionReason::StaleClient))
            .and_then(|()| stream.flush());
    }
}
