//! System V shared memory (`shmget`, `shmat`) that the process alone has
//! attached: PostgreSQL's interlock segment, older servers' shared buffers,
//! X11's MIT-SHM images.
//!
//! Capture: `memory` lists each mapping of a segment (`/SYSV<key>
//! (deleted)` in the maps, whose inode column is the segment's id) as
//! [`Backing::SysV`](super::memory::Backing::SysV), with its pages (the
//! segment's data extents, [`super::memory::shmem_data_runs`], so pages
//! this process has not mapped count too),
//! and hands the mappings to this part in `cx.sysv_maps`. This part groups
//! them into attaches (one `shmat` each: mappings that follow each other
//! from offset 0 to the segment's end, split only by `mprotect`) and reads
//! each segment's id, key, size, owner, mode and creation time
//! (`IPC_STAT`). Refused, with the process running on: a segment attached
//! by another process too (its attach count is higher than the process's
//! mappings of it), an attach partly unmapped, a segment of huge pages, and
//! a process in another IPC namespace than pmig's.
//!
//! Restore (`preflight`, before any process exists): each segment must come
//! back under the same id, which the process holds in its memory and will
//! use (`shmctl(id, IPC_RMID)` at its exit). If this node's IPC namespace
//! has a segment of that id with the same key, size, creator and creation
//! time, it is the very segment (the nodes of one machine share it) and is
//! used as it is. Otherwise it is made again: no segment may have that id
//! or key here, `/proc/sys/kernel/shm_next_id` asks the kernel for the id,
//! and the segment gets its owner, mode and lock (`SHM_LOCK`) back. A
//! segment made here is removed again if the restore fails. `memory`'s
//! plan attaches it where it was (`shmat` with `SHM_REMAP`), writes its
//! pages, attaches it read-only again if no mapping of it was writable,
//! and gives each mapping its protection. A segment marked for removal
//! (`SHM_DEST`) is marked again once attached (`finish`). No skeleton is
//! built for such a process: one is restored while the process still runs
//! at the source, and on a node that shares the segment it would write old
//! pages over the live ones.
//!
//! After the handover the source's holder lets go of the frozen original's
//! attaches ([`detach_frozen`]) and removes a segment nothing on the source
//! attaches any more: it moved with the process.
//!
//! Not seen, so not moved: a segment the process made or knows by id but
//! has not attached.

use super::{Capture, Finish, Preflight, Resource};
use crate::error::{unsupported, EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};

pub struct SysvShm;

/// `shm_perm.mode` bits besides the permissions.
const SHM_DEST: u32 = 0o1000;
const SHM_LOCKED: u32 = 0o2000;
/// `shmat` flags (linux/shm.h).
pub const SHM_RDONLY: u64 = 0o10000;
pub const SHM_REMAP: u64 = 0o40000;
pub const SHM_EXEC: u64 = 0o100000;
const SHM_LOCK: i32 = 11;
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
const PAGE: u64 = 4096;

/// One mapping of a segment, as `memory` found it.
#[derive(Debug, Clone, Copy)]
pub struct FoundMap {
    pub start: u64,
    pub end: u64,
    /// Offset in the segment.
    pub offset: u64,
    pub shmid: i32,
}

/// One segment and where the process has it attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub shmid: i32,
    /// `IPC_PRIVATE` (0) for a private segment, and for one marked for
    /// removal.
    pub key: i32,
    pub size: u64,
    /// `shm_perm.mode`: permissions, `SHM_DEST`, `SHM_LOCKED`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub cuid: u32,
    pub cgid: u32,
    /// `shm_ctime`: when it was made or last changed by `IPC_SET`.
    pub ctime: i64,
    /// The start and end of each attach.
    pub attaches: Vec<(u64, u64)>,
}

