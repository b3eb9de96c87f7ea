//! Engine errors. Every variant renders as one line that names the cause.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("process {0} does not exist")]
    NoProcess(i32),
    #[error("cannot migrate process {pid}: {what} is not supported yet")]
    Unsupported { pid: i32, what: String },
    /// A state that usually passes in a moment (an event not yet read, a
    /// file lock held): the process runs on, and a later try may succeed.
    #[error("cannot migrate process {pid} now: {what}; it may pass, try again")]
    Busy { pid: i32, what: String },
    #[error("{what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Image(#[from] pmig_image::ImageError),
    #[error("image cannot be restored here: {0}")]
    Incompatible(String),
    #[error("restore failed at step {step} ({what}): {err}")]
    RestoreStep {
        step: u64,
        what: String,
        err: io::Error,
    },
    #[error("restore failed: {0}")]
    Restore(String),
    /// A skeleton (see `skeleton`) cannot be brought up to the capture of
    /// the stop: the process changed in a way it cannot follow. It is
    /// killed; the process is restored from that capture instead.
    #[error("the skeleton is out of date: {0}")]
    Stale(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T> = std::result::Result<T, EngineError>;

/// Attach context to an io::Error.
pub trait Ctx<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Ctx<T> for io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| EngineError::Sys {
            what: what(),
            source,
        })
    }
}

impl<T> Ctx<T> for nix::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| EngineError::Sys {
            what: what(),
            source: io::Error::from_raw_os_error(e as i32),
        })
    }
}

pub fn errno_err(what: impl Into<String>) -> EngineError {
    EngineError::Sys {
        what: what.into(),
        source: io::Error::last_os_error(),
    }
}

/// A refusal for a state that usually passes in a moment (see
/// [`EngineError::Busy`]).
pub fn busy(pid: i32, what: impl Into<String>) -> EngineError {
    EngineError::Busy {
        pid,
        what: what.into(),
    }
}

/// A skeleton that cannot follow a change (see [`EngineError::Stale`]).
pub fn stale(what: impl Into<String>) -> EngineError {
    EngineError::Stale(what.into())
}

pub fn unsupported(pid: i32, what: impl Into<String>) -> EngineError {
    EngineError::Unsupported {
        pid,
        what: what.into(),
    }
}
