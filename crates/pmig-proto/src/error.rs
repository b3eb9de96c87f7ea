//! Error types of the protocol layer.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while reading or writing the cluster key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key file {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write key file {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("key file {} already exists; refusing to overwrite it", path.display())]
    Exists { path: PathBuf },
    #[error("key file {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "key file {} is accessible by group or others (mode {mode:04o}); run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error(
        "key file {}: expected 64 hex characters (32 bytes) and an optional newline, found {found} characters",
        path.display()
    )]
    Length { path: PathBuf, found: usize },
    #[error(
        "key file {}: invalid character {ch:?} at position {pos}; expected a hex digit",
        path.display()
    )]
    Format { path: PathBuf, ch: char, pos: usize },
    #[error("cannot obtain random bytes from the kernel: {0}")]
    Random(io::Error),
}

/// Errors of the transport, the handshake, version negotiation and message decoding.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// An I/O error, with what we were doing at the time.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The peer closed the connection (cleanly, between frames).
    #[error("connection to {peer} closed by the peer")]
    Closed { peer: String },
    /// The connection ended in the middle of a record or a frame.
    #[error("connection to {peer} closed in the middle of {what}")]
    Truncated { peer: String, what: &'static str },
    /// The peer does not hold our cluster key (detected by the responder).
    #[error("authentication of {peer} failed: the peer does not use this cluster's key")]
    AuthFailed { peer: String },
    /// The handshake could not complete; `reason` says why.
    #[error("handshake with {peer} failed: {reason}")]
    Handshake { peer: String, reason: String },
    /// The peer speaks a protocol version we cannot talk to.
    #[error("peer {peer} speaks protocol version {peer_version}, this node speaks {our_version} (peer accepts {peer_min}..={peer_version}, this node accepts {our_min}..={our_version})")]
    VersionMismatch {
        peer: String,
        peer_version: u16,
        peer_min: u16,
        our_version: u16,
        our_min: u16,
    },
    /// The peer sent an `Error` message instead of what we expected.
    #[error("peer {peer} reported an error (code {code}): {text}")]
    Remote {
        peer: String,
        code: u32,
        text: String,
    },
    /// The peer sent a well-formed message at the wrong time.
    #[error("unexpected message from {peer}: expected {expected}, got {got}")]
    Unexpected {
        peer: String,
        expected: &'static str,
        got: String,
    },
    /// A record failed authentication after the handshake (tampering or corruption).
    #[error("record {nonce} from {peer} failed authentication (corrupted or forged data)")]
    Decrypt { peer: String, nonce: u64 },
    /// A frame or record does not follow the wire format.
    #[error("malformed data from {peer}: {reason}")]
    BadFrame { peer: String, reason: String },
    /// A message could not be decoded.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A message or frame exceeds the configured maximum size.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: u64, max: usize },
    /// The Noise library refused an operation (should not happen with valid parameters).
    #[error("noise: {0}")]
    Noise(String),
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl ProtoError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        ProtoError::Io {
            what: what.into(),
            source,
        }
    }

    /// True if the error means the connection is gone (closed, truncated, reset, timed out).
    pub fn is_disconnect(&self) -> bool {
        match self {
            ProtoError::Closed { .. } | ProtoError::Truncated { .. } => true,
            ProtoError::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }
}

pub type Result<T, E = ProtoError> = std::result::Result<T, E>;
