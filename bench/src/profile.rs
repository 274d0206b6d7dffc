//! Flame graphs of the engine's shard thread for the bench report.
//!
//! A scenario that profiles runs its client once more after the measured runs (so the
//! sampling costs none of the reported figures), with `perf record -F 999 -g` attached to
//! this process for that run only. Then `perf script` gives the samples, inferno's perf
//! collapser folds them into stacks (`thread;outer;…;leaf count`, kernel frames marked `_[k]`),
//! the stacks of the threads whose name starts with the prefix asked for are kept (the kernel
//! truncates thread names to 15 bytes: the shard threads are all `spillway-shard-`), and
//! inferno draws them as an SVG next to the report. The functions most often at the top of
//! the stack (self time) come out as a table for the text report.
//!
//! Stacks are walked by frame pointers (`-g`): the release build has no frame pointers, so a
//! stack may end early, but the leaf frame of every sample is right, and so is the self-time
//! table. Needs `perf` (Debian's linux-perf) and the right to sample this process (root, or
//! `kernel.perf_event_paranoid` at most 1); without it the scenario says why and goes on.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufReader, Cursor};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use inferno::collapse::Collapse as _;

/// Samples per second.
const FREQUENCY: &str = "999";
/// Rows of the self-time table.
const TOP: usize = 15;
/// Set to `0` to skip the profile runs.
pub const ENV: &str = "SPILLWAY_BENCH_PROFILE";

/// Whether profiling is wanted (not switched off by [`ENV`]).
pub fn wanted() -> bool {
    std::env::var(ENV).map_or(true, |v| v.trim() != "0")
}

/// `perf record` on this process, until [`Recording::stop`].
#[derive(Debug)]
pub struct Recording {
    child: Child,
    data: PathBuf,
    log: PathBuf,
}

/// Starts sampling this process into `data` (a `perf.data` file); waits until perf has
/// attached (it writes its file header then).
pub fn start(data: &Path) -> Result<Recording, String> {
    let _ = std::fs::remove_file(data);
    let log = data.with_extension("log");
    let log_file =
        std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let mut child = Command::new("perf")
        .arg("record")
        .args(["-F", FREQUENCY, "-g", "--quiet", "-p"])
        .arg(std::process::id().to_string())
        .arg("-o")
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .map_err(|e| format!("perf record: {e} (install linux-perf)"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "perf record exited at once ({status}): {}",
                tail(&log)
            ));
        }
        if std::fs::metadata(data).is_ok_and(|m| m.len() > 0) {
            // Attached; give it a moment to set up the events of every thread.
            std::thread::sleep(Duration::from_millis(200));
            return Ok(Recording {
                child,
                data: data.to_owned(),
                log,
            });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "perf record wrote nothing within 10 s: {}",
                tail(&log)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Recording {
    /// Stops sampling (SIGINT, as Ctrl-C would: perf then finishes its file) and returns the
    /// file's path.
    pub fn stop(mut self) -> Result<PathBuf, String> {
        let pid = libc::pid_t::try_from(self.child.id()).map_err(|e| e.to_string())?;
        // SAFETY: kill has no memory preconditions; the pid is our own child's, not yet
        // waited for, so it cannot have been reused.
        #[allow(unsafe_code)]
        let sent = unsafe { libc::kill(pid, libc::SIGINT) };
        if sent != 0 {
            let _ = self.child.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!("perf record did not finish: {}", tail(&self.log)));
                }
            }
        }
        let _ = std::fs::remove_file(&self.log);
        Ok(self.data)
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    let joined: Vec<&str> = lines.into_iter().rev().collect();
    joined.join(" / ")
}

/// One thread group's profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// What the samples of the threads kept weigh: perf's sample periods (for the
    /// `cpu-clock` event a VM falls back to, nanoseconds on the CPU).
    pub samples: u64,
    /// The leaf functions with the most samples, most first: name and samples.
    pub top: Vec<(String, u64)>,
    /// Samples whose leaf is in the kernel.
    pub kernel: u64,
}

