//! Host selection: Sprite's central migration server, with failover (issue 5).
//!
//! * [`measure`]: what each daemon measures (load, owner activity) and when its
//!   node counts as idle.
//! * [`table`]: the selector's allocation policy, pure (longest idle first, one
//!   application per class per host, fairness, release on close).
//! * [`node`]: the service inside every daemon: reporting to the selector,
//!   serving the role when this daemon is the first reachable peer, handing it
//!   over, local client sessions, owner activity and the eviction hook.
//! * [`client`]: the API for `pmig hosts`, `pmig run --idle` and pmake.
//! * [`wire`]: the messages (`docs/protocol.md` §8.1).
//! * [`bench`]: `pmig bench selector`.

pub mod bench;
pub mod client;
pub mod measure;
pub mod node;
pub mod table;
pub mod wire;

pub use client::{Client, Revoked, CONTROL_NAME};
pub use measure::{LoadSource, Settings};
pub use node::{ChannelEvictions, EvictionHandler, LogEvictions, NodeEvent, Selector};
pub use wire::{Class, HostRow, Order, RevokeReason};

/// Host selection errors: one line each.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    #[error(transparent)]
    Proto(#[from] pmig_proto::ProtoError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// No host could be given (the selector's reason).
    #[error("no host: {0}")]
    Denied(String),
    #[error("no selector reachable: {0}")]
    NoSelector(String),
    #[error("the selector said: {0}")]
    Remote(String),
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(String),
}
