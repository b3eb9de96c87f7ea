//! The Go runtime's own record of its threads' ids.
//!
//! Each thread of a Go program runs one of the runtime's `m`s, which keeps
//! the thread's id in `m.procid` from the thread's start. The runtime
//! signals a thread with `tgkill(getpid(), m.procid, …)`: to preempt a
//! goroutine that loops without calling a function (the garbage collector
//! must do so to stop the world), for CPU profiling, and to have every
//! thread make a system call (`syscall.Setuid` and its kin). Under new
//! thread ids these signals reach no thread: the collector then waits until
//! the loop calls a function, holding up every goroutine that allocates
//! (seconds, measured), and a `Setuid` waits for good. So when the ids
//! change, the restore rewrites each `m.procid` that names an old id.
//!
//! The `m`s are found through two symbols of the executable:
//! `runtime.m0`, the first `m` (the main thread's), in its data, and
//! `runtime.allm`, the list of all of them, newest first, linked through
//! `m.alllink` and ending at `m0`. Both offsets differ between Go versions
//! and are learned from the memory itself: `procid` is the one word in
//! `m0`'s first KiB that holds the main thread's id, and `alllink` the
//! offset of the longest list from `allm` that passes only `m`s whose
//! `procid` is one of the process's threads (or not set yet) and ends at
//! `m0` (another field may lead to `m0` too, by a shorter way).
//!
//! A binary built without its symbol table (`-ldflags=-s`, as many
//! released Go programs are) has no such names; its `m`s are found
//! through each thread instead. On amd64 the runtime keeps the thread's
//! current goroutine `g` in the word below the thread pointer (`fs`; in a
//! program that uses cgo too, as its one thread-local variable), and `g.m`
//! is the thread's `m`. The offsets of `g.m` and of `procid` are learned
//! together, as the one pair by which the most threads reach an `m` that
//! holds their own id, the main thread among them. A thread that does not
//! (one C code started, one not yet running its start code) is left alone;
//! if the main thread does not, nothing is done.
//!
//! Each thread whose `m.procid` was rewritten is also sent one preemption
//! signal, delivered once it runs (see [`kick`]): one lost in the move
//! would otherwise hold its goroutine up for good.

use super::tcb::FileCache;
use crate::error::{Ctx, Result};
use crate::image::ProcessImage;
use crate::ptrace::Frozen;
use crate::sys;
use libc::pid_t;
use std::collections::HashSet;

const PAGE: u64 = 4096;
/// How much of `m0` is searched for `procid`, and of an `m` for `alllink`.
const PROCID_WITHIN: usize = 1024;
const ALLLINK_WITHIN: usize = 2048;

/// Link-time addresses of `runtime.m0` and `runtime.allm`, and the entry
/// point (its run-time value, in the auxiliary vector, gives the load
/// bias of a position-independent executable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GoSymbols {
    m0: u64,
    allm: u64,
    entry: u64,
}

/// A Go executable: with the runtime's symbols, or without a symbol table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoExe {
    Symbols(GoSymbols),
    Stripped,
}

/// The symbols of each executable looked up.
static SYMBOLS: FileCache<Option<GoExe>> = FileCache::new();

/// The Go runtime's symbols in the executable at `path`; None if it is
/// not a Go program. Only a Go program's symbols are read: for another,
/// the section headers tell (reading every symbol of a large program,
/// node's, took 18 ms).
fn go_symbols(path: &str) -> Result<Option<GoExe>> {
    use object::read::elf::{FileHeader, Sym};
    let file = std::fs::File::open(path).ctx(|| format!("open {path}"))?;
    let data = object::ReadCache::new(&file);
    let parsed = (|| {
        let header = object::elf::FileHeader64::<object::Endianness>::parse(&data)?;
        let endian = header.endian()?;
        let sections = header.sections(endian, &data)?;
        if sections.section_by_name(endian, b".go.buildinfo").is_none() {
            return Ok(None);
        }
        let symbols = sections.symbols(endian, &data, object::elf::SHT_SYMTAB)?;
        let (mut m0, mut allm) = (None, None);
        for s in symbols.iter() {
            match symbols.symbol_name(endian, s)? {
                b"runtime.m0" => m0 = Some(s.st_value(endian)),
                b"runtime.allm" => allm = Some(s.st_value(endian)),
                _ => continue,
            }
            if m0.is_some() && allm.is_some() {
                break;
            }
        }
        Ok::<_, object::Error>(Some(match m0.zip(allm) {
            Some((m0, allm)) => GoExe::Symbols(GoSymbols {
                m0,
                allm,
                entry: header.e_entry(endian),
            }),
            None => GoExe::Stripped,
        }))
    })();
    Ok(parsed.unwrap_or(None))
}

