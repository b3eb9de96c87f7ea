//! Files the process holds open or maps after they were deleted, and
//! memfds: a shell's here-document or long here-string, `tmpfile()`,
//! Python's `TemporaryFile`, any "open, unlink, use" scratch file, a file
//! mapped and then unlinked, the memory file of `memfd_create` (Java's ZGC
//! keeps its heap in one, mapped at three addresses). No path leads to one
//! any more, so it cannot be reopened by path on another node: its bytes
//! move in the image, up to [`MAX_BYTES`] per file.
//!
//! Capture: `files` names each descriptor of such a file
//! ([`FdKind::Ghost`](super::files::FdKind::Ghost), by device and inode)
//! and lists it in `cx.ghost_fds`; `memory` lists each mapping of one in
//! `cx.ghost_maps` (and maps it as a file). This part, captured after both,
//! reads each file once, through `/proc/PID/fd/N` or
//! `/proc/PID/map_files/START-END` (a new open, so the process's offset
//! does not move): its mode, owner and bytes, and a memfd's seals. Only a
//! regular file with no name left (`st_nlink` 0) that no other process
//! holds or maps (`holders`, the memory precheck) is taken: one still named
//! elsewhere, or shared, would become two files that drift apart.
//!
//! Restore: each file is made again, unnamed (`O_TMPFILE`), in the
//! directory it was deleted from if that is here and can hold one, else in
//! `/tmp`, filled and given its mode and owner; a memfd is made with
//! `memfd_create` under its name, filled, given its mode and then its seals.
//! Every descriptor of it is a new open of that file with the descriptor's
//! flags, at its offset (`files`); every mapping maps it (`memory`). The
//! process sees a deleted file in /proc as "DIR/#INODE (deleted)" instead
//! of its old name, a memfd as it was ("/memfd:NAME (deleted)").
//!
//! The memfds and the mappings are in a part of their own, `ghostmaps`
//! (format 1.10), which images without either do not have.
//!
//! A sparse file (ZGC sizes its memfd to its largest heap and uses a part
//! of it) is read as its data extents (`SEEK_DATA`, `SEEK_HOLE`), up to
//! [`MAX_BYTES`] of data whatever its length, and written to part
//! `sparseghosts` (format 1.11) with them; it is made again as long, each
//! extent at its place, the rest holes.

use super::{Capture, Preflight, Resource};
use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

pub struct Ghosts;

/// The most bytes of one deleted file a capture copies (of a sparse one,
/// the bytes of its data, not its holes); a file with more is refused (the
/// process runs on).
pub const MAX_BYTES: u64 = 1 << 30;

/// One deleted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ghost {
    /// `st_dev` and `st_ino` where it was captured: how `files` names it.
    pub dev: u64,
    pub ino: u64,
    /// The path it had (its descriptors' link, without " (deleted)").
    pub path: String,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Its bytes, all of them (encoded as bytes: the same encoding as a
    /// sequence of `u8` in postcard, written and read in one copy); of a
    /// sparse file, the bytes of its data extents, back to back.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// Where `data` goes in a sparse file, and its length. Not in part
    /// `ghosts`: a sparse ghost is written to part `sparseghosts` (1.11),
    /// with these, so that a reader that does not know them finds no
    /// ghost, and refuses the image, rather than make it again dense.
    #[serde(skip)]
    pub sparse: Option<Sparse>,
}

/// The layout of a sparse ghost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sparse {
    /// Its length (`st_size`).
    pub size: u64,
    /// Its data extents, `(offset, length)`, in order (`SEEK_DATA`,
    /// `SEEK_HOLE`); everything else is a hole.
    pub extents: Vec<(u64, u64)>,
}

/// Part `sparseghosts` (format 1.11): the ghosts that are sparse files (a
/// memfd Java's ZGC sizes to its largest heap, of which it uses a part).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseGhosts {
    pub files: Vec<SparseGhost>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseGhost {
    pub ghost: Ghost,
    pub layout: Sparse,
}

impl SparseGhosts {
    pub const PART: &'static str = "sparseghosts";

    /// Writes the ghosts of `s`: the dense ones as part `ghosts`, the
    /// sparse ones as this part, each only if there is one (by reference:
    /// the same encoding as [`GhostsState`] and [`SparseGhosts`], without
    /// copying their bytes).
    pub fn put(s: &Option<GhostsState>, w: &mut pmig_image::ImageWriter) -> Result<()> {
        #[derive(Serialize)]
        struct Dense<'a> {
            files: Vec<&'a Ghost>,
        }
        #[derive(Serialize)]
        struct One<'a> {
            ghost: &'a Ghost,
            layout: &'a Sparse,
        }
        #[derive(Serialize)]
        struct SparseRefs<'a> {
            files: Vec<One<'a>>,
        }
        let Some(s) = s else { return Ok(()) };
        let dense: Vec<&Ghost> = s.files.iter().filter(|g| g.sparse.is_none()).collect();
        let sparse: Vec<One> = s
            .files
            .iter()
            .filter_map(|g| g.sparse.as_ref().map(|layout| One { ghost: g, layout }))
            .collect();
        if !dense.is_empty() {
            w.put(Ghosts::PART, &Dense { files: dense })?;
        }
        if !sparse.is_empty() {
            w.put(Self::PART, &SparseRefs { files: sparse })?;
        }
        Ok(())
    }

    /// The ghosts of both parts, as one state (None if neither has any).
    pub fn join(dense: Option<GhostsState>, sparse: Option<SparseGhosts>) -> Option<GhostsState> {
        let Some(sparse) = sparse else {
            return dense;
        };
        let mut s = dense.unwrap_or_default();
        s.files.extend(sparse.files.into_iter().map(|x| Ghost {
            sparse: Some(x.layout),
            ..x.ghost
        }));
        Some(s)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostsState {
    pub files: Vec<Ghost>,
}

/// Part `ghostmaps` (format 1.10): what the `ghosts` part of format 1.9 has
/// no field for. Written only when a ghost is a memfd or is mapped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostMaps {
    /// The ghosts that are memfds, with their seals.
    pub memfds: Vec<Memfd>,
    /// Every mapping of a ghost.
    pub maps: Vec<GhostMap>,
    /// The executable, when it was deleted (or replaced) since the process
    /// started: one of the ghosts, by device and inode.
    pub exe: Option<(u64, u64)>,
}

