//! Daemon errors: one line each, naming the cause.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Key(#[from] pmig_proto::KeyError),
    #[error("cannot reach the pmig daemon of this node (abstract socket @{name} in this network namespace): {source}; is `pmig daemon` running here?")]
    NoDaemon {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("the daemon sent a bad reply: {0}")]
    BadReply(String),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = DaemonError> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}
