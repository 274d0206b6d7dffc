//! An S3 server that verifies SigV4: `s3s-fs` 0.14.1 run as a child process on an ephemeral
//! loopback port, storing objects as files under a temporary data directory (in `/dev/shm` when
//! it can, see `fsutil::scratch_dir`).
//!
//! Facts about s3s-fs 0.14.1 (see also the design guide):
//! - flags: `s3s-fs --host H --port P --access-key AK --secret-key SK ROOT`;
//! - a bucket is a directory under `ROOT`, so creating the directory before start creates the
//!   bucket; an object `key` of bucket `b` is the file `ROOT/b/key`;
//! - an unsigned request gets 403 `AccessDenied` ("Signature is required"); a request signed with
//!   a wrong secret gets 403 `SignatureDoesNotMatch`;
//! - it does not check Content-MD5 on parts, accepts a wrong part ETag at Complete, answers a
//!   body / `x-amz-content-sha256` mismatch with 500, and has no ListMultipartUploads.

use std::fmt;
use std::fs;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::HarnessError;
use crate::fsutil::scratch_dir;
use crate::ports::LOOPBACK;
use crate::process::ServerProcess;

/// The region harness S3 servers use in signatures.
pub const REGION: &str = "us-east-1";

/// Options for [`S3Server::start_with`].
#[derive(Clone)]
pub struct S3ServerOpts {
    /// The bucket created before start.
    pub bucket: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// How long start-up may take (default 10 s).
    pub start_timeout: Duration,
    /// Keep the data on a disk (the system's temporary directory, or `SPILLWAY_TEST_SCRATCH`)
    /// rather than in `/dev/shm`: for benches, whose figures are compared with earlier ones
    /// (default false: tests push GiBs through the store and CI machines can be short of disk).
    pub on_disk: bool,
}

impl Default for S3ServerOpts {
    fn default() -> Self {
        S3ServerOpts {
            bucket: "spillway-test".to_owned(),
            access_key: "SPILLWAYTESTACCESSKEY".to_owned(),
            secret_key: "spillway-test-secret-key-0123456789".to_owned(),
            start_timeout: Duration::from_secs(10),
            on_disk: false,
        }
    }
}

impl fmt::Debug for S3ServerOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3ServerOpts")
            .field("bucket", &self.bucket)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("start_timeout", &self.start_timeout)
            .field("on_disk", &self.on_disk)
            .finish()
    }
}

/// A running s3s-fs server. Killed on drop; its data directory is removed then.
pub struct S3Server {
    // Field order matters on drop: the process stops before its directory goes.
    process: ServerProcess,
    port: u16,
    data_dir: PathBuf,
    opts: S3ServerOpts,
    dir: TempDir,
}

impl fmt::Debug for S3Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoint", &self.endpoint())
            .field("data_dir", &self.data_dir)
            .field("opts", &self.opts)
            .finish()
    }
}

impl S3Server {
    /// Starts s3s-fs with the default bucket and credentials.
    pub fn start() -> Result<S3Server, HarnessError> {
        Self::start_with(S3ServerOpts::default())
    }

    /// The same with its data on a disk ([`S3ServerOpts::on_disk`]), as the benches run it.
    pub fn start_on_disk() -> Result<S3Server, HarnessError> {
        Self::start_with(S3ServerOpts {
            on_disk: true,
            ..S3ServerOpts::default()
        })
    }

    /// Starts s3s-fs with `opts`: creates the bucket directory, picks a free loopback port and
    /// waits until the server accepts connections.
    pub fn start_with(opts: S3ServerOpts) -> Result<S3Server, HarnessError> {
        validate_bucket_name(&opts.bucket)?;
        if opts.access_key.is_empty() || opts.secret_key.is_empty() {
            return Err(HarnessError::InvalidOption(
                "S3 access key and secret key must not be empty".to_owned(),
            ));
        }
        let dir = scratch_dir("spillway-s3-", !opts.on_disk)?;
        let data_dir = dir.path().join("data");
        let bucket_dir = data_dir.join(&opts.bucket);
        fs::create_dir_all(&bucket_dir)
            .map_err(|e| HarnessError::io(format!("creating {}", bucket_dir.display()), e))?;

        let log_path = dir.path().join("s3s-fs.log");
        let mut process = ServerProcess::new(
            "s3s-fs",
            "s3s-fs",
            Vec::<std::ffi::OsString>::new(),
            log_path,
        );
        let port = process.start_on_free_port(opts.start_timeout, |p, port| {
            p.set_args(args(port, &opts, &data_dir));
            Ok(())
        })?;
        Ok(S3Server {
            process,
            port,
            data_dir,
            opts,
            dir,
        })
    }

