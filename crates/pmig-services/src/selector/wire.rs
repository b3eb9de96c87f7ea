//! The selector's messages. On the node-to-node channel each one is the
//! postcard-encoded attachment of `Msg::Service { service: SELECTOR }`; on the
//! local control socket (a `"hosts"` session) the same enum travels as JSON, one
//! message per line. Variant indices are wire format: append only.

use crate::Peer;
use serde::{Deserialize, Serialize};

/// Version of these messages, carried by [`SelMsg::Hello`].
pub const VERSION: u16 = 1;
/// Most hosts asked for in one request.
pub const MAX_COUNT: u32 = 1024;

/// Sprite's application classes: at most one application of each class on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Short, high-priority work (compilations).
    Short,
    /// Long-running work (simulations).
    Long,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Short => "short",
            Class::Long => "long",
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Class {
    type Err = String;
    fn from_str(s: &str) -> Result<Class, String> {
        match s {
            "short" => Ok(Class::Short),
            "long" => Ok(Class::Long),
            _ => Err(format!("unknown class `{s}` (short or long)")),
        }
    }
}

/// Who opens a selector connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A daemon reporting its node's state every interval.
    Reporter { node: String },
    /// A client (one application session) requesting and returning hosts.
    Client { label: String },
    /// "Are you alive, and are you the selector?" Answered by `Welcome` or
    /// `Redirect`, then closed.
    Probe,
    /// An order for this node's daemon (any node, not only the selector).
    Admin { order: Order },
}

/// Orders for a node's daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// The owner is active now (`pmig owner active`).
    OwnerActive,
    /// Evict the foreign processes (`pmig evict`).
    Evict,
}

/// One node's state as its daemon measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub node: String,
    /// `ADDR:PORT` of its daemon.
    pub addr: String,
    /// Runnable processes averaged over the last minute.
    pub load: f32,
    /// Time since the last owner activity, in ms; `None`: none seen.
    pub owner_idle_ms: Option<u64>,
    /// How long the node has been idle (load and owner thresholds both met), in
    /// ms; `None`: not idle.
    pub idle_for_ms: Option<u64>,
    /// The owner was active within the owner-idle threshold.
    pub owner_active: bool,
    /// Whether the node takes foreign work at all.
    pub accepts: bool,
}

/// One row of `pmig hosts status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRow {
    pub node: String,
    pub addr: String,
    /// `idle`, `busy` (load), `owner` (owner active), `refuses` or `lost` (no recent report).
    pub state: String,
    pub load: f32,
    pub owner_idle_ms: Option<u64>,
    pub idle_for_ms: Option<u64>,
    /// Age of the last report, in ms.
    pub report_age_ms: u64,
    /// (class, client label) of every allocation of this host.
    pub held: Vec<(Class, String)>,
}

/// Why a host was taken back from its holder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevokeReason {
    /// Given to a client that held none (Sprite's fairness).
    Fairness { to: String },
    /// Its owner became active: its foreign processes are being evicted.
    OwnerActive,
    /// Its daemon stopped reporting.
    Lost,
    /// The selector changed (failover or hand-over) and the host could not be
    /// claimed again.
    SelectorChanged,
}

impl std::fmt::Display for RevokeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RevokeReason::Fairness { to } => write!(f, "reclaimed for {to} (fairness)"),
            RevokeReason::OwnerActive => f.write_str("its owner is active"),
            RevokeReason::Lost => f.write_str("its daemon stopped reporting"),
            RevokeReason::SelectorChanged => f.write_str("the selector changed"),
        }
    }
}

/// The selector's messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelMsg {
    /// 0, first message of every connection.
    Hello { version: u16, role: Role },
    /// 1, the selector accepts the connection (`selector`: its node name).
    Welcome { selector: String },
    /// 2, this daemon is not the selector; `to` is, as far as it knows.
    Redirect { to: Option<Peer> },
    /// 3, reporter → selector, every interval.
    Report(Report),
    /// 4, selector → reporter.
    ReportAck,
    /// 5, client → selector: `count` hosts of `class`, none of `exclude`.
    Request {
        id: u64,
        class: Class,
        count: u32,
        exclude: Vec<String>,
    },
    /// 6, some hosts (at least one, at most `count`), longest-idle first.
    Granted { id: u64, hosts: Vec<Peer> },
    /// 7, no host could be given.
    Denied { id: u64, reason: String },
    /// 8, client → selector: return these hosts (empty: all).
    Release { id: u64, hosts: Vec<String> },
    /// 9, how many allocations were returned.
    Released { id: u64, count: u32 },
    /// 10, selector → client, at any time: a host is taken back.
    Revoked {
        host: String,
        class: Class,
        reason: RevokeReason,
    },
    /// 11, client → selector: the table, please.
    Status { id: u64 },
    /// 12
    Table { id: u64, rows: Vec<HostRow> },
    /// 13, client → selector after a failover: these hosts were mine; keep
    /// them mine if they are still free and idle. Answered by `Granted` (maybe
    /// with no hosts).
    Claim {
        id: u64,
        class: Class,
        hosts: Vec<String>,
    },
    /// 14, answer to an `Admin` order.
    Done { text: String },
    /// 15, a request that could not be served (one line).
    Failed { id: u64, text: String },
}

impl SelMsg {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }

    pub fn decode(b: &[u8]) -> Result<SelMsg, String> {
        postcard::from_bytes(b).map_err(|e| format!("malformed selector message: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_postcard_and_json() {
        let m = SelMsg::Request {
            id: 7,
            class: Class::Long,
            count: 3,
            exclude: vec!["n1".into()],
        };
        assert_eq!(SelMsg::decode(&m.encode()).unwrap(), m);
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<SelMsg>(&j).unwrap(), m);
        assert!(SelMsg::decode(&[200, 1, 2]).is_err());
        assert_eq!("short".parse::<Class>().unwrap(), Class::Short);
        assert!("medium".parse::<Class>().is_err());
    }
}
