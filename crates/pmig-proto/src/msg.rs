//! Typed messages and their encoding (postcard).
//!
//! A frame body is `postcard(Msg)` optionally followed by raw *attachment* bytes (bulk
//! data such as page contents, which are not copied through serde). [`decode`] accepts a
//! body without attachment; [`decode_with_attachment`] returns the attachment too.
//!
//! **Compatibility rules** (see `docs/protocol.md`): variant indices are part of the wire
//! format. `Hello` must stay variant 0 and `Error` variant 1 with their fields unchanged
//! forever, so that any two versions can at least exchange `Hello` and refuse each other
//! cleanly. New messages are appended at the end of [`Msg`].

use serde::{Deserialize, Serialize};

use crate::error::ProtoError;

/// The protocol version this build speaks.
pub const PROTO_VERSION: u16 = 1;
/// The oldest protocol version this build can still speak.
pub const MIN_PROTO_VERSION: u16 = 1;

/// Largest frame body (and so largest encoded message plus attachment), in bytes.
pub const MAX_MESSAGE_SIZE: usize = 256 << 20;
/// Longest node name accepted in `Hello`.
pub const MAX_NODE_NAME: usize = 64;
/// Longest text accepted in `Error`.
pub const MAX_ERROR_TEXT: usize = 4096;

/// Error codes carried by [`Msg::Error`].
pub mod code {
    /// The peers' protocol versions do not overlap.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// A message could not be decoded.
    pub const MALFORMED: u32 = 2;
    /// A well-formed message arrived in a state where it is not allowed.
    pub const UNEXPECTED: u32 = 3;
    /// The request was understood but refused (permissions, policy).
    pub const REFUSED: u32 = 4;
    /// The peer failed internally while handling the request.
    pub const INTERNAL: u32 = 5;
    /// Codes from this value on are free for the migration messages.
    pub const FIRST_APPLICATION_CODE: u32 = 100;
}

/// Feature bits announced in [`Hello::features`]; the connection uses the intersection.
pub mod feature {
    /// No optional features are defined yet.
    pub const NONE: u64 = 0;
}

/// First message on every connection, in both directions, right after the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The newest protocol version the sender speaks.
    pub proto_version: u16,
    /// The oldest protocol version the sender still speaks.
    pub min_version: u16,
    /// The sender's node name (e.g. `n2`).
    pub node: String,
    /// Optional feature bits (see [`feature`]).
    pub features: u64,
}

impl Hello {
    /// The version both sides will use, or `None` if their ranges do not overlap.
    ///
    /// The rule is symmetric: `v = min(a.proto, b.proto)` and both minimums must be `<= v`.
    pub fn negotiate(&self, peer: &Hello) -> Option<u16> {
        let v = self.proto_version.min(peer.proto_version);
        (v >= self.min_version && v >= peer.min_version && v > 0).then_some(v)
    }
}

/// Every message of the protocol. Append new variants at the end only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Variant 0, frozen: version and identity exchange.
    Hello(Hello),
    /// Variant 1, frozen: the sender refuses or failed; usually followed by a close.
    Error {
        code: u32,
        text: String,
    },
    /// Liveness and round-trip measurement; answered by `Pong` with the same `seq`.
    Ping {
        seq: u64,
    },
    Pong {
        seq: u64,
    },
    // Migration messages are appended below (see docs/protocol.md, "Migration messages").
}