impl GhostMaps {
    pub const PART: &'static str = "ghostmaps";

    pub fn is_empty(&self) -> bool {
        self.memfds.is_empty() && self.maps.is_empty() && self.exe.is_none()
    }

    fn seals_of(&self, dev: u64, ino: u64) -> Option<u32> {
        self.memfds
            .iter()
            .find(|m| (m.dev, m.ino) == (dev, ino))
            .map(|m| m.seals)
    }
}

/// A ghost made by `memfd_create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memfd {
    pub dev: u64,
    pub ino: u64,
    /// Its seals (`F_GET_SEALS`; `F_SEAL_SEAL` alone for a memfd made
    /// without `MFD_ALLOW_SEALING`).
    pub seals: u32,
}

/// A mapping of a ghost: the mapping of the `memory` part that starts at
/// `start` maps the ghost `(dev, ino)` (at its own offset and protection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostMap {
    pub start: u64,
    pub dev: u64,
    pub ino: u64,
}

/// A mapping of a ghost, as the memory capture found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundMap {
    pub start: u64,
    pub end: u64,
    pub dev: u64,
    pub ino: u64,
    /// Shared and writable: a memfd sealed against writes cannot be mapped
    /// so again.
    pub writable_shared: bool,
}

/// Whether a mapping's path (`/proc/PID/maps`) names a file that no path
/// leads to any more: a memfd, or a file deleted since it was mapped.
pub fn is_ghost_mapping(path: &str) -> bool {
    path.starts_with("/memfd:") || (path.starts_with('/') && deleted_path(path).is_some())
}

/// Whether the file behind the link `link` is a memfd.
fn is_memfd(link: &str) -> bool {
    link.starts_with("/memfd:")
}

/// A memfd's name, as `memfd_create` was given it.
fn memfd_name(path: &str) -> &str {
    path.strip_prefix("/memfd:").unwrap_or(path)
}

/// Refuses a memfd or deleted file of huge pages (`MFD_HUGETLB`,
/// hugetlbfs): made again on another node it would need huge pages
/// reserved there.
pub fn refuse_huge(pid: libc::pid_t, f: &impl std::os::fd::AsFd, link: &str) -> Result<()> {
    let huge = nix::sys::statfs::fstatfs(f)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::HUGETLBFS_MAGIC);
    if huge {
        return Err(crate::error::unsupported(
            pid,
            format!("a file of huge pages (hugetlbfs: {link})"),
        ));
    }
    Ok(())
}

/// A descriptor of a deleted file, as `files` found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GhostFd {
    pub fd: i32,
    pub dev: u64,
    pub ino: u64,
}

/// The path an fd link names once its file was deleted, if it was.
pub fn deleted_path(link: &str) -> Option<&str> {
    link.strip_suffix(" (deleted)")
}

/// What refuses the deleted file `md` (the `stat` of the process's fd),
/// if anything: only a regular file without a name left, with few enough
/// bytes of data (a sparse file's holes are not copied).
pub fn refusal(md: &std::fs::Metadata) -> Option<String> {
    refusal_above(md, MAX_BYTES)
}

