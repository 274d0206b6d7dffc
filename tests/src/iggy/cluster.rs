//! [`IggyCluster`]: the real Iggy server (`../shared/iggy/`, 0.9.0-edge.5) run as a replicated
//! cluster of one process per node on loopback, each with its own data directory, client port
//! and replica port, `--replica-id N`, and the cluster described by `IGGY_CLUSTER_*` variables
//! (the server's `[cluster]` config section). Every node is killed on drop.
//!
//! Facts seen on it: logins work on every node; `GET_CLUSTER_METADATA` (code 12) lists the nodes
//! with role 0 (leader) or 1 (follower); followers refuse writes with 58; after a SIGKILL of the
//! leader another node leads within a few seconds, and the killed node, restarted on its data,
//! rejoins as a follower.

use std::ffi::OsString;
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use iggy_binary_protocol::WireDecode;
use iggy_binary_protocol::codes::GET_CLUSTER_METADATA_CODE;
use iggy_binary_protocol::responses::system::ClusterMetadataResponse;

use super::{DEFAULT_CREDENTIALS, IggyAdmin, real};
use crate::HarnessError;
use crate::ports::{LOOPBACK, free_loopback_port};
use crate::process::ServerProcess;

fn fastrand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    t ^ std::process::id().rotate_left(16)
}

/// How long a node may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a cluster may take to agree on a leader (an election after a kill takes 2-6 s with
/// the server's 5 s heartbeat timeout).
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(40);

struct ClusterNode {
    process: ServerProcess,
    port: u16,
}

/// A cluster of real Iggy servers (see the [module docs](self)).
pub struct IggyCluster {
    nodes: Vec<ClusterNode>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for IggyCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IggyCluster")
            .field(
                "ports",
                &self.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// An admin connection to the node of `nodes` that leads: the first that answers the roster
/// naming itself leader (role 0 on its own port). A single address is connected to as it is.
pub fn leader_admin(
    nodes: &[SocketAddr],
    username: &str,
    password: &str,
) -> Result<IggyAdmin, HarnessError> {
    if let [only] = nodes {
        return IggyAdmin::connect(*only, username, password);
    }
    let mut last = None;
    for addr in nodes {
        let mut admin = match IggyAdmin::connect(*addr, username, password) {
            Ok(a) => a,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let roster = admin
            .request("cluster metadata", GET_CLUSTER_METADATA_CODE, &[])
            .and_then(|body| {
                ClusterMetadataResponse::decode_from(&body)
                    .map_err(|e| HarnessError::IggyProtocol(format!("cluster metadata reply: {e}")))
            });
        match roster {
            Ok(r)
                if r.nodes
                    .iter()
                    .any(|n| n.role == 0 && n.tcp_port == addr.port()) =>
            {
                return Ok(admin);
            }
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(HarnessError::Timeout {
        waiting_for: "an Iggy node that leads",
        waited: Duration::ZERO,
    }))
}

impl IggyCluster {
    /// Starts `size` nodes of the real server found by [`real::server_binary`] and waits until
    /// they agree on a leader; [`HarnessError::BinaryMissing`] when there is no server binary.
    pub fn start(size: usize) -> Result<IggyCluster, HarnessError> {
        Self::start_with(size, &[])
    }

    /// As [`IggyCluster::start`], with more `IGGY_*` settings for every node (e.g.
    /// `IGGY_HEARTBEAT_INTERVAL`).
    pub fn start_with(size: usize, settings: &[(&str, &str)]) -> Result<IggyCluster, HarnessError> {
        let binary = real::server_binary()?.ok_or_else(|| HarnessError::BinaryMissing {
            binary: "iggy-server".to_owned(),
        })?;
        let dir = tempfile::Builder::new()
            .prefix("spillway-iggy-cluster-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the cluster directory", e))?;
        let config = std::env::var_os("SPILLWAY_IGGY_SERVER_CONFIG")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| {
                let beside = binary.with_file_name("config.toml");
                beside.is_file().then_some(beside)
            });
        let mut ports = Vec::new();
        while ports.len() < size * 2 {
            let p = free_loopback_port()?;
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        let (client_ports, replica_ports) = ports.split_at(size);
        let mut roster: Vec<(String, String)> = vec![
            ("IGGY_CLUSTER_ENABLED".into(), "true".into()),
            ("IGGY_CLUSTER_NAME".into(), "spillway-test".into()),
        ];
        for i in 0..size {
            let key = |k: &str| format!("IGGY_CLUSTER_NODES_{i}_{k}");
            roster.push((key("NAME"), format!("node-{i}")));
            roster.push((key("IP"), "127.0.0.1".into()));
            roster.push((key("REPLICA_ID"), i.to_string()));
            roster.push((key("PORTS_TCP"), client_ports[i].to_string()));
            roster.push((key("PORTS_TCP_REPLICA"), replica_ports[i].to_string()));
        }
        let mut nodes = Vec::new();
        for (i, &port) in client_ports.iter().enumerate() {
            let data = dir.path().join(format!("node-{i}"));
            std::fs::create_dir_all(&data)
                .map_err(|e| HarnessError::io(format!("creating {}", data.display()), e))?;
            let mut process = ServerProcess::new(
                "iggy-server (cluster node)",
                binary.as_os_str().to_owned(),
                [
                    OsString::from("--replica-id"),
                    OsString::from(i.to_string()),
                ],
                dir.path().join(format!("node-{i}.log")),
            )
            .current_dir(&data);
            let envs: [(&str, OsString); 12] = [
                ("IGGY_SYSTEM_PATH", data.clone().into()),
                ("IGGY_TCP_ENABLED", "true".into()),
                (
                    "IGGY_TCP_ADDRESS",
                    SocketAddrV4::new(LOOPBACK, port).to_string().into(),
                ),
                ("IGGY_HTTP_ENABLED", "false".into()),
                ("IGGY_QUIC_ENABLED", "false".into()),
                ("IGGY_WEBSOCKET_ENABLED", "false".into()),
                ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "1".into()),
                ("IGGY_SYSTEM_SHARDING_PIN_CORES", "false".into()),
                ("IGGY_SYSTEM_LOGGING_FILE_ENABLED", "false".into()),
                ("IGGY_ROOT_USERNAME", DEFAULT_CREDENTIALS.0.into()),
                ("IGGY_ROOT_PASSWORD", DEFAULT_CREDENTIALS.1.into()),
                ("NO_COLOR", "1".into()),
            ];
            for (k, v) in envs {
                process = process.env(k, v);
            }
            if let Some(config) = &config {
                process = process.env("IGGY_CONFIG_PATH", config.clone());
            }
            for (k, v) in &roster {
                process = process.env(k, v);
            }
            for (k, v) in settings {
                process = process.env(k, v);
            }
            nodes.push(ClusterNode { process, port });
        }
        let mut cluster = IggyCluster { nodes, _dir: dir };
        // A node dials the peers of higher replica id, once and then every few seconds: the
        // highest starts first, so every dial finds its peer listening (started together,
        // a late dial cost two view changes in the first 10 s).
        for i in (0..size).rev() {
            let addr = cluster.addr(i);
            let node = &mut cluster.nodes[i];
            node.process.spawn()?;
            node.process.wait_until_accepting(addr, START_TIMEOUT)?;
        }
        cluster.wait_for_leader(LEADER_TIMEOUT)?;
        Ok(cluster)
    }

    /// How many nodes it has.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i`'s client address.
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(LOOPBACK, self.nodes[i].port))
    }

