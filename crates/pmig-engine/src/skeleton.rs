//! Skeletons: most of a restore done before the process stops.
//!
//! A lazy migration's down time is the stop's capture plus the whole
//! restore: reading the image, opening files, building the plan, forking,
//! rebuilding the address space and the threads. Nearly all of it depends
//! on what changes rarely while a process runs (its mappings, files,
//! signal actions, threads). So the source captures the process once while
//! it runs (a short freeze during the preparation), the destination
//! restores that capture as a *skeleton*, lazily and without what depends
//! on the moment (timers stay disarmed, pending signals unqueued), and
//! holds it stopped at the end of its plan. At the stop the source
//! captures again, as it always does, and the destination only *brings the
//! skeleton up* to that capture ([`bring_up`]): every resource compares
//! its two states ([`Resource::update`]); what may change while a process
//! runs (registers, file offsets, timers, pending signals, the pages that
//! go with the state) is applied to the held process, and any other
//! change makes the skeleton stale ([`crate::error::stale`]). A stale
//! skeleton is killed and the capture of the stop restored the ordinary
//! way: it costs that migration the time the skeleton would have saved,
//! never the process.
//!
//! The pages a skeleton holds (those of the first capture that go with
//! the state) must all be in the capture of the stop, which then replaces
//! them: the source's second capture keeps every page the first one kept.

use crate::error::{stale, Result};
use crate::image::ProcessImage;
use crate::resources::cpu::CpuCheck;
use crate::resources::{
    cgroups::Cgroups,
    clocks::Clocks,
    files::Files,
    identity::Identity,
    jobctl::JobCtl,
    locks::{Locks, LocksState},
    lonesockets::LoneSockets,
    memory::Memory,
    pipes::Pipes,
    prctl::Prctl,
    process::Process,
    sched::Sched,
    seccomp::Seccomp,
    session::Session,
    signals::Signals,
    socketpairs::SocketPairs,
    threads::Threads,
    timers::Timers,
    Resource, Update,
};
use serde::Serialize;

/// The encoding of `v` in an image (postcard): two states are the same
/// when they encode alike.
pub fn encode<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    // Encoding into memory fails only for types postcard cannot express,
    // which no part of an image is; such a value then differs from any.
    postcard::to_allocvec(v).unwrap_or_else(|_| vec![0xff; 1])
}

/// Whether `a` and `b` encode alike.
pub fn same<T: Serialize + ?Sized>(a: &T, b: &T) -> bool {
    encode(a) == encode(b)
}

/// Whether the sorted, disjoint ranges `outer` cover every byte of the
/// sorted, disjoint ranges `inner` ((start, length) each).
pub fn covers(outer: &[(u64, u64)], inner: &[(u64, u64)]) -> bool {
    let mut i = 0;
    for &(a, l) in inner {
        let mut at = a;
        let end = a + l;
        while at < end {
            while i < outer.len() && outer[i].0 + outer[i].1 <= at {
                i += 1;
            }
            match outer.get(i) {
                Some(&(s, n)) if s <= at => at = (s + n).min(end),
                _ => return false,
            }
        }
    }
    true
}

/// An optional part: the same when both are absent or both encode alike;
/// present in one capture only is a change.
fn update_optional<R: Resource>(
    pre: &Option<R::State>,
    fin: &Option<R::State>,
    cx: &mut Update,
) -> Result<()> {
    match (pre, fin) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) => R::update(a, b, same(a, b), cx),
        _ => Err(stale(format!("its {} changed", R::PART))),
    }
}

/// A part that is not a resource of its own (flags kept beside another
/// part): any change is stale.
fn compare_part<T: Serialize>(part: &str, pre: &Option<T>, fin: &Option<T>) -> Result<()> {
    if same(pre, fin) {
        Ok(())
    } else {
        Err(stale(format!("its {part} changed")))
    }
}