fn refusal_above(md: &std::fs::Metadata, max: u64) -> Option<String> {
    if !md.file_type().is_file() {
        return Some("a deleted special file (not a regular file or directory)".into());
    }
    if md.nlink() > 0 {
        let n = md.nlink();
        return Some(format!(
            "a deleted name of a file that still has {n} other name{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    let data = md.size().min(md.blocks() * 512);
    (data > max).then(|| {
        format!(
            "a deleted file of {} MiB of data (pmig copies deleted files of up to {} MiB)",
            data.div_ceil(1 << 20),
            max >> 20
        )
    })
}

/// Whether fd `fd` of process `other`, whose link is `link`, is the deleted
/// file `(dev, ino)`.
pub fn is_one_of(other: libc::pid_t, fd: i32, link: &str, files: &[(u64, u64)]) -> bool {
    deleted_path(link).is_some()
        && std::fs::metadata(format!("/proc/{other}/fd/{fd}"))
            .is_ok_and(|md| files.contains(&(md.dev(), md.ino())))
}

impl Resource for Ghosts {
    const PART: &'static str = "ghosts";
    type State = GhostsState;

    /// `files` has listed the descriptors in `cx.ghost_fds`, `memory` the
    /// mappings in `cx.ghost_maps`; what part `ghostmaps` holds goes to
    /// `cx.ghost_extra`.
    fn capture(cx: &mut Capture) -> Result<GhostsState> {
        let pid = cx.pid;
        let fds = std::mem::take(&mut cx.ghost_fds);
        let maps = std::mem::take(&mut cx.ghost_maps);
        // Each file once: through an fd of it if there is one, else through
        // one of its mappings.
        let mut sources: Vec<((u64, u64), String, String)> = Vec::new();
        for g in &fds {
            let link = crate::procfs::readlink(pid, &format!("fd/{}", g.fd))?;
            sources.push((
                (g.dev, g.ino),
                format!("/proc/{pid}/fd/{}", g.fd),
                format!("fd {}: {link}", g.fd),
            ));
        }
        for m in &maps {
            let link =
                crate::procfs::readlink(pid, &format!("map_files/{:x}-{:x}", m.start, m.end))?;
            sources.push((
                (m.dev, m.ino),
                format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end),
                format!("mapped at {:#x}: {link}", m.start),
            ));
        }
        let mut files: Vec<Ghost> = Vec::new();
        let mut extra = GhostMaps::default();
        for ((dev, ino), via, what) in sources {
            if files.iter().any(|f| (f.dev, f.ino) == (dev, ino)) {
                continue;
            }
            let (g, seals) = read_one(pid, (dev, ino), &via, &what)?;
            if let Some(seals) = seals {
                let no_writes = (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) as u32;
                if let Some(m) = maps
                    .iter()
                    .find(|m| (m.dev, m.ino) == (dev, ino) && m.writable_shared)
                    .filter(|_| seals & no_writes != 0)
                {
                    return Err(crate::error::unsupported(
                        pid,
                        format!(
                            "a memfd sealed against writes and mapped writable at {:#x} ({})",
                            m.start, g.path
                        ),
                    ));
                }
                extra.memfds.push(Memfd { dev, ino, seals });
            }
            files.push(g);
        }
        extra.maps = maps
            .iter()
            .map(|m| GhostMap {
                start: m.start,
                dev: m.dev,
                ino: m.ino,
            })
            .collect();
        extra.exe = cx.ghost_exe.take();
        cx.ghost_extra = (!extra.is_empty()).then_some(extra);
        Ok(GhostsState { files })
    }

    fn preflight(s: &GhostsState, pf: &mut Preflight) -> Result<()> {
        preflight_with(s, None, pf)
    }
}

/// Reads the ghost `(dev, ino)` through `via` (`what` names it in errors):
/// the file, and a memfd's seals.
fn read_one(
    pid: libc::pid_t,
    (dev, ino): (u64, u64),
    via: &str,
    what: &str,
) -> Result<(Ghost, Option<u32>)> {
    let mut f = std::fs::File::open(via)
        .map_err(|e| EngineError::Other(format!("open {via} ({what}): {e}")))?;
    let md = f
        .metadata()
        .map_err(|e| EngineError::Other(format!("stat {via}: {e}")))?;
    if (md.dev(), md.ino()) != (dev, ino) {
        return Err(EngineError::Other(format!(
            "{what} of process {pid} is no longer the deleted file it was"
        )));
    }
    if let Some(why) = refusal(&md) {
        return Err(crate::error::unsupported(pid, format!("{why} ({what})")));
    }
    let link = std::fs::read_link(via)
        .map(|l| l.to_string_lossy().into_owned())
        .map_err(|e| EngineError::Other(format!("readlink {via}: {e}")))?;
    let seals = if is_memfd(&link) {
        refuse_huge(pid, &f, &link)?;
        let s = nix::fcntl::fcntl(f.as_raw_fd(), nix::fcntl::FcntlArg::F_GET_SEALS)
            .map_err(|e| EngineError::Other(format!("the seals of {via} ({what}): {e}")))?;
        Some(s as u32)
    } else {
        None
    };
    let too_big = || {
        crate::error::unsupported(
            pid,
            format!(
                "a deleted file of more than {} MiB of data ({what})",
                MAX_BYTES >> 20
            ),
        )
    };
    let read_err = |e: std::io::Error| EngineError::Other(format!("read {via} ({what}): {e}"));
    let extents = extents_of(&f, md.size()).map_err(read_err)?;
    // `lseek` moved our own open's offset (not the process's): back to 0.
    std::io::Seek::rewind(&mut f).map_err(read_err)?;
    let (data, sparse) = match extents.as_slice() {
        // Dense (or empty): read to its end, one byte more than allowed, so
        // that a file that grew past it is refused.
        [] | [(0, _)] if extents.iter().map(|e| e.1).sum::<u64>() == md.size() => {
            let mut data = Vec::with_capacity(md.size().min(MAX_BYTES) as usize);
            (&mut f)
                .take(MAX_BYTES + 1)
                .read_to_end(&mut data)
                .map_err(read_err)?;
            (data, None)
        }
        _ => {
            let n: u64 = extents.iter().map(|e| e.1).sum();
            if n > MAX_BYTES {
                return Err(too_big());
            }
            let mut data = vec![0u8; n as usize];
            let mut at = 0usize;
            for &(off, len) in &extents {
                std::os::unix::fs::FileExt::read_exact_at(
                    &f,
                    &mut data[at..at + len as usize],
                    off,
                )
                .map_err(read_err)?;
                at += len as usize;
            }
            let layout = Sparse {
                size: md.size(),
                extents,
            };
            (data, Some(layout))
        }
    };
    if data.len() as u64 > MAX_BYTES {
        return Err(too_big());
    }
    let ghost = Ghost {
        dev,
        ino,
        path: deleted_path(&link).unwrap_or(&link).to_string(),
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        data,
        sparse,
    };
    Ok((ghost, seals))
}

/// [`Ghosts`]' preflight with part `ghostmaps`, if the image has one: makes
/// every ghost again (a memfd as a memfd, with its seals) and lists which
/// helper fd each mapping of one maps. A mapping of a ghost the image does
/// not hold refuses the image, before anything is made.
pub fn preflight_with(
    s: &GhostsState,
    extra: Option<&GhostMaps>,
    pf: &mut Preflight,
) -> Result<()> {
    if let Some(x) = extra {
        let held = |dev: u64, ino: u64| s.files.iter().any(|g| (g.dev, g.ino) == (dev, ino));
        if let Some(m) = x.maps.iter().find(|m| !held(m.dev, m.ino)) {
            return Err(EngineError::Incompatible(format!(
                "the image maps at {:#x} a deleted file its ghosts part does not hold",
                m.start
            )));
        }
        if x.exe.is_some_and(|(dev, ino)| !held(dev, ino)) {
            return Err(EngineError::Incompatible(
                "the image's deleted executable is not in its ghosts part".into(),
            ));
        }
    }
    for g in &s.files {
        let seals = extra.and_then(|x| x.seals_of(g.dev, g.ino));
        let f = match seals {
            Some(seals) => make_memfd(g, seals)?,
            None => make(g)?,
        };
        let fd = pf.keep(f)?;
        pf.ghosts.insert((g.dev, g.ino), fd);
    }
    for m in extra.map(|x| x.maps.as_slice()).unwrap_or_default() {
        pf.ghost_maps.insert(m.start, pf.ghosts[&(m.dev, m.ino)]);
    }
    if let Some(exe) = extra.and_then(|x| x.exe) {
        // The kernel takes as a process's executable only a file that no
        // one has open for writing: a read-only open of the file made
        // again, which its mappings map too.
        let rw = pf.ghosts[&exe];
        let ro = std::fs::File::open(format!("/proc/self/fd/{rw}")).map_err(|e| {
            EngineError::Other(format!("reopen the deleted executable read-only: {e}"))
        })?;
        let fd = pf.keep(ro.into())?;
        pf.ghosts.insert(exe, fd);
        for (start, f) in pf.ghost_maps.iter_mut() {
            if *f == rw {
                tracing::trace!("the executable's mapping at {start:#x} maps fd {fd}");
                *f = fd;
            }
        }
        pf.mapped_files
            .insert(super::memory::EXE_KEY.to_string(), fd);
        pf.drop_helper(rw);
    }
    Ok(())
}

/// A skeleton's bring-up (see [`crate::skeleton`]): the files the held
/// skeleton made from `pre` take the bytes they have in `fin`, the capture
/// of the stop, written through `/proc/PID/fd/N` or `/proc/PID/map_files`
/// of the skeleton (only the pages that differ, then the length). Any other
/// change (a file that came or went, its name, mode or owner, a memfd's
/// seals, a mapping of one) makes the skeleton stale, as does a file its
/// seals keep from being written, grown or shrunk.
pub fn bring_up(
    pre: &crate::image::ProcessImage,
    fin: &crate::image::ProcessImage,
    pid: libc::pid_t,
) -> Result<Vec<MadeGhost>> {
    use crate::error::stale;
    use std::os::unix::fs::FileExt;
    if !crate::skeleton::same(&pre.ghost_maps, &fin.ghost_maps) {
        return Err(stale("its memfds or mappings of deleted files changed"));
    }
    // A deleted file the process has let go of since (a temporary file
    // closed, as programs do all the time; not mapped, nor a memfd, or
    // `ghost_maps` would differ) is let go of in the skeleton too: its
    // descriptor is closed with the others' changes (`Files::update`). One
    // the process holds at the stop only (a temporary file deleted since)
    // is made again here, and `Files::update` opens it in the skeleton.
    let none = GhostsState::default();
    let (a, b) = match (&pre.ghosts, &fin.ghosts) {
        (None, None) => return Ok(Vec::new()),
        (Some(a), Some(b)) => (a, b),
        (Some(a), None) => (a, &none),
        (None, Some(b)) => (&none, b),
    };
    let id = |g: &Ghost| (g.dev, g.ino, g.path.clone(), g.mode, g.uid, g.gid);
    let mut both = Vec::with_capacity(b.files.len());
    let mut made = Vec::new();
    for h in &b.files {
        match a.files.iter().find(|g| (g.dev, g.ino) == (h.dev, h.ino)) {
            Some(g) if id(g) == id(h) => both.push((g, h)),
            Some(_) => return Err(stale(format!("its ghosts changed: {} changed", h.path))),
            // A memfd comes with its seals (`ghost_maps`, compared above).
            None if is_memfd(&h.path) => {
                return Err(stale(format!("its ghosts changed: {} came", h.path)))
            }
            None => {
                let file = make(h).map_err(|e| {
                    stale(format!("{} came, and cannot be made again: {e}", h.path))
                })?;
                made.push(MadeGhost {
                    source: (h.dev, h.ino),
                    path: h.path.clone(),
                    file,
                });
            }
        }
    }
    for (g, h) in both {
        if g.sparse == h.sparse && g.data == h.data {
            continue;
        }
        let via = in_skeleton(pre, pid, g.dev, g.ino)
            .ok_or_else(|| stale(format!("no way into the skeleton's copy of {}", g.path)))?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&via)
            .map_err(|e| stale(format!("open the skeleton's copy of {}: {e}", g.path)))?;
        let write = |bytes: &[u8], at: usize| {
            f.write_all_at(bytes, at as u64).map_err(|e| {
                stale(format!(
                    "write the bytes of {} into the skeleton: {e}",
                    g.path
                ))
            })
        };
        const CHUNK: usize = 4096;
        if g.sparse.is_some() || h.sparse.is_some() {
            let bad = || stale(format!("the extents of {} do not hold its bytes", g.path));
            let (was, now) = (layout_of(g), layout_of(h));
            // Each page of the stop's data that the skeleton's copy does not
            // hold already (where it had data, the same bytes).
            let mut at = 0usize;
            for &(off, len) in &now.extents {
                let y = h.data.get(at..at + len as usize).ok_or_else(bad)?;
                for (i, q) in y.chunks(CHUNK).enumerate() {
                    let o = off + (i * CHUNK) as u64;
                    if bytes_at(&was, &g.data, o, q.len()) != Some(q) {
                        write(q, o as usize)?;
                    }
                }
                at += len as usize;
            }
            // What was data and is a hole now is let go (it reads as
            // zeros, and its memory is freed as the process freed it).
            for (off, len) in uncovered(&was.extents, &now.extents) {
                nix::fcntl::fallocate(
                    f.as_raw_fd(),
                    nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                        | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
                    off as i64,
                    len as i64,
                )
                .map_err(|e| stale(format!("punch a hole into {}: {e}", g.path)))?;
            }
            if was.size != now.size {
                f.set_len(now.size)
                    .map_err(|e| stale(format!("set the length of {}: {e}", g.path)))?;
            }
            continue;
        }
        let mut n = 0;
        for (i, (x, y)) in g.data.chunks(CHUNK).zip(h.data.chunks(CHUNK)).enumerate() {
            if x != y {
                write(y, i * CHUNK)?;
            }
            n = i * CHUNK + y.len();
        }
        if h.data.len() > n {
            write(&h.data[n..], n)?;
        }
        if h.data.len() < g.data.len() {
            f.set_len(h.data.len() as u64)
                .map_err(|e| stale(format!("shorten the skeleton's copy of {}: {e}", g.path)))?;
        }
    }
    Ok(made)
}

/// A deleted file made again for a skeleton ([`bring_up`]).
#[derive(Debug)]
pub struct MadeGhost {
    /// Its device and inode at the source (what the image's descriptors
    /// name).
    pub source: (u64, u64),
    /// Its path when it was deleted.
    pub path: String,
    /// The file, unnamed.
    pub file: OwnedFd,
}

impl MadeGhost {
    /// Gives the file a name for a moment, in the directory it was made
    /// in or in `/tmp` (an injected `open` takes it by name; the
    /// process's own ids may open it, a root's descriptors not): the
    /// name, to remove with [`std::fs::remove_file`] once it is open.
    pub fn named(&self, tag: &str) -> Result<String> {
        let dir = std::path::Path::new(&self.path)
            .parent()
            .and_then(|d| d.to_str())
            .filter(|d| !d.is_empty())
            .unwrap_or("/tmp");
        let from = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let mut last = None;
        for d in [dir, "/tmp"] {
            let name = format!("{d}/.pmig-{}-{tag}", std::process::id());
            match nix::unistd::linkat(
                None,
                from.as_str(),
                None,
                name.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
            ) {
                Ok(()) => return Ok(name),
                Err(e) => last = Some(e),
            }
        }
        Err(EngineError::Other(format!(
            "name the deleted file {} made again: {}",
            self.path,
            last.map(|e| e.to_string()).unwrap_or_default()
        )))
    }
}

/// The layout of `g`: its own, or one extent of all its bytes.
fn layout_of(g: &Ghost) -> Sparse {
    g.sparse.clone().unwrap_or(Sparse {
        size: g.data.len() as u64,
        extents: match g.data.len() {
            0 => vec![],
            n => vec![(0, n as u64)],
        },
    })
}

/// The `len` bytes of the file laid out as `layout` with `data` at file
/// offset `at`, if they are all inside one extent.
fn bytes_at<'a>(layout: &Sparse, data: &'a [u8], at: u64, len: usize) -> Option<&'a [u8]> {
    let mut i = 0u64;
    for &(off, n) in &layout.extents {
        if at >= off && at + len as u64 <= off + n {
            let from = (i + at - off) as usize;
            return data.get(from..from + len);
        }
        i += n;
    }
    None
}

