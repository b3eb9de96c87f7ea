//! Skeletons: the process restored at the destination before it stops
//! (post-copy, ampom, demand-paging, freeze-free; protocol 11; assisted-post-copy, protocol 20,
//! docs/protocol.md §6.3i). See
//! `pmig_engine::skeleton` for what a skeleton is and how it is brought up.
//!
//! Source, at the end of the preparation ([`offer`]): a primed holder
//! captures the process once while it runs (a freeze of about a
//! millisecond or two, reported as the skeleton's `pause_ms`) and stays
//! primed for the stop; that image goes to the destination as `Skeleton`
//! and the destination answers `SkeletonReady` once the skeleton is held.
//! At the stop the holder captures as it always does, keeping the pages the
//! first capture kept, and the image goes against the skeleton's, which
//! both sides keep (protocol 14, [`crate::delta`]); the destination says
//! `SkeletonUsed` before `Restored`.
//!
//! Destination ([`receive`], [`start`]): the skeleton's image (composed
//! with the private copies of file mappings received before it, if any) is
//! restored by `pmig restore --skeleton` and held; at the stop it is
//! brought up to the image of the stop. One that cannot follow the
//! process's changes is killed, and the image of the stop is restored the
//! ordinary way: the migration then takes as long as without a skeleton,
//! and nothing else changes.
//!
//! Nothing here loses a process: until the stop the source runs on (a
//! failure before it resumes it as always), and a held skeleton whose
//! daemon or source goes away reads the end of its input and is killed
//! without having run.

use crate::clock::{mark, ms_between};
use crate::error::{io_err, Result, StrategyError};
use crate::holder::{CaptureMode, Primed};
use crate::post_copy::read_image;
use crate::pre_copy::{compose, FINAL_DIR};
use crate::report::SkeletonUse;
use crate::stop_copy::{
    prespawn_restore, receive_image_after, restore_from, send_image, start_skeleton, HeldSkeleton,
    NotBrought, Started,
};
use crate::{Destination, Source};
use pmig_engine::pagestore::PageStore;
use pmig_engine::resources::memory::Backing;
use pmig_proto::{code, Msg};
use std::path::{Path, PathBuf};

/// Where the source's holder writes the skeleton's image, in the staging
/// directory.
const SKELETON_DIR: &str = "skeleton";
/// Where the destination receives it when private copies came before it
/// (the composed image then goes into the staging directory itself).
const SKELETON_IN_DIR: &str = "skeleton-in";
/// Where the destination composes the image of the stop with the private
/// copies when a stale skeleton has used them up.
const FALLBACK_DIR: &str = "fallback";

/// Source, the end of the preparation (see the module's documentation):
/// with a version-11 destination, captures the process into a skeleton with
/// a holder primed for `mode`, sends it, and waits until the destination
/// holds it or says why not. The holder stays in `m.primed` for the stop.
/// An error is the migration's (the process runs on, untouched but for
/// the pause).
pub(crate) fn offer(m: &mut Source, mode: &CaptureMode) -> Result<()> {
    if m.ch.peer().version < pmig_proto::msg::SKELETON || not_offered(m) {
        return Ok(());
    }
    std::fs::create_dir_all(&m.staging)
        .map_err(io_err(format!("create {}", m.staging.display())))?;
    let primed = Primed::start(m.host, m.pid, m.started, &m.staging, mode)?;
    offer_from(m, primed)
}

/// Source, at the end of assisted-post-copy's round 0 (version 20): as
/// [`offer`], with the holder the rounds primed for the stop (`m.primed`,
/// which captures into its own directory in its own mode). Without one (it
/// could not be started) no skeleton is offered, and the stop starts a
/// holder itself as before.
pub(crate) fn offer_primed(m: &mut Source) -> Result<()> {
    if not_offered(m) {
        return Ok(());
    }
    match m.primed.take() {
        Some(primed) => offer_from(m, primed),
        None => Ok(()),
    }
}

