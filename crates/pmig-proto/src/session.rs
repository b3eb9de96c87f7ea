//! Handshake and `Hello` logic shared by the blocking and the async API (no I/O here).

use std::sync::Arc;
use std::time::Duration;

use snow::{HandshakeState, StatelessTransportState};

use crate::error::ProtoError;
use crate::key::ClusterKey;
use crate::msg::{self, code, Hello, Msg, MAX_MESSAGE_SIZE, MIN_PROTO_VERSION, PROTO_VERSION};

/// The AEAD of the transport, named in the Noise protocol name (docs/protocol.md §2).
/// NN: no static keys; psk0: the cluster key is mixed in before the first message, so
/// the responder authenticates the initiator on message 1 and the initiator
/// authenticates the responder on message 2. The initiator picks the cipher
/// ([`Config::cipher`]); a responder accepts either, by trying each on message 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// AES-256-GCM: several times faster than ChaCha20-Poly1305 where the CPU has AES
    /// and carry-less multiply instructions (ring uses them).
    AesGcm,
    /// ChaCha20-Poly1305: the faster one without such instructions, and the only
    /// one that nodes built before responders took either accept.
    ChaChaPoly,
}

impl Cipher {
    /// In the order a responder tries them.
    pub const ALL: [Cipher; 2] = [Cipher::AesGcm, Cipher::ChaChaPoly];

    /// The Noise protocol name with this cipher.
    pub fn noise_params(self) -> &'static str {
        match self {
            Cipher::AesGcm => "Noise_NNpsk0_25519_AESGCM_BLAKE2s",
            Cipher::ChaChaPoly => "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s",
        }
    }

    /// Its name on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::AesGcm => "aesgcm",
            Cipher::ChaChaPoly => "chachapoly",
        }
    }

    /// AES-GCM where this CPU accelerates it, ChaChaPoly otherwise.
    pub fn for_this_cpu() -> Cipher {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("aes")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
            {
                return Cipher::AesGcm;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("aes")
                && std::arch::is_aarch64_feature_detected!("pmull")
            {
                return Cipher::AesGcm;
            }
        }
        Cipher::ChaChaPoly
    }

    /// The cipher [`Config::new`] gives connections this process starts: the one
    /// set with [`Cipher::set_default`], else [`Cipher::for_this_cpu`].
    pub fn default_for_process() -> Cipher {
        *DEFAULT_CIPHER.get_or_init(Cipher::for_this_cpu)
    }

    /// Sets [`Cipher::default_for_process`], once, before any connection is made
    /// (`pmig daemon --cipher`). Returns false if a default was already in use.
    pub fn set_default(c: Cipher) -> bool {
        DEFAULT_CIPHER.set(c).is_ok()
    }
}

static DEFAULT_CIPHER: std::sync::OnceLock<Cipher> = std::sync::OnceLock::new();

/// Whether each peer this process reached offered AES-GCM in its `Hello`
/// ([`msg::FEATURE_AESGCM`]), by address: see [`client_cipher`].
static PEER_OFFERS: std::sync::Mutex<
    Option<std::collections::HashMap<std::net::SocketAddr, bool>>,
> = std::sync::Mutex::new(None);

/// The cipher to reach `addr` with, for a side that prefers `want`: AES-GCM to
/// a peer that offered it before, ChaChaPoly to one that did not. `None`: the
/// peer is not known yet, and is reached with ChaChaPoly first, which every
/// pmig accepts ([`learn_peer`] then tells what it offers).
pub(crate) fn client_cipher(addr: &std::net::SocketAddr, want: Cipher) -> Option<Cipher> {
    if want == Cipher::ChaChaPoly {
        return Some(Cipher::ChaChaPoly);
    }
    let known = PEER_OFFERS.lock().unwrap_or_else(|e| e.into_inner());
    match known.as_ref().and_then(|m| m.get(addr)) {
        Some(true) => Some(Cipher::AesGcm),
        Some(false) => Some(Cipher::ChaChaPoly),
        None => None,
    }
}

/// Remembers whether the peer at `addr` offered AES-GCM (its `Hello`'s
/// features); `None` forgets it (a connection to it failed: it may have been
/// replaced by another build).
pub(crate) fn learn_peer(addr: &std::net::SocketAddr, features: Option<u64>) {
    let mut known = PEER_OFFERS.lock().unwrap_or_else(|e| e.into_inner());
    let m = known.get_or_insert_with(Default::default);
    match features {
        Some(f) => {
            m.insert(*addr, f & msg::FEATURE_AESGCM != 0);
        }
        None => {
            m.remove(addr);
        }
    }
}

/// `cfg` with the cipher to reach `addr` with ([`client_cipher`];
/// ChaChaPoly to a peer not known yet).
pub(crate) fn config_for(addr: &std::net::SocketAddr, cfg: &Config) -> Config {
    Config {
        cipher: client_cipher(addr, cfg.cipher).unwrap_or(Cipher::ChaChaPoly),
        ..cfg.clone()
    }
}