impl Segment {
    fn dest(&self) -> bool {
        self.mode & SHM_DEST != 0
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysvState {
    pub segments: Vec<Segment>,
}

impl SysvState {
    /// The segment and attach `[start, end)` the mapping at `addr` is part of.
    pub fn attach_of(&self, addr: u64) -> Option<(&Segment, (u64, u64))> {
        self.segments.iter().find_map(|s| {
            s.attaches
                .iter()
                .find(|&&(a, e)| a <= addr && addr < e)
                .map(|&a| (s, a))
        })
    }
}

/// A segment a restore made: its id, and its change time once made (the
/// id alone may name another segment later; the time tells them apart in
/// any pid namespace).
pub type MadeSegment = (i32, i64);

/// The segments made by a restore; removed when dropped, unless kept.
#[derive(Debug, Default)]
pub struct Made(Vec<MadeSegment>);

impl Made {
    /// The segments made: what [`remove_made`] removes if the restored
    /// process is killed after all.
    pub fn list(&self) -> Vec<MadeSegment> {
        self.0.clone()
    }

    /// The restore succeeded: they are the process's now.
    pub fn keep(&mut self) {
        self.0.clear();
    }
}

/// Removes the segments a restore made ([`Made::list`]) for a restored
/// process that was killed after the restore (its migration failed later).
/// A segment is removed only while it is still the one made then (its id
/// and change time), and is left, with a warning, while anything attaches
/// it. Without this a retry to the same node would find the id taken.
pub fn remove_made(made: &[MadeSegment]) {
    for &(id, ctime) in made {
        match stat(id) {
            Ok(ds) if ds.shm_ctime != ctime => {}
            Ok(ds) if ds.shm_nattch > 0 => tracing::warn!(
                "System V shared memory {id}, made for a restored process since killed, is left: {} attaches remain",
                ds.shm_nattch
            ),
            Ok(_) => match rmid(id) {
                Ok(()) => tracing::info!(
                    "System V shared memory {id}, made for a restored process since killed, removed"
                ),
                Err(e) => tracing::warn!("remove System V shared memory {id}: {e}"),
            },
            // Gone already (removed, or marked and no longer attached).
            Err(_) => {}
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for &(id, _) in &self.0 {
            if let Err(e) = rmid(id) {
                tracing::warn!("remove System V shared memory {id} after a failed restore: {e}");
            }
        }
    }
}

fn stat(shmid: i32) -> std::io::Result<libc::shmid_ds> {
    // SAFETY: shmid_ds is plain data; all zeros is a valid value.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT writes one shmid_ds into `ds`, which we own.
    if unsafe { libc::shmctl(shmid, libc::IPC_STAT, &mut ds) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ds)
}

fn rmid(shmid: i32) -> std::io::Result<()> {
    // SAFETY: IPC_RMID reads no buffer.
    if unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The mappings of `/proc/PID/maps` that are System V shared memory.
pub fn is_sysv(path: &str) -> bool {
    path.starts_with("/SYSV")
}

/// Whether `pid` has System V shared memory attached now (false if its
/// mappings cannot be read).
pub fn attached_by(pid: pid_t) -> bool {
    crate::procfs::maps(pid).is_ok_and(|m| m.iter().any(|l| is_sysv(&l.path)))
}

/// Groups the mappings of segments into attaches; refuses what cannot be
/// attached again as it was. Returns (shmid, attach start, attach end,
/// mappings in it).
fn attaches(pid: pid_t, maps: &[FoundMap]) -> Result<Vec<(i32, u64, u64, usize)>> {
    let mut sorted = maps.to_vec();
    sorted.sort_by_key(|m| m.start);
    let mut out: Vec<(i32, u64, u64, usize)> = Vec::new();
    for m in &sorted {
        match out.last_mut() {
            Some((id, base, end, n))
                if *id == m.shmid && *end == m.start && m.offset == m.start - *base =>
            {
                *end = m.end;
                *n += 1;
            }
            _ if m.offset == 0 => out.push((m.shmid, m.start, m.end, 1)),
            _ => {
                return Err(unsupported(
                    pid,
                    format!(
                        "System V shared memory attached in part (segment {}, from offset {:#x} at {:#x})",
                        m.shmid, m.offset, m.start
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// Checks and reads every segment of `maps` (mappings of `pid`).
fn segments(pid: pid_t, maps: &[FoundMap]) -> Result<Vec<Segment>> {
    if maps.is_empty() {
        return Ok(Vec::new());
    }
    let theirs = crate::procfs::readlink(pid, "ns/ipc")?;
    let ours = std::fs::read_link("/proc/self/ns/ipc")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    if theirs != ours {
        return Err(unsupported(
            pid,
            "System V shared memory of another IPC namespace",
        ));
    }
    let mut out: Vec<Segment> = Vec::new();
    for (shmid, base, end, _) in attaches(pid, maps)? {
        if let Some(s) = out.iter_mut().find(|s| s.shmid == shmid) {
            s.attaches.push((base, end));
            continue;
        }
        let ds = stat(shmid).map_err(|e| EngineError::Sys {
            what: format!("read System V shared memory {shmid} (IPC_STAT)"),
            source: e,
        })?;
        let via = format!("/proc/{pid}/map_files/{base:x}-{end:x}");
        if let Ok(fs) = nix::sys::statfs::statfs(via.as_str()) {
            if fs.filesystem_type().0 == HUGETLBFS_MAGIC {
                return Err(unsupported(
                    pid,
                    format!("System V shared memory of huge pages (segment {shmid})"),
                ));
            }
        }
        out.push(Segment {
            shmid,
            key: ds.shm_perm.__key,
            size: ds.shm_segsz as u64,
            mode: ds.shm_perm.mode as u32,
            uid: ds.shm_perm.uid,
            gid: ds.shm_perm.gid,
            cuid: ds.shm_perm.cuid,
            cgid: ds.shm_perm.cgid,
            ctime: ds.shm_ctime,
            attaches: vec![(base, end)],
        });
    }
    for s in &mut out {
        let pages = s.size.div_ceil(PAGE) * PAGE;
        if let Some(&(a, e)) = s.attaches.iter().find(|(a, e)| e - a != pages) {
            return Err(unsupported(
                pid,
                format!(
                    "System V shared memory attached in part (segment {}: {:#x}-{a:#x} of {pages} bytes)",
                    s.shmid, e
                ),
            ));
        }
        // Every mapping of a segment counts as one attach (a split one too).
        let ours = maps.iter().filter(|m| m.shmid == s.shmid).count() as u64;
        let nattch = stat(s.shmid).map(|d| d.shm_nattch).unwrap_or(0);
        if nattch > ours {
            return Err(unsupported(
                pid,
                format!(
                    "System V shared memory attached by another process too (segment {}, key {:#x}, {nattch} attaches, {ours} of them this process's)",
                    s.shmid, s.key
                ),
            ));
        }
    }
    Ok(out)
}

/// The mappings of segments among `maps`.
fn found(maps: &[crate::procfs::MapLine]) -> Vec<FoundMap> {
    maps.iter()
        .filter(|m| is_sysv(&m.path))
        .map(|m| FoundMap {
            start: m.start,
            end: m.end,
            offset: m.offset,
            shmid: m.inode as i32,
        })
        .collect()
}

/// The mappings of segments in `/proc/PID/maps`.
fn found_in_maps(pid: pid_t) -> Result<Vec<FoundMap>> {
    Ok(found(&crate::procfs::maps(pid)?))
}

/// The precheck of `pid`'s segments, on the mappings `memory`'s precheck
/// read (one read of the maps for both, before and after the freeze).
pub fn precheck_maps(pid: pid_t, maps: &[crate::procfs::MapLine]) -> Result<()> {
    segments(pid, &found(maps)).map(|_| ())
}

/// After the handover: the frozen original lets go of every segment it has
/// attached (`shmdt`, injected). Where the copy shares the segment (the
/// nodes of one machine may share an IPC namespace) it then sees the
/// attach count it had, while the original is kept for its other pages.
/// Where it does not, the copy has the segment made again on its node,
/// and one that nothing here attaches any more is removed: it moved (a
/// segment left behind would also take the id the process would need to
/// come back). The original never runs again, and no page of a segment is
/// served from it (they all move at the stop). Returns how many attaches
/// were let go and how many segments removed.
pub fn detach_frozen(frozen: &mut crate::ptrace::Frozen) -> Result<(usize, usize)> {
    let pid = frozen.pid;
    let maps = found_in_maps(pid)?;
    let bases: Vec<u64> = maps
        .iter()
        .filter(|m| m.offset == 0)
        .map(|m| m.start)
        .collect();
    for &base in &bases {
        let r = frozen.inject(0, libc::SYS_shmdt, &[base])?;
        if r < 0 {
            return Err(EngineError::Sys {
                what: format!("detach System V shared memory at {base:#x} in process {pid}"),
                source: std::io::Error::from_raw_os_error(-r as i32),
            });
        }
    }
    let mut ids: Vec<i32> = maps.iter().map(|m| m.shmid).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut removed = 0;
    for id in ids {
        if stat(id).is_ok_and(|ds| ds.shm_nattch == 0) {
            rmid(id).map_err(|e| EngineError::Sys {
                what: format!("remove System V shared memory {id}, which moved"),
                source: e,
            })?;
            removed += 1;
        }
    }
    Ok((bases.len(), removed))
}

/// Whether `ds` describes `s` itself (seen from another node of the same
/// machine, which shares the IPC namespace).
fn same(s: &Segment, ds: &libc::shmid_ds) -> bool {
    ds.shm_perm.__key == s.key
        && ds.shm_segsz as u64 == s.size
        && ds.shm_perm.cuid == s.cuid
        && ds.shm_perm.cgid == s.cgid
        && ds.shm_ctime == s.ctime
}

/// Makes segment `s` with its own id; errors name why not.
fn make(s: &Segment) -> Result<()> {
    let id = s.shmid;
    let refuse = |why: String| {
        EngineError::Incompatible(format!(
            "System V shared memory {id} (key {:#x}) cannot be made again here: {why}",
            s.key
        ))
    };
    if s.key != libc::IPC_PRIVATE {
        // SAFETY: shmget with size 0 and no flags only looks the key up.
        let other = unsafe { libc::shmget(s.key, 0, 0) };
        if other >= 0 {
            return Err(refuse(format!("segment {other} has that key")));
        }
    }
    std::fs::write("/proc/sys/kernel/shm_next_id", id.to_string())
        .map_err(|e| refuse(format!("write /proc/sys/kernel/shm_next_id: {e}")))?;
    let flags = libc::IPC_CREAT | libc::IPC_EXCL | 0o600;
    // SAFETY: shmget makes a segment; it takes no pointer.
    let got = unsafe { libc::shmget(s.key, s.size as usize, flags) };
    if got < 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::write("/proc/sys/kernel/shm_next_id", "-1");
        return Err(refuse(format!("shmget: {e}")));
    }
    if got != id {
        let _ = rmid(got);
        return Err(refuse(format!("the kernel gave id {got}")));
    }
    let mut ds = stat(id).map_err(|e| refuse(format!("IPC_STAT: {e}")))?;
    ds.shm_perm.uid = s.uid;
    ds.shm_perm.gid = s.gid;
    ds.shm_perm.mode = (s.mode & 0o777) as libc::c_ushort;
    // SAFETY: IPC_SET reads the shmid_ds we own.
    if unsafe { libc::shmctl(id, libc::IPC_SET, &mut ds) } < 0 {
        let e = std::io::Error::last_os_error();
        let _ = rmid(id);
        return Err(refuse(format!("IPC_SET: {e}")));
    }
    if s.mode & SHM_LOCKED != 0 {
        // SAFETY: SHM_LOCK reads no buffer.
        if unsafe { libc::shmctl(id, SHM_LOCK, std::ptr::null_mut()) } < 0 {
            let e = std::io::Error::last_os_error();
            let _ = rmid(id);
            return Err(refuse(format!("SHM_LOCK: {e}")));
        }
    }
    Ok(())
}

impl Resource for SysvShm {
    const PART: &'static str = "sysvshm";
    type State = SysvState;

    /// Done by `memory`'s precheck ([`precheck_maps`]).
    fn precheck(pid: pid_t) -> Result<()> {
        precheck_maps(pid, &crate::procfs::maps(pid)?)
    }

    fn capture(cx: &mut Capture) -> Result<SysvState> {
        let maps = std::mem::take(&mut cx.sysv_maps);
        Ok(SysvState {
            segments: segments(cx.pid, &maps)?,
        })
    }

    fn preflight(s: &SysvState, pf: &mut Preflight) -> Result<()> {
        for seg in &s.segments {
            match stat(seg.shmid) {
                Ok(ds) if same(seg, &ds) => {}
                Ok(ds) => {
                    return Err(EngineError::Incompatible(format!(
                        "System V shared memory {} (key {:#x}) cannot be made again here: another segment has that id (key {:#x})",
                        seg.shmid, seg.key, ds.shm_perm.__key
                    )))
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EIDRM) => {
                    make(seg)?;
                    let ctime = stat(seg.shmid).map_or(0, |ds| ds.shm_ctime);
                    pf.sysv_made.0.push((seg.shmid, ctime));
                }
                Err(e) => {
                    return Err(EngineError::Sys {
                        what: format!("read System V shared memory {} (IPC_STAT)", seg.shmid),
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }

    fn finish(s: &SysvState, _cx: &mut Finish) -> Result<()> {
        for seg in s.segments.iter().filter(|s| s.dest()) {
            rmid(seg.shmid).map_err(|e| EngineError::Sys {
                what: format!("mark System V shared memory {} for removal", seg.shmid),
                source: e,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, offset: u64, shmid: i32) -> FoundMap {
        FoundMap {
            start,
            end,
            offset,
            shmid,
        }
    }

    #[test]
    fn mappings_split_by_mprotect_are_one_attach() {
        let maps = [
            m(0x3000, 0x5000, 0x1000, 7),
            m(0x2000, 0x3000, 0, 7),
            m(0x9000, 0xa000, 0, 8),
            m(0xa000, 0xb000, 0, 7),
        ];
        let got = attaches(1, &maps).unwrap();
        assert_eq!(
            got,
            vec![
                (7, 0x2000, 0x5000, 2),
                (8, 0x9000, 0xa000, 1),
                (7, 0xa000, 0xb000, 1)
            ]
        );
    }

    #[test]
    fn an_attach_without_its_first_page_is_refused() {
        let maps = [m(0x3000, 0x5000, 0x1000, 7)];
        let e = attaches(1, &maps).unwrap_err().to_string();
        assert!(e.contains("attached in part"), "{e}");
        // Two attaches of one segment side by side are two, not one.
        let maps = [m(0x2000, 0x3000, 0, 7), m(0x3000, 0x4000, 0, 7)];
        assert_eq!(attaches(1, &maps).unwrap().len(), 2);
    }

    #[test]
    fn the_attach_of_an_address() {
        let s = SysvState {
            segments: vec![Segment {
                shmid: 3,
                key: 0,
                size: 5000,
                mode: 0o600,
                uid: 0,
                gid: 0,
                cuid: 0,
                cgid: 0,
                ctime: 0,
                attaches: vec![(0x1000, 0x3000), (0x8000, 0xa000)],
            }],
        };
        assert_eq!(
            s.attach_of(0x9000).map(|(s, a)| (s.shmid, a)),
            Some((3, (0x8000, 0xa000)))
        );
        assert!(s.attach_of(0x3000).is_none());
    }
}