/// The ranges of `was` that no extent of `now` covers, as (offset, length).
fn uncovered(was: &[(u64, u64)], now: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(off, len) in was {
        let mut at = off;
        let end = off + len;
        for &(o, n) in now {
            if o + n <= at || o >= end {
                continue;
            }
            if o > at {
                out.push((at, o - at));
            }
            at = at.max(o + n);
        }
        if at < end {
            out.push((at, end - at));
        }
    }
    out
}

/// A path into the held skeleton `pid`'s copy of the ghost `(dev, ino)` of
/// `pre`: one of its descriptors, else one of its mappings.
fn in_skeleton(
    pre: &crate::image::ProcessImage,
    pid: libc::pid_t,
    dev: u64,
    ino: u64,
) -> Option<String> {
    use super::files::FdKind;
    let fd =
        pre.files.fds.iter().find(
            |f| matches!(f.kind, FdKind::Ghost { dev: d, ino: i, .. } if (d, i) == (dev, ino)),
        );
    if let Some(f) = fd {
        return Some(format!("/proc/{pid}/fd/{}", f.fd));
    }
    let m = pre
        .ghost_maps
        .as_ref()?
        .maps
        .iter()
        .find(|m| (m.dev, m.ino) == (dev, ino))?;
    let v = pre.memory.vmas.iter().find(|v| v.start == m.start)?;
    Some(format!("/proc/{pid}/map_files/{:x}-{:x}", v.start, v.end))
}