/// Forgets what the peer at `addr` offered: its next connection learns it again
/// (tests; a node replaced by another build).
pub fn forget_peer(addr: &std::net::SocketAddr) {
    learn_peer(addr, None);
}

impl std::str::FromStr for Cipher {
    type Err = String;
    fn from_str(s: &str) -> Result<Cipher, String> {
        match s.to_ascii_lowercase().as_str() {
            "aesgcm" | "aes-gcm" => Ok(Cipher::AesGcm),
            "chachapoly" | "chacha20-poly1305" => Ok(Cipher::ChaChaPoly),
            _ => Err(format!(
                "unknown cipher {s:?}: expected aesgcm or chachapoly"
            )),
        }
    }
}

impl std::fmt::Display for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
    /// The cipher this side uses when it connects (as a responder it accepts
    /// either).
    pub cipher: Cipher,
}

impl Config {
    pub fn new(node: impl Into<String>) -> Self {
        let cipher = Cipher::default_for_process();
        Config {
            node: node.into(),
            proto_version: PROTO_VERSION,
            min_version: MIN_PROTO_VERSION,
            features: match cipher {
                Cipher::AesGcm => msg::FEATURE_AESGCM,
                Cipher::ChaChaPoly => 0,
            },
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
            max_message_size: MAX_MESSAGE_SIZE,
            cipher,
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
    /// The transport's cipher.
    pub cipher: Cipher,
}

pub(crate) fn handshake_state(
    key: &ClusterKey,
    initiator: bool,
    cipher: Cipher,
) -> Result<HandshakeState, ProtoError> {
    let params = cipher
        .noise_params()
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

/// The responder's side of message 1: the handshake state of the cipher whose
/// tag `first` passes, with that cipher, or `None` if it passes neither's (the
/// peer does not use the cluster key). Nothing of `first` is used before its tag
/// is checked.
pub(crate) fn respond(
    key: &ClusterKey,
    first: &[u8],
) -> Result<Option<(HandshakeState, Cipher)>, ProtoError> {
    let mut buf = [0u8; MAX_HANDSHAKE_MSG];
    for c in Cipher::ALL {
        let mut hs = handshake_state(key, false, c)?;
        if hs.read_message(first, &mut buf).is_ok() {
            return Ok(Some((hs, c)));
        }
    }
    Ok(None)
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
pub(crate) fn check_hello(cfg: &Config, addr: &str, frame: &[u8], cipher: Cipher) -> HelloOutcome {
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
                    cipher,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn first_message(key: &ClusterKey, c: Cipher) -> Vec<u8> {
        let mut hs = handshake_state(key, true, c).unwrap();
        let mut buf = [0u8; MAX_HANDSHAKE_MSG];
        let n = hs.write_message(&[], &mut buf).unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn the_responder_takes_the_cipher_of_the_initiator() {
        let key = ClusterKey::from_bytes([3; 32]);
        for c in Cipher::ALL {
            let (_, got) = respond(&key, &first_message(&key, c)).unwrap().unwrap();
            assert_eq!(got, c);
        }
    }

    #[test]
    fn another_key_passes_neither_cipher() {
        let ours = ClusterKey::from_bytes([3; 32]);
        let theirs = ClusterKey::from_bytes([4; 32]);
        for c in Cipher::ALL {
            assert!(respond(&ours, &first_message(&theirs, c))
                .unwrap()
                .is_none());
        }
        // A tampered message too.
        let mut m = first_message(&ours, Cipher::AesGcm);
        m[40] ^= 1;
        assert!(respond(&ours, &m).unwrap().is_none());
    }

    #[test]
    fn ciphers_are_named_and_parsed() {
        for c in Cipher::ALL {
            assert_eq!(c.name().parse::<Cipher>().unwrap(), c);
            assert!(c
                .noise_params()
                .parse::<snow::params::NoiseParams>()
                .is_ok());
        }
        assert!("des"
            .parse::<Cipher>()
            .unwrap_err()
            .contains("unknown cipher"));
    }

    #[test]
    fn a_peer_is_reached_with_what_it_offered() {
        let a: std::net::SocketAddr = "192.0.2.7:7070".parse().unwrap();
        learn_peer(&a, None);
        assert_eq!(client_cipher(&a, Cipher::AesGcm), None);
        assert_eq!(
            client_cipher(&a, Cipher::ChaChaPoly),
            Some(Cipher::ChaChaPoly)
        );
        learn_peer(&a, Some(msg::FEATURE_AESGCM));
        assert_eq!(client_cipher(&a, Cipher::AesGcm), Some(Cipher::AesGcm));
        // Who prefers ChaChaPoly uses it whatever the peer offers.
        assert_eq!(
            client_cipher(&a, Cipher::ChaChaPoly),
            Some(Cipher::ChaChaPoly)
        );
        learn_peer(&a, Some(0));
        assert_eq!(client_cipher(&a, Cipher::AesGcm), Some(Cipher::ChaChaPoly));
        learn_peer(&a, None);
        assert_eq!(client_cipher(&a, Cipher::AesGcm), None);
    }
}