impl Profile {
    /// The self-time table, in shares of the samples.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let share = |n: u64| 100.0 * n as f64 / self.samples.max(1) as f64;
        let _ = writeln!(
            out,
            "  sampled weight {} (cpu-clock: {:.0} ms on the CPU), {:.1}% of it in the kernel; self time:",
            self.samples,
            self.samples as f64 / 1e6,
            share(self.kernel)
        );
        for (name, n) in &self.top {
            let _ = writeln!(out, "  {:>5.1}%  {}", share(*n), shorten(name));
        }
        out
    }
}

/// A Rust symbol without its generic arguments and hash, cut to a readable length.
fn shorten(name: &str) -> String {
    // Generic arguments (a `<` right after a name) go; a qualified path (`<T as Trait>`)
    // stays, without the generics inside it.
    let mut out = String::with_capacity(name.len());
    let mut open: Vec<bool> = Vec::new();
    for c in name.chars() {
        let skipping = open.iter().any(|&skip| skip);
        match c {
            '<' => {
                let generic = out
                    .chars()
                    .last()
                    .is_some_and(|p| p.is_alphanumeric() || p == '_' || p == ':');
                open.push(skipping || generic);
                if !(skipping || generic) {
                    out.push(c);
                }
            }
            '>' if open.pop() == Some(false) && !skipping => out.push(c),
            '>' => {}
            _ if !skipping => out.push(c),
            _ => {}
        }
    }
    // `Vec::<u8>::new` leaves `Vec::::new`.
    while let Some(i) = out.find("::::") {
        out.replace_range(i..i + 4, "::");
    }
    // A trailing `::h0123…` hash.
    if let Some(i) = out.rfind("::h")
        && out[i + 3..].chars().all(|c| c.is_ascii_hexdigit())
        && out.len() - i == 19
    {
        out.truncate(i);
    }
    while out.ends_with("::") {
        out.truncate(out.len() - 2);
    }
    if out.len() > 110 {
        let mut cut = 107;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// Folds `perf script` output into stacks and keeps those of the threads named
/// `thread_prefix…`.
pub fn fold(perf_script: &[u8], thread_prefix: &str) -> Result<Vec<String>, String> {
    let mut options = inferno::collapse::perf::Options::default();
    options.annotate_kernel = true;
    let mut folder = inferno::collapse::perf::Folder::from(options);
    let mut folded = Vec::new();
    folder
        .collapse(BufReader::new(Cursor::new(perf_script)), &mut folded)
        .map_err(|e| format!("folding the perf samples: {e}"))?;
    let text = String::from_utf8_lossy(&folded);
    Ok(text
        .lines()
        .filter(|l| l.starts_with(thread_prefix))
        .map(str::to_owned)
        .collect())
}

/// The self-time profile of folded stacks.
pub fn summarize(stacks: &[String]) -> Profile {
    let mut leaves: HashMap<&str, u64> = HashMap::new();
    let mut samples = 0u64;
    let mut kernel = 0u64;
    for line in stacks {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = count.parse::<u64>() else {
            continue;
        };
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        samples += n;
        if leaf.ends_with("_[k]") {
            kernel += n;
        }
        *leaves.entry(leaf).or_default() += n;
    }
    let mut top: Vec<(String, u64)> = leaves.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP);
    Profile {
        samples,
        top,
        kernel,
    }
}

/// Renders the recording's samples of the threads named `thread_prefix…` as a flame graph
/// at `svg`, titled `title` (and their folded stacks beside it, `.folded`); their self-time
/// profile.
pub fn render(
    data: &Path,
    thread_prefix: &str,
    title: &str,
    svg: &Path,
) -> Result<Profile, String> {
    let script = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(data)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("perf script: {e}"))?;
    if !script.status.success() {
        return Err(format!("perf script exited with {}", script.status));
    }
    let stacks = fold(&script.stdout, thread_prefix)?;
    if stacks.is_empty() {
        return Err(format!("no samples of a thread named {thread_prefix}*"));
    }
    let profile = summarize(&stacks);
    // The folded stacks too, for a closer look (`grep`, or inferno-flamegraph with options).
    let folded = svg.with_extension("folded");
    std::fs::write(&folded, stacks.join("\n") + "\n")
        .map_err(|e| format!("writing {}: {e}", folded.display()))?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = "samples".to_owned();
    let file =
        std::fs::File::create(svg).map_err(|e| format!("creating {}: {e}", svg.display()))?;
    inferno::flamegraph::from_lines(
        &mut options,
        stacks.iter().map(String::as_str),
        std::io::BufWriter::new(file),
    )
    .map_err(|e| format!("drawing {}: {e}", svg.display()))?;
    let _ = std::fs::remove_file(data);
    Ok(profile)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `perf script` output of three samples: two of a shard thread (one in user space, one
    /// in the kernel under it), one of another thread.
    const SCRIPT: &str = "\
spillway-shard- 4242/4250 [001] 100.000001: 1001001 cpu-clock:pppH:
\t    55d0c0a01000 spillway::json::Scanner::string+0x20 (/bin/bench)
\t    55d0c0a02000 spillway::sink::s3::format::Encoder::push+0x80 (/bin/bench)
\t    55d0c0a03000 std::sys::thread::start+0x10 (/bin/bench)

spillway-shard- 4242/4250 [001] 100.001002: 1001001 cpu-clock:pppH:
\t    ffffffff81000000 copy_user_enhanced_fast_string+0x1 ([kernel.kallsyms])
\t    ffffffff81000100 tcp_sendmsg+0x40 ([kernel.kallsyms])
\t    55d0c0a03000 std::sys::thread::start+0x10 (/bin/bench)

spillway-shard- 4242/4250 [001] 100.002003: 1001001 cpu-clock:pppH:
\t    55d0c0a01000 spillway::json::Scanner::string+0x20 (/bin/bench)
\t    55d0c0a02000 spillway::sink::s3::format::Encoder::push+0x80 (/bin/bench)
\t    55d0c0a03000 std::sys::thread::start+0x10 (/bin/bench)

iggy-standin-co 4242/4251 [000] 100.002500: 1001001 cpu-clock:pppH:
\t    55d0c0a09000 spillway_tests::iggy::serve+0x20 (/bin/bench)

";

    #[test]
    fn the_shard_stacks_are_kept_and_their_leaves_counted() {
        let stacks = fold(SCRIPT.as_bytes(), "spillway-shard").unwrap();
        assert!(!stacks.is_empty());
        assert!(
            stacks.iter().all(|s| s.starts_with("spillway-shard-")),
            "{stacks:?}"
        );
        let p = summarize(&stacks);
        // Weighted by the samples' periods (1001001 ns each here).
        assert_eq!(p.samples, 3 * 1001001, "{stacks:?}");
        assert_eq!(p.kernel, 1001001, "{stacks:?}");
        assert_eq!(
            p.top[0],
            ("spillway::json::Scanner::string".to_owned(), 2 * 1001001)
        );
        assert_eq!(p.top[1].0, "copy_user_enhanced_fast_string_[k]");
        let table = p.table();
        assert!(table.contains("weight 3003003 (cpu-clock: 3 ms"), "{table}");
        assert!(table.contains("33.3% of it in the kernel"), "{table}");
        assert!(
            table.contains(" 66.7%  spillway::json::Scanner::string"),
            "{table}"
        );
    }

    #[test]
    fn symbols_lose_generics_and_hashes() {
        assert_eq!(
            shorten("<alloc::vec::Vec<u8> as core::ops::Drop>::drop::h0123456789abcdef"),
            "<alloc::vec::Vec as core::ops::Drop>::drop"
        );
        assert_eq!(
            shorten("bytes::BytesMut::extend::<&[u8]>"),
            "bytes::BytesMut::extend"
        );
        assert_eq!(
            shorten("spillway::json::Scanner::string::h0123456789abcdef"),
            "spillway::json::Scanner::string"
        );
        assert_eq!(shorten("memcpy"), "memcpy");
        assert!(shorten(&"a".repeat(300)).len() <= 110);
    }
}