/// Whether no skeleton is offered for the process, because the
/// destination would refuse it: the process holds a named pipe, which is
/// opened at the stop only (see `pmig_engine::resources::fifos`), or has
/// System V shared memory attached, which is attached at the stop only
/// (see `pmig_engine::resources::sysvshm`). Its capture would pause the
/// process and its image travel for nothing, and the image of the stop
/// would then be composed with it, in the stop. The report says why.
fn not_offered(m: &mut Source) -> bool {
    use pmig_engine::resources::{fifos, sysvshm};
    let why = if let Some(path) = fifos::held_by(m.pid) {
        format!("it holds a named pipe ({path}), which is opened at the stop only")
    } else if sysvshm::attached_by(m.pid) {
        "it has System V shared memory attached, which is attached at the stop only".to_string()
    } else {
        return false;
    };
    tracing::info!("process {}: no skeleton: {why}", m.pid);
    m.skeleton = Some(SkeletonUse {
        used: false,
        pause_ms: 0.0,
        why_not: Some(why),
    });
    true
}

/// Captures the process into a skeleton with `primed`, sends it and waits
/// for `SkeletonReady`; `primed` goes to `m.primed` for the stop.
fn offer_from<'a>(m: &mut Source<'a>, mut primed: Primed<'a>) -> Result<()> {
    let dir = m.staging.join(SKELETON_DIR);
    let c = match primed.precapture(&dir) {
        Ok(c) => c,
        Err(e) => {
            // The process runs on, and its holder has gone: the stop
            // captures it with a new one, and says whether it can be.
            tracing::info!("process {}: no skeleton: {e}", m.pid);
            let _ = std::fs::remove_dir_all(&dir);
            m.skeleton = Some(SkeletonUse {
                used: false,
                pause_ms: 0.0,
                why_not: Some(format!("its capture failed: {e}")),
            });
            return Ok(());
        }
    };
    m.primed = Some(primed);
    let pause_ms = ms_between(c.frozen_ns, c.captured_ns);
    mark("src: skeleton captured");
    tracing::info!(
        "process {}: captured for its skeleton (paused {pause_ms:.2} ms)",
        m.pid
    );
    m.ch.queue(&Msg::Skeleton { id: m.id }, &[])?;
    m.count(16);
    send_image(m, &dir)?;
    // Kept (in the staging directory, removed at the end): the image of
    // the stop goes against it.
    let (ready, why) = match m.recv("SkeletonReady")? {
        Msg::SkeletonReady { id, ready, why } if id == m.id => (ready, why),
        other => {
            return Err(StrategyError::Protocol {
                node: m.peer.clone(),
                what: format!("expected SkeletonReady, got {}", other.kind()),
            })
        }
    };
    mark("src: skeleton held");
    if !ready {
        tracing::info!("{} holds no skeleton of process {}: {why}", m.peer, m.pid);
        let _ = std::fs::remove_dir_all(&dir);
    } else if m.ch.peer().version >= pmig_proto::msg::IMAGE_COPY {
        match crate::stop_copy::DeltaBase::read(&dir) {
            Ok(base) => m.delta_base = Some(std::rc::Rc::new(base)),
            Err(e) => tracing::info!(
                "the images after the skeleton go whole: its image cannot be read: {e}"
            ),
        }
    }
    m.skeleton = Some(SkeletonUse {
        used: false,
        pause_ms,
        why_not: (!ready).then_some(why),
    });
    if ready && m.host.hooks().hold_skeleton {
        m.hold_for_test("release-skeleton", "the stop");
    }
    Ok(())
}

/// Source, after the image of the stop: a destination that holds a
/// skeleton says whether it ran it (`SkeletonUsed`).
pub(crate) fn outcome(m: &mut Source) -> Result<()> {
    let Some(k) = m.skeleton.as_mut().filter(|k| k.why_not.is_none()) else {
        return Ok(());
    };
    match m.ch.recv()? {
        Msg::SkeletonUsed { id, used, why } if id == m.id => {
            k.used = used;
            if !used {
                tracing::info!(
                    "{} did not run the skeleton of process {}: {why}",
                    m.peer,
                    m.pid
                );
                k.why_not = Some(why);
            }
            Ok(())
        }
        Msg::Error { code, text } => Err(StrategyError::Refused {
            node: m.peer.clone(),
            code,
            text,
        }),
        other => Err(StrategyError::Protocol {
            node: m.peer.clone(),
            what: format!("expected SkeletonUsed, got {}", other.kind()),
        }),
    }
}

