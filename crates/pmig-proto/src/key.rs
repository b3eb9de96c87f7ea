//! The cluster key: 32 random bytes, stored hex-encoded (64 characters and an optional
//! newline) in a file that only its owner may read.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::KeyError;

/// Length of the cluster key in bytes.
pub const KEY_LEN: usize = 32;

/// The pre-shared cluster key. Its `Debug` output never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey([u8; KEY_LEN]);

impl ClusterKey {
    /// Wraps raw key bytes (for tests and for keys obtained elsewhere).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        ClusterKey(bytes)
    }

    /// A fresh random key from the kernel's CSPRNG.
    pub fn generate() -> Result<Self, KeyError> {
        let mut k = [0u8; KEY_LEN];
        fill_random(&mut k).map_err(KeyError::Random)?;
        Ok(ClusterKey(k))
    }

    /// The raw bytes: used as the Noise pre-shared key.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The key from 64 hex characters (as [`ClusterKey::to_hex`] writes it).
    pub fn from_hex(text: &str) -> Option<Self> {
        parse_key(Path::new("-"), text.as_bytes()).ok()
    }

    /// The key as 64 lowercase hex characters (the key file format, without newline).
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(2 * KEY_LEN);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
    }
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(<redacted>)")
    }
}

fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes for the whole call;
        // getrandom(2) writes at most that many bytes into it.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// Creates a new key file at `path` holding a fresh random key, with mode 0600.
///
/// Refuses to overwrite an existing file. Returns the key that was written.
pub fn generate_key_file(path: impl AsRef<Path>) -> Result<ClusterKey, KeyError> {
    let path = path.as_ref();
    let key = ClusterKey::generate()?;
    let werr = |source| KeyError::Write {
        path: path.to_owned(),
        source,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                KeyError::Exists {
                    path: path.to_owned(),
                }
            } else {
                werr(e)
            }
        })?;
    let mut text = key.to_hex();
    text.push('\n');
    f.write_all(text.as_bytes()).map_err(werr)?;
    f.sync_all().map_err(werr)?;
    Ok(key)
}

/// Reads and checks a key file: a regular file, not accessible by group or others,
/// holding exactly 64 hex characters and an optional trailing newline.
pub fn load_key(path: impl AsRef<Path>) -> Result<ClusterKey, KeyError> {
    let path = path.as_ref();
    let rerr = |source| KeyError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = fs::metadata(path).map_err(rerr)?;
    if !meta.is_file() {
        return Err(KeyError::NotAFile {
            path: path.to_owned(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    // Read a bounded amount: a valid file is at most 66 bytes.
    let mut buf = Vec::with_capacity(80);
    fs::File::open(path)
        .map_err(rerr)?
        .take(4096)
        .read_to_end(&mut buf)
        .map_err(rerr)?;
    parse_key(path, &buf)
}

fn parse_key(path: &Path, buf: &[u8]) -> Result<ClusterKey, KeyError> {
    let mut body = buf;
    if let Some(rest) = body.strip_suffix(b"\n") {
        body = rest.strip_suffix(b"\r").unwrap_or(rest);
    }
    // Check characters before length, so that a wrong file (e.g. binary) says so.
    for (pos, &c) in body.iter().enumerate() {
        if !c.is_ascii_hexdigit() {
            let ch = if c.is_ascii() {
                c as char
            } else {
                char::REPLACEMENT_CHARACTER
            };
            return Err(KeyError::Format {
                path: path.to_owned(),
                ch,
                pos,
            });
        }
    }
    if body.len() != 2 * KEY_LEN {
        return Err(KeyError::Length {
            path: path.to_owned(),
            found: body.len(),
        });
    }
    let nib = |c: u8| -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => c - b'A' + 10,
        }
    };
    let mut k = [0u8; KEY_LEN];
    for (i, pair) in body.chunks_exact(2).enumerate() {
        k[i] = (nib(pair[0]) << 4) | nib(pair[1]);
    }
    Ok(ClusterKey(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn generate_then_load() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        let k = generate_key_file(&p).unwrap();
        let meta = fs::metadata(&p).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        let text = fs::read_to_string(&p).unwrap();
        assert_eq!(text.len(), 65);
        assert_eq!(load_key(&p).unwrap(), k);
        assert!(matches!(
            generate_key_file(&p),
            Err(KeyError::Exists { .. })
        ));
        assert_eq!(format!("{k:?}"), "ClusterKey(<redacted>)");
    }

    #[test]
    fn bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, content: &[u8], mode: u32| {
            let p = dir.path().join(name);
            fs::write(&p, content).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let good = "ab".repeat(32);
        let p = write("ok", good.as_bytes(), 0o600);
        assert_eq!(load_key(&p).unwrap().as_bytes(), &[0xab; 32]);
        let p = write(
            "okcrlf",
            format!("{}\r\n", good.to_uppercase()).as_bytes(),
            0o400,
        );
        assert_eq!(load_key(&p).unwrap().as_bytes(), &[0xab; 32]);

        let p = write("short", b"abcd\n", 0o600);
        let e = load_key(&p).unwrap_err();
        assert!(matches!(e, KeyError::Length { found: 4, .. }), "{e}");
        assert!(e.to_string().contains("expected 64 hex characters"), "{e}");

        let p = write("long", format!("{good}00\n").as_bytes(), 0o600);
        assert!(matches!(
            load_key(&p),
            Err(KeyError::Length { found: 66, .. })
        ));

        let p = write("twonl", format!("{good}\n\n").as_bytes(), 0o600);
        assert!(matches!(
            load_key(&p),
            Err(KeyError::Format { pos: 64, .. })
        ));

        let mut bad = good.clone().into_bytes();
        bad[5] = b'x';
        let p = write("fmt", &bad, 0o600);
        let e = load_key(&p).unwrap_err();
        assert!(
            matches!(
                e,
                KeyError::Format {
                    ch: 'x',
                    pos: 5,
                    ..
                }
            ),
            "{e}"
        );

        let p = write("perm", good.as_bytes(), 0o644);
        let e = load_key(&p).unwrap_err();
        assert!(
            matches!(e, KeyError::Permissions { mode: 0o644, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 600"), "{e}");

        let e = load_key(dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, KeyError::Read { .. }), "{e}");
        let e = load_key(dir.path()).unwrap_err();
        assert!(matches!(e, KeyError::NotAFile { .. }), "{e}");
    }
}
