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