/// Where the symbols are in the running process: the load bias from its
/// entry point (`AT_ENTRY` in `auxv`, pairs of words).
fn placed(s: GoSymbols, auxv: &[u64]) -> Option<GoSymbols> {
    let at_entry = auxv
        .chunks_exact(2)
        .find(|kv| kv[0] == libc::AT_ENTRY)
        .map(|kv| kv[1])?;
    let bias = at_entry.checked_sub(s.entry)?;
    Some(GoSymbols {
        m0: s.m0 + bias,
        allm: s.allm + bias,
        entry: at_entry,
    })
}

/// Reads `buf.len()` bytes of the process at an address; false if it
/// cannot (or must not) be read.
type Read<'a> = &'a dyn Fn(u64, &mut [u8]) -> bool;

fn word(read: Read, a: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read(a, &mut b).then(|| u64::from_le_bytes(b))
}

/// The `m`s found: the offset of `procid` and each `m`'s address.
#[derive(Debug, PartialEq, Eq)]
struct Ms {
    procid: u64,
    alllink: u64,
    ms: Vec<u64>,
}

/// Walks the runtime's `m`s (see the module's comment). `main`: the main
/// thread's id as the runtime has it; `tids`: every thread's. Says why if
/// it cannot.
fn walk(s: GoSymbols, main: pid_t, tids: &[pid_t], read: Read) -> std::result::Result<Ms, String> {
    let mut head = vec![0u8; PROCID_WITHIN];
    if !read(s.m0, &mut head) {
        return Err(format!("m0 at {:#x} cannot be read", s.m0));
    }
    let at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let offsets: Vec<u64> = (8..PROCID_WITHIN)
        .step_by(8)
        .filter(|&o| at(&head, o) == main as u64)
        .map(|o| o as u64)
        .collect();
    let [procid] = offsets[..] else {
        return Err(format!(
            "m0 holds the main thread's id {main} at {offsets:?}"
        ));
    };
    let first = word(read, s.allm).ok_or("allm cannot be read")?;
    if first == s.m0 {
        // One m: its link is learned from nothing, and not needed.
        return Ok(Ms {
            procid,
            alllink: 0,
            ms: vec![s.m0],
        });
    }
    let ok_id = |id: u64| id == 0 || tids.iter().any(|&t| t as u64 == id);
    let mut links = vec![0u8; ALLLINK_WITHIN];
    if first % 8 != 0 || !read(first, &mut links) {
        return Err(format!("the newest m at {first:#x} cannot be read"));
    }
    if !word(read, first + procid).is_some_and(ok_id) {
        return Err(format!(
            "the newest m at {first:#x} names no thread of the process"
        ));
    }
    // Every offset through which the list ends at m0; the list is the
    // longest of them (another field may point at m0 or at one m of it).
    let mut fits: Vec<Ms> = Vec::new();
    for alllink in (8..ALLLINK_WITHIN as u64).step_by(8) {
        if alllink == procid {
            continue;
        }
        let mut ms = vec![first];
        let mut next = at(&links, alllink as usize);
        let ends = loop {
            if next == s.m0 {
                break word(read, s.m0 + alllink) == Some(0);
            }
            if next == 0 || next % 8 != 0 || ms.len() > tids.len() || ms.contains(&next) {
                break false;
            }
            match word(read, next + procid) {
                Some(id) if ok_id(id) => ms.push(next),
                _ => break false,
            }
            match word(read, next + alllink) {
                Some(n) => next = n,
                None => break false,
            }
        };
        if ends {
            ms.push(s.m0);
            fits.push(Ms {
                procid,
                alllink,
                ms,
            });
        }
    }
    let longest = fits.iter().map(|m| m.ms.len()).max().unwrap_or(0);
    let mut best = fits.into_iter().filter(|m| m.ms.len() == longest);
    match (best.next(), best.next()) {
        (Some(m), None) => Ok(m),
        (None, _) => Err(format!("no list of ms from {first:#x} ends at m0")),
        (Some(a), Some(b)) => Err(format!(
            "the ms' links are at {:#x} or {:#x}, not sure which",
            a.alllink, b.alllink
        )),
    }
}

