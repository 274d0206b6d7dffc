//! EMQX and MinIO in Docker containers, through testcontainers 0.28 (blocking API).
//!
//! Enabled by the `containers` feature, for machines with a Docker engine. **This path compiles
//! in CI but is not exercised there** (CI has no Docker engine): the process-based servers
//! ([`crate::Mosquitto`], [`crate::S3Server`]) are what the test suite runs. Image tags are
//! pinned; the first start pulls the images, which can take minutes.
//!
//! The shapes follow the process-based servers: an address and port mapped on the host,
//! credentials, a bucket for S3; the container is removed on drop.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt, TestcontainersError};

use crate::HarnessError;

/// The EMQX image.
pub const EMQX_IMAGE: (&str, &str) = ("emqx/emqx", "5.8.3");
/// The MinIO image.
pub const MINIO_IMAGE: (&str, &str) = ("minio/minio", "RELEASE.2024-01-16T16-07-38Z");

const EMQX_MQTT_PORT: u16 = 1883;
const MINIO_API_PORT: u16 = 9000;
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

fn container_err(what: &str, e: TestcontainersError) -> HarnessError {
    HarnessError::Container(format!("{what}: {e}"))
}

/// Resolves the host the container runtime reports, with a mapped port, to a socket address.
fn host_addr(host: &str, port: u16) -> Result<SocketAddr, HarnessError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| HarnessError::io(format!("resolving container host {host}"), e))?
        .collect();
    // The port was mapped on IPv4; prefer an IPv4 address for `localhost`.
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| {
            HarnessError::Container(format!("container host {host} resolves to no address"))
        })
}

/// An EMQX 5 broker in a container; MQTT on a mapped port, anonymous clients allowed (EMQX's
/// default with no authenticator configured).
pub struct Emqx {
    container: Container<GenericImage>,
    host: String,
    port: u16,
}

impl fmt::Debug for Emqx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emqx")
            .field("container", &self.container.id())
            .field("host", &self.host)
            .field("port", &self.port)
            .finish()
    }
}

impl Emqx {
    /// Starts EMQX and waits for its "is running now" log line.
    pub fn start() -> Result<Emqx, HarnessError> {
        let (name, tag) = EMQX_IMAGE;
        let container = GenericImage::new(name, tag)
            .with_exposed_port(EMQX_MQTT_PORT.tcp())
            .with_wait_for(WaitFor::message_on_either_std("is running now"))
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .map_err(|e| container_err("starting EMQX", e))?;
        let port = container
            .get_host_port_ipv4(EMQX_MQTT_PORT.tcp())
            .map_err(|e| container_err("reading the EMQX MQTT port", e))?;
        let host = container
            .get_host()
            .map_err(|e| container_err("reading the EMQX host", e))?
            .to_string();
        Ok(Emqx {
            container,
            host,
            port,
        })
    }

    /// The host the MQTT port is mapped on.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The MQTT port on the host.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The MQTT address on the host.
    pub fn addr(&self) -> Result<SocketAddr, HarnessError> {
        host_addr(&self.host, self.port)
    }

    /// `mqtt://host:port`.
    pub fn url(&self) -> String {
        format!("mqtt://{}:{}", self.host, self.port)
    }

    /// The container id.
    pub fn container_id(&self) -> &str {
        self.container.id()
    }
}

/// A MinIO server in a container, with root credentials and one bucket created at start.
pub struct Minio {
    container: Container<GenericImage>,
    host: String,
    port: u16,
    access_key: String,
    secret_key: String,
    bucket: String,
}

impl fmt::Debug for Minio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Minio")
            .field("container", &self.container.id())
            .field("host", &self.host)
            .field("port", &self.port)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("bucket", &self.bucket)
            .finish()
    }
}

impl Minio {
    /// Starts MinIO with fixed root credentials; the bucket `spillway-test` is a directory made
    /// under the data path before the server starts, which single-drive MinIO serves as a
    /// bucket.
    pub fn start() -> Result<Minio, HarnessError> {
        let access_key = "spillwayminio".to_owned();
        let secret_key = "spillway-minio-secret".to_owned();
        let bucket = "spillway-test".to_owned();
        let (name, tag) = MINIO_IMAGE;
        let script = format!("mkdir -p /data/{bucket} && exec minio server /data --address :9000");
        let container = GenericImage::new(name, tag)
            .with_entrypoint("sh")
            .with_exposed_port(MINIO_API_PORT.tcp())
            .with_wait_for(WaitFor::message_on_either_std("API:"))
            .with_cmd(["-c", script.as_str()])
            .with_env_var("MINIO_ROOT_USER", access_key.as_str())
            .with_env_var("MINIO_ROOT_PASSWORD", secret_key.as_str())
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .map_err(|e| container_err("starting MinIO", e))?;
        let port = container
            .get_host_port_ipv4(MINIO_API_PORT.tcp())
            .map_err(|e| container_err("reading the MinIO API port", e))?;
        let host = container
            .get_host()
            .map_err(|e| container_err("reading the MinIO host", e))?
            .to_string();
        Ok(Minio {
            container,
            host,
            port,
            access_key,
            secret_key,
            bucket,
        })
    }

    /// `http://host:port` (path-style addressing).
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// The API address on the host.
    pub fn addr(&self) -> Result<SocketAddr, HarnessError> {
        host_addr(&self.host, self.port)
    }

    /// The API port on the host.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, as the `Host` header of a request.
    pub fn host_port(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The access key id (MinIO root user).
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret access key (MinIO root password).
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The signing region, `us-east-1` (MinIO's default).
    pub fn region(&self) -> &'static str {
        crate::s3server::REGION
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The container id.
    pub fn container_id(&self) -> &str {
        self.container.id()
    }
}