    /// `http://127.0.0.1:port` (path-style addressing: `endpoint/bucket/key`).
    pub fn endpoint(&self) -> String {
        format!("http://{LOOPBACK}:{}", self.port)
    }

    /// The listener address.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// The listener port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, as the `Host` header of a request.
    pub fn host_port(&self) -> String {
        format!("{LOOPBACK}:{}", self.port)
    }

    /// The access key id.
    pub fn access_key(&self) -> &str {
        &self.opts.access_key
    }

    /// The secret access key.
    pub fn secret_key(&self) -> &str {
        &self.opts.secret_key
    }

    /// The signing region, `us-east-1`.
    pub fn region(&self) -> &'static str {
        REGION
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.opts.bucket
    }

    /// The data directory (`ROOT` of s3s-fs): one directory per bucket.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory of the default bucket.
    pub fn bucket_dir(&self) -> PathBuf {
        self.data_dir.join(&self.opts.bucket)
    }

    /// Where s3s-fs stores object `key` of the default bucket.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.bucket_dir().join(key)
    }

    /// Creates another bucket (a directory under the data directory); returns its path.
    pub fn create_bucket(&self, name: &str) -> Result<PathBuf, HarnessError> {
        validate_bucket_name(name)?;
        let path = self.data_dir.join(name);
        fs::create_dir_all(&path)
            .map_err(|e| HarnessError::io(format!("creating {}", path.display()), e))?;
        Ok(path)
    }

    /// The temporary directory holding data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// The server's process id while it runs (to read its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the server process is running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Kills the server and waits for it to exit (stored objects stay).
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        self.process.stop()
    }

    /// Starts the stopped server again on the same port with the same data.
    pub fn start_again(&mut self) -> Result<(), HarnessError> {
        if self.process.is_running() {
            return Err(HarnessError::InvalidOption(
                "s3s-fs is already running; stop() it first or use restart()".to_owned(),
            ));
        }
        self.process.spawn()?;
        self.process
            .wait_until_accepting(self.addr(), self.opts.start_timeout)
    }

    /// Stops and starts the server on the same port.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop()?;
        self.start_again()
    }
}

fn args(port: u16, opts: &S3ServerOpts, data_dir: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "--host".into(),
        LOOPBACK.to_string().into(),
        "--port".into(),
        port.to_string().into(),
        "--access-key".into(),
        opts.access_key.clone().into(),
        "--secret-key".into(),
        opts.secret_key.clone().into(),
        data_dir.as_os_str().to_owned(),
    ]
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, port))
}

/// S3 bucket naming rules, enough to keep names usable as one path component.
fn validate_bucket_name(name: &str) -> Result<(), HarnessError> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let ok_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if (3..=63).contains(&name.len()) && ok_chars && ok_ends && !name.contains("..") {
        Ok(())
    } else {
        Err(HarnessError::InvalidOption(format!(
            "{name:?} is not a valid S3 bucket name (3-63 of a-z 0-9 . -, alphanumeric ends)"
        )))
    }
}

/// The object files under `dir` (s3s-fs's directory of a bucket, or of a key prefix in it), in
/// path order, without s3s-fs's own bookkeeping (`*.metadata.json`, `.upload*` parts, dot
/// entries; a sink's `.spillway/` markers are dot entries too).
pub fn object_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            if path.is_dir() {
                walk(&path, out)?;
            } else if !name.ends_with(".metadata.json") && !name.contains(".upload") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    out.sort();
    Ok(out)
}
