//! pmig node-to-node transport.
//!
//! * **Authentication** with the cluster key before any other byte is parsed: Noise
//!   `NNpsk0_25519_{AESGCM,ChaChaPoly}_BLAKE2s` (the `snow` crate) with the 32-byte
//!   cluster key as pre-shared key ([`key`]); the initiator picks the cipher, the
//!   responder accepts either ([`session::Cipher`]).
//! * **Framing**: after the handshake the stream is a sequence of Noise transport
//!   messages (*records*, at most 65535 bytes, 2-byte length prefix); their plaintext is a
//!   stream of length-prefixed *frames* of any size up to a limit ([`frame`]).
//! * **Versioning**: both sides send [`Hello`] as their first frame; incompatible
//!   versions are refused with a clear error ([`ProtoError::VersionMismatch`]).
//! * **Messages**: [`Msg`] (serde + postcard), optionally followed by a raw attachment
//!   for bulk data ([`msg`]).
//!
//! * **Congestion control**: `cubic` on every connection unless the daemon is told
//!   otherwise ([`congestion`]).
//!
//! APIs: [`blocking`] (std streams, complete) and [`asynch`] (tokio, feature `tokio`).
//! The wire format is specified in `docs/protocol.md`.

pub mod blocking;
pub mod compress;
pub mod congestion;
pub mod error;
pub mod frame;
pub mod key;
pub mod msg;
pub mod page_delta;
pub mod session;

#[cfg(feature = "tokio")]
pub mod asynch;

pub use blocking::{Incoming, PagesSent};
pub use error::{KeyError, ProtoError};
pub use frame::FrameParser;
pub use key::{generate_key_file, load_key, ClusterKey, KEY_LEN};
pub use msg::{
    code, decode, decode_with_attachment, encode, feature, is_safe_file_name, service, Hello, Msg,
    Offer, MAX_MESSAGE_SIZE, MAX_NODE_NAME, MIN_PROTO_VERSION, PROTO_VERSION,
};
pub use session::{Cipher, Config, PeerInfo};
