//! Name resolution off the calling thread. The system resolver blocks; a shard thread that
//! called it would stop every connection and timer it runs for as long as DNS takes. An IP
//! literal is answered at once; a name is resolved on a short-lived thread and the answer
//! handed back through a one-shot slot that wakes the waiting task.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct Slot {
    answer: Option<io::Result<Vec<SocketAddr>>>,
    waker: Option<Waker>,
}

struct Answer(Arc<Mutex<Slot>>);

impl Future for Answer {
    type Output = io::Result<Vec<SocketAddr>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.answer.take() {
            Some(answer) => Poll::Ready(answer),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Splits `host:port` (`[v6]:port` too) into the host (brackets removed) and the port.
pub fn split_host_port(address: &str) -> io::Result<(&str, u16)> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{address:?} is not host:port"),
        )
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse::<u16>().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host, port))
}

/// The addresses of `host` (a name, or an IP literal with or without brackets) at `port`.
/// Names are resolved on another thread; dropping the future leaves that thread to finish
/// alone.
pub async fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let slot = Arc::new(Mutex::new(Slot::default()));
    let theirs = Arc::clone(&slot);
    let name = bare.to_owned();
    std::thread::Builder::new()
        .name("spillway-resolve".to_owned())
        .spawn(move || {
            let answer = (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect::<Vec<_>>);
            let mut slot = theirs.lock().unwrap_or_else(PoisonError::into_inner);
            slot.answer = Some(answer);
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        })?;
    Answer(slot).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn host_and_port_are_split_and_checked() {
        assert_eq!(split_host_port("a.b:80").unwrap(), ("a.b", 80));
        assert_eq!(split_host_port("[::1]:9").unwrap(), ("::1", 9));
        assert!(split_host_port("nohost").is_err());
        assert!(split_host_port(":80").is_err());
        assert!(split_host_port("h:99999").is_err());
    }

    #[test]
    fn names_resolve_off_the_thread_and_literals_at_once() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        rt.block_on(async {
            let v4 = resolve("127.0.0.1", 5).await.unwrap();
            assert_eq!(v4, vec!["127.0.0.1:5".parse().unwrap()]);
            let v6 = resolve("[::1]", 6).await.unwrap();
            assert_eq!(v6, vec!["[::1]:6".parse().unwrap()]);
            // "localhost" comes from /etc/hosts: a name, resolved on the helper thread.
            let named = resolve("localhost", 7).await.unwrap();
            assert!(named.iter().all(|a| a.ip().is_loopback() && a.port() == 7));
            assert!(!named.is_empty());
            assert!(resolve("no-such-host.invalid", 7).await.is_err());
        });
    }
}