/// How much of a `g` is searched for `g.m`.
const GM_WITHIN: u64 = 256;

/// Finds each thread's `m` through its thread pointer (see the module's
/// comment). `threads`: each thread's id, as the runtime has it, and
/// thread pointer (`fs`); the main thread first. Returns the offset of
/// `procid` and, for each thread whose `m` holds its id, that `m` (None for
/// another); says why if the main thread's is not found.
fn walk_tls(
    threads: &[(pid_t, u64)],
    read: Read,
) -> std::result::Result<(u64, Vec<Option<u64>>), String> {
    let gs: Vec<Option<u64>> = threads
        .iter()
        .map(|&(_, fs)| word(read, fs.checked_sub(8)?).filter(|g| *g != 0 && g % 8 == 0))
        .collect();
    if gs[0].is_none() {
        return Err("the main thread's thread pointer leads to no g".into());
    }
    // Thread k's m through offset gm of its g.
    let m_of = |k: usize, gm: u64| word(read, gs[k]? + gm).filter(|m| *m != 0 && m % 8 == 0);
    let at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let mut best: Option<(usize, u64, u64)> = None; // (threads, g.m, procid)
    let mut tied = false;
    let mut head = vec![0u8; PROCID_WITHIN];
    for gm in (0..GM_WITHIN).step_by(8) {
        // The offsets at which the main thread's m holds its id; then, for
        // each, how many other threads' ms hold theirs there (a word each:
        // read for only the few offsets the main thread leaves).
        let Some(main) = m_of(0, gm) else { continue };
        if !read(main, &mut head) {
            continue;
        }
        for procid in (8..PROCID_WITHIN).step_by(8) {
            if at(&head, procid) != threads[0].0 as u64 {
                continue;
            }
            let procid = procid as u64;
            let fit = 1
                + (1..threads.len())
                    .filter(|&k| {
                        m_of(k, gm)
                            .is_some_and(|m| word(read, m + procid) == Some(threads[k].0 as u64))
                    })
                    .count();
            match best {
                Some((n, _, _)) if n > fit => {}
                Some((n, _, _)) if n == fit => tied = true,
                _ => {
                    best = Some((fit, gm, procid));
                    tied = false;
                }
            }
        }
    }
    let Some((_, gm, procid)) = best else {
        return Err("no m found through the main thread's g holds its id".into());
    };
    if tied {
        return Err("the threads' ms fit more than one way".into());
    }
    let ms = gs
        .iter()
        .zip(threads)
        .map(|(g, &(tid, _))| {
            let m = word(read, (*g)? + gm)?;
            (word(read, m + procid) == Some(tid as u64)).then_some(m)
        })
        .collect();
    Ok((procid, ms))
}

/// The executable's Go symbols, placed in a process (`exe` is its path,
/// `auxv` gives its auxiliary vector, asked for only for a Go program);
/// None if it is not a Go program.
fn symbols_in(exe: &str, auxv: impl FnOnce() -> Vec<u64>) -> Option<GoExe> {
    match SYMBOLS.get(exe, go_symbols).ok().flatten()? {
        GoExe::Symbols(s) => placed(s, &auxv()).map(GoExe::Symbols),
        GoExe::Stripped => Some(GoExe::Stripped),
    }
}