/// A skeleton offered to the destination: held (unless it could not be
/// built), and where its image is.
pub(crate) struct Offered<'a> {
    held: Option<HeldSkeleton<'a>>,
    /// When the private copies of file mappings went into the skeleton's
    /// image: a page store that holds that image's pages already, which
    /// the image of the stop is composed with if the skeleton is not used.
    fallback: Option<PageStore>,
}

/// The pages received before a skeleton, which its image is composed with.
pub(crate) enum Copies<'s> {
    /// None (the skeleton's image is restored as it is).
    None,
    /// Post-copy's private copies of file mappings: all of them.
    Store(Box<PageStore>),
    /// Assisted-post-copy's round 0: of its pages, those of the private
    /// file mappings of the skeleton's image (the captures leave out the
    /// pages of the ranges round 0 sent that were not written since; its
    /// anonymous pages stay out of the skeleton, which faults them in).
    Round0(&'s mut PageStore),
}

/// Destination, on `Skeleton`: receives the image that follows, composes
/// it with `copies` (pages received before, if any), restores it as a
/// skeleton, and answers `SkeletonReady`. A skeleton that cannot be built
/// is no error of the migration: the answer says why, and the process is
/// then restored from the image of the stop.
pub(crate) fn receive<'a>(d: &mut Destination<'a>, copies: Copies) -> Result<Offered<'a>> {
    let staging = d.staging.clone();
    let composed = !matches!(copies, Copies::None);
    let dir = staging.join(if composed {
        SKELETON_IN_DIR
    } else {
        SKELETON_DIR
    });
    std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
    receive_image_after(d, &dir, None)?;
    mark("dst: skeleton received");
    // The files the image of the stop may take bytes from (`ImageCopy`):
    // as received, whatever composing makes of them.
    d.delta_base = Some(crate::stop_copy::SkeletonBase::read(&dir));
    let store = match copies {
        Copies::None => None,
        Copies::Store(s) => Some(*s),
        Copies::Round0(round0) => Some(file_copies(round0, &dir, &staging)?),
    };
    let pre = match store {
        Some(store) => {
            // The skeleton's own page data stays in `dir`: the image of
            // the stop may take pages from it (protocol 15).
            let r = compose(store, &dir);
            if let Err(e) = r {
                return Err(crate::pre_copy::cannot_compose(d, e));
            }
            staging.clone()
        }
        None => dir,
    };
    // Ready in case the skeleton is not used: the store the image of the
    // stop would then be composed with, and the restore that would run
    // (started now: starting the program is a millisecond of the stop).
    let fallback = match composed {
        true => Some(fallback_store(d, &pre)?),
        false => None,
    };
    let fallback_dir = match composed {
        true => staging.join(FALLBACK_DIR),
        false => final_dir(d),
    };
    // Started before the skeleton's restore, so that its own start is over
    // before the stop.
    prespawn_restore(d, &fallback_dir, true);
    let (held, why) = match start_skeleton(d, &pre) {
        Ok(held) => {
            tracing::info!(
                "holding a skeleton of process {} ({}) from {} as pid {}",
                d.offer.pid,
                d.offer.comm,
                d.peer,
                held.pid
            );
            (Some(held), String::new())
        }
        Err((_, e)) => {
            tracing::warn!(
                "no skeleton of process {} ({}) from {}: {e}",
                d.offer.pid,
                d.offer.comm,
                d.peer
            );
            (None, e)
        }
    };
    mark("dst: skeleton held");
    d.ch.send(&Msg::SkeletonReady {
        id: d.offer.id,
        ready: held.is_some(),
        why: why.chars().take(pmig_proto::msg::MAX_ERROR_TEXT).collect(),
    })?;
    Ok(Offered { held, fallback })
}

/// A page store in `to` that holds the pages `round0` holds of the private
/// file mappings of the image in `dir`.
fn file_copies(round0: &mut PageStore, dir: &Path, to: &Path) -> Result<PageStore> {
    let pi = read_image(dir)?;
    let ranges: Vec<(u64, u64)> = pi
        .memory
        .vmas
        .iter()
        .filter(|v| v.backing == Backing::PrivateFile)
        .flat_map(|v| v.present.iter().copied())
        .collect();
    let mut store = PageStore::create(to)?;
    let n = round0.copy_within(&ranges, &mut store)?;
    tracing::debug!(
        "skeleton: {:.1} KiB of round 0's private file pages composed in",
        n as f64 / 1024.0
    );
    Ok(store)
}

