//! The pmig image format (see `docs/image-format.md`).
//!
//! An image is a directory holding three files:
//!
//! * `manifest.pmig` — fixed header (magic, format version, architecture) and a
//!   postcard-encoded [`Manifest`] that lists every part with its checksums;
//! * `parts.pmig` — the small, serialized parts (one per resource kind);
//! * `pages.pmig` — raw page contents, page aligned, read directly by the
//!   restorer.
//!
//! Every part carries one xxh3-64 checksum per chunk, so a corrupt or truncated
//! image is refused before anything is created from it.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

/// Magic bytes at the start of `manifest.pmig`.
pub const MAGIC: &[u8; 8] = b"PMIGIMG\0";
/// Major format version: readers refuse any other major version.
pub const FORMAT_MAJOR: u16 = 1;
/// Minor format version: additions that older readers of the same major can ignore.
pub const FORMAT_MINOR: u16 = 20;
/// Architecture tag for x86_64.
pub const ARCH_X86_64: u32 = 0x3e; // ELF e_machine EM_X86_64
/// Page size the image's page data is laid out in.
pub const PAGE_SIZE: u64 = 4096;
/// Chunk size for checksums of large parts.
pub const CHUNK: u64 = 16 << 20;

/// Most bytes of page data handed to the kernel in one `write`.
///
/// The kernel sizes the page-cache folios of a buffered write by its
/// length: a write of 4 MiB to ext4 gets 2 MiB folios, taken from the free
/// blocks of that order. A virtual machine that reports its free memory to
/// its host (free page reporting, from order 9 up here) has given exactly
/// those blocks back, and the host backs each again on its first touch: on
/// the test VM the first 256 MiB written in 4 MiB writes took 2.2–2.7 s,
/// in 1 MiB or smaller writes 0.05 s (BENCHMARKS.md, "Image writes in
/// pieces"). A quarter of a MiB keeps the folios well below that order.
pub const WRITE_PIECE: usize = 256 << 10;

/// Writes `data` to `w` in pieces of at most [`WRITE_PIECE`] bytes.
pub fn write_in_pieces(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    data.chunks(WRITE_PIECE).try_for_each(|p| w.write_all(p))
}

pub const MANIFEST_FILE: &str = "manifest.pmig";
pub const PARTS_FILE: &str = "parts.pmig";
pub const PAGES_FILE: &str = "pages.pmig";
/// Name of the page-data part.
pub const PAGES_PART: &str = "pages";

const HEADER_LEN: usize = 8 + 2 + 2 + 4 + 8 + 8;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image directory {0}: {1}")]
    Io(PathBuf, #[source] io::Error),
    #[error("{0}: not a pmig image (bad magic)")]
    BadMagic(PathBuf),
    #[error("{path}: image format version {major}.{minor} is not supported (this pmig reads {FORMAT_MAJOR}.x)")]
    Version {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    #[error("{path}: image is for architecture {arch:#x}, this machine is x86_64")]
    Arch { path: PathBuf, arch: u32 },
    #[error("{0}: manifest is truncated")]
    Truncated(PathBuf),
    #[error("{0}: manifest checksum mismatch (image is corrupt)")]
    ManifestChecksum(PathBuf),
    #[error("image part '{part}' is truncated: {file} has {have} bytes, needs {need}")]
    PartTruncated {
        part: String,
        file: String,
        have: u64,
        need: u64,
    },
    #[error("image part '{part}' is corrupt: checksum mismatch in chunk {chunk} (bytes {start}..{end} of {file})")]
    PartChecksum {
        part: String,
        file: String,
        chunk: usize,
        start: u64,
        end: u64,
    },
    #[error("image has no part '{0}'")]
    MissingPart(String),
    #[error("image part '{0}' cannot be decoded: {1}")]
    Decode(String, postcard::Error),
    #[error("cannot encode image part '{0}': {1}")]
    Encode(String, postcard::Error),
    #[error("image part '{0}' appears twice")]
    DuplicatePart(String),
}

pub type Result<T> = std::result::Result<T, ImageError>;

/// Where one part lives and how to check it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartEntry {
    pub name: String,
    pub file: String,
    pub offset: u64,
    pub len: u64,
    pub chunk: u64,
    /// xxh3-64 of each `chunk`-sized piece (the last one may be shorter).
    pub sums: Vec<u64>,
}