fn auxv_of(pid: pid_t) -> Vec<u64> {
    std::fs::read(format!("/proc/{pid}/auxv"))
        .unwrap_or_default()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// Looks up the symbols of process `pid`'s executable, ahead of a freeze:
/// the lookup then costs one `stat` at the stop.
pub fn learn(pid: pid_t) {
    if let Ok(exe) = crate::procfs::readlink(pid, "exe") {
        let _ = SYMBOLS.get(&exe, go_symbols);
    }
}

/// The pages a restore reads and writes to rewrite the `m`s of the frozen
/// Go process `frozen` (none for another program): a lazy handover sends
/// them along.
pub fn handover_pages(frozen: &Frozen) -> HashSet<u64> {
    let pid = frozen.pid;
    let Ok(exe) = crate::procfs::readlink(pid, "exe") else {
        return HashSet::new();
    };
    let Some(exe) = symbols_in(&exe, || auxv_of(pid)) else {
        return HashSet::new();
    };
    let threads: Vec<(pid_t, u64)> = frozen
        .threads
        .iter()
        .map(|t| {
            // Only a program without symbols is walked through its threads.
            let fs = match exe {
                GoExe::Stripped => sys::get_regs(t.tid).map_or(0, |r| r.fs_base),
                GoExe::Symbols(_) => 0,
            };
            (t.tid, fs)
        })
        .collect();
    let read = |a: u64, b: &mut [u8]| sys::process_vm_read(pid, a, b).ok() == Some(b.len());
    runtime_pages(exe, pid, &threads, &read)
}

/// The pages of the Go program imaged in `pi` (none for another program)
/// that a restore reads and writes to rewrite its `m`s, found by reading
/// its memory through `read` (the image's pages, wherever they are): a
/// restore from a page store that is not held until its pages are in keeps
/// them in its first image.
pub fn image_pages(pi: &ProcessImage, read: &dyn Fn(u64, &mut [u8]) -> bool) -> HashSet<u64> {
    let mm = &pi.memory.mm;
    let Some(exe) = symbols_in(&mm.exe.path, || mm.auxv.clone()) else {
        return HashSet::new();
    };
    let threads: Vec<(pid_t, u64)> = pi
        .threads
        .threads
        .iter()
        .map(|t| (t.tid, super::threads::regs_from_vec(&t.regs).fs_base))
        .collect();
    runtime_pages(exe, pi.process.pid, &threads, read)
}

/// The pages that hold the `m`s of the Go program `exe` and the ways to
/// them. `main`: the main thread's id as the runtime has it; `threads`:
/// each thread's id and thread pointer (`fs`), the main thread first.
fn runtime_pages(exe: GoExe, main: pid_t, threads: &[(pid_t, u64)], read: Read) -> HashSet<u64> {
    let mut keep = HashSet::new();
    let mut add = |a: u64, len: u64| {
        let mut p = a & !(PAGE - 1);
        while p < a + len {
            keep.insert(p);
            p += PAGE;
        }
    };
    match exe {
        GoExe::Stripped => match walk_tls(threads, read) {
            Ok((procid, ms)) => {
                for (&(_, fs), m) in threads.iter().zip(ms) {
                    let Some(m) = m else { continue };
                    add(fs - 8, 8);
                    if let Some(g) = word(read, fs - 8) {
                        add(g, GM_WITHIN);
                    }
                    add(m, PROCID_WITHIN as u64);
                    add(m + procid, 8);
                }
            }
            Err(why) => {
                tracing::debug!("process {main}: the Go runtime's threads not found ({why})")
            }
        },
        GoExe::Symbols(s) => {
            let tids: Vec<pid_t> = threads.iter().map(|t| t.0).collect();
            match walk(s, main, &tids, read) {
                Ok(ms) => {
                    add(s.allm, 8);
                    add(s.m0, PROCID_WITHIN as u64);
                    if let Some(&first) = ms.ms.first() {
                        add(first, ALLLINK_WITHIN as u64);
                    }
                    for &m in &ms.ms {
                        add(m + ms.procid, 8);
                        add(m + ms.alllink, 8);
                    }
                }
                Err(why) => {
                    tracing::debug!("process {main}: the Go runtime's threads not found ({why})")
                }
            }
        }
    }
    keep
}

/// Rewrites, in the process restored from `pi` (threads of `frozen`, in
/// the image's order), each `m.procid` that names a thread whose id
/// changed. With `lazy`, only the image's pages and file mappings are read
/// (any other private page is owed). Returns how many were rewritten, or
/// None if the process is a Go program whose `m`s were not found (in pages
/// not there yet, with `lazy`).
pub fn rewrite_ids(pi: &ProcessImage, frozen: &Frozen, lazy: bool) -> Result<Option<usize>> {
    let renamed = super::threads::renamed(pi, frozen);
    if renamed.iter().all(|(old, new, _)| old == new) {
        return Ok(Some(0));
    }
    let pid = frozen.pid;
    // A deleted executable: the file made again, the new process's own.
    let path = match super::ghosts::deleted_path(&pi.memory.mm.exe.path) {
        Some(_) => format!("/proc/{pid}/exe"),
        None => pi.memory.mm.exe.path.clone(),
    };
    let Some(exe) = symbols_in(&path, || pi.memory.mm.auxv.clone()) else {
        return Ok(Some(0));
    };
    // Every page of [a, a + len) in a file's mapping or in the image.
    let held = |a: u64, len: u64| {
        (a & !(PAGE - 1)..a + len).step_by(PAGE as usize).all(|p| {
            pi.memory.vmas.iter().any(|v| {
                (v.file.is_some() && v.start <= p && p < v.end)
                    || v.runs.iter().any(|r| r.addr <= p && p < r.addr + r.len)
            })
        })
    };
    let read = |a: u64, b: &mut [u8]| {
        (!lazy || held(a, b.len() as u64)) && sys::process_vm_read(pid, a, b).ok() == Some(b.len())
    };
    let olds: Vec<pid_t> = renamed.iter().map(|i| i.0).collect();
    let found = match exe {
        GoExe::Symbols(s) => walk(s, pi.process.pid, &olds, &read)
            .map(|ms| (ms.procid, ms.ms.into_iter().map(Some).collect())),
        GoExe::Stripped => {
            let threads: Vec<(pid_t, u64)> =
                renamed.iter().map(|&(old, _, fs)| (old, fs)).collect();
            walk_tls(&threads, &read)
        }
    };
    let (procid, ms): (u64, Vec<Option<u64>>) = match found {
        Ok(f) => f,
        Err(why) => {
            tracing::debug!("process {pid}: the Go runtime's threads not found ({why})");
            return Ok(None);
        }
    };
    let mut n = 0;
    for m in ms.into_iter().flatten() {
        let Some(id) = word(&read, m + procid) else {
            continue;
        };
        if let Some(&(_, new, _)) = renamed
            .iter()
            .find(|&&(old, new, _)| old as u64 == id && old != new)
        {
            sys::process_vm_write(pid, m + procid, &(new as u64).to_le_bytes())?;
            n += 1;
            kick(pid, new);
        }
    }
    if n > 0 {
        tracing::info!(
            "process {pid}: the Go runtime's record of {n} thread ids now names the new ones"
        );
    }
    Ok(Some(n))
}

/// The Go runtime's preemption signal (`SIGURG`).
const SIG_PREEMPT: i32 = libc::SIGURG;

/// Sends thread `tid` of the restored process `pid` (stopped, every signal
/// blocked until it is let go) one preemption signal. The runtime sends a
/// thread no second one until the thread has handled the first (its `m`'s
/// `signalPending`); one that a thread of the original sent with the old
/// ids still in its registers, frozen between reading them and the send,
/// reaches no thread of the copy, and that thread would be sent none
/// again: a goroutine looping on it then holds up every collection for
/// good. The runtime takes a signal it did not ask for as a no-op (`SIGURG`
/// also comes with a socket's out-of-band data), and this one clears the
/// flag. Best effort: a failure is logged.
fn kick(pid: pid_t, tid: pid_t) {
    // SAFETY: tgkill takes integers only; the thread is one of the process
    // this restore made.
    if unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, SIG_PREEMPT) } < 0 {
        tracing::debug!(
            "process {pid}: no preemption signal for thread {tid}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// [`rewrite_ids`], whose failure leaves the ids as they were: the
/// program runs, its runtime's signals to its threads go astray. Returns
/// whether it is done (false: the `m`s are in pages not there yet; `last`
/// says that there will be no later try, which is then logged).
pub fn rewrite_ids_or_warn(pi: &ProcessImage, frozen: &Frozen, lazy: bool, last: bool) -> bool {
    let why = match rewrite_ids(pi, frozen, lazy) {
        Ok(Some(_)) => return true,
        Ok(None) if !last => return false,
        Ok(None) => "its runtime's threads were not found".to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!(
        "process {}: the Go runtime's record of its thread ids could not be rewritten ({why}); its signals to its own threads go astray",
        frozen.pid
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up memory of words.
    struct Mem(std::collections::HashMap<u64, u64>);

    impl Mem {
        fn read(&self, a: u64, b: &mut [u8]) -> bool {
            for (k, c) in b.chunks_mut(8).enumerate() {
                let w = self.0.get(&(a + 8 * k as u64)).copied().unwrap_or(0);
                c.copy_from_slice(&w.to_le_bytes()[..c.len()]);
            }
            true
        }
    }

    #[test]
    fn the_ms_are_walked_from_allm_to_m0_with_offsets_learned_from_memory() {
        let s = GoSymbols {
            m0: 0x59_b560,
            allm: 0x59_9e30,
            entry: 0x40_0000,
        };
        let (procid, alllink) = (64, 352);
        let ms = [0x7f00_0000_3008u64, 0x7f00_0000_2808, 0x7f00_0000_2008];
        let tids = [100, 102, 103, 104];
        let mut m = std::collections::HashMap::new();
        m.insert(s.allm, ms[0]);
        m.insert(s.m0 + procid, 100);
        m.insert(s.m0 + 8, 7); // other words of m0
        for (k, &a) in ms.iter().enumerate() {
            m.insert(a + procid, tids[k + 1] as u64);
            m.insert(a + alllink, ms.get(k + 1).copied().unwrap_or(s.m0));
            // A pointer elsewhere that leads nowhere.
            m.insert(a + 16, a + 0x100);
        }
        // A list that passes an m of another thread is not the list.
        let plain = Mem(m.clone());
        let read = |a: u64, b: &mut [u8]| plain.read(a, b);
        assert_eq!(walk(s, 100, &tids, &read).unwrap().alllink, alllink);
        assert!(walk(s, 100, &[100, 102, 103], &read).is_err());
        // A field of the newest m that points at m0 (whose same field is
        // 0), and one that points at the next m: lists that end at m0 too,
        // but shorter.
        m.insert(ms[0] + 200, s.m0);
        m.insert(ms[0] + 208, ms[1]);
        m.insert(ms[1] + 208, s.m0);
        let mem = Mem(m);
        let read = |a: u64, b: &mut [u8]| mem.read(a, b);
        let got = walk(s, 100, &tids, &read).unwrap();
        assert_eq!(
            got,
            Ms {
                procid,
                alllink,
                ms: vec![ms[0], ms[1], ms[2], s.m0]
            }
        );
        // The pages a restore keeps for the walk: the walk finds the same
        // in them alone (a lazy restore reads no other page).
        let threads: Vec<(pid_t, u64)> = tids.iter().map(|&t| (t, 0)).collect();
        let kept = runtime_pages(GoExe::Symbols(s), 100, &threads, &read);
        let only = |a: u64, b: &mut [u8]| kept.contains(&(a & !(PAGE - 1))) && mem.read(a, b);
        assert_eq!(walk(s, 100, &tids, &only).unwrap(), got);
        assert!(runtime_pages(GoExe::Symbols(s), 100, &threads, &|_, _| false).is_empty());
        // Another main thread's id: not m0's.
        assert!(walk(s, 101, &tids, &read).is_err());
        // A memory that cannot be read finds nothing.
        assert!(walk(s, 100, &tids, &|_, _| false).is_err());
    }

    #[test]
    fn without_symbols_each_threads_m_is_found_through_its_thread_pointer() {
        // As go1.26 lays them out: g.m at 48, procid at 64; without cgo the
        // thread pointer lies in the m (m.tls, 0x88 in), with cgo it is
        // the C library's and the m is elsewhere.
        let (gm, procid) = (48u64, 64u64);
        let ms = [0x58_71e0u64, 0x7f00_0000_6008, 0x7f00_0000_6808];
        let gs = [0x58_6420u64, 0x7f00_1000_c5a0, 0x7f00_1000_cb40];
        let tids = [100, 102, 103];
        for cgo in [false, true] {
            let mut m = std::collections::HashMap::new();
            let mut threads = Vec::new();
            for k in 0..3 {
                let fs = if cgo {
                    0x7fcd_7591_a6c0 + k as u64 * 0x80_0000
                } else {
                    ms[k] + 0x88
                };
                m.insert(fs - 8, gs[k]);
                m.insert(gs[k] + gm, ms[k]);
                // Other fields of g: its stack, where no id is.
                m.insert(gs[k], 0x7f00_2000_0000 + k as u64 * 0x4000);
                m.insert(ms[k] + procid, tids[k] as u64);
                m.insert(ms[k], gs[k]); // m.g0
                threads.push((tids[k], fs));
            }
            // A thread started by C code: its thread pointer leads to no g.
            threads.push((104, 0x7f00_3000_0640));
            let mem = Mem(m.clone());
            let read = |a: u64, b: &mut [u8]| mem.read(a, b);
            let (p, found) = walk_tls(&threads, &read).unwrap();
            assert_eq!(p, procid, "cgo {cgo}");
            assert_eq!(found, vec![Some(ms[0]), Some(ms[1]), Some(ms[2]), None]);
            // The pages a restore keeps for the walk: the walk finds the
            // same in them alone (a lazy restore reads no other page).
            let kept = runtime_pages(GoExe::Stripped, 100, &threads, &read);
            for k in 0..3 {
                for a in [threads[k].1 - 8, gs[k] + gm, ms[k] + procid] {
                    assert!(kept.contains(&(a & !(PAGE - 1))), "cgo {cgo}: {a:#x}");
                }
            }
            let only = |a: u64, b: &mut [u8]| kept.contains(&(a & !(PAGE - 1))) && mem.read(a, b);
            assert_eq!(walk_tls(&threads, &only).unwrap(), (p, found));
            // An m that holds no id yet, or another thread's, is left alone.
            for other in [0, 999] {
                let mut changed = m.clone();
                changed.insert(ms[2] + procid, other);
                let mem = Mem(changed);
                let read = |a: u64, b: &mut [u8]| mem.read(a, b);
                let (p, found) = walk_tls(&threads, &read).unwrap();
                assert_eq!((p, found[2]), (procid, None));
            }
            // A main thread whose g leads to no m: nothing is found.
            let mut lost = m.clone();
            lost.insert(gs[0] + gm, 0);
            let mem = Mem(lost);
            let read = |a: u64, b: &mut [u8]| mem.read(a, b);
            assert!(walk_tls(&threads, &read).is_err());
            // Two fields of the gs that lead to the ms alike: unsure.
            let mut two = m.clone();
            for k in 0..3 {
                two.insert(gs[k] + gm + 8, ms[k]);
            }
            let mem = Mem(two);
            let read = |a: u64, b: &mut [u8]| mem.read(a, b);
            assert!(walk_tls(&threads, &read).is_err());
            // One field that leads to the main thread's m alone (a goroutine
            // locked to it): g.m leads to more.
            let mut locked = m.clone();
            locked.insert(gs[0] + 200, ms[0]);
            let mem = Mem(locked);
            let read = |a: u64, b: &mut [u8]| mem.read(a, b);
            assert_eq!(walk_tls(&threads, &read).unwrap().1[1], Some(ms[1]));
            assert!(walk_tls(&threads, &|_, _| false).is_err());
        }
    }

    #[test]
    fn the_load_bias_comes_from_the_entry_point() {
        let s = GoSymbols {
            m0: 0x1000,
            allm: 0x2000,
            entry: 0x500,
        };
        let auxv = [libc::AT_PHDR, 0x40, libc::AT_ENTRY, 0x5555_0000_0500, 0, 0];
        let p = placed(s, &auxv).unwrap();
        assert_eq!((p.m0, p.allm), (0x5555_0000_1000, 0x5555_0000_2000));
        assert_eq!(placed(s, &[0, 0]), None);
    }

    #[test]
    fn a_program_that_is_not_go_has_no_go_symbols() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(go_symbols(exe.to_str().unwrap()).unwrap(), None);
    }
}
