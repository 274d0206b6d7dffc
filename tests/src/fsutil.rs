//! Small file helpers: write a file and say which one failed; write a secret with mode 0600.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::HarnessError;

/// Writes `contents` to `path` (created or truncated).
pub(crate) fn write_file(path: &Path, contents: &[u8]) -> Result<(), HarnessError> {
    fs::write(path, contents)
        .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
}

/// Writes `contents` to `path` readable by the owner only (mode 0600), as servers expect of
/// private keys and password files.
pub(crate) fn write_private_file(path: &Path, contents: &[u8]) -> Result<(), HarnessError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| HarnessError::io(format!("creating {}", path.display()), e))?;
    file.write_all(contents)
        .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
}

/// Reads a file as text, replacing invalid UTF-8; an unreadable file reads as a note saying so.
pub(crate) fn read_lossy(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}

/// Whether the current process runs as root (uid 0), read from the owner of `/proc/self`.
pub(crate) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Where a server that stores what the tests send keeps its data: `SPILLWAY_TEST_SCRATCH` if
/// set, else (with `memory`) `/dev/shm` when a directory can be made there, else the system's
/// temporary directory. The S3 tests push gigabytes through the store; on a CI machine whose disk
/// is nearly full (one run had a few GiB free after the build) a disk-backed store fails with
/// ENOSPC and the test measures the disk instead of the engine.
pub(crate) fn scratch_dir(prefix: &str, memory: bool) -> Result<tempfile::TempDir, HarnessError> {
    let make = |root: &Path| tempfile::Builder::new().prefix(prefix).tempdir_in(root);
    if let Some(root) = std::env::var_os("SPILLWAY_TEST_SCRATCH") {
        let root = Path::new(&root);
        return make(root).map_err(|e| {
            HarnessError::io(
                format!(
                    "creating a directory in SPILLWAY_TEST_SCRATCH={}",
                    root.display()
                ),
                e,
            )
        });
    }
    let shm = Path::new("/dev/shm");
    if memory
        && shm.is_dir()
        && let Ok(dir) = make(shm)
    {
        return Ok(dir);
    }
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| HarnessError::io(format!("creating a {prefix} directory"), e))
}
