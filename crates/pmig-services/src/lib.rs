//! Cluster services of the node daemon, each behind `Msg::Service` on the
//! node-to-node protocol (see `docs/protocol.md`, "Cluster services") and its
//! own requests on the local control socket.
//!
//! * [`exec`]: remote execution with a home node (`pmig run`, `pmig ps`, `pmig kill`).
//! * [`selector`]: host selection (Sprite's central migration server), with failover.
//! * [`balance`]: eviction and load balancing: messages, reports and the
//!   balancing policy (the daemon moves the processes).
//!
//! Each service encodes its own messages (postcard) into the attachment of
//! `Msg::Service { service }` and versions them itself.

pub mod balance;
pub mod exec;
pub mod selector;

/// A node of the cluster as the daemon knows it (`pmig daemon --peer NAME=ADDR:PORT`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Peer {
    pub name: String,
    /// `ADDR:PORT` of its daemon.
    pub addr: String,
}

impl Peer {
    /// Parses `NAME=ADDR:PORT`.
    pub fn parse(s: &str) -> Result<Peer, String> {
        let (name, addr) = s
            .split_once('=')
            .ok_or_else(|| format!("peer `{s}` is not NAME=ADDR:PORT"))?;
        if name.is_empty() || name.len() > pmig_proto::MAX_NODE_NAME {
            return Err(format!("peer `{s}`: bad node name"));
        }
        addr.parse::<std::net::SocketAddr>()
            .map_err(|e| format!("peer `{s}`: bad address: {e}"))?;
        Ok(Peer {
            name: name.into(),
            addr: addr.into(),
        })
    }

    /// The node called `name` among `peers`, or one line saying it is not
    /// one of them and which are.
    pub fn by_name<'a>(peers: &'a [Peer], name: &str) -> Result<&'a Peer, String> {
        peers.iter().find(|p| p.name == name).ok_or_else(|| {
            let known: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
            format!(
                "unknown node `{name}` (this daemon knows: {})",
                if known.is_empty() {
                    "none; start it with --peer NAME=ADDR:PORT".to_string()
                } else {
                    known.join(", ")
                }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_peer() {
        let p = Peer::parse("n2=10.77.0.2:7070").unwrap();
        assert_eq!(p.name, "n2");
        assert_eq!(p.addr, "10.77.0.2:7070");
        assert!(Peer::parse("n2").is_err());
        assert!(Peer::parse("=10.0.0.1:1").is_err());
        assert!(Peer::parse("n2=nowhere").is_err());
    }
}