impl Msg {
    /// A short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Hello(_) => "Hello",
            Msg::Error { .. } => "Error",
            Msg::Ping { .. } => "Ping",
            Msg::Pong { .. } => "Pong",
        }
    }

    /// Semantic checks beyond what the type system enforces.
    pub fn validate(&self) -> Result<(), ProtoError> {
        match self {
            Msg::Hello(h) => {
                if h.node.is_empty() || h.node.len() > MAX_NODE_NAME {
                    return Err(ProtoError::Malformed(format!(
                        "Hello: node name must be 1..={MAX_NODE_NAME} bytes, got {}",
                        h.node.len()
                    )));
                }
                if h.node.chars().any(|c| c.is_control()) {
                    return Err(ProtoError::Malformed(
                        "Hello: node name contains control characters".into(),
                    ));
                }
                if h.min_version > h.proto_version {
                    return Err(ProtoError::Malformed(format!(
                        "Hello: min_version {} is above proto_version {}",
                        h.min_version, h.proto_version
                    )));
                }
            }
            Msg::Error { text, .. } if text.len() > MAX_ERROR_TEXT => {
                return Err(ProtoError::Malformed(format!(
                    "Error: text of {} bytes exceeds {MAX_ERROR_TEXT}",
                    text.len()
                )));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Encodes a message (without attachment) into a new buffer.
pub fn encode(msg: &Msg) -> Result<Vec<u8>, ProtoError> {
    let v = postcard::to_stdvec(msg).map_err(|e| ProtoError::Malformed(format!("encode: {e}")))?;
    if v.len() > MAX_MESSAGE_SIZE {
        return Err(ProtoError::TooLarge {
            size: v.len() as u64,
            max: MAX_MESSAGE_SIZE,
        });
    }
    Ok(v)
}

/// Appends the encoding of `msg` to `out`.
pub fn encode_into(msg: &Msg, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let v = postcard::to_extend(msg, std::mem::take(out))
        .map_err(|e| ProtoError::Malformed(format!("encode: {e}")))?;
    *out = v;
    Ok(())
}

/// Decodes one message that fills `buf` exactly. Never panics; rejects inputs above
/// [`MAX_MESSAGE_SIZE`], truncated input, unknown variants, trailing bytes and
/// semantically invalid fields.
pub fn decode(buf: &[u8]) -> Result<Msg, ProtoError> {
    let (msg, rest) = decode_with_attachment(buf)?;
    if !rest.is_empty() {
        return Err(ProtoError::Malformed(format!(
            "{} trailing bytes after {} message",
            rest.len(),
            msg.kind()
        )));
    }
    Ok(msg)
}

/// Decodes one message at the start of `buf` and returns it with the remaining bytes
/// (the attachment). Same guarantees as [`decode`].
pub fn decode_with_attachment(buf: &[u8]) -> Result<(Msg, &[u8]), ProtoError> {
    if buf.len() > MAX_MESSAGE_SIZE {
        return Err(ProtoError::TooLarge {
            size: buf.len() as u64,
            max: MAX_MESSAGE_SIZE,
        });
    }
    if buf.is_empty() {
        return Err(ProtoError::Malformed("empty message".into()));
    }
    let (msg, rest): (Msg, &[u8]) = postcard::take_from_bytes(buf).map_err(|e| {
        let ty = match leading_varint(buf) {
            Some(t) => format!("message type {t}"),
            None => "message with invalid type".to_string(),
        };
        let what = match e {
            postcard::Error::DeserializeUnexpectedEnd => "truncated".to_string(),
            postcard::Error::SerdeDeCustom | postcard::Error::DeserializeBadEnum => {
                "unknown type or invalid field".to_string()
            }
            other => other.to_string(),
        };
        ProtoError::Malformed(format!("{ty}: {what}"))
    })?;
    msg.validate()?;
    Ok((msg, rest))
}

/// The postcard varint at the start of `buf` (the enum variant index), if well-formed.
fn leading_varint(buf: &[u8]) -> Option<u32> {
    let mut v: u32 = 0;
    for (i, &b) in buf.iter().take(5).enumerate() {
        v |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(v: u16, min: u16) -> Hello {
        Hello {
            proto_version: v,
            min_version: min,
            node: "n1".into(),
            features: 0,
        }
    }

    #[test]
    fn roundtrip() {
        let msgs = [
            Msg::Hello(hello(1, 1)),
            Msg::Error {
                code: code::REFUSED,
                text: "nope".into(),
            },
            Msg::Ping { seq: u64::MAX },
            Msg::Pong { seq: 7 },
        ];
        for m in msgs {
            let b = encode(&m).unwrap();
            assert_eq!(decode(&b).unwrap(), m);
            let mut b2 = b.clone();
            b2.extend_from_slice(b"attached");
            let (m2, att) = decode_with_attachment(&b2).unwrap();
            assert_eq!((m2, att), (m.clone(), &b"attached"[..]));
            assert!(decode(&b2).is_err());
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn wire_layout_is_frozen() {
        // Hello is variant 0, Error variant 1: these bytes must never change.
        let b = encode(&Msg::Hello(hello(1, 1))).unwrap();
        assert_eq!(b, [0, 1, 1, 2, b'n', b'1', 0]);
        let b = encode(&Msg::Error {
            code: 1,
            text: "x".into(),
        })
        .unwrap();
        assert_eq!(b, [1, 1, 1, b'x']);
    }

    #[test]
    fn bad_inputs() {
        assert!(decode(&[]).is_err());
        let e = decode(&[100]).unwrap_err();
        assert!(e.to_string().contains("message type 100"), "{e}");
        // Hello with a 1 GiB node name length but no bytes.
        assert!(decode(&[0, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x04]).is_err());
        // Empty node name.
        assert!(decode(&[0, 1, 1, 0, 0]).is_err());
        // min above version.
        assert!(decode(&[0, 1, 2, 2, b'n', b'1', 0]).is_err());
        let big = vec![0u8; MAX_MESSAGE_SIZE + 1];
        assert!(matches!(decode(&big), Err(ProtoError::TooLarge { .. })));
    }

    #[test]
    fn negotiation() {
        assert_eq!(hello(1, 1).negotiate(&hello(1, 1)), Some(1));
        assert_eq!(hello(3, 1).negotiate(&hello(1, 1)), Some(1));
        assert_eq!(hello(3, 2).negotiate(&hello(1, 1)), None);
        assert_eq!(hello(1, 1).negotiate(&hello(3, 3)), None);
        assert_eq!(hello(4, 2).negotiate(&hello(3, 3)), Some(3));
    }
}
