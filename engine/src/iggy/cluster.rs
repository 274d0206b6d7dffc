//! Iggy clusters: the roster a node reports (`GET_CLUSTER_METADATA`, code 12) and finding the
//! node to talk to.
//!
//! A replicated Iggy server (Viewstamped Replication) has one leader; followers answer logins,
//! polls and offset reads from their own copy, which can be behind, and refuse every write with
//! 58 (`TransientNotAccepted`). Spillway therefore talks to the leader for everything: after
//! each login it reads the roster, and when the node it reached is not the leader it dials the
//! leader the roster names. When the leader goes (the connection breaks, or a request is refused
//! with 58 past [`super::conn::CLUSTER_RESENDS`] resends), the next connect asks the nodes it
//! knows, the last leader first, then the roster, then the configured addresses, for the new
//! one. A server that runs alone reports no roster, and is talked to as it is.

use std::fmt::Write as _;

use iggy_binary_protocol::responses::system::ClusterMetadataResponse;

use super::client::{Credentials, IggyClient};
use super::conn::Endpoint;
use super::error::IggyError;
use super::proto::Identity;

/// A node's role as the roster gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Takes writes (role 0 on the wire).
    Leader,
    /// Serves reads from its copy, refuses writes (role 1).
    Follower,
    /// A role this build does not know.
    Other(u8),
}

impl Role {
    fn from_wire(role: u8) -> Role {
        match role {
            0 => Role::Leader,
            1 => Role::Follower,
            other => Role::Other(other),
        }
    }
}

/// One node of the roster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name in the cluster config.
    pub name: String,
    /// `host:port` of its TCP listener, as clients are told to reach it.
    pub address: String,
    /// Its role.
    pub role: Role,
    /// Its status as the answering node sees it (0: healthy).
    pub status: u8,
}

/// The cluster as one node describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    /// The cluster's name.
    pub name: String,
    /// Its nodes.
    pub nodes: Vec<Node>,
}

impl Roster {
    /// The roster of a reply; `None` when it lists one node or none: a server that runs alone
    /// (0.9.0-edge.5 reports itself as the leader of a one-node cluster "single-node", with
    /// whatever address its config gives, which a client behind NAT may not reach) is talked
    /// to where it was found.
    pub fn from_reply(reply: ClusterMetadataResponse) -> Option<Roster> {
        if reply.nodes.len() < 2 {
            return None;
        }
        Some(Roster {
            name: reply.name,
            nodes: reply
                .nodes
                .into_iter()
                .map(|n| Node {
                    address: host_port(&n.ip, n.tcp_port),
                    name: n.name,
                    role: Role::from_wire(n.role),
                    status: n.status,
                })
                .collect(),
        })
    }

    /// The node that leads, when one does (none during an election).
    pub fn leader(&self) -> Option<&Node> {
        self.nodes.iter().find(|n| n.role == Role::Leader)
    }

    /// One line for a person: `cluster "c": n1 127.0.0.1:8090 leader, n2 ... follower`.
    pub fn describe(&self) -> String {
        let mut out = format!("cluster {:?}:", self.name);
        for (i, n) in self.nodes.iter().enumerate() {
            let role = match n.role {
                Role::Leader => "leader".to_owned(),
                Role::Follower => "follower".to_owned(),
                Role::Other(r) => format!("role {r}"),
            };
            let sep = if i == 0 { " " } else { ", " };
            let _ = write!(out, "{sep}{} {} {role}", n.name, n.address);
            if n.status != 0 {
                let _ = write!(out, " (status {})", n.status);
            }
        }
        out
    }
}

