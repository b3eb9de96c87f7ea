//! Errors of a migration. Every variant renders as one line naming the cause.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    #[error("unknown strategy `{name}`; use one of: {all}")]
    UnknownStrategy { name: String, all: String },
    #[error("strategy `{0}` is not implemented yet (implemented: {1})")]
    NotImplemented(String, String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Proto(#[from] pmig_proto::ProtoError),
    #[error(transparent)]
    Engine(#[from] pmig_engine::EngineError),
    #[error(transparent)]
    Image(#[from] pmig_image::ImageError),
    /// The peer answered with `Error` or `Abort`.
    #[error("{node} {}: {text}", answer(*code))]
    Refused {
        node: String,
        code: u32,
        text: String,
    },
    /// The peer broke the protocol.
    #[error("protocol error with {node}: {what}")]
    Protocol { node: String, what: String },
    /// Not allowed (permissions, policy).
    #[error("{0}")]
    Denied(String),
    /// An error with what was being done when it happened.
    #[error("{what}: {source}")]
    During {
        what: String,
        #[source]
        source: Box<StrategyError>,
    },
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = StrategyError> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> StrategyError {
    let what = what.into();
    move |source| StrategyError::Io { what, source }
}

/// How a peer's `Error` reads, by its code: a destination that failed to
/// restore did not refuse anything.
fn answer(code: u32) -> &'static str {
    use pmig_proto::code;
    match code {
        code::RESTORE_FAILED => "could not restore the process",
        code::BAD_IMAGE => "rejected the image",
        code::INTERNAL => "failed",
        _ => "refused",
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    #[test]
    fn a_failed_restore_does_not_read_as_a_refusal() {
        let e = |code| {
            StrategyError::Refused {
                node: "n2".into(),
                code,
                text: "why".into(),
            }
            .to_string()
        };
        assert_eq!(
            e(pmig_proto::code::RESTORE_FAILED),
            "n2 could not restore the process: why"
        );
        assert_eq!(e(pmig_proto::code::BAD_IMAGE), "n2 rejected the image: why");
        assert_eq!(e(pmig_proto::code::MIGRATION_REFUSED), "n2 refused: why");
    }
}
