//! The local control socket: an abstract unix socket (`@pmig-control`), one per
//! network namespace, so a CLI run inside node nK reaches nK's daemon.
//!
//! Protocol: the client sends one JSON request on one line (at most
//! [`MAX_REQUEST`] bytes); the daemon answers with JSON events, one per line, the
//! last being `done`, `pong` or `error`. The caller's identity is taken from
//! `SO_PEERCRED`, never from the request.

use crate::error::{DaemonError, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

/// Default abstract name of the control socket.
pub const CONTROL_NAME: &str = "pmig-control";
/// Longest request line.
pub const MAX_REQUEST: usize = 64 << 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Is the daemon there? Answered by `pong`.
    Ping,
    /// Migrate a process of this node.
    Migrate(MigrateRequest),
    /// Start a job on another node with this node as its home (`pmig run`): answered
    /// by `started` (then the connection carries exec frames, §7) or `error`.
    Run(pmig_services::exec::RunRequest),
    /// The cluster's jobs (`pmig ps`): answered by `jobs`.
    Ps,
    /// Signal a job wherever it runs (`pmig kill`): answered by `killed` or `error`.
    Kill(KillRequest),
    /// Open a host selection session: the connection stays open and carries
    /// `pmig_services::selector::wire::SelMsg`s as JSON lines both ways
    /// (docs/protocol.md §8.1); the hosts come back when it closes.
    Hosts,
    /// The selector's table (answered by `hosts`).
    HostsStatus,
    /// The owner of `node` (default: this one) is active now: not idle for the
    /// owner threshold, foreign processes evicted. Answered by `ok`.
    OwnerActive {
        #[serde(default)]
        node: Option<String>,
    },
    /// Evict the foreign processes of `node` (default: this one); root only.
    /// Answered by `evicted` once every process has moved or failed.
    Evict {
        #[serde(default)]
        node: Option<String>,
    },
    /// The load balancer's recent decisions and the evictions of every node
    /// (answered by `balance`).
    BalanceStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    /// Job id, `<home node>:<n>`.
    pub job: String,
    /// Signal number.
    pub signal: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrateRequest {
    pub pid: i32,
    /// The destination daemon: `ADDR:PORT` (or `HOST:PORT`), or the name of
    /// a node this daemon knows (`--peer NAME=ADDR:PORT`).
    pub to: String,
    /// The destination's node name, if known (for reports).
    #[serde(default)]
    pub to_name: Option<String>,
    pub strategy: String,
    /// Longest wait for any single answer from the destination, in seconds.
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Pre-copy strategies: most reruns after the initial round (default 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
    /// Pre-copy strategies: stop rerunning once a round leaves at most this
    /// fraction of the address space dirty (default 0.30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_dirty_fraction: Option<f64>,
    /// pre-copy: the down-time budget of `--max-down-ms` (default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_down_ms: Option<f64>,
    /// flushing, freeze-free: the page store directory (default
    /// [`pmig_strategies::DEFAULT_PAGE_STORE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_store: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum Event {
    Pong {
        node: String,
        version: String,
    },
    Progress {
        phase: String,
        done: u64,
        total: u64,
    },
    Done {
        outcome: Box<pmig_strategies::Outcome>,
    },
    Error {
        message: String,
    },
    /// `run`: the job runs; exec frames follow on this connection.
    Started {
        job: String,
        node: String,
        pid: i32,
    },
    /// `ps`: every job, and the nodes that did not answer.
    Jobs {
        jobs: Vec<pmig_services::exec::JobInfo>,
        unreachable: Vec<String>,
    },
    /// The selector's table, from `selector`.
    Hosts {
        selector: String,
        rows: Vec<pmig_services::selector::HostRow>,
    },
    /// A request that needs no more than a line in answer.
    Ok {
        message: String,
    },
    /// `kill`: the job was signalled on `node`.
    Killed {
        job: String,
        node: String,
    },
    /// `evict`: what moved where, and how long each move took.
    Evicted {
        report: pmig_services::balance::EvictReport,
    },
    /// `balance_status`: every node's decisions and evictions.
    Balance {
        nodes: Vec<pmig_services::balance::NodeDecisions>,
        unreachable: Vec<String>,
    },
}

pub fn address(name: &str) -> Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| DaemonError::Invalid(format!("bad control socket name {name:?}: {e}")))
}

/// Sends `req` to the daemon of this network namespace and returns its final event;
/// `on_event` sees every progress event.
pub fn request(name: &str, req: &Request, mut on_event: impl FnMut(&Event)) -> Result<Event> {
    let s = UnixStream::connect_addr(&address(name)?).map_err(|source| DaemonError::NoDaemon {
        name: name.into(),
        source,
    })?;
    let mut line = serde_json::to_vec(req).map_err(|e| DaemonError::Invalid(e.to_string()))?;
    line.push(b'\n');
    (&s).write_all(&line)
        .map_err(crate::error::io_err("send the request to the daemon"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(24 * 3600)));
    let mut r = BufReader::new(&s);
    for _ in 0..u32::MAX {
        let mut l = String::new();
        let n = r
            .read_line(&mut l)
            .map_err(crate::error::io_err("read the daemon's answer"))?;
        if n == 0 {
            return Err(DaemonError::BadReply(
                "the daemon closed the connection without an answer (see its log)".into(),
            ));
        }
        let ev: Event = serde_json::from_str(l.trim())
            .map_err(|e| DaemonError::BadReply(format!("{e}: {:?}", l.trim())))?;
        match ev {
            Event::Progress { .. } => on_event(&ev),
            ev => return Ok(ev),
        }
    }
    Err(DaemonError::BadReply("endless answer".into()))
}