/// The manifest: what produced the image and where its parts are.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub pmig_version: String,
    pub kernel_release: String,
    pub hostname: String,
    pub pid: i32,
    pub created_unix_ms: u64,
    pub parts: Vec<PartEntry>,
}

impl Manifest {
    pub fn part(&self, name: &str) -> Option<&PartEntry> {
        self.parts.iter().find(|p| p.name == name)
    }

    /// Decodes part `name` from `bytes`, the whole of file `file` as this
    /// manifest places parts in it (a file already mapped or read), as
    /// [`Image::get`] would from the image's directory. Its checksums are
    /// not verified (neither are `get`'s).
    pub fn decode_part<T: DeserializeOwned>(
        &self,
        name: &str,
        file: &str,
        bytes: &[u8],
    ) -> Result<T> {
        let p = self
            .part(name)
            .filter(|p| p.file == file)
            .ok_or_else(|| ImageError::MissingPart(name.into()))?;
        let raw = p
            .offset
            .checked_add(p.len)
            .and_then(|end| bytes.get(p.offset as usize..end as usize))
            .ok_or_else(|| ImageError::PartTruncated {
                part: p.name.clone(),
                file: p.file.clone(),
                have: bytes.len() as u64,
                need: p.offset.saturating_add(p.len),
            })?;
        postcard::from_bytes(raw).map_err(|e| ImageError::Decode(name.to_string(), e))
    }
}

fn chunk_sums(data: &[u8], chunk: u64) -> Vec<u64> {
    if data.is_empty() {
        return vec![xxh3_64(&[])];
    }
    data.chunks(chunk as usize).map(xxh3_64).collect()
}

/// Removes the file `name` of `dir`, if there is one.
fn remove_if_there(dir: &Path, name: &str) -> Result<()> {
    match fs::remove_file(dir.join(name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ImageError::Io(dir.to_path_buf(), e)),
    }
}

fn io_err(dir: &Path) -> impl Fn(io::Error) -> ImageError + '_ {
    move |e| ImageError::Io(dir.to_path_buf(), e)
}

/// Streams page data into `pages.pmig`, checksumming as it goes.
pub struct PagesWriter {
    file: File,
    len: u64,
    /// The end of what the file holds: past `len`, zeros written ahead by
    /// [`PagesWriter::touch_ahead`].
    end: u64,
    sums: Vec<u64>,
    hasher: xxhash_rust::xxh3::Xxh3,
    in_chunk: u64,
}

impl PagesWriter {
    /// Current offset (where the next bytes will land).
    pub fn offset(&self) -> u64 {
        self.len
    }