fn host_port(ip: &str, port: u16) -> String {
    if ip.contains(':') && !ip.starts_with('[') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// Finds the node to talk to and remembers what it learnt for the next time.
#[derive(Debug, Clone)]
pub struct Finder {
    seeds: Vec<String>,
    /// The roster's addresses, as last read.
    known: Vec<String>,
    /// The node talked to last (the leader, or the lone server).
    current: Option<String>,
    roster: Option<Roster>,
    /// The client id every connection logs in with once a cluster was seen: the first
    /// connection's. A consumer group keeps its members by client id, and the new leader's
    /// group still lists the member this client was; a reconnect under a new id would be a
    /// second member, and the partitions dealt to the first (whose session is gone) would never
    /// be read again. A lone server gets a fresh id per connection, as before.
    client: Option<Identity>,
}

impl Finder {
    /// A finder that starts from the configured addresses.
    pub fn new(seeds: Vec<String>) -> Finder {
        Finder {
            seeds,
            known: Vec::new(),
            current: None,
            roster: None,
            client: None,
        }
    }

    /// The roster last read (`None`: a lone server, or none reached yet).
    pub fn roster(&self) -> Option<&Roster> {
        self.roster.as_ref()
    }

    /// The node talked to last.
    pub fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// Takes a new client identity at the next connect: the server evicted this one (its
    /// session is over), or took its requests for ones already applied (59).
    pub fn forget_client(&mut self) {
        self.client = None;
    }

    /// Where to look, in order: the node talked to last, the roster, the configured addresses.
    fn candidates(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for a in self
            .current
            .iter()
            .chain(self.known.iter())
            .chain(self.seeds.iter())
        {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }

    /// Connects and logs in to the node to talk to: the server itself when it runs alone, a
    /// cluster's leader otherwise. A failure that no other node would change (credentials, a
    /// protocol the server does not speak) is returned at once; when no node could be reached
    /// or none names a reachable leader, the error is transient (an election, a node down).
    pub async fn connect(
        &mut self,
        endpoint: &Endpoint,
        creds: &Credentials,
    ) -> Result<IggyClient, IggyError> {
        let mut problems: Vec<String> = Vec::new();
        for address in self.candidates() {
            match self.try_node(endpoint, &address, creds).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(why)) => problems.push(format!("{address}: {why}")),
                Err(e) if e.is_transient() => problems.push(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        Err(IggyError::NoLeader(problems.join("; ")))
    }

    /// `Ok(Ok(client))` on the node to use, `Ok(Err(why))` when this node reached no leader.
    async fn try_node(
        &mut self,
        endpoint: &Endpoint,
        address: &str,
        creds: &Credentials,
    ) -> Result<Result<IggyClient, String>, IggyError> {
        let mut client = IggyClient::connect(endpoint, address, self.client.clone(), creds).await?;
        let Some(roster) = client.cluster_metadata().await? else {
            self.settle(address, None);
            return Ok(Ok(client));
        };
        client.set_clustered(true);
        if self.client.is_none() {
            self.client = Some(client.identity());
        }
        self.known = roster.nodes.iter().map(|n| n.address.clone()).collect();
        let Some(leader) = roster.leader().map(|n| n.address.clone()) else {
            let why = format!("no leader in {} (an election?)", roster.describe());
            self.roster = Some(roster);
            return Ok(Err(why));
        };
        if leader == address {
            self.settle(address, Some(roster));
            return Ok(Ok(client));
        }
        drop(client);
        // The leader the roster names must call itself leader too: a node that missed a view
        // change may name the old one.
        let mut client = IggyClient::connect(endpoint, &leader, self.client.clone(), creds).await?;
        let Some(seen) = client.cluster_metadata().await? else {
            return Ok(Err(format!("{leader} named as leader runs alone")));
        };
        client.set_clustered(true);
        if seen.leader().map(|n| n.address.as_str()) != Some(leader.as_str()) {
            return Ok(Err(format!(
                "{leader} was named leader by {address} but does not lead ({})",
                seen.describe()
            )));
        }
        self.settle(&leader, Some(seen));
        Ok(Ok(client))
    }

    fn settle(&mut self, address: &str, roster: Option<Roster>) {
        if let Some(r) = &roster
            && self.current.as_deref() != Some(address)
        {
            tracing::info!("talking to the Iggy leader at {address} ({})", r.describe());
        }
        if let Some(r) = &roster {
            self.known = r.nodes.iter().map(|n| n.address.clone()).collect();
        }
        self.current = Some(address.to_owned());
        self.roster = roster;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_binary_protocol::responses::system::ClusterNodeResponse;

    fn node(name: &str, port: u16, role: u8) -> ClusterNodeResponse {
        ClusterNodeResponse {
            name: name.to_owned(),
            ip: "127.0.0.1".to_owned(),
            tcp_port: port,
            quic_port: 0,
            http_port: 0,
            websocket_port: 0,
            role,
            status: 0,
        }
    }

    #[test]
    fn a_roster_names_its_leader_and_reads_as_one_line() {
        let reply = ClusterMetadataResponse {
            name: "c".to_owned(),
            nodes: vec![node("a", 1, 1), node("b", 2, 0), node("c", 3, 7)],
        };
        let Some(roster) = Roster::from_reply(reply) else {
            panic!("a roster of three nodes");
        };
        assert_eq!(
            roster.leader().map(|n| n.address.as_str()),
            Some("127.0.0.1:2")
        );
        assert_eq!(
            roster.describe(),
            "cluster \"c\": a 127.0.0.1:1 follower, b 127.0.0.1:2 leader, c 127.0.0.1:3 role 7"
        );
        for nodes in [Vec::new(), vec![node("alone", 9, 0)]] {
            let lone = ClusterMetadataResponse {
                name: "single-node".to_owned(),
                nodes,
            };
            assert!(Roster::from_reply(lone).is_none());
        }
        assert_eq!(host_port("::1", 5), "[::1]:5");
    }

    #[test]
    fn candidates_go_last_node_roster_then_seeds_without_repeats() {
        let mut f = Finder::new(vec!["s:1".into(), "b:2".into()]);
        assert_eq!(f.candidates(), vec!["s:1", "b:2"]);
        f.known = vec!["a:1".into(), "b:2".into()];
        f.current = Some("b:2".into());
        assert_eq!(f.candidates(), vec!["b:2", "a:1", "s:1"]);
    }
}