    /// Every node's client address, comma-separated (for `iggy.address`).
    pub fn addresses(&self) -> String {
        (0..self.size())
            .map(|i| self.addr(i).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The leader as the running nodes report it: `Some(i)` when a node that answers names
    /// node `i` the leader and node `i` names itself too.
    pub fn leader(&mut self) -> Option<usize> {
        for asked in 0..self.size() {
            if !self.nodes[asked].process.is_running() {
                continue;
            }
            let Ok(roster) = self.roster_of(asked) else {
                continue;
            };
            let Some(port) = roster
                .nodes
                .iter()
                .find(|n| n.role == 0)
                .map(|n| n.tcp_port)
            else {
                continue;
            };
            let Some(i) = self.nodes.iter().position(|n| n.port == port) else {
                continue;
            };
            if i == asked {
                return Some(i);
            }
            if self.nodes[i].process.is_running()
                && let Ok(own) = self.roster_of(i)
                && own.nodes.iter().any(|n| n.role == 0 && n.tcp_port == port)
            {
                return Some(i);
            }
        }
        None
    }

    /// Waits until the nodes agree on a leader; its index.
    pub fn wait_for_leader(&mut self, within: Duration) -> Result<usize, HarnessError> {
        self.wait_for_leader_but(None, within)
    }

    /// Waits for a leader other than `old`; its index.
    pub fn wait_for_new_leader(
        &mut self,
        old: usize,
        within: Duration,
    ) -> Result<usize, HarnessError> {
        self.wait_for_leader_but(Some(old), within)
    }

    fn wait_for_leader_but(
        &mut self,
        old: Option<usize>,
        within: Duration,
    ) -> Result<usize, HarnessError> {
        let until = Instant::now() + within;
        loop {
            if let Some(i) = self.leader().filter(|&i| Some(i) != old) {
                return Ok(i);
            }
            if Instant::now() > until {
                return Err(HarnessError::Timeout {
                    waiting_for: if old.is_some() {
                        "another Iggy node to lead"
                    } else {
                        "the Iggy cluster to agree on a leader"
                    },
                    waited: within,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The roster node `i` reports (the wire reply, roles as numbers).
    pub fn roster_of(&self, i: usize) -> Result<ClusterMetadataResponse, HarnessError> {
        let mut admin =
            IggyAdmin::connect(self.addr(i), DEFAULT_CREDENTIALS.0, DEFAULT_CREDENTIALS.1)?;
        let body = admin.request("cluster metadata", GET_CLUSTER_METADATA_CODE, &[])?;
        ClusterMetadataResponse::decode_from(&body)
            .map_err(|e| HarnessError::IggyProtocol(format!("cluster metadata reply: {e}")))
    }

    /// Every node's client address.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        (0..self.size()).map(|i| self.addr(i)).collect()
    }

    /// An admin connection to the current leader (waiting for one).
    pub fn admin(&mut self) -> Result<IggyAdmin, HarnessError> {
        let i = self.wait_for_leader(LEADER_TIMEOUT)?;
        IggyAdmin::connect(self.addr(i), DEFAULT_CREDENTIALS.0, DEFAULT_CREDENTIALS.1)
    }

    /// Waits until node `i` (a follower, restarted say) is in step with the leader: a stream
    /// created on the leader now is listed by node `i` (followers answer reads from their own
    /// copy), and every partition of `stream`/`topic` holds on node `i` at least the messages
    /// it held on the leader when the wait began. A node that is not in step within `within`
    /// is killed and started again, twice at most: seen on 0.9.0-edge.5, a restarted node whose
    /// metadata catch-up found no snapshot to transfer could stay out of the metadata plane,
    /// and the next kill then left no quorum. Returns how many restarts that took.
    pub fn wait_in_step(
        &mut self,
        i: usize,
        stream: &str,
        topic: &str,
        within: Duration,
    ) -> Result<u32, HarnessError> {
        let mut restarts = 0;
        loop {
            let mut admin = self.admin()?;
            let probe = format!("in-step-{:x}", fastrand_u32());
            admin.create_stream(&probe)?;
            let heads = admin.partition_heads(stream, topic)?;
            let until = Instant::now() + within;
            let in_step = loop {
                let seen =
                    IggyAdmin::connect(self.addr(i), DEFAULT_CREDENTIALS.0, DEFAULT_CREDENTIALS.1)
                        .and_then(|mut a| {
                            let listed = a.stream_exists(&probe)?;
                            let own = a.partition_heads(stream, topic)?;
                            let caught_up = heads.iter().all(|(p, _, count)| {
                                own.iter().any(|(q, _, c)| q == p && c >= count)
                            });
                            Ok(listed && caught_up)
                        });
                if matches!(seen, Ok(true)) {
                    break true;
                }
                if Instant::now() > until {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let _ = admin.delete_stream(&probe);
            if in_step {
                return Ok(restarts);
            }
            if restarts == 2 {
                return Err(HarnessError::Timeout {
                    waiting_for: "a restarted Iggy node to be in step with the leader",
                    waited: within,
                });
            }
            restarts += 1;
            self.kill(i)?;
            self.restart(i)?;
        }
    }

    /// Kills node `i` (SIGKILL, a crash).
    pub fn kill(&mut self, i: usize) -> Result<(), HarnessError> {
        self.nodes[i].process.stop()
    }

    /// Starts node `i` again on its data and ports.
    pub fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        let addr = self.addr(i);
        let node = &mut self.nodes[i];
        node.process.spawn()?;
        node.process.wait_until_accepting(addr, START_TIMEOUT)
    }

    /// Kills every node (SIGKILL) and starts them all again on their data, the highest replica
    /// id first as at the start; waits for a leader.
    pub fn restart_all(&mut self) -> Result<(), HarnessError> {
        for i in 0..self.size() {
            self.kill(i)?;
        }
        for i in (0..self.size()).rev() {
            self.restart(i)?;
        }
        self.wait_for_leader(LEADER_TIMEOUT).map(|_| ())
    }

    /// Node `i`'s process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].process.pid()
    }

    /// Every node's whole log, one after the other.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("--- node {i}\n{}", n.process.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The last lines of every node's log.
    pub fn log_tails(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let log = n.process.log();
                let tail: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.contains("partitions.diag") && !l.trim().is_empty())
                    .collect();
                let from = tail.len().saturating_sub(lines);
                format!("--- node {i}\n{}", tail[from..].join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