/// The data extents of `f`, `size` bytes long, as `(offset, length)`:
/// everything between them is a hole. A file system that does not tell
/// holes makes it one extent.
pub(crate) fn extents_of(f: &std::fs::File, size: u64) -> std::io::Result<Vec<(u64, u64)>> {
    use nix::unistd::{lseek, Whence};
    let mut out = Vec::new();
    let mut at = 0i64;
    let end = size as i64;
    while at < end {
        let data = match lseek(f.as_raw_fd(), at, Whence::SeekData) {
            Ok(d) => d,
            // No data after `at`: the rest is a hole.
            Err(nix::errno::Errno::ENXIO) => break,
            Err(e) => return Err(e.into()),
        };
        if data >= end {
            break;
        }
        let hole = match lseek(f.as_raw_fd(), data, Whence::SeekHole) {
            Ok(h) => h.min(end),
            Err(e) => return Err(e.into()),
        };
        if hole <= data {
            break;
        }
        out.push((data as u64, (hole - data) as u64));
        at = hole;
    }
    Ok(out)
}

/// Fills `f` with `g`'s bytes (a sparse one: its extents, at their places,
/// the rest holes) and gives it `g`'s owner and mode.
fn fill(f: &mut std::fs::File, g: &Ghost) -> Result<()> {
    let again = |what: &str, e: std::io::Error| {
        EngineError::Other(format!("{what} of the deleted file {} again: {e}", g.path))
    };
    match &g.sparse {
        None => f.write_all(&g.data),
        Some(layout) => write_sparse(f, layout, &g.data),
    }
    .map_err(|e| again("write the bytes", e))?;
    // The owner is best effort: a restore that is not root keeps its own.
    let _ = std::os::unix::fs::fchown(&*f, Some(g.uid), Some(g.gid));
    f.set_permissions(std::fs::Permissions::from_mode(g.mode))
        .map_err(|e| again("set the mode", e))
}

/// Writes `data` into `f` at the extents of `layout`, and makes `f` as long
/// as `layout` says. The extents must hold exactly `data`'s bytes.
fn write_sparse(f: &std::fs::File, layout: &Sparse, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let n: u64 = layout.extents.iter().map(|e| e.1).sum();
    let inside = layout
        .extents
        .iter()
        .all(|&(off, len)| off.checked_add(len).is_some_and(|e| e <= layout.size));
    if n != data.len() as u64 || !inside {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "its extents do not hold its bytes",
        ));
    }
    f.set_len(layout.size)?;
    let mut at = 0usize;
    for &(off, len) in &layout.extents {
        f.write_all_at(&data[at..at + len as usize], off)?;
        at += len as usize;
    }
    Ok(())
}

/// The memfd `g` made again under its name, with its bytes, mode and owner,
/// then its seals (after the bytes: a seal may forbid writing them).
fn make_memfd(g: &Ghost, seals: u32) -> Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    let name = std::ffi::CString::new(memfd_name(&g.path)).map_err(|_| {
        EngineError::Incompatible(format!("the memfd name {:?} holds a NUL byte", g.path))
    })?;
    let fd = memfd_create(
        &name,
        MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
    )
    .map_err(|e| EngineError::Other(format!("memfd_create for {}: {e}", g.path)))?;
    let mut f = std::fs::File::from(fd);
    fill(&mut f, g)?;
    if seals != 0 {
        let flags = nix::fcntl::SealFlag::from_bits_retain(seals as i32);
        nix::fcntl::fcntl(f.as_raw_fd(), nix::fcntl::FcntlArg::F_ADD_SEALS(flags)).map_err(
            |e| EngineError::Incompatible(format!("seal the memfd {} ({seals:#x}): {e}", g.path)),
        )?;
    }
    Ok(f.into())
}