/// Brings the held skeleton built from `pre` up to `fin`, the capture of
/// the stop (see the module's documentation). The resources that only
/// compare go first, so that a stale skeleton is mostly found before
/// anything of it changes; an error leaves it to be killed.
pub fn bring_up(
    pre: &ProcessImage,
    fin: &ProcessImage,
    cx: &mut Update,
) -> Result<Vec<(libc::pid_t, libc::pid_t)>> {
    // Which threads ended and started since (a change it cannot follow is
    // stale here): the skeleton follows them after the comparisons below,
    // and the parts kept per thread compare the others.
    cx.threads = crate::resources::threads::thread_changes(&pre.threads, &fin.threads)?;
    Process::update(
        &pre.process,
        &fin.process,
        same(&pre.process, &fin.process),
        cx,
    )?;
    Identity::update(
        &pre.identity,
        &fin.identity,
        same(&pre.identity, &fin.identity),
        cx,
    )?;
    update_optional::<Session>(&pre.session, &fin.session, cx)?;
    update_optional::<JobCtl>(&pre.jobctl, &fin.jobctl, cx)?;
    update_optional::<Clocks>(&pre.clocks, &fin.clocks, cx)?;
    update_optional::<Pipes>(&pre.pipes, &fin.pipes, cx)?;
    update_optional::<SocketPairs>(&pre.socketpairs, &fin.socketpairs, cx)?;
    update_optional::<LoneSockets>(&pre.lonesockets, &fin.lonesockets, cx)?;
    update_optional::<Prctl>(&pre.prctl, &fin.prctl, cx)?;
    // A filter installed since cannot be put under those the skeleton's
    // threads hold: stale.
    update_optional::<Seccomp>(&pre.seccomp, &fin.seccomp, cx)?;
    // The mapping flags (MAP_NORESERVE) are followed with the mappings,
    // by `Memory::update`.
    compare_part("memory-deny-write-execute flags", &pre.mdwe, &fin.mdwe)?;
    // A permission asked for since: the skeleton's threads have no room
    // for tile data (nor has a thread started since).
    compare_part("permissions for AMX", &pre.xcomp, &fin.xcomp)?;
    crate::resources::xcomp::refuse_new_threads_with_tiles(&cx.threads.started, &fin.threads)?;
    // FPU state the threads took up since (AVX-512 registers, say) must fit
    // this CPU too; its features were checked with the skeleton's image.
    let here = crate::resources::cpu::CpuState::here();
    let xstates = fin.threads.xstates();
    crate::resources::cpu::check(fin.cpu.as_ref(), here, &xstates, CpuCheck::Xsave)
        .map_err(|e| stale(format!("{e}")))?;
    crate::resources::files::compare_ids(&pre.files, &fin.files, &pre.file_ids, &fin.file_ids)?;
    // A file mapped since is opened by path in the skeleton, as the
    // process itself (`Memory::update`): only the files mapped in both
    // captures must be the same.
    if let (Some(a), Some(b)) = (&pre.mapped_ids, &fin.mapped_ids) {
        if !a.agree(b) {
            return Err(stale("its mapped files' inodes changed"));
        }
    } else if pre.mapped_ids.is_some() != fin.mapped_ids.is_some() {
        return Err(stale("its mapped files' inodes changed"));
    }
    // The threads that ended end and those that started start; then the
    // parts kept per thread follow.
    crate::resources::threads::follow_membership(&pre.threads, &fin.threads, cx)?;
    update_optional::<Sched>(&pre.sched, &fin.sched, cx)?;
    // A process moved to other cgroups since: stale.
    update_optional::<Cgroups>(&pre.cgroups, &fin.cgroups, cx)?;
    // A working directory deleted since (or another deleted one): the
    // skeleton cannot enter it by its path. A live one it enters by its
    // path (`Files::update`), if that differs from the deleted one's name.
    let cwd_followed = match (&pre.dead_cwd, &fin.dead_cwd) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b,
        (Some(_), None) => pre.files.cwd != fin.files.cwd,
        (None, Some(_)) => false,
    };
    if !cwd_followed {
        return Err(stale(
            "its working directory was deleted since (or it entered another deleted one)",
        ));
    }
    // These apply what changed: the descriptors, signals, timers and
    // threads first (their comparisons are the likelier to find the
    // skeleton stale), then the pages of the stop, which the thread
    // descriptors' ids are written into last.
    // The deleted files and memfds take their bytes of the stop, before
    // the descriptors change.
    cx.made_ghosts = crate::resources::ghosts::bring_up(pre, fin, cx.pid)?;
    Files::update(&pre.files, &fin.files, same(&pre.files, &fin.files), cx)?;
    // The locks of the stop, on its descriptors (a skeleton holds none).
    if let Some(l) = &fin.locks {
        Locks::update(&LocksState::default(), l, false, cx)?;
    }
    Signals::update(
        &pre.signals,
        &fin.signals,
        same(&pre.signals, &fin.signals),
        cx,
    )?;
    Timers::update(&pre.timers, &fin.timers, same(&pre.timers, &fin.timers), cx)?;
    Threads::update(
        &pre.threads,
        &fin.threads,
        same(&pre.threads, &fin.threads),
        cx,
    )?;
    Memory::update(&pre.memory, &fin.memory, same(&pre.memory, &fin.memory), cx)?;
    crate::resources::threads::register_rseq_of_new(&fin.threads, cx)?;
    let ids = crate::resources::tcb::rewrite_tids(fin, cx.frozen, cx.uffd.is_some(), None)?;
    crate::resources::gort::rewrite_ids_or_warn(fin, cx.frozen, cx.uffd.is_some(), true);
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_what_lies_inside_them_only() {
        let outer = [(0x1000, 0x2000), (0x3000, 0x1000), (0x8000, 0x1000)];
        // Across two adjacent ranges, and the empty set.
        assert!(covers(&outer, &[(0x1000, 0x3000)]));
        assert!(covers(&outer, &[]));
        assert!(covers(&outer, &[(0x2000, 0x1000), (0x8000, 0x1000)]));
        // A gap, an end beyond, a start before.
        assert!(!covers(&outer, &[(0x3000, 0x2000)]));
        assert!(!covers(&outer, &[(0x8000, 0x2000)]));
        assert!(!covers(&outer, &[(0x0, 0x2000)]));
        assert!(!covers(&[], &[(0x1000, 0x1000)]));
    }

    #[test]
    fn states_are_the_same_when_they_encode_alike() {
        assert!(same(&(1u64, "a"), &(1u64, "a")));
        assert!(!same(&(1u64, "a"), &(2u64, "a")));
        assert!(same(&None::<u32>, &None));
        assert!(!same(&None, &Some(0u32)));
    }
}