    /// Reserves room for `bytes` of page data ahead of the writes (without
    /// changing the file's length), so that the writes made while a process
    /// is frozen do not also allocate the file's storage. A file system that
    /// cannot reserve is left as it is: this is only an optimisation.
    pub fn reserve(&mut self, bytes: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: fallocate on a descriptor we own; it touches no memory of ours.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                self.len as libc::off_t,
                bytes as libc::off_t,
            )
        };
    }

    /// Writes zeros where the next `bytes` of page data will land, past
    /// what is there already, without moving where that data goes. A file
    /// system allocates its storage then, and memory (tmpfs, page cache)
    /// is touched then: where the memory of a virtual machine has to be
    /// backed again by its host, the first write to a page costs tens of
    /// microseconds, and the writes made while a process is frozen should
    /// not pay that. Unlike [`PagesWriter::reserve`], the file grows. The
    /// zeros never written over stay past the page data, which the
    /// manifest bounds (readers go by the parts' offsets and lengths), until
    /// the file is removed: cutting them off at the finish would free their
    /// memory while the process is frozen (about 80 µs per MiB on tmpfs
    /// here). Returns the bytes written.
    pub fn touch_ahead(&mut self, bytes: u64) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        // Zeros too go a piece at a time (see [`WRITE_PIECE`]).
        static ZEROS: [u8; WRITE_PIECE] = [0; WRITE_PIECE];
        let (from, to) = (self.end.max(self.len), self.len.saturating_add(bytes));
        let mut at = from;
        while at < to {
            let n = ((to - at) as usize).min(WRITE_PIECE);
            self.file.write_all_at(&ZEROS[..n], at)?;
            at += n as u64;
            self.end = at;
        }
        Ok(to.saturating_sub(from))
    }

    /// Bytes written ahead of the page data by [`PagesWriter::touch_ahead`]
    /// and not yet written over.
    pub fn ahead(&self) -> u64 {
        self.end.saturating_sub(self.len)
    }

    /// Append bytes, hashing them into the running chunk sums.
    pub fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        write_in_pieces(&mut self.file, data)?;
        self.len += data.len() as u64;
        self.end = self.end.max(self.len);
        while !data.is_empty() {
            let take = ((CHUNK - self.in_chunk) as usize).min(data.len());
            self.hasher.update(&data[..take]);
            self.in_chunk += take as u64;
            data = &data[take..];
            if self.in_chunk == CHUNK {
                self.sums.push(self.hasher.digest());
                self.hasher.reset();
                self.in_chunk = 0;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<(u64, Vec<u64>)> {
        if self.in_chunk > 0 || self.sums.is_empty() {
            self.sums.push(self.hasher.digest());
        }
        self.file.flush()?;
        Ok((self.len, self.sums))
    }
}

/// How many bytes of parts [`ImageWriter`] gathers before it writes them.
const PARTS_BUFFER: usize = 64 << 10;

/// Builds an image directory. The manifest is written last, atomically, so a
/// directory without a manifest is never mistaken for a complete image.
pub struct ImageWriter {
    dir: PathBuf,
    /// Parts are gathered and written in large pieces: an image has a few
    /// dozen, most of them short, and a system call each costs more than
    /// their bytes (the capture of a stop writes its image while the
    /// process is frozen).
    parts_file: io::BufWriter<File>,
    parts_len: u64,
    entries: Vec<PartEntry>,
    pages: Option<PagesWriter>,
}

impl ImageWriter {
    pub fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        // A stale manifest must not survive next to new parts.
        remove_if_there(dir, MANIFEST_FILE)?;
        let parts_file = File::create(dir.join(PARTS_FILE)).map_err(io_err(dir))?;
        let pages = File::create(dir.join(PAGES_FILE)).map_err(io_err(dir))?;
        Ok(ImageWriter::of(
            dir,
            parts_file,
            PagesWriter {
                file: pages,
                len: 0,
                end: 0,
                sums: Vec::new(),
                hasher: xxhash_rust::xxh3::Xxh3::new(),
                in_chunk: 0,
            },
        ))
    }

    /// A writer of an image in `dir` with these files, no part put yet.
    fn of(dir: &Path, parts_file: File, pages: PagesWriter) -> ImageWriter {
        ImageWriter {
            dir: dir.to_path_buf(),
            parts_file: io::BufWriter::with_capacity(PARTS_BUFFER, parts_file),
            parts_len: 0,
            entries: Vec::new(),
            pages: Some(pages),
        }
    }

    /// An image in `dir` that carries on from another image's page data:
    /// `pages`, a `pages.pmig` whose part `manifest` lists (verified by the
    /// caller), is moved into `dir` (over any file of that name: a reader
    /// of the old one keeps reading it) and more page data is appended
    /// after its own, its checksums carried on; the parts and the manifest
    /// are written anew. Costs the bytes appended, not those already there.
    pub fn append_to_pages(dir: &Path, pages: &Path, manifest: &Manifest) -> Result<Self> {
        let entry = manifest
            .part(PAGES_PART)
            .filter(|p| p.file == PAGES_FILE && p.offset == 0 && p.chunk == CHUNK)
            .ok_or_else(|| ImageError::MissingPart(PAGES_PART.into()))?;
        let len = entry.len;
        let tail = len % CHUNK;
        let mut sums = entry.sums.clone();
        // Those of the whole chunks; the last, partial one is hashed again
        // from its bytes, to go on with the bytes appended.
        if tail > 0 || len == 0 {
            sums.pop();
        }
        if sums.len() as u64 != len / CHUNK {
            return Err(ImageError::Truncated(pages.to_path_buf()));
        }
        remove_if_there(dir, MANIFEST_FILE)?;
        let target = dir.join(PAGES_FILE);
        fs::rename(pages, &target).map_err(io_err(dir))?;
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&target)
            .map_err(io_err(dir))?;
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        if tail > 0 {
            let mut buf = vec![0u8; tail as usize];
            file.read_exact_at(&mut buf, len - tail)
                .map_err(io_err(dir))?;
            hasher.update(&buf);
        }
        let end = file.metadata().map_err(io_err(dir))?.len().max(len);
        io::Seek::seek(&mut file, io::SeekFrom::Start(len)).map_err(io_err(dir))?;
        // A new file, not the old one cut short: a writer of that one may
        // still hold it.
        remove_if_there(dir, PARTS_FILE)?;
        let parts_file = File::create(dir.join(PARTS_FILE)).map_err(io_err(dir))?;
        Ok(ImageWriter::of(
            dir,
            parts_file,
            PagesWriter {
                file,
                len,
                end,
                sums,
                hasher,
                in_chunk: tail,
            },
        ))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Abandons the image: removes the files created so far.
    pub fn discard(self) {
        let _ = fs::remove_file(self.dir.join(PARTS_FILE));
        let _ = fs::remove_file(self.dir.join(PAGES_FILE));
    }

    /// Serialize `value` as part `name`.
    pub fn put<T: Serialize>(&mut self, name: &str, value: &T) -> Result<()> {
        let bytes =
            postcard::to_allocvec(value).map_err(|e| ImageError::Encode(name.to_string(), e))?;
        self.put_raw(name, &bytes)
    }

    pub fn put_raw(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        if name == PAGES_PART || self.entries.iter().any(|e| e.name == name) {
            return Err(ImageError::DuplicatePart(name.to_string()));
        }
        self.parts_file
            .write_all(bytes)
            .map_err(io_err(&self.dir))?;
        self.entries.push(PartEntry {
            name: name.to_string(),
            file: PARTS_FILE.to_string(),
            offset: self.parts_len,
            len: bytes.len() as u64,
            chunk: CHUNK,
            sums: chunk_sums(bytes, CHUNK),
        });
        self.parts_len += bytes.len() as u64;
        Ok(())
    }

    /// The page-data stream.
    pub fn pages(&mut self) -> &mut PagesWriter {
        self.pages
            .as_mut()
            .expect("pages writer taken only by finish")
    }

    /// Write the manifest. After this returns the image is complete.
    pub fn finish(mut self, mut manifest: Manifest) -> Result<Manifest> {
        let dir = self.dir.clone();
        let (len, sums) = self
            .pages
            .take()
            .expect("finish called once")
            .finish()
            .map_err(io_err(&dir))?;
        self.parts_file.flush().map_err(io_err(&dir))?;
        self.entries.push(PartEntry {
            name: PAGES_PART.to_string(),
            file: PAGES_FILE.to_string(),
            offset: 0,
            len,
            chunk: CHUNK,
            sums,
        });
        manifest.parts = std::mem::take(&mut self.entries);
        let body = postcard::to_allocvec(&manifest)
            .map_err(|e| ImageError::Encode("manifest".into(), e))?;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_MAJOR.to_le_bytes());
        out.extend_from_slice(&FORMAT_MINOR.to_le_bytes());
        out.extend_from_slice(&ARCH_X86_64.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&xxh3_64(&body).to_le_bytes());
        out.extend_from_slice(&body);
        let tmp = dir.join(".manifest.pmig.tmp");
        fs::write(&tmp, &out).map_err(io_err(&dir))?;
        fs::rename(&tmp, dir.join(MANIFEST_FILE)).map_err(io_err(&dir))?;
        Ok(manifest)
    }
}

