//! Socket options beyond `TCP_NODELAY` (which [`crate::connect`] sets). A failure (not TCP,
//! another OS) only loses the optimisation, so none of these report one.

use std::os::fd::RawFd;

#[allow(unsafe_code)]
fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: plain setsockopt on a socket the caller owns, with a c_int value that lives
    // for the call.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// `TCP_QUICKACK` (Linux): ACK received segments at once until the kernel leaves quick-ack
/// mode again.
pub fn set_quickack(fd: RawFd) {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
}

/// `SO_RCVLOWAT`: a read completes only once this many bytes are waiting (or the connection
/// closes).
pub fn set_rcvlowat(fd: RawFd, bytes: usize) {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v);
}
