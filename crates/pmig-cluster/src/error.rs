use std::io;
use std::path::PathBuf;

/// Errors of the test cluster. Each renders as one line naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A command ran and failed.
    #[error("command `{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    /// A command could not be started at all.
    #[error("cannot run `{cmd}`: {source}{hint}")]
    Spawn {
        cmd: String,
        source: io::Error,
        hint: &'static str,
    },
    #[error("the local test cluster needs root (it creates network namespaces); run it as root")]
    NotRoot,
    #[error("cluster `{prefix}` is already up (network namespace {netns} exists); run `pmig cluster down` first")]
    AlreadyUp { prefix: String, netns: String },
    #[error("cluster `{prefix}` is not up (no state file {})", path.display())]
    NotUp { prefix: String, path: PathBuf },
    #[error("unknown node `{node}`; this cluster has {available}")]
    UnknownNode { node: String, available: String },
    #[error("invalid option: {0}")]
    Invalid(String),
    #[error("state file {}: {reason}", path.display())]
    State { path: PathBuf, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("daemon on node {node} did not come up: {reason} (log: {})", log.display())]
    Daemon {
        node: String,
        reason: String,
        log: PathBuf,
    },
    #[error(transparent)]
    Key(#[from] pmig_proto::KeyError),
}

impl ClusterError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        ClusterError::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T, E = ClusterError> = std::result::Result<T, E>;