/// An image opened for reading. `open` checks the manifest; `verify` checks
/// every byte of every part.
#[derive(Debug)]
pub struct Image {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// The files the manifest places parts in, each opened once (an
    /// image has two): parts are read from them at their offsets.
    files: Vec<(String, File)>,
}

/// Parse and check the fixed header and manifest body.
pub fn decode_manifest(path: &Path, raw: &[u8]) -> Result<Manifest> {
    if raw.len() < 8 || &raw[..8] != MAGIC {
        return Err(ImageError::BadMagic(path.to_path_buf()));
    }
    if raw.len() < HEADER_LEN {
        return Err(ImageError::Truncated(path.to_path_buf()));
    }
    let u16_at = |o: usize| u16::from_le_bytes([raw[o], raw[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
    let (major, minor) = (u16_at(8), u16_at(10));
    if major != FORMAT_MAJOR {
        return Err(ImageError::Version {
            path: path.to_path_buf(),
            major,
            minor,
        });
    }
    let arch = u32_at(12);
    if arch != ARCH_X86_64 {
        return Err(ImageError::Arch {
            path: path.to_path_buf(),
            arch,
        });
    }
    let body_len = u64_at(16);
    let sum = u64_at(24);
    let body = &raw[HEADER_LEN..];
    if (body.len() as u64) < body_len {
        return Err(ImageError::Truncated(path.to_path_buf()));
    }
    let body = &body[..body_len as usize];
    if xxh3_64(body) != sum {
        return Err(ImageError::ManifestChecksum(path.to_path_buf()));
    }
    postcard::from_bytes(body).map_err(|e| ImageError::Decode("manifest".into(), e))
}

impl Image {
    /// Open an image: checks magic, version, architecture and the manifest
    /// checksum, and that every part's file is long enough.
    pub fn open(dir: &Path) -> Result<Image> {
        let mpath = dir.join(MANIFEST_FILE);
        let raw = fs::read(&mpath).map_err(io_err(dir))?;
        let manifest = decode_manifest(&mpath, &raw)?;
        let mut files: Vec<(String, File, u64)> = Vec::new();
        for p in &manifest.parts {
            if !files.iter().any(|(name, ..)| *name == p.file) {
                let f = File::open(dir.join(&p.file)).map_err(io_err(dir))?;
                let len = f.metadata().map_err(io_err(dir))?.len();
                files.push((p.file.clone(), f, len));
            }
        }
        for p in &manifest.parts {
            let have = files
                .iter()
                .find(|(name, ..)| *name == p.file)
                .map_or(0, |(_, _, len)| *len);
            let need = p.offset + p.len;
            if have < need {
                return Err(ImageError::PartTruncated {
                    part: p.name.clone(),
                    file: p.file.clone(),
                    have,
                    need,
                });
            }
            let chunks = if p.len == 0 {
                1
            } else {
                p.len.div_ceil(p.chunk.max(1))
            };
            if p.chunk == 0 || p.sums.len() as u64 != chunks {
                return Err(ImageError::ManifestChecksum(mpath));
            }
        }
        Ok(Image {
            dir: dir.to_path_buf(),
            manifest,
            files: files.into_iter().map(|(name, f, _)| (name, f)).collect(),
        })
    }

    /// The file `p` lies in, opened by `open`.
    fn file_of(&self, p: &PartEntry) -> &File {
        &self
            .files
            .iter()
            .find(|(name, _)| *name == p.file)
            .expect("open opened the file of every part")
            .1
    }

    /// Open and verify every checksum of every part.
    pub fn open_verified(dir: &Path) -> Result<Image> {
        let img = Image::open(dir)?;
        for p in &img.manifest.parts {
            img.verify_part(p, &mut |_, _| {})?;
        }
        Ok(img)
    }

    /// Verify every checksum of every part but `name`.
    pub fn verify_except(&self, name: &str) -> Result<()> {
        for p in self.manifest.parts.iter().filter(|p| p.name != name) {
            self.verify_part(p, &mut |_, _| {})?;
        }
        Ok(())
    }

    /// Verify every checksum of part `name` (if the image has it), showing
    /// `visit` its bytes in order as they are read: their offset in the
    /// part's file, then the bytes. A chunk's bytes are shown before its
    /// checksum is compared: what `visit` learns counts only if this
    /// returns `Ok`.
    pub fn verify_visiting(&self, name: &str, visit: &mut dyn FnMut(u64, &[u8])) -> Result<()> {
        match self.manifest.part(name) {
            Some(p) => self.verify_part(p, visit),
            None => Ok(()),
        }
    }

    fn verify_part(&self, p: &PartEntry, visit: &mut dyn FnMut(u64, &[u8])) -> Result<()> {
        const VERIFY_BUF: usize = 64 << 10;
        let f = self.file_of(p);
        // Read in small pieces into one buffer, which stays in the heap
        // (a chunk-sized one would be fresh memory every time: on a VM that
        // costs more than the hashing).
        let mut buf = vec![0u8; VERIFY_BUF.min(p.chunk.min(p.len.max(1)) as usize)];
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut done = 0u64;
        for (i, want) in p.sums.iter().enumerate() {
            let n = (p.len - done).min(p.chunk) as usize;
            hasher.reset();
            let mut got = 0;
            while got < n {
                let k = (n - got).min(buf.len());
                f.read_exact_at(&mut buf[..k], p.offset + done + got as u64)
                    .map_err(|_| ImageError::PartTruncated {
                        part: p.name.clone(),
                        file: p.file.clone(),
                        have: done + got as u64,
                        need: p.len,
                    })?;
                hasher.update(&buf[..k]);
                visit(p.offset + done + got as u64, &buf[..k]);
                got += k;
            }
            if hasher.digest() != *want {
                return Err(ImageError::PartChecksum {
                    part: p.name.clone(),
                    file: p.file.clone(),
                    chunk: i,
                    start: p.offset + done,
                    end: p.offset + done + n as u64,
                });
            }
            done += n as u64;
        }
        Ok(())
    }

    pub fn raw_part(&self, name: &str) -> Result<Vec<u8>> {
        let p = self
            .manifest
            .part(name)
            .ok_or_else(|| ImageError::MissingPart(name.into()))?;
        let mut v = vec![0u8; p.len as usize];
        self.file_of(p)
            .read_exact_at(&mut v, p.offset)
            .map_err(io_err(&self.dir))?;
        Ok(v)
    }

    /// Decode part `name`.
    pub fn get<T: DeserializeOwned>(&self, name: &str) -> Result<T> {
        let raw = self.raw_part(name)?;
        postcard::from_bytes(&raw).map_err(|e| ImageError::Decode(name.to_string(), e))
    }

    pub fn pages_path(&self) -> PathBuf {
        self.dir.join(PAGES_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that records the length of every write it is given.
    struct Lengths(Vec<usize>, Vec<u8>);

    impl Write for Lengths {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.push(b.len());
            self.1.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn page_data_reaches_the_kernel_a_quarter_mib_at_most_at_a_time() {
        let data: Vec<u8> = (0..4 * WRITE_PIECE + 4096)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut w = Lengths(Vec::new(), Vec::new());
        write_in_pieces(&mut w, &data).unwrap();
        assert_eq!(
            w.0,
            [WRITE_PIECE, WRITE_PIECE, WRITE_PIECE, WRITE_PIECE, 4096]
        );
        assert_eq!(w.1, data);
        let mut w = Lengths(Vec::new(), Vec::new());
        write_in_pieces(&mut w, &data[..8192]).unwrap();
        assert_eq!(w.0, [8192]);
    }

    #[test]
    fn page_data_appended_to_another_images_checks_as_if_written_at_once() {
        let data: Vec<u8> = (0..2 * CHUNK as usize + 9000)
            .map(|i| (i % 253) as u8)
            .collect();
        // Split inside a chunk, at a chunk's end, and with nothing before.
        for first in [CHUNK as usize + 1234, CHUNK as usize, 0] {
            let t = tempfile::tempdir().unwrap();
            let (a, b) = (t.path().join("a"), t.path().join("b"));
            let mut w = ImageWriter::create(&a).unwrap();
            w.pages().write_all(&data[..first]).unwrap();
            w.put("x", &1u32).unwrap();
            let ma = w.finish(test_manifest()).unwrap();
            // `b` holds an older page file, which a reader still has open.
            let mut old = ImageWriter::create(&b).unwrap();
            old.pages().write_all(&[7u8; 4096]).unwrap();
            let old_pages = File::open(b.join(PAGES_FILE)).unwrap();
            let mut w = ImageWriter::append_to_pages(&b, &a.join(PAGES_FILE), &ma).unwrap();
            assert_eq!(w.pages().offset(), first as u64);
            w.pages().write_all(&data[first..]).unwrap();
            w.put("y", &2u32).unwrap();
            let mb = w.finish(test_manifest()).unwrap();
            assert!(!a.join(PAGES_FILE).exists(), "moved, not copied");
            let img = Image::open_verified(&b).unwrap();
            assert_eq!(img.get::<u32>("y").unwrap(), 2);
            assert!(img.get::<u32>("x").is_err(), "the parts are written anew");
            assert_eq!(fs::read(b.join(PAGES_FILE)).unwrap(), data);
            let whole = mb.part(PAGES_PART).unwrap();
            assert_eq!(whole.sums, chunk_sums(&data, CHUNK), "split at {first}");
            let mut buf = [0u8; 4096];
            old_pages.read_exact_at(&mut buf, 0).unwrap();
            assert_eq!(buf, [7u8; 4096]);
        }
        // A manifest without page data in pages.pmig is refused.
        let t = tempfile::tempdir().unwrap();
        let mut m = test_manifest();
        m.parts.clear();
        assert!(ImageWriter::append_to_pages(t.path(), &t.path().join("none"), &m).is_err());
    }

    fn test_manifest() -> Manifest {
        Manifest {
            pmig_version: "t".into(),
            kernel_release: "k".into(),
            hostname: "h".into(),
            pid: 1,
            created_unix_ms: 0,
            parts: vec![],
        }
    }

    fn sample(dir: &Path) -> Manifest {
        let mut w = ImageWriter::create(dir).unwrap();
        w.put("numbers", &vec![1u32, 2, 3]).unwrap();
        w.put("name", &"hello".to_string()).unwrap();
        w.pages()
            .write_all(&vec![7u8; 3 * PAGE_SIZE as usize])
            .unwrap();
        w.finish(test_manifest()).unwrap()
    }

    #[test]
    fn roundtrip() {
        let d = tempfile::tempdir().unwrap();
        sample(d.path());
        let img = Image::open_verified(d.path()).unwrap();
        assert_eq!(img.get::<Vec<u32>>("numbers").unwrap(), vec![1, 2, 3]);
        assert_eq!(img.get::<String>("name").unwrap(), "hello");
        assert_eq!(img.manifest.part(PAGES_PART).unwrap().len, 3 * PAGE_SIZE);
        assert!(matches!(
            img.get::<String>("nope"),
            Err(ImageError::MissingPart(_))
        ));
    }

    #[test]
    fn zeros_written_ahead_are_written_over_in_order_and_the_rest_left_past_the_part() {
        let d = tempfile::tempdir().unwrap();
        let mut w = ImageWriter::create(d.path()).unwrap();
        let page = PAGE_SIZE as usize;
        w.pages().write_all(&vec![1u8; page]).unwrap();
        // Four pages ahead; then two more asked for from the same end: the
        // two already there are not written again.
        assert_eq!(w.pages().touch_ahead(4 * PAGE_SIZE).unwrap(), 4 * PAGE_SIZE);
        assert_eq!(w.pages().touch_ahead(2 * PAGE_SIZE).unwrap(), 0);
        assert_eq!(w.pages().ahead(), 4 * PAGE_SIZE);
        assert_eq!(w.pages().offset(), PAGE_SIZE, "the data's end did not move");
        w.pages().write_all(&vec![2u8; 2 * page]).unwrap();
        assert_eq!(w.pages().ahead(), 2 * PAGE_SIZE);
        // Past the zeros: the file grows as it would have.
        w.pages().write_all(&vec![3u8; 3 * page]).unwrap();
        assert_eq!(w.pages().ahead(), 0);
        assert_eq!(w.pages().touch_ahead(PAGE_SIZE).unwrap(), PAGE_SIZE);
        w.finish(test_manifest()).unwrap();
        let bytes = fs::read(d.path().join(PAGES_FILE)).unwrap();
        let mut want = vec![1u8; page];
        want.extend(vec![2u8; 2 * page]);
        want.extend(vec![3u8; 3 * page]);
        want.extend(vec![0u8; page]);
        assert!(
            bytes == want,
            "the data in order, then the zeros not written over"
        );
        // The part ends where the data does, and the image reads and
        // verifies as one without the zeros.
        let img = Image::open_verified(d.path()).unwrap();
        assert_eq!(img.manifest.part(PAGES_PART).unwrap().len, 6 * PAGE_SIZE);
    }

    #[test]
    fn parts_decode_from_the_bytes_of_their_file() {
        let d = tempfile::tempdir().unwrap();
        let m = sample(d.path());
        let parts = fs::read(d.path().join(PARTS_FILE)).unwrap();
        assert_eq!(
            m.decode_part::<Vec<u32>>("numbers", PARTS_FILE, &parts)
                .unwrap(),
            vec![1, 2, 3]
        );
        assert_eq!(
            m.decode_part::<String>("name", PARTS_FILE, &parts).unwrap(),
            "hello"
        );
        // A part named in another file, or one the bytes do not hold whole.
        assert!(matches!(
            m.decode_part::<String>("name", PAGES_FILE, &parts),
            Err(ImageError::MissingPart(_))
        ));
        let at = m.part("name").unwrap();
        let short = &parts[..(at.offset + at.len - 1) as usize];
        assert!(matches!(
            m.decode_part::<String>("name", PARTS_FILE, short),
            Err(ImageError::PartTruncated { .. })
        ));
    }

    #[test]
    fn corrupt_page_byte_is_found() {
        let d = tempfile::tempdir().unwrap();
        sample(d.path());
        let p = d.path().join(PAGES_FILE);
        let mut b = fs::read(&p).unwrap();
        b[5000] ^= 1;
        fs::write(&p, b).unwrap();
        assert!(Image::open(d.path()).is_ok(), "open checks only sizes");
        match Image::open_verified(d.path()) {
            Err(ImageError::PartChecksum { part, .. }) => assert_eq!(part, PAGES_PART),
            other => panic!("expected checksum error, got {other:?}"),
        }
    }

    #[test]
    fn truncated_parts_are_refused() {
        let d = tempfile::tempdir().unwrap();
        sample(d.path());
        let p = d.path().join(PARTS_FILE);
        let b = fs::read(&p).unwrap();
        fs::write(&p, &b[..b.len() - 1]).unwrap();
        assert!(matches!(
            Image::open(d.path()),
            Err(ImageError::PartTruncated { .. })
        ));
    }

    #[test]
    fn manifest_damage_version_and_arch() {
        let d = tempfile::tempdir().unwrap();
        sample(d.path());
        let mp = d.path().join(MANIFEST_FILE);
        let good = fs::read(&mp).unwrap();

        let mut b = good.clone();
        *b.last_mut().unwrap() ^= 0x40;
        fs::write(&mp, &b).unwrap();
        assert!(matches!(
            Image::open(d.path()),
            Err(ImageError::ManifestChecksum(_))
        ));

        let mut b = good.clone();
        b[8] = 9;
        fs::write(&mp, &b).unwrap();
        assert!(matches!(
            Image::open(d.path()),
            Err(ImageError::Version { major: 9, .. })
        ));

        let mut b = good.clone();
        b[12] = 0xb7; // aarch64
        fs::write(&mp, &b).unwrap();
        assert!(matches!(
            Image::open(d.path()),
            Err(ImageError::Arch { .. })
        ));

        fs::write(&mp, &good[..20]).unwrap();
        assert!(matches!(
            Image::open(d.path()),
            Err(ImageError::Truncated(_))
        ));

        fs::write(&mp, b"garbage!garbage!garbage!garbage!").unwrap();
        assert!(matches!(
            Image::open(d.path()),
            Err(ImageError::BadMagic(_))
        ));
    }

    #[test]
    fn decoder_never_panics_on_random_bytes() {
        // Cheap deterministic fuzz of the manifest decoder.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for len in 0..400usize {
            let mut raw = Vec::with_capacity(len + HEADER_LEN);
            raw.extend_from_slice(MAGIC);
            raw.extend_from_slice(&FORMAT_MAJOR.to_le_bytes());
            raw.extend_from_slice(&0u16.to_le_bytes());
            raw.extend_from_slice(&ARCH_X86_64.to_le_bytes());
            raw.extend_from_slice(&(len as u64).to_le_bytes());
            let body: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            raw.extend_from_slice(&xxh3_64(&body).to_le_bytes());
            raw.extend_from_slice(&body);
            let _ = decode_manifest(Path::new("fuzz"), &raw);
        }
    }
}
