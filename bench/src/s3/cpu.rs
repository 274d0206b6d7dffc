//! Client CPU time, from `getrusage` (user + system: the kernel's share of sending is the
//! client's cost too).

use std::time::Duration;

/// Whose CPU time is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The whole process, every thread (`RUSAGE_SELF`): right when the server is another
    /// process and nothing else in this one is busy.
    Process,
    /// The calling thread only (`RUSAGE_THREAD`): right for a client that runs on one thread
    /// beside a server living in other threads of this process.
    Thread,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Process => "RUSAGE_SELF",
            Scope::Thread => "RUSAGE_THREAD",
        }
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// CPU time used, split into user and system (kernel) time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    pub fn total(self) -> Duration {
        self.user + self.system
    }

    /// The time used between `earlier` and this reading.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// The CPU time used so far by `scope`.
pub fn used(scope: Scope) -> Result<CpuTime, String> {
    let who = match scope {
        Scope::Process => libc::RUSAGE_SELF,
        Scope::Thread => libc::RUSAGE_THREAD,
    };
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` points to writable memory the size of a `rusage`, which getrusage fills
    // in; `who` is one of the two constants it accepts.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if rc != 0 {
        return Err(format!(
            "getrusage({}): {}",
            scope.name(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: zero bytes are a valid `rusage` (integers only), and getrusage succeeded.
    #[allow(unsafe_code)]
    let usage = unsafe { usage.assume_init() };
    Ok(CpuTime {
        user: timeval(usage.ru_utime),
        system: timeval(usage.ru_stime),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() -> Result<(), String> {
        for scope in [Scope::Thread, Scope::Process] {
            let before = used(scope)?;
            let mut x = 1u64;
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            let spent = used(scope)?.since(before).total();
            assert!(spent >= Duration::from_millis(10), "{scope:?}: {spent:?}");
        }
        Ok(())
    }
}