/// A page store in the staging directory's fallback directory that holds
/// the pages of private file mappings in the image in `pre`: the private
/// copies sent before the stop, which the image of the stop leaves out
/// unless they were written since.
///
/// Only those: the stop's image lists writable private anonymous memory as
/// wholly present (its pages follow the resume), so any other page of the
/// skeleton's capture taken into the store would be composed into the
/// image and restored as it was at that capture, however the process
/// changed it since (a read-only area made writable and written, or
/// released). The pages the stop keeps with the state, it captures itself.
fn fallback_store(d: &Destination, pre: &Path) -> Result<PageStore> {
    let dir = d.staging.join(FALLBACK_DIR);
    std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
    let mut store = PageStore::create(&dir)?;
    let img = pmig_image::Image::open(pre).map_err(|e| StrategyError::Other(e.to_string()))?;
    let mut pi = read_image(pre)?;
    pi.memory.vmas.retain(|v| v.backing == Backing::PrivateFile);
    store.absorb(&img, &pi)?;
    Ok(store)
}

/// Destination, once the image of the stop is in `fin` (and verified):
/// brings the skeleton up to it, or, if there is none or that cannot be,
/// restores that image the ordinary way; a held skeleton's source is told
/// which (`SkeletonUsed`, queued ahead of `Restored`). Returns what runs
/// and the directory of its image. `meanwhile` is called with the image's
/// directory while it is brought up or restored (again if the skeleton
/// gives way to the ordinary restore).
pub(crate) fn start<'a>(
    d: &mut Destination<'a>,
    offered: Offered<'a>,
    fin: &Path,
    meanwhile: &mut dyn FnMut(&Path),
) -> std::result::Result<(Started, PathBuf), (u32, String)> {
    let Offered { held, fallback } = offered;
    if d.hooks.fail_restore {
        // Dropped, the held skeleton is killed, as a failed restore's
        // process would be.
        return Err((
            code::RESTORE_FAILED,
            "restore failed: test hook fail-restore".into(),
        ));
    }
    let why = match held.map(|h| h.bring_up(fin, meanwhile)) {
        None => None,
        Some(Ok((started, exiting))) => {
            d.exiting.push(exiting);
            mark("dst: skeleton brought up");
            let _ = d.ch.queue(
                &Msg::SkeletonUsed {
                    id: d.offer.id,
                    used: true,
                    why: String::new(),
                },
                &[],
            );
            return Ok((started, fin.to_path_buf()));
        }
        Some(Err(NotBrought::Stale(why))) => {
            tracing::info!(
                "the skeleton of process {} is out of date ({why}): restoring the image of the stop",
                d.offer.comm
            );
            Some(why)
        }
        Some(Err(NotBrought::Failed(e))) => {
            tracing::warn!(
                "the skeleton of process {} failed ({e}): restoring the image of the stop",
                d.offer.comm
            );
            Some(e)
        }
    };
    let dir = full_image(d, fallback, fin).map_err(|e| (code::BAD_IMAGE, e.to_string()))?;
    if let Some(why) = why {
        let _ = d.ch.queue(
            &Msg::SkeletonUsed {
                id: d.offer.id,
                used: false,
                why: why.chars().take(pmig_proto::msg::MAX_ERROR_TEXT).collect(),
            },
            &[],
        );
    }
    let started = restore_from(d, &dir, true, meanwhile)?;
    Ok((started, dir))
}

/// The image of the stop as the ordinary restore wants it: `fin` itself,
/// or, when the private copies of file mappings went into the skeleton's
/// image, `fin` composed with that image's pages (`fallback`, a store
/// that holds them).
fn full_image(d: &mut Destination, fallback: Option<PageStore>, fin: &Path) -> Result<PathBuf> {
    let Some(store) = fallback else {
        return Ok(fin.to_path_buf());
    };
    compose(store, fin)?;
    mark("dst: image of the stop composed");
    let dir = d.staging.join(FALLBACK_DIR);
    d.composed = Some(dir.clone());
    Ok(dir)
}

/// Destination: the directory the image of the stop goes into when a
/// skeleton was offered.
pub(crate) fn final_dir(d: &Destination) -> PathBuf {
    d.staging.join(FINAL_DIR)
}