/// An unnamed file (`O_TMPFILE`) in `dir`.
fn unnamed_in(dir: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir)
}

/// The file `g` made again, unnamed, with its bytes, mode and owner.
fn make(g: &Ghost) -> Result<OwnedFd> {
    let dir = std::path::Path::new(&g.path)
        .parent()
        .and_then(|d| d.to_str())
        .filter(|d| !d.is_empty())
        .unwrap_or("/tmp");
    let mut f = unnamed_in(dir)
        .or_else(|_| unnamed_in("/tmp"))
        .map_err(|e| {
            EngineError::Incompatible(format!(
                "cannot make the deleted file {} again (O_TMPFILE in {dir} and /tmp): {e}",
                g.path
            ))
        })?;
    fill(&mut f, g)?;
    Ok(f.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom};
    use std::os::fd::AsRawFd;

    #[test]
    fn the_bytes_encode_as_format_1_9_wrote_them() {
        // Format 1.9 encoded `data` as a plain sequence of u8.
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Was {
            dev: u64,
            ino: u64,
            path: String,
            mode: u32,
            uid: u32,
            gid: u32,
            data: Vec<u8>,
        }
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let g = Ghost {
            dev: 1,
            ino: 2,
            path: "/tmp/x".into(),
            mode: 0o600,
            uid: 3,
            gid: 4,
            data: data.clone(),
            sparse: None,
        };
        let was = Was {
            dev: 1,
            ino: 2,
            path: "/tmp/x".into(),
            mode: 0o600,
            uid: 3,
            gid: 4,
            data,
        };
        let now = postcard::to_allocvec(&g).unwrap();
        assert_eq!(now, postcard::to_allocvec(&was).unwrap());
        assert_eq!(postcard::from_bytes::<Was>(&now).unwrap(), was);
        assert_eq!(postcard::from_bytes::<Ghost>(&now).unwrap(), g);
    }

    #[test]
    fn memfds_and_deleted_files_are_ghost_mappings() {
        assert!(is_ghost_mapping("/memfd:java_heap (deleted)"));
        assert!(is_ghost_mapping("/tmp/x (deleted)"));
        assert!(!is_ghost_mapping("/usr/lib/libc.so.6"));
        assert!(!is_ghost_mapping("[heap]"));
        assert!(!is_ghost_mapping(""));
        assert_eq!(memfd_name("/memfd:java_heap"), "java_heap");
    }

    #[test]
    fn a_memfd_is_made_again_with_its_name_bytes_and_seals() {
        let g = Ghost {
            dev: 1,
            ino: 2,
            path: "/memfd:pmig-test".into(),
            mode: 0o600,
            uid: 0,
            gid: 0,
            data: b"heap bytes".to_vec(),
            sparse: None,
        };
        let seals = (libc::F_SEAL_GROW | libc::F_SEAL_SEAL) as u32;
        let mut f = std::fs::File::from(make_memfd(&g, seals).unwrap());
        let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        assert_eq!(link.to_str().unwrap(), "/memfd:pmig-test (deleted)");
        let got = nix::fcntl::fcntl(f.as_raw_fd(), nix::fcntl::FcntlArg::F_GET_SEALS).unwrap();
        assert_eq!(got as u32, seals);
        assert_eq!(f.metadata().unwrap().mode() & 0o7777, 0o600);
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "heap bytes");
        // Sealed against growing.
        assert!(f.write_all(b"!").is_err());
    }

    /// A sparse memfd: 10 MiB long, two pages of data. It is read as two
    /// extents, written to and read from an image as part `sparseghosts`
    /// (the dense ghost beside it as part `ghosts`), and made again with
    /// the same bytes at the same places, the rest holes.
    #[test]
    fn a_sparse_memfd_moves_as_its_data_and_holes() {
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        use std::os::unix::fs::FileExt;
        let name = std::ffi::CString::new("pmig-sparse").unwrap();
        let f = std::fs::File::from(memfd_create(&name, MemFdCreateFlag::MFD_CLOEXEC).unwrap());
        f.set_len(10 << 20).unwrap();
        f.write_all_at(b"abc", (1 << 20) + 5).unwrap();
        f.write_all_at(&[9u8; 4096], 5 << 20).unwrap();
        let md = f.metadata().unwrap();
        let me = std::process::id() as libc::pid_t;
        let via = format!("/proc/self/fd/{}", f.as_raw_fd());
        let (g, seals) = read_one(me, (md.dev(), md.ino()), &via, "test").unwrap();
        assert!(seals.is_some());
        let layout = g.sparse.clone().expect("sparse");
        assert_eq!(layout.size, 10 << 20);
        assert_eq!(layout.extents, vec![(1 << 20, 4096), (5 << 20, 4096)]);
        assert_eq!(g.data.len(), 8192);
        assert_eq!(&g.data[5..8], b"abc");
        // A dense one is read whole, from its start.
        let name = std::ffi::CString::new("pmig-dense").unwrap();
        let d1 = std::fs::File::from(memfd_create(&name, MemFdCreateFlag::MFD_CLOEXEC).unwrap());
        d1.write_all_at(b"hello", 0).unwrap();
        let md1 = d1.metadata().unwrap();
        let via1 = format!("/proc/self/fd/{}", d1.as_raw_fd());
        let (g1, _) = read_one(me, (md1.dev(), md1.ino()), &via1, "test").unwrap();
        assert_eq!((g1.data.as_slice(), g1.sparse), (&b"hello"[..], None));
        // Through an image, beside a dense ghost.
        let dense = Ghost {
            dev: 7,
            ino: 8,
            path: "/tmp/dense".into(),
            mode: 0o600,
            uid: 0,
            gid: 0,
            data: b"dense".to_vec(),
            sparse: None,
        };
        let state = Some(GhostsState {
            files: vec![dense.clone(), g.clone()],
        });
        let d = tempfile::tempdir().unwrap();
        let mut w = pmig_image::ImageWriter::create(d.path()).unwrap();
        SparseGhosts::put(&state, &mut w).unwrap();
        let manifest = pmig_image::Manifest {
            pmig_version: "t".into(),
            kernel_release: "t".into(),
            hostname: "t".into(),
            pid: 1,
            created_unix_ms: 0,
            parts: vec![],
        };
        w.finish(manifest).unwrap();
        let img = pmig_image::Image::open_verified(d.path()).unwrap();
        let only: GhostsState = img.get(Ghosts::PART).unwrap();
        assert_eq!(only.files, vec![dense.clone()]);
        let sparse: SparseGhosts = img.get(SparseGhosts::PART).unwrap();
        assert_eq!(sparse.files.len(), 1);
        let back = SparseGhosts::join(Some(only), Some(sparse));
        assert_eq!(back, state);
        // Made again: the bytes at their places, holes elsewhere.
        let again = std::fs::File::from(make_memfd(&g, 0).unwrap());
        let amd = again.metadata().unwrap();
        assert_eq!(amd.size(), 10 << 20);
        assert!(amd.blocks() * 512 <= 64 << 10, "{} blocks", amd.blocks());
        let mut buf = [0u8; 8];
        again.read_exact_at(&mut buf, (1 << 20) + 3).unwrap();
        assert_eq!(&buf, b"\0\0abc\0\0\0");
        again.read_exact_at(&mut buf, (5 << 20) + 4090).unwrap();
        assert_eq!(buf, [9, 9, 9, 9, 9, 9, 0, 0]);
        again.read_exact_at(&mut buf, 8 << 20).unwrap();
        assert_eq!(buf, [0; 8]);
        // Extents that do not hold the bytes are refused.
        let bad = Ghost {
            data: vec![1u8; 100],
            ..g.clone()
        };
        assert!(make_memfd(&bad, 0).is_err());
    }

    #[test]
    fn a_mapping_of_a_ghost_the_image_does_not_hold_is_refused() {
        let s = GhostsState { files: vec![] };
        let extra = GhostMaps {
            memfds: vec![],
            maps: vec![GhostMap {
                start: 0x1000,
                dev: 1,
                ino: 2,
            }],
            exe: None,
        };
        let mut pf = Preflight::new(Default::default(), 2);
        let e = preflight_with(&s, Some(&extra), &mut pf).unwrap_err();
        assert!(e.to_string().contains("does not hold"), "{e}");
        assert!(pf.helpers.is_empty());
    }

    /// Images before and after, with one ghost held at `fd` of this
    /// process, its bytes `a` then `b`.
    fn images_with(
        fd: i32,
        g: &Ghost,
        b: &[u8],
    ) -> (crate::image::ProcessImage, crate::image::ProcessImage) {
        use crate::resources::files::{Fd, FdKind};
        let image = |data: &[u8]| {
            let mut pi = crate::image::tests_support::empty_image();
            pi.files.fds.push(Fd {
                fd,
                flags: libc::O_RDWR,
                cloexec: true,
                kind: FdKind::Ghost {
                    dev: g.dev,
                    ino: g.ino,
                    pos: 0,
                },
            });
            pi.ghosts = Some(GhostsState {
                files: vec![Ghost {
                    data: data.to_vec(),
                    ..g.clone()
                }],
            });
            pi
        };
        (image(&g.data), image(b))
    }

    /// A sparse memfd whose data moved between the two captures: the
    /// skeleton's copy takes the stop's layout, its bytes and its holes.
    #[test]
    fn a_skeleton_follows_a_sparse_file_whose_holes_moved() {
        use std::os::unix::fs::FileExt;
        const P: u64 = 4096;
        let page = |c: u8| vec![c; P as usize];
        let g = Ghost {
            dev: 1,
            ino: 2,
            path: "/memfd:pmig-sparse".into(),
            mode: 0o600,
            uid: 0,
            gid: 0,
            data: [page(b'a'), page(b'b')].concat(),
            sparse: Some(Sparse {
                size: 1 << 20,
                extents: vec![(0, P), (10 * P, P)],
            }),
        };
        let f = std::fs::File::from(make_memfd(&g, 0).unwrap());
        // The stop: page 0 let go, page 10 rewritten, page 300 new, and
        // the file twice as long.
        let b = [page(b'c'), page(b'd')].concat();
        let now = Sparse {
            size: 2 << 20,
            extents: vec![(10 * P, P), (300 * P, P)],
        };
        let (pre, mut fin) = images_with(f.as_raw_fd(), &g, &b);
        fin.ghosts.as_mut().unwrap().files[0].sparse = Some(now.clone());
        let me = std::process::id() as libc::pid_t;
        bring_up(&pre, &fin, me).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 2 << 20);
        assert_eq!(extents_of(&f, 2 << 20).unwrap(), now.extents);
        let at = |o: u64| {
            let mut buf = vec![0u8; P as usize];
            f.read_exact_at(&mut buf, o).unwrap();
            buf
        };
        assert_eq!(at(0), vec![0u8; P as usize]);
        assert_eq!(at(10 * P), page(b'c'));
        assert_eq!(at(300 * P), page(b'd'));
        assert_eq!(
            uncovered(&[(0, 100), (200, 50)], &[(10, 20), (40, 10), (190, 20)]),
            vec![(0, 10), (30, 10), (50, 50), (210, 40)]
        );
    }

    /// A deleted file `/tmp/gone` (device 1, inode 2) of `len` bytes of 7.
    fn gone_file(len: usize) -> Ghost {
        Ghost {
            dev: 1,
            ino: 2,
            path: "/tmp/gone".into(),
            mode: 0o600,
            uid: 0,
            gid: 0,
            data: vec![7u8; len],
            sparse: None,
        }
    }

    #[test]
    fn a_skeleton_takes_the_bytes_of_the_stop_into_its_own_file() {
        let g = gone_file(3 * 4096 + 100);
        // Longer, one page changed; then shorter.
        let mut b = g.data.clone();
        b[4096 + 5] = 9;
        b.extend_from_slice(b"more");
        let f = std::fs::File::from(make(&g).unwrap());
        let (pre, fin) = images_with(f.as_raw_fd(), &g, &b);
        let me = std::process::id() as libc::pid_t;
        bring_up(&pre, &fin, me).unwrap();
        let read = |f: &std::fs::File| {
            let mut v = Vec::new();
            let mut r = std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
            r.read_to_end(&mut v).unwrap();
            v
        };
        assert_eq!(read(&f), b);
        let c = b"short".to_vec();
        let (pre, fin) = images_with(
            f.as_raw_fd(),
            &Ghost {
                data: b,
                ..g.clone()
            },
            &c,
        );
        bring_up(&pre, &fin, me).unwrap();
        assert_eq!(read(&f), c);
        // Another mode: stale, the file untouched.
        let (pre, mut fin) = images_with(
            f.as_raw_fd(),
            &Ghost {
                data: c.clone(),
                ..g.clone()
            },
            b"x",
        );
        fin.ghosts.as_mut().unwrap().files[0].mode = 0o644;
        let e = bring_up(&pre, &fin, me).unwrap_err();
        assert!(matches!(e, EngineError::Stale(_)), "{e}");
        assert_eq!(read(&f), c);
    }

    /// A deleted file the process closed between the two captures is let
    /// go of (its descriptor follows with the others); one it holds at the
    /// stop only is made again, with its bytes and mode, for the skeleton
    /// to open; a memfd that came makes the skeleton stale.
    #[test]
    fn a_skeleton_lets_a_deleted_file_go_and_makes_one_that_came() {
        let g = gone_file(100);
        let f = std::fs::File::from(make(&g).unwrap());
        let me = std::process::id() as libc::pid_t;
        let (pre, mut fin) = images_with(f.as_raw_fd(), &g, &g.data);
        let held = fin.ghosts.take();
        assert!(bring_up(&pre, &fin, me).unwrap().is_empty());
        fin.ghosts = held;
        fin.ghosts.as_mut().unwrap().files[0].ino = 3;
        let made = bring_up(&pre, &fin, me).unwrap();
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].source, (1, 3));
        let name = made[0].named("test").unwrap();
        let (bytes, md) = (std::fs::read(&name), std::fs::metadata(&name));
        std::fs::remove_file(&name).unwrap();
        assert_eq!(bytes.unwrap(), g.data);
        assert_eq!(md.unwrap().permissions().mode() & 0o7777, 0o600);
        let (mut pre, mut fin) = images_with(f.as_raw_fd(), &g, &g.data);
        pre.ghosts = None;
        fin.ghosts.as_mut().unwrap().files[0].path = "/memfd:x (deleted)".into();
        let e = bring_up(&pre, &fin, me).unwrap_err();
        assert!(
            matches!(&e, EngineError::Stale(w) if w.contains("came")),
            "{e}"
        );
    }

    #[test]
    fn a_memfd_sealed_against_writes_makes_the_skeleton_stale() {
        let g = Ghost {
            dev: 1,
            ino: 2,
            path: "/memfd:sealed".into(),
            mode: 0o600,
            uid: 0,
            gid: 0,
            data: b"fixed".to_vec(),
            sparse: None,
        };
        let f = std::fs::File::from(make_memfd(&g, libc::F_SEAL_WRITE as u32).unwrap());
        let (pre, fin) = images_with(f.as_raw_fd(), &g, b"fixes");
        let e = bring_up(&pre, &fin, std::process::id() as libc::pid_t).unwrap_err();
        assert!(matches!(e, EngineError::Stale(_)), "{e}");
    }

    #[test]
    fn a_deleted_link_names_its_path() {
        assert_eq!(
            deleted_path("/tmp/sh-thd.x (deleted)"),
            Some("/tmp/sh-thd.x")
        );
        assert_eq!(deleted_path("/tmp/x"), None);
    }

    #[test]
    fn only_an_unnamed_regular_file_small_enough_is_taken() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = std::fs::File::create(&p).unwrap();
        let named = refusal(&f.metadata().unwrap());
        assert!(
            named
                .as_deref()
                .is_some_and(|w| w.ends_with("still has 1 other name")),
            "{named:?}"
        );
        std::fs::remove_file(&p).unwrap();
        assert_eq!(refusal(&f.metadata().unwrap()), None);
        // Above the limit in data (here 1 MiB): refused; far longer but
        // sparse, with little data: taken.
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![1u8; (1 << 20) + 1], 0).unwrap();
        let big = refusal_above(&f.metadata().unwrap(), 1 << 20);
        assert!(
            big.as_deref().is_some_and(|w| w.contains("2 MiB of data")),
            "{big:?}"
        );
        f.set_len(0).unwrap();
        f.write_all_at(b"x", 100 << 20).unwrap();
        assert_eq!(refusal_above(&f.metadata().unwrap(), 1 << 20), None);
        let dir = refusal(&std::fs::metadata(d.path()).unwrap());
        assert!(dir.is_some());
    }

    #[test]
    fn a_ghost_is_made_again_unnamed_with_its_bytes_and_mode() {
        let d = tempfile::tempdir().unwrap();
        let g = Ghost {
            dev: 1,
            ino: 2,
            path: d.path().join("gone").to_str().unwrap().to_string(),
            mode: 0o640,
            uid: 0,
            gid: 0,
            data: b"still here".to_vec(),
            sparse: None,
        };
        let fd = make(&g).unwrap();
        let mut f = std::fs::File::from(fd);
        let md = f.metadata().unwrap();
        assert_eq!(md.nlink(), 0);
        assert_eq!(md.mode() & 0o7777, 0o640);
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "still here");
        // In the directory it was deleted from.
        let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        assert!(link.starts_with(d.path()), "{link:?}");
        // Nothing named was left there.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        f.write_all(b"!").unwrap();
        // A directory that is not here: /tmp.
        let elsewhere = Ghost {
            path: "/no/such/dir/x".into(),
            ..g
        };
        let f2 = std::fs::File::from(make(&elsewhere).unwrap());
        let link = std::fs::read_link(format!("/proc/self/fd/{}", f2.as_raw_fd())).unwrap();
        assert!(link.starts_with("/tmp"), "{link:?}");
    }
}
