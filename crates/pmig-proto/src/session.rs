//! Handshake and `Hello` logic shared by the blocking and the async API (no I/O here).

use std::sync::Arc;
use std::time::Duration;

use snow::{HandshakeState, StatelessTransportState};

use crate::error::ProtoError;
use crate::key::ClusterKey;
use crate::msg::{self, code, Hello, Msg, MAX_MESSAGE_SIZE, MIN_PROTO_VERSION, PROTO_VERSION};

/// The Noise protocol name. NN: no static keys; psk0: the cluster key is mixed in
/// before the first message, so the responder authenticates the initiator on message 1
/// and the initiator authenticates the responder on message 2.
///
/// Cipher cost, measured over loopback on the development machine (ring backend):
/// ChaChaPoly about 1.2 CPU-ns per byte for encrypt + decrypt + TCP, AESGCM about 0.6
/// (AES-NI). Switching is this one constant (and bumping [`PROLOGUE`]); both ends of a
/// cluster must agree, or the handshake fails as if the keys differed.
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// Bound into the handshake hash: a peer using another transport layout fails to
/// authenticate instead of misparsing. Change it when the record/frame layout changes.
pub const PROLOGUE: &[u8] = b"pmig transport 1";
/// Both handshake messages are 48 bytes (32-byte ephemeral key + 16-byte tag); anything
/// longer than this is refused before it is read.
pub const MAX_HANDSHAKE_MSG: usize = 256;
/// Default limit for the handshake and the `Hello` exchange together.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of one side of a connection.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name, sent in `Hello`.
    pub node: String,
    /// Newest version we speak (normally [`PROTO_VERSION`]; tests change it).
    pub proto_version: u16,
    /// Oldest version we speak (normally [`MIN_PROTO_VERSION`]).
    pub min_version: u16,
    /// Feature bits we offer.
    pub features: u64,
    /// Limit for handshake plus `Hello`; `None` waits forever.
    pub handshake_timeout: Option<Duration>,
    /// Largest frame body accepted or sent.
    pub max_message_size: usize,
}

impl Config {
    pub fn new(node: impl Into<String>) -> Self {
        Config {
            node: node.into(),
            proto_version: PROTO_VERSION,
            min_version: MIN_PROTO_VERSION,
            features: 0,
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
            max_message_size: MAX_MESSAGE_SIZE,
        }
    }

    pub(crate) fn hello(&self) -> Hello {
        Hello {
            proto_version: self.proto_version,
            min_version: self.min_version,
            node: self.node.clone(),
            features: self.features,
        }
    }
}

/// What we know about the peer once the connection is established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's node name from its `Hello`.
    pub node: String,
    /// The peer's socket address (or another label for non-TCP streams).
    pub addr: String,
    /// The negotiated protocol version.
    pub version: u16,
    /// The negotiated features (intersection of both offers).
    pub features: u64,
    /// The peer's `Hello` as received.
    pub hello: Hello,
}

pub(crate) fn handshake_state(
    key: &ClusterKey,
    initiator: bool,
) -> Result<HandshakeState, ProtoError> {
    let params = NOISE_PARAMS
        .parse()
        .map_err(|e: snow::Error| ProtoError::Noise(e.to_string()))?;
    let b = snow::Builder::new(params)
        .psk(0, key.as_bytes())
        .prologue(PROLOGUE);
    let r = if initiator {
        b.build_initiator()
    } else {
        b.build_responder()
    };
    r.map_err(|e| ProtoError::Noise(e.to_string()))
}

pub(crate) fn into_transport(
    hs: HandshakeState,
) -> Result<Arc<StatelessTransportState>, ProtoError> {
    hs.into_stateless_transport_mode()
        .map(Arc::new)
        .map_err(|e| ProtoError::Noise(e.to_string()))
}

/// Checks a handshake message length prefix; `from_initiator` picks the wording.
pub(crate) fn check_handshake_len(
    len: usize,
    peer: &str,
    from_initiator: bool,
) -> Result<(), ProtoError> {
    if len == 0 || len > MAX_HANDSHAKE_MSG {
        let who = if from_initiator { "client" } else { "server" };
        return Err(ProtoError::Handshake {
            peer: peer.to_string(),
            reason: format!(
                "invalid handshake message (length {len}, at most {MAX_HANDSHAKE_MSG} expected): not a pmig {who}"
            ),
        });
    }
    Ok(())
}

/// Error for the initiator when the responder hangs up instead of answering message 1.
pub(crate) fn closed_during_handshake(peer: &str) -> ProtoError {
    ProtoError::Handshake {
        peer: peer.to_string(),
        reason: "the peer closed the connection during the handshake: it does not use this cluster's key, or is not a pmig node".into(),
    }
}

/// Error when message 2 fails authentication at the initiator.
pub(crate) fn reply_auth_failed(peer: &str) -> ProtoError {
    ProtoError::Handshake {
        peer: peer.to_string(),
        reason: "the peer's reply failed authentication: it does not use this cluster's key".into(),
    }
}

/// Outcome of checking the peer's first message.
pub(crate) enum HelloOutcome {
    Ok(PeerInfo),
    /// Refuse: send `Msg` (best effort) then fail with the error.
    Refuse(Msg, ProtoError),
    /// Fail without sending anything (the peer already refused us).
    Fail(ProtoError),
}

/// Decides what to do with the first frame received after the handshake.
pub(crate) fn check_hello(cfg: &Config, addr: &str, frame: &[u8]) -> HelloOutcome {
    let msg = match msg::decode(frame) {
        Ok(m) => m,
        Err(e) => {
            let text = format!("expected Hello: {e}");
            return HelloOutcome::Refuse(
                Msg::Error {
                    code: code::MALFORMED,
                    text: text.clone(),
                },
                ProtoError::BadFrame {
                    peer: addr.to_string(),
                    reason: text,
                },
            );
        }
    };
    match msg {
        Msg::Hello(h) => {
            let ours = cfg.hello();
            match ours.negotiate(&h) {
                Some(version) => HelloOutcome::Ok(PeerInfo {
                    node: h.node.clone(),
                    addr: addr.to_string(),
                    version,
                    features: ours.features & h.features,
                    hello: h,
                }),
                None => {
                    let e = ProtoError::VersionMismatch {
                        peer: h.node.clone(),
                        peer_version: h.proto_version,
                        peer_min: h.min_version,
                        our_version: ours.proto_version,
                        our_min: ours.min_version,
                    };
                    let text = format!(
                        "node {} (protocol versions {}..={}) cannot talk to node {} (versions {}..={})",
                        cfg.node,
                        ours.min_version,
                        ours.proto_version,
                        h.node,
                        h.min_version,
                        h.proto_version
                    );
                    HelloOutcome::Refuse(
                        Msg::Error {
                            code: code::INCOMPATIBLE_VERSION,
                            text,
                        },
                        e,
                    )
                }
            }
        }
        Msg::Error { code, text } => HelloOutcome::Fail(ProtoError::Remote {
            peer: addr.to_string(),
            code,
            text,
        }),
        other => {
            let e = ProtoError::Unexpected {
                peer: addr.to_string(),
                expected: "Hello",
                got: other.kind().to_string(),
            };
            HelloOutcome::Refuse(
                Msg::Error {
                    code: code::UNEXPECTED,
                    text: format!("expected Hello, got {}", other.kind()),
                },
                e,
            )
        }
    }
}
