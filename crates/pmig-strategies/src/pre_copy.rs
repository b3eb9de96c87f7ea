//! `pre-copy`: copy the memory in rounds while the process runs, then stop it
//! and send only what changed since the last round (Noack §2.3.5, after the
//! V kernel).
//!
//! Source, preparation (the process runs):
//! 1. [`DirtyTracker::attach`]: a userfaultfd inside the process protects its
//!    writable private memory in asynchronous write-protect mode (the process
//!    is stopped for a few hundred microseconds while it is created);
//! 2. round 0 sends every populated page of that memory (`PageData`, 4 MiB at
//!    a time, read with `process_vm_readv`); untracked memory (shared, read-only
//!    or special mappings) is left for the final image;
//! 3. every rerun scans the pages written since the previous scan
//!    (`PAGEMAP_SCAN`, which protects them again) and sends them. Every
//!    round reads its pages a piece at a time, each protected again just
//!    before it is read ([`DirtyTracker::protect_before_read`]), so that
//!    what the next scan reports is only what was written after. The rounds
//!    stop after the first rerun whose dirty bytes are at most
//!    `max_dirty_fraction` of the address space, or after `max_rounds`
//!    reruns (Noack's defaults: 30 %, 6). Every round ends with `RoundDone`.
//!
//!    *The address space* is the total of the populated, saveable pages at
//!    round 0 (what a stop-copy image would hold then), not the virtual size:
//!    reserved but never touched memory would make any limit meaningless.
//!    Unlike Noack, the dirty pages of the round that meets the limit are sent
//!    while the process still runs, so the stop only carries what was written
//!    during that (short) last round.
//!
//! Source, handover: the tracked ranges go to a file in the staging directory;
//! the holder freezes the process and captures the state and all untracked
//! memory, but no page of the tracked ranges ([`CaptureMode::WrittenApart`]).
//! The holder's page scan at the freeze found the pages written since the
//! last round ([`crate::holder::read_written_at_freeze`]; without its list
//! the tracker scans the frozen process again); the source sends them
//! from the frozen process as one more round ([`send_frozen_round`]):
//! once through the stream into the destination's store, not into the image,
//! a second copy of it and then the store. The partial image follows,
//! streamed like a stop-copy image. The tracker lives until `Restored`, then
//! it is dropped, which removes every write protection. On any failure
//! before `Restored` it is dropped too and the process resumes exactly as it
//! was.
//!
//! Destination: a [`PageStore`] in the staging directory takes the pages of
//! every round (newest copy wins); the final image goes to a subdirectory, is
//! verified and absorbed, and the store composes a complete image in the
//! staging directory. That image becomes a local page store: a small image
//! is restored lazily and the rest is filled from the store, faults first
//! ([`restore_lazily_from_local`]); `PagesDone` then lets the source commit.
//!
//! `queued-pre-copy` ([`crate::queued_pre_copy`]) runs the same code with
//! another [`Policy`]. See docs/protocol.md, "pre-copy".

use crate::clock::{mark, mono_ns};
use crate::error::{io_err, Result, StrategyError};
use crate::flushing::{compose_small_from, kept_pages, restore_and_fill};
use crate::holder::{CaptureMode, Holder};
use crate::sent_copies::SentCopies;
use crate::stop_copy::{await_commit, receive_image_after, send_image};
use crate::{Destination, Progress, Source, Strategy, StrategyKind};
use pmig_engine::dirty::{DirtyTracker, Scope};
use pmig_engine::image::ProcessImage;
use pmig_engine::pagestore::{read_ranges, PageStore};
use pmig_engine::resources::memory::{saveable_ranges, RangeFilter, TASK_END};
use pmig_engine::EngineError;
use pmig_proto::blocking::Incoming;
use pmig_proto::{code, Msg};
use std::path::Path;
use std::time::{Duration, Instant};

const PAGE: u64 = pmig_image::PAGE_SIZE;
/// Bytes of page data per `PageData` message.
pub const PAGE_CHUNK: usize = 4 << 20;
/// Queued pre-copy: a page written within this interval is *hot* (held back).
/// Every scan interval of queued pre-copy lasts at least this long, so that
/// "not written in the last interval" means something even when a round
/// sends almost nothing.
pub const HOT_INTERVAL: Duration = Duration::from_millis(50);
/// Most reruns accepted from a request (the loop stays bounded).
pub const MAX_ROUNDS_LIMIT: u32 = 1000;
/// Most messages a destination accepts before the final image.
const MAX_ROUND_MESSAGES: u64 = 1 << 32;
/// File in the source's staging directory listing the tracked ranges.
pub(crate) const TRACKED_FILE: &str = "written-since.ranges";
/// Pages per `PageDeltas` message in the round read from the frozen
/// process ([`send_frozen_round`]).
const FROZEN_DELTA_BATCH: u32 = 64;
/// Room a destination keeps touched past its store's pages after each
/// round ([`PageStore::touch_ahead`]), so that the next round's pages, and
/// above all those of the stop, are written into memory already there,
/// not into memory the machine has to supply while the process is frozen.
/// A rerun sends what was written during the round before it, and the
/// stop what was written during the last rerun, which rounds that converge
/// make less: after a rerun, as much as it stored, at least [`ROOM_MIN`]
/// and at most [`ROOM_MAX`]. After round 0, whose size says nothing about
/// the next, only [`ROOM_MIN`]: the stop follows a rerun (with
/// `--max-rounds 0`, round 0).
fn room_after(round: u32, stored: u64) -> u64 {
    match round {
        0 => ROOM_MIN,
        _ => stored.clamp(ROOM_MIN, ROOM_MAX),
    }
}
/// The least room touched after a round ([`room_after`]).
const ROOM_MIN: u64 = 1 << 20;
/// The most room touched after a round ([`room_after`]).
const ROOM_MAX: u64 = 64 << 20;
/// Subdirectory of the staging directory for the final image (both sides).
pub(crate) const FINAL_DIR: &str = "final";

/// Which pages each round sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Every page written since the previous round.
    Plain,
    /// Only pages not written in the last interval; the others are queued and
    /// sent once they stay unwritten for an interval, or at the stop.
    Queued,
}

/// The source and destination sides of both pre-copy strategies.
pub(crate) struct Iterative {
    policy: Policy,
    /// From the start of the rounds until `Restored` (or a failure).
    tracker: Option<DirtyTracker>,
    /// Queued: pages held back for the stop, sorted ranges.
    delayed: Vec<(u64, u64)>,
    /// Pages a round could not read (made inaccessible or unmapped while
    /// it ran): not on the destination, and maybe never written again, so
    /// the stop saves them whole.
    missed: Vec<(u64, u64)>,
    /// The round in progress (for errors).
    round: u32,
    /// From the first rerun until the handover, to a version-18
    /// destination: the copies of the pages the reruns sent, against which
    /// they are sent again as their changes.
    copies: Option<SentCopies>,
    /// How the holder captures the process at the stop: with nothing of
    /// the tracked ranges (pre-copy, [`CaptureMode::WrittenApart`]), or
    /// with nothing of writable private anonymous memory beyond the pages
    /// the restore touches and, of the other tracked ranges, only the pages
    /// written since round 0 (assisted-post-copy,
    /// [`CaptureMode::HandoverWritten`]: its anonymous pages written or
    /// mapped since round 0 are owed).
    handover: bool,
}

impl Iterative {
    pub(crate) fn new(policy: Policy) -> Iterative {
        Iterative {
            policy,
            tracker: None,
            delayed: Vec::new(),
            missed: Vec::new(),
            round: 0,
            copies: None,
            handover: false,
        }
    }

    /// The stop captures like a post-copy handover (see
    /// [`Iterative::handover`]'s field): assisted-post-copy.
    pub(crate) fn capturing_a_handover(self) -> Iterative {
        Iterative {
            handover: true,
            ..self
        }
    }

    /// The holder's mode at the stop, for the tracked ranges listed in
    /// `list`.
    pub(crate) fn stop_mode(&self, list: &Path) -> CaptureMode {
        if self.handover {
            CaptureMode::HandoverWritten(list.into())
        } else {
            CaptureMode::WrittenApart(list.into())
        }
    }

    /// The tracked ranges whose pages a round sent (less the queued pages
    /// and those a round missed), sorted: assisted-post-copy's list for the
    /// holder at its stop (pre-copy's is [`Self::read_at_stop`]).
    pub(crate) fn tracked_and_sent(&self) -> Option<Vec<(u64, u64)>> {
        let t = self.tracker.as_ref()?.tracked();
        Some(subtract(&subtract(&t, &self.delayed), &self.missed))
    }

    /// The tracked ranges whose pages the stop reads from the frozen
    /// process (pre-copy's [`CaptureMode::WrittenApart`] list): all but the
    /// pages a round missed, which the holder saves whole. Queued pages,
    /// never sent, go whole with that last round ([`Self::written_at_stop`]),
    /// once into the destination's store, not into the image, a second
    /// copy of it and then the store.
    fn read_at_stop(&self) -> Option<Vec<(u64, u64)>> {
        let t = self.tracker.as_ref()?.tracked();
        Some(subtract(&t, &self.missed))
    }

    /// Drops the tracker: the kernel removes every registration and write
    /// protection from the process.
    pub(crate) fn untrack(&mut self) {
        if self.tracker.take().is_some() {
            tracing::debug!("write tracking removed");
        }
        self.delayed.clear();
        self.missed.clear();
        self.copies = None;
    }

    pub(crate) fn prepare(&mut self, m: &mut Source) -> Result<()> {
        self.round = 0;
        self.rounds(m).map_err(|e| {
            self.untrack();
            StrategyError::During {
                what: format!("pre-copy round {} (write tracking removed)", self.round),
                source: Box::new(e),
            }
        })?;
        if m.host.hooks().hold_rounds {
            m.hold_for_test("release-rounds", "the stop");
        }
        Ok(())
    }

    fn rounds(&mut self, m: &mut Source) -> Result<()> {
        let p = m.precopy;
        let pid = m.pid;
        let t = mono_ns();
        // assisted-post-copy also tracks, and sends in round 0, the private
        // copies in read-only mappings of files (a library's relocated
        // data), which its stop then leaves out unless written since.
        let scope = match self.handover {
            true => Scope::WritableAndPrivateFiles,
            false => Scope::Writable,
        };
        let tracker = self
            .tracker
            .insert(DirtyTracker::attach_scoped(pid, scope)?);
        tracing::info!(
            "tracking writes of process {pid} ({:.1} MiB tracked, attached in {:.2} ms)",
            tracker.tracked_bytes() as f64 / (1 << 20) as f64,
            (mono_ns() - t) as f64 / 1e6
        );
        let hot = if self.policy == Policy::Queued {
            std::thread::sleep(HOT_INTERVAL);
            tracker.scan()?
        } else {
            Vec::new()
        };
        let mut last_scan = Instant::now();
        let all = saveable_ranges(pid)?;
        let address_space = total(&all);
        let limit = (address_space as f64 * p.max_dirty_fraction) as u64;
        // Untracked memory goes with the final image anyway.
        let mut first = intersect(&all, &tracker.tracked());
        if self.policy == Policy::Queued {
            self.delayed = intersect(&hot, &all);
            first = subtract(&first, &self.delayed);
        }
        let sent = send_round(m, 0, &first, self.tracker.as_ref(), None, &mut self.missed)?;
        // The pages the reruns send are kept, up to a quarter of the
        // address space, to send them again as their changes.
        if m.ch.peer().version >= pmig_proto::msg::PAGE_DELTAS {
            self.copies = Some(SentCopies::new(address_space / 4));
        }
        tracing::info!(
            "round 0: sent {:.1} MiB of {:.1} MiB saveable ({:.1} MiB queued); limit {:.1} MiB",
            mib(sent),
            mib(address_space),
            mib(total(&self.delayed)),
            mib(limit)
        );
        // The holder that will capture the process at the stop does its
        // preparation now (see `holder::Primed`).
        let mut layout_read = Instant::now();
        let mode = self.stop_mode(&m.staging.join(TRACKED_FILE));
        prime_holder(m, &mode);
        // With a down-time budget: the previous round's bytes, to see that
        // rounds still shrink.
        let mut previous = sent;
        for round in 1..=p.max_rounds.min(MAX_ROUNDS_LIMIT) {
            self.round = round;
            // The mappings the holder read may have changed: re-read at most
            // once a second, in the background.
            if layout_read.elapsed() > LAYOUT_REFRESH {
                if let Some(h) = m.primed.as_mut() {
                    h.refresh();
                    layout_read = Instant::now();
                }
            }
            if self.policy == Policy::Queued {
                std::thread::sleep(HOT_INTERVAL.saturating_sub(last_scan.elapsed()));
            }
            let tracker = self.tracker.as_mut().ok_or_else(lost_tracker)?;
            let written = tracker.scan()?;
            last_scan = Instant::now();
            // Whole new mappings are reported written: send only their
            // populated pages.
            let present = saveable_ranges(pid)?;
            let written = intersect(&written, &present);
            let (send, left) = match self.policy {
                Policy::Plain => {
                    let n = total(&written);
                    (written, n)
                }
                Policy::Queued => {
                    let cooled =
                        crate::queued_pre_copy::rerun(&mut self.delayed, written, &present);
                    (cooled, total(&self.delayed))
                }
            };
            let t_round = Instant::now();
            let sent = send_round(
                m,
                round,
                &send,
                self.tracker.as_ref(),
                self.copies.as_mut(),
                &mut self.missed,
            )?;
            let round_ms = t_round.elapsed().as_secs_f64() * 1e3;
            tracing::info!(
                "round {round}: sent {:.1} MiB; {:.1} MiB {} (limit {:.1} MiB)",
                mib(sent),
                mib(left),
                if self.policy == Policy::Queued {
                    "queued for the stop"
                } else {
                    "were dirty"
                },
                mib(limit)
            );
            if left > limit {
                previous = sent;
                continue;
            }
            // Noack's rule is met. A down-time budget asks for more rounds
            // while the stop would still send more than the budget allows:
            // the pages written during a round that took longer than it.
            let budget = p.max_down_ms.filter(|_| self.policy == Policy::Plain);
            match Budget::decide(budget, round_ms, sent, previous) {
                Budget::Met => break,
                Budget::NotShrinking => {
                    tracing::info!(
                        "round {round} took {round_ms:.1} ms, over the {} ms budget, but rounds no longer shrink: stopping",
                        budget.unwrap_or_default()
                    );
                    break;
                }
                Budget::OneMore => {
                    tracing::info!(
                        "round {round} took {round_ms:.1} ms, over the {} ms budget: one more round",
                        budget.unwrap_or_default()
                    );
                    previous = sent;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn handover(&mut self, m: &mut Source) -> Result<()> {
        let r = self.stop_and_send(m);
        // After `Restored` the tracker has served its purpose; after a failure
        // it must go before the process resumes. Either way: now.
        self.untrack();
        r
    }

    fn stop_and_send(&mut self, m: &mut Source) -> Result<()> {
        mark("src: stop decided");
        // Missed pages are left out of the list: the holder saves them whole.
        let listed = self.read_at_stop().ok_or_else(lost_tracker)?;
        std::fs::create_dir_all(&m.staging)
            .map_err(io_err(format!("create {}", m.staging.display())))?;
        let list = m.staging.join(TRACKED_FILE);
        write_ranges(&list, &listed)?;
        let dir = m.staging.join(FINAL_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        let holder = stop_holder(m, &dir, &self.stop_mode(&list))?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        m.pages_sent += holder.captured.page_bytes / PAGE;
        holder
            .captured
            .log(m.pid, "written since the last round, queued or untracked");
        m.holder = Some(holder);
        self.send_written_apart(m, &dir, &list, &listed)?;
        send_image(m, &dir)?;
        await_restored(m)
    }

    /// The stop's last round ([`CaptureMode::WrittenApart`]).
    fn send_written_apart(
        &mut self,
        m: &mut Source,
        dir: &Path,
        list: &Path,
        listed: &[(u64, u64)],
    ) -> Result<()> {
        // The pages written since the last round: read from the frozen
        // process and sent once, as the rounds' pages are (the image holds
        // none of the tracked ranges), instead of being copied into the
        // image, received into a second copy and put into the store.
        let (written, _) = self.written_at_stop(dir, list, listed)?;
        let before = self.copies.as_ref().map(|c| (c.as_changes, c.change_bytes));
        let sent = send_frozen_round(m, self.round + 1, &written, self.copies.as_mut())?;
        mark("src: written pages sent");
        m.pages_as_changes = self.copies.as_ref().map_or(0, |c| c.as_changes);
        let changes = match (before, self.copies.as_ref()) {
            (Some((n, b)), Some(c)) => format!(
                "; {} pages as their changes ({:.1} KiB)",
                c.as_changes - n,
                (c.change_bytes - b) as f64 / 1024.0
            ),
            _ => String::new(),
        };
        tracing::info!(
            "process {}: {:.1} MiB written since the last round sent from the frozen process{changes}",
            m.pid,
            mib(sent)
        );
        Ok(())
    }

    /// At the stop, once the holder captured the process into `dir` (in
    /// [`Iterative::stop_mode`], with the ranges `listed` in the file
    /// `list`): the pages of those ranges written since the last round, as
    /// the holder's scan at the freeze found them (or, without its list,
    /// the tracker's scan of the frozen process), with the queued pages
    /// among them, and the image. Of what
    /// the scan reports, only the pages the image lists as present (its
    /// populated pages at the freeze, the shared zero page left out) count.
    ///
    /// A listed range that the scan no longer covers (made read-only since,
    /// or unmapped and mapped again as memory it does not track) counts as
    /// written whole: what the process wrote there before is unknown. Pages
    /// the image holds itself (read-only memory is saved whole) are left
    /// out.
    pub(crate) fn written_at_stop(
        &mut self,
        dir: &Path,
        list: &Path,
        listed: &[(u64, u64)],
    ) -> Result<(Vec<(u64, u64)>, ProcessImage)> {
        let pi = crate::post_copy::read_image(dir)?;
        mark("src: image of the stop read");
        let present: Vec<(u64, u64)> = pi
            .memory
            .vmas
            .iter()
            .flat_map(|v| v.present.iter().copied())
            .collect();
        // The holder's scan at the freeze found them already (the process
        // has not run since); without its list, the tracker scans again.
        let found = match crate::holder::read_written_at_freeze(list) {
            Some(w) => w,
            None => {
                let tracker = self.tracker.as_mut().ok_or_else(lost_tracker)?;
                let scanned = intersect(&tracker.scan()?, listed);
                let untracked = subtract(listed, &tracker.tracked());
                [scanned, untracked].concat()
            }
        };
        mark("src: written pages listed");
        // Queued pages (queued-pre-copy) were never sent: all of them go.
        let found = normalize(&[found, intersect(&self.delayed, listed)].concat());
        let written = subtract(&intersect(&found, &present), &in_image(&pi));
        mark("src: written pages scanned");
        Ok((written, pi))
    }

    pub(crate) fn post(&mut self, m: &mut Source) -> Result<()> {
        self.untrack();
        // The destination fills the process's memory from its own copy of
        // the pages (restore_lazily_from_local) and then says so.
        match m.recv("PagesDone") {
            Ok(Msg::PagesDone {
                id, remote_faults, ..
            }) if id == m.id => {
                m.remote_faults = remote_faults;
                m.residual.until = "handover (nothing remains on the source)".into();
            }
            Ok(other) => {
                return Err(self.lost(m, format!("expected PagesDone, got {}", other.kind())))
            }
            Err(e @ StrategyError::Refused { .. }) => {
                return Err(self.lost(m, e.to_string()));
            }
            Err(e) => {
                // The process runs there on pages of its own node; a
                // restarted daemon finishes the fill.
                tracing::warn!(
                    "no report of the fill from {} ({e}); the process runs there",
                    m.peer
                );
                m.residual.until = format!(
                    "handover; the destination did not report the end of its local fill ({e})"
                );
            }
        }
        m.commit()
    }

    /// The process ran on the destination and could not be completed there:
    /// the frozen original is killed (it must not run a second time).
    fn lost(&mut self, m: &mut Source, why: String) -> StrategyError {
        let peer = m.peer.clone();
        m.lost(format!(
            "the process ran on {peer} and was lost there: {why}"
        ))
    }

    pub(crate) fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        // Started now, it has long started when the small image is ready
        // (see `Prespawned`): it reads the staging directory only after
        // `go`, once that has been set aside and refilled.
        let staging = d.staging.clone();
        crate::stop_copy::prespawn_restore(d, &staging, true);
        let mut store = PageStore::create(&d.staging)?;
        let first = receive_rounds(d, &mut store, None, true)?;
        let dir = d.staging.join(FINAL_DIR);
        std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        receive_image_after(d, &dir, Some(first))?;
        mark("dst: final image received");
        let t_done = mono_ns();
        let composed = compose(store, &dir).map_err(|e| cannot_compose(d, e))?;
        tracing::info!(
            "final image absorbed and full image composed in {:.1} ms",
            (mono_ns() - t_done) as f64 / 1e6
        );
        mark("dst: full image composed");
        // The final image's pages now live in the store's pages file.
        let _ = std::fs::remove_dir_all(&dir);
        restore_lazily_from_local(d, composed)
    }
}

/// Destination: the complete image composed in the staging directory
/// becomes a local page store (`<staging root>/pmig-<node>-store-<id>`, out
/// of reach of the stale-staging cleanup, so that a restarted daemon can take
/// over). A small image (the state, every page outside writable private
/// anonymous memory, the pages the restore touches) is restored lazily, and
/// the rest is filled from the store in the background, faults first, as
/// `flushing` does from its page store. The stop no longer waits for the
/// whole memory to be copied into the process. `PagesDone` tells the source
/// when nothing is owed any more.
///
/// `composed` is the image just composed there, and its manifest: read back
/// from the files it would cost the stop another decode of every run.
fn restore_lazily_from_local(
    d: &mut Destination,
    composed: (ProcessImage, pmig_image::Manifest),
) -> Result<i32> {
    let staging = d.staging.clone();
    let (store, pages) = set_aside_small(d, composed, &staging, true)?;
    let (pid, st) = restore_and_fill(d, true, &store, &pages)?;
    d.ch.send(&Msg::PagesDone {
        id: d.offer.id,
        installed: st.installed_pages,
        remote_faults: st.remote_faults,
        prefetched: 0,
        prefetch_hits: 0,
    })?;
    await_commit(d, pid)?;
    Ok(pid)
}

/// The destination's local copy: the complete image `composed` in
/// directory `from` (the staging directory or one inside it) is set aside
/// as a local page store (`<staging root>/pmig-<node>-store-<id>`), and,
/// with `small`, the small image to restore lazily (the state, every page
/// outside writable private anonymous memory, the pages the restore
/// touches) is composed from it in the staging directory. Without, what
/// runs is a skeleton brought up to the image of the stop. Returns the
/// store's directory and its pages.
pub(crate) fn set_aside_small(
    d: &mut Destination,
    composed: (ProcessImage, pmig_image::Manifest),
    from: &Path,
    small: bool,
) -> Result<(std::path::PathBuf, crate::flushing::StorePages)> {
    let store = d
        .host
        .staging_root()
        .join(format!("pmig-{}-store-{}", d.host.node(), d.offer.id));
    let refuse = |d: &mut Destination, what: String| {
        let text = format!("{}: {what}", d.host.node());
        let _ = d.ch.send(&Msg::Error {
            code: code::BAD_IMAGE,
            text: text.chars().take(4000).collect(),
        });
        StrategyError::Other(text)
    };
    let _ = std::fs::remove_dir_all(&store);
    let moved = std::fs::rename(from, &store).and_then(|_| match from == d.staging {
        true => std::fs::create_dir(&d.staging),
        false => Ok(()),
    });
    if let Err(e) = moved {
        let _ = std::fs::remove_dir_all(&store);
        return Err(refuse(
            d,
            format!("cannot set the composed image aside: {e}"),
        ));
    }
    // The restore started with the rounds (or, if it is gone, a new one).
    if small && d.restorer.is_none() {
        let staging = d.staging.clone();
        crate::stop_copy::prespawn_restore(d, &staging, true);
    }
    let (pi, manifest) = composed;
    let data = store.join(pmig_image::PAGES_FILE);
    let pages = crate::flushing::StorePages::of(&pi, &data).and_then(|pages| {
        if !small {
            return Ok(pages);
        }
        let set = kept_pages(&pi, &pages);
        let staging = d.staging.clone();
        compose_small_from(
            pi,
            manifest,
            &data,
            &staging,
            &RangeFilter::of_pages(set.iter().copied()),
        )?;
        Ok(pages)
    });
    let pages = match pages {
        Ok(p) => p,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&store);
            return Err(refuse(
                d,
                format!("cannot compose the image to restore: {e}"),
            ));
        }
    };
    if small {
        mark("dst: small image composed");
        d.composed = Some(d.staging.clone());
    }
    Ok((store, pages))
}

/// How old the mappings a primed holder read may grow before a round asks it
/// to read them again.
const LAYOUT_REFRESH: Duration = Duration::from_secs(1);

/// Starts the holder for the stop (its capture into the staging
/// directory's final image, in `mode`) and lets it prepare while the
/// rounds go on. Without it the stop starts a holder itself.
fn prime_holder(m: &mut Source, mode: &CaptureMode) {
    if m.primed.is_some() {
        return;
    }
    match crate::holder::Primed::start(m.host, m.pid, m.started, &m.staging.join(FINAL_DIR), mode) {
        Ok(p) => m.primed = Some(p),
        Err(e) => tracing::info!("process {}: the holder starts at the stop ({e})", m.pid),
    }
}

/// The holder of the stop, frozen and captured: the one primed during the
/// rounds (it uses `<staging>/TRACKED_FILE` and `<staging>/FINAL_DIR`, which
/// `dir` must be, and the mode of [`Iterative::stop_mode`]), else a new one
/// capturing into `dir` in `mode`.
pub(crate) fn stop_holder<'a>(
    m: &mut Source<'a>,
    dir: &Path,
    mode: &CaptureMode,
) -> Result<Holder<'a>> {
    match m.primed.take() {
        Some(p) => p.go(),
        None => Holder::start_with(m.host, m.pid, m.started, dir, mode),
    }
}

/// What `--max-down-ms` says once Noack's fraction is met.
#[derive(Debug, PartialEq, Eq)]
enum Budget {
    /// No budget, or the last round took no longer than it: stop.
    Met,
    /// Over the budget, and the round sent at least 90 % of the previous
    /// one's bytes: more rounds would not shrink the stop; stop.
    NotShrinking,
    /// Over the budget and still shrinking: one more round.
    OneMore,
}

impl Budget {
    fn decide(budget_ms: Option<f64>, round_ms: f64, sent: u64, previous: u64) -> Budget {
        match budget_ms {
            Some(b) if round_ms > b => {
                if sent >= previous.saturating_mul(9) / 10 {
                    Budget::NotShrinking
                } else {
                    Budget::OneMore
                }
            }
            _ => Budget::Met,
        }
    }
}

fn lost_tracker() -> StrategyError {
    StrategyError::Other("internal error: no write tracking at the handover".into())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Sends the pages of `ranges` (read from the running process) as round
/// `round`, then `RoundDone`, and waits for the link to carry them
/// ([`drain`]). Returns the bytes of pages sent (whole or as their
/// changes, with `copies`: see [`SentCopies`]); adds the pages it could not
/// read to `missed`. With the `tracker` of the process's writes, each piece
/// of `ranges` is protected again just before it is read
/// ([`DirtyTracker::protect_before_read`]): a page written during the round
/// before its piece was read goes with it, and the next scan reports only
/// the pages written after.
pub(crate) fn send_round(
    m: &mut Source,
    round: u32,
    ranges: &[(u64, u64)],
    tracker: Option<&DirtyTracker>,
    copies: Option<&mut SentCopies>,
    missed: &mut Vec<(u64, u64)>,
) -> Result<u64> {
    let phase = if round == 0 { "round 0" } else { "rounds" };
    let (sent, skipped) = stream_pages(m, ranges, Some(phase), tracker, copies)?;
    if !skipped.is_empty() {
        tracing::info!(
            "round {round}: {} pages could not be read; the stop saves them whole",
            total(&skipped) / PAGE
        );
        *missed = normalize(&[missed.as_slice(), &skipped].concat());
    }
    let pages = sent / PAGE;
    m.ch.send(&Msg::RoundDone {
        id: m.id,
        round,
        pages,
    })?;
    m.count(24);
    m.rounds += 1;
    m.pages_sent += pages;
    if m.ch.peer().version >= pmig_proto::msg::ROUND_STORED {
        await_round_stored(m, round)?;
    } else {
        drain(m)?;
    }
    Ok(sent)
}

/// Source: waits for the destination's `RoundStored` of `round` (version
/// 21): the round is stored and the room for the next one made. Until then
/// the process runs on; a stop decided now does not wait behind pages the
/// destination still has to store.
fn await_round_stored(m: &mut Source, round: u32) -> Result<()> {
    match m.recv("RoundStored")? {
        Msg::RoundStored { id, round: r } if id == m.id && r == round => {
            mark("src: round stored");
            Ok(())
        }
        other => Err(StrategyError::Protocol {
            node: m.peer.clone(),
            what: match other {
                Msg::RoundStored { round: r, .. } => {
                    format!("RoundStored of round {r}, expected round {round}")
                }
                other => format!("expected RoundStored, got {}", other.kind()),
            },
        }),
    }
}

/// The bytes of a round read after one protection of their pages
/// ([`DirtyTracker::protect_before_read`]): a page written during the round
/// is sent again after it only if written after its piece was read, which
/// smaller pieces make likelier to be so; each piece costs one scan of its
/// ranges.
const PROTECT_PIECE: u64 = 1 << 20;

/// `ranges` cut into consecutive pieces of at most `max` bytes (a multiple
/// of the page size), in order.
fn pieces(ranges: &[(u64, u64)], max: u64) -> Vec<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut piece = Vec::new();
    let mut bytes = 0;
    for &(s, l) in ranges {
        let mut at = s;
        while at < s + l {
            let take = (s + l - at).min(max - bytes);
            piece.push((at, take));
            bytes += take;
            at += take;
            if bytes == max {
                out.push(std::mem::take(&mut piece));
                bytes = 0;
            }
        }
    }
    if !piece.is_empty() {
        out.push(piece);
    }
    out
}

/// Reads the pages of `ranges` from the process and sends them as
/// `PageData` (queued, and flushed at the end), showing progress as `phase`
/// if given; with a `tracker`, a piece at a time, each protected just
/// before it is read (see [`send_round`]); with `copies`, a page with a
/// copy as its changes. Returns the bytes sent and the pages that could not
/// be read.
fn stream_pages(
    m: &mut Source,
    ranges: &[(u64, u64)],
    phase: Option<&'static str>,
    tracker: Option<&DirtyTracker>,
    mut copies: Option<&mut SentCopies>,
) -> Result<(u64, Vec<(u64, u64)>)> {
    let (id, pid) = (m.id, m.pid);
    let want = total(ranges);
    let mut done = 0u64;
    let mut failed: Option<StrategyError> = None;
    let mut sink = |addr: u64, data: &[u8]| {
        let sent = match copies.as_deref_mut() {
            Some(c) => c.send(&mut m.ch, id, addr, data).map(|s| s.wire),
            None => {
                m.ch.queue_pages(id, addr, data)
                    .map(|s| s.wire())
                    .map_err(StrategyError::from)
            }
        };
        match sent {
            Ok(wire) => m.count(wire),
            Err(e) => {
                failed = Some(e);
                return Err(EngineError::Other("sending pages failed".into()));
            }
        }
        done += data.len() as u64;
        if let Some(phase) = phase {
            (m.progress)(Progress {
                phase,
                done,
                total: want,
            });
        }
        Ok(())
    };
    let read = read_protected(pid, ranges, tracker, &mut sink);
    if let Some(e) = failed {
        return Err(e);
    }
    let (sent, skipped) = read?;
    // What was queued (scattered single pages go a record at a time, not a
    // write at a time) goes out now.
    match copies {
        Some(c) => {
            let wire = c.finish(&mut m.ch, id)?;
            m.count(wire);
        }
        None => m.ch.flush()?,
    }
    Ok((sent, skipped))
}

/// Reads the pages of `ranges` from the running process `pid` into `sink`;
/// with the `tracker` of its writes, a piece at a time, each protected
/// again just before it is read (see [`send_round`]). Returns the bytes
/// read and the pages that could not be read (sorted runs). Used by the
/// rounds and by flushing's pre-flush ([`crate::flushing`]).
pub(crate) fn read_protected(
    pid: i32,
    ranges: &[(u64, u64)],
    tracker: Option<&DirtyTracker>,
    sink: &mut dyn FnMut(u64, &[u8]) -> pmig_engine::Result<()>,
) -> pmig_engine::Result<(u64, Vec<(u64, u64)>)> {
    let parts = match tracker {
        Some(_) => pieces(ranges, PROTECT_PIECE),
        None => vec![ranges.to_vec()],
    };
    let (mut read, mut skipped) = (0, Vec::new());
    for part in &parts {
        if let Some(t) = tracker {
            t.protect_before_read(part);
        }
        let (n, k) = read_ranges(pid, part, PAGE_CHUNK, sink)?;
        read += n;
        skipped.extend(k);
    }
    Ok((read, normalize(&skipped)))
}

/// The last round, at the stop: the pages of `ranges` read from the frozen
/// process and sent as `PageData` (or as their changes, with `copies`),
/// then `RoundDone`; no wait for the link
/// (the image follows at once). A page `process_vm_readv` cannot read
/// (protected since round 0) is read through `/proc/PID/mem`, which may;
/// one that cannot be read at all fails the migration, since the image
/// does not hold it. Returns the bytes sent.
fn send_frozen_round(
    m: &mut Source,
    round: u32,
    ranges: &[(u64, u64)],
    mut copies: Option<&mut SentCopies>,
) -> Result<u64> {
    let (id, pid) = (m.id, m.pid);
    // The pages' changes in small batches, each on its way at once: the
    // destination applies one while the next is read and compared here.
    if let Some(c) = copies.as_deref_mut() {
        c.stream(FROZEN_DELTA_BATCH);
    }
    let (mut sent, skipped) = stream_pages(m, ranges, None, None, copies)?;
    if !skipped.is_empty() {
        use std::os::unix::fs::FileExt;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem"))
            .map_err(io_err(format!("open /proc/{pid}/mem")))?;
        let mut page = vec![0u8; PAGE as usize];
        for &(a, l) in &skipped {
            for addr in (a..a + l).step_by(PAGE as usize) {
                mem.read_exact_at(&mut page, addr).map_err(|e| {
                    StrategyError::Other(format!(
                        "cannot read the page at {addr:#x} of the frozen process {pid}, written since the last round: {e}"
                    ))
                })?;
                let s = m.ch.send_pages(id, addr, &page)?;
                m.count(s.wire());
                sent += PAGE;
            }
        }
    }
    let pages = sent / PAGE;
    // A version-21 destination answers every `RoundDone` once it has made
    // room for the next round: there is none, and the image follows now,
    // which ends the rounds as well. (The pages went out flushed.)
    if m.ch.peer().version < pmig_proto::msg::ROUND_STORED {
        m.ch.send(&Msg::RoundDone { id, round, pages })?;
        m.count(24);
    }
    m.pages_sent += pages;
    Ok(sent)
}

/// Unacknowledged bytes below which a round counts as delivered: a few
/// segments, whose last acknowledgement may be delayed.
const DRAINED: u64 = 16 << 10;

/// Waits until the peer has acknowledged nearly all this side wrote (at most
/// the migration's timeout; without `TCP_INFO`, not at all). A round's time
/// then includes its transfer, which the down-time budget compares, and the
/// stop's image is not queued behind the round's tail, which may be
/// megabytes of socket buffer: the process runs on while that drains.
/// A connection reset meanwhile is an error: the round never arrived.
fn drain(m: &Source) -> Result<()> {
    let t = Instant::now();
    while t.elapsed() < m.timeout {
        match crate::post_copy::TcpState::of(m.ch.stream()) {
            Some(s) if s.closed => {
                return Err(StrategyError::Other(format!(
                    "the connection to {} was reset before the pages sent reached it",
                    m.peer
                )))
            }
            Some(s) if s.in_network > DRAINED => std::thread::sleep(Duration::from_micros(200)),
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Source: waits for `Restored` and records it.
pub(crate) fn await_restored(m: &mut Source) -> Result<()> {
    m.await_restored()
}

/// Destination: stores `PageData` until the final image starts; returns its
/// first message (`ImageFile`). `first` is a message already received.
/// Each `RoundDone` is answered with `RoundStored` (version 21); before
/// that, with `touch_room` (more rounds and the stop's pages will come to
/// this store), room for the next round is touched ahead of the stored
/// pages (see [`room_after`]).
pub(crate) fn receive_rounds(
    d: &mut Destination,
    store: &mut PageStore,
    mut first: Option<Incoming>,
    touch_room: bool,
) -> Result<Incoming> {
    let bad = |d: &mut Destination, code: u32, what: String| {
        let _ = d.ch.send(&Msg::Error {
            code,
            text: what.clone(),
        });
        StrategyError::Protocol {
            node: d.peer.clone(),
            what,
        }
    };
    let mut rounds = 0u32;
    let mut stored_before = store.bytes_received();
    for _ in 0..MAX_ROUND_MESSAGES {
        let inc = match first.take() {
            Some(inc) => inc,
            None => d.ch.recv_with()?,
        };
        if let Some((_, addr, data)) = inc.pages().filter(|p| p.0 == d.offer.id) {
            let n = data.len() as u64;
            if n == 0 || !n.is_multiple_of(PAGE) || addr.checked_add(n).is_none_or(|e| e > TASK_END)
            {
                return Err(bad(
                    d,
                    code::MALFORMED,
                    format!(
                        "{} of {n} bytes at {addr:#x}: not whole pages of user memory",
                        inc.msg.kind()
                    ),
                ));
            }
            store.put(addr, data)?;
            d.count_received(inc.attachment().len() as u64);
            d.ch.recycle(inc.into_body());
            continue;
        }
        if let Msg::PageDeltas { id, pages } = inc.msg {
            if id == d.offer.id {
                mark("dst: page changes received");
                if let Err(what) = apply_changes(d, store, pages, inc.attachment())? {
                    return Err(bad(d, code::MALFORMED, what));
                }
                mark("dst: page changes applied");
                d.count_received(inc.attachment().len() as u64);
                d.ch.recycle(inc.into_body());
                continue;
            }
        }
        match inc.msg {
            Msg::RoundDone { id, round, pages } if id == d.offer.id => {
                mark("dst: round received");
                rounds += 1;
                let stored = store.bytes_received() - stored_before;
                stored_before = store.bytes_received();
                // Only an optimisation: the pages are stored either way.
                if touch_room {
                    match store.touch_ahead(room_after(round, stored)) {
                        Ok(n) if n > 0 => mark("dst: room for the next round touched"),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!("no room touched ahead of the stored pages: {e}")
                        }
                    }
                }
                if d.ch.peer().version >= pmig_proto::msg::ROUND_STORED {
                    d.ch.send(&Msg::RoundStored { id, round })?;
                }
                tracing::debug!(
                    "pre-copy round {round} from {}: {pages} pages; {:.1} MiB held",
                    d.peer,
                    mib(store.pages_held() as u64 * PAGE)
                );
            }
            Msg::ImageFile { id, .. } | Msg::Skeleton { id } if id == d.offer.id => {
                mark("dst: rounds received");
                tracing::info!(
                    "{rounds} pre-copy rounds from {}: {:.1} MiB received, {} pages held; the process is stopped",
                    d.peer,
                    mib(store.bytes_received()),
                    store.pages_held()
                );
                return Ok(inc);
            }
            Msg::Abort { reason, .. } => return Err(d.source_aborted(reason)),
            other => {
                let what = format!("unexpected {} during the pre-copy rounds", other.kind());
                return Err(bad(d, code::UNEXPECTED, what));
            }
        }
    }
    Err(bad(
        d,
        code::UNEXPECTED,
        "too many messages before the image".into(),
    ))
}

/// Destination: the `pages` pages of a `PageDeltas` attachment `att`, each
/// written into the store's newest copy of its page, which must be there
/// and must come out as the record's hash says. The inner error says what
/// is wrong with the message (the store may hold some of its pages
/// already: the migration fails); the outer one is the store's.
fn apply_changes(
    d: &Destination,
    store: &mut PageStore,
    pages: u32,
    att: &[u8],
) -> Result<std::result::Result<(), String>> {
    let records = match pmig_proto::page_delta::records(att) {
        Ok(r) if r.len() == pages as usize => r,
        Ok(r) => {
            return Ok(Err(format!(
                "PageDeltas of {pages} pages carries {} records",
                r.len()
            )))
        }
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut page = vec![0u8; PAGE as usize];
    for r in records {
        if r.addr >= TASK_END {
            return Ok(Err(format!(
                "PageDeltas: the page at {:#x} is not user memory",
                r.addr
            )));
        }
        if !store.get(r.addr, &mut page)? {
            return Ok(Err(format!(
                "PageDeltas: the changes of the page at {:#x}, which {} never sent",
                r.addr, d.peer
            )));
        }
        if let Err(e) = r.apply(&mut page) {
            return Ok(Err(e.to_string()));
        }
        store.put(r.addr, &page)?;
    }
    Ok(Ok(()))
}

/// Destination: absorbs the verified final image of `dir` into the store and
/// writes the complete image into the store's directory.
/// Returns the composed image, as written, and its manifest.
pub(crate) fn compose(
    store: PageStore,
    dir: &Path,
) -> Result<(ProcessImage, pmig_image::Manifest)> {
    compose_with(store, dir, false)
}

/// [`compose`] for a final image that may hold more page data than the
/// store (post-copy's stop after the private copies of file mappings, say,
/// with shared memory that goes whole at the stop): then the final image's
/// page data is moved into the store's directory, the store's pages it
/// does not replace are copied after it ([`PageStore::adopt`]), and the
/// copying costs the smaller of the two. `dir` loses its page data; the
/// caller removes it.
pub(crate) fn compose_either_way(
    store: PageStore,
    dir: &Path,
) -> Result<(ProcessImage, pmig_image::Manifest)> {
    compose_with(store, dir, true)
}

fn compose_with(
    mut store: PageStore,
    dir: &Path,
    either_way: bool,
) -> Result<(ProcessImage, pmig_image::Manifest)> {
    let img = pmig_image::Image::open_verified(dir)?;
    let pi = ProcessImage::read(&img)?;
    mark("dst: final image decoded");
    let fin_bytes = img
        .manifest
        .part(pmig_image::PAGES_PART)
        .map_or(0, |p| p.len);
    if either_way && fin_bytes > store.pages_held() as u64 * PAGE {
        let into = store.dir().to_path_buf();
        let held = store.held()?;
        drop(store);
        let mut adopted = PageStore::adopt(&into, &img, &pi)?;
        adopted.fill_from(&held)?;
        mark("dst: final image took the pages before it");
        let mut manifest = img.manifest.clone();
        manifest.parts.clear();
        let (manifest, pi) = adopted.finish_image(pi, manifest)?;
        return Ok((pi, manifest));
    }
    store.absorb(&img, &pi)?;
    mark("dst: final image absorbed");
    let mut manifest = img.manifest.clone();
    manifest.parts.clear();
    let (manifest, pi) = store.finish_image(pi, manifest)?;
    Ok((pi, manifest))
}

/// Destination: the image received cannot be composed with the pages
/// received before it; the source is told (and resumes the process).
pub(crate) fn cannot_compose(d: &mut Destination, e: StrategyError) -> StrategyError {
    let text = format!("{}: cannot compose the image: {e}", d.host.node());
    let _ = d.ch.send(&Msg::Error {
        code: code::BAD_IMAGE,
        text: text.chars().take(4000).collect(),
    });
    StrategyError::Other(text)
}

/// Writes `start len` (hex) lines, the format of [`CaptureMode::WrittenSince`],
/// under another name first: a reader finds the whole list or none.
pub(crate) fn write_ranges(path: &Path, ranges: &[(u64, u64)]) -> Result<()> {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(ranges.len() * 24);
    for (s, l) in ranges {
        let _ = writeln!(text, "{s:x} {l:x}");
    }
    // Under another name first: a reader finds the whole list or none.
    let tmp = path.with_extension("part");
    std::fs::write(&tmp, text).map_err(io_err(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("rename {}", tmp.display())))
}

/// The pages an image holds itself, as (address, length) runs.
pub(crate) fn in_image(pi: &ProcessImage) -> Vec<(u64, u64)> {
    pi.memory
        .vmas
        .iter()
        .flat_map(|v| v.runs.iter().map(|r| (r.addr, r.len)))
        .collect()
}

/// Total bytes of sorted, disjoint ranges.
pub(crate) fn total(r: &[(u64, u64)]) -> u64 {
    r.iter().map(|(_, l)| l).sum()
}

/// Sorted, disjoint, merged copy of `r`.
pub(crate) fn normalize(r: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = r.iter().copied().filter(|(_, l)| *l > 0).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, l) in v {
        match out.last_mut() {
            Some((ps, pl)) if *ps + *pl >= s => *pl = (*pl).max(s + l - *ps),
            _ => out.push((s, l)),
        }
    }
    out
}

/// The parts of `a` that lie in `b`.
pub(crate) fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (a, b) = (normalize(a), normalize(b));
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), (a[i].0 + a[i].1).min(b[j].0 + b[j].1));
        if s < e {
            out.push((s, e - s));
        }
        if a[i].0 + a[i].1 < b[j].0 + b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The parts of `a` that do not lie in `b`.
pub(crate) fn subtract(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (a, b) = (normalize(a), normalize(b));
    let mut out = Vec::new();
    let mut j = 0;
    for (s, l) in a {
        let end = s + l;
        let mut at = s;
        while j < b.len() && b[j].0 + b[j].1 <= at {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < end {
            if b[k].0 > at {
                out.push((at, b[k].0 - at));
            }
            at = at.max(b[k].0 + b[k].1);
            k += 1;
        }
        if at < end {
            out.push((at, end - at));
        }
    }
    out
}

/// `pre-copy` and `queued-pre-copy`: one implementation, the policy decides.
impl Strategy for Iterative {
    fn kind(&self) -> StrategyKind {
        match self.policy {
            Policy::Plain => StrategyKind::PreCopy,
            Policy::Queued => StrategyKind::QueuedPreCopy,
        }
    }
    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        Iterative::prepare(self, m)
    }
    fn handover(&mut self, m: &mut Source) -> Result<()> {
        Iterative::handover(self, m)
    }
    fn post(&mut self, m: &mut Source) -> Result<()> {
        Iterative::post(self, m)
    }
    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        Iterative::destination(self, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_time_budget_adds_rounds_only_while_they_shrink() {
        // No budget: Noack's rule alone.
        assert_eq!(Budget::decide(None, 500.0, 10, 100), Budget::Met);
        // Within the budget.
        assert_eq!(Budget::decide(Some(20.0), 15.0, 10, 100), Budget::Met);
        // Over it, and the round sent a third of the previous one.
        assert_eq!(Budget::decide(Some(20.0), 44.0, 33, 100), Budget::OneMore);
        // Over it, but the rounds no longer shrink (a writer faster than the link).
        assert_eq!(
            Budget::decide(Some(20.0), 134.0, 95, 100),
            Budget::NotShrinking
        );
        assert_eq!(
            Budget::decide(Some(20.0), 134.0, 120, 100),
            Budget::NotShrinking
        );
    }

    #[test]
    fn pieces_cut_ranges_in_order_at_the_size() {
        const P: u64 = 4096;
        let r = [(0x10000, 3 * P), (0x20000, P), (0x30000, 6 * P)];
        let cut = pieces(&r, 4 * P);
        assert_eq!(
            cut,
            vec![
                vec![(0x10000, 3 * P), (0x20000, P)],
                vec![(0x30000, 4 * P)],
                vec![(0x30000 + 4 * P, 2 * P)],
            ]
        );
        let all: Vec<(u64, u64)> = cut.concat();
        assert_eq!(total(&all), total(&r));
        assert_eq!(normalize(&all), normalize(&r));
        assert!(pieces(&[], 4 * P).is_empty());
    }

    #[test]
    fn range_algebra() {
        let a = [(0x1000, 0x4000), (0x10000, 0x1000)];
        let b = [(0x2000, 0x1000), (0x4000, 0x2000), (0x10000, 0x1000)];
        assert_eq!(
            intersect(&a, &b),
            [(0x2000, 0x1000), (0x4000, 0x1000), (0x10000, 0x1000)]
        );
        assert_eq!(subtract(&a, &b), [(0x1000, 0x1000), (0x3000, 0x1000)]);
        assert_eq!(subtract(&a, &[]), a);
        assert!(intersect(&a, &[]).is_empty());
        // Unsorted, overlapping and empty inputs.
        let c = [
            (0x5000, 0x1000),
            (0x1000, 0x2000),
            (0x2000, 0x2000),
            (0x9000, 0),
        ];
        assert_eq!(normalize(&c), [(0x1000, 0x3000), (0x5000, 0x1000)]);
        assert_eq!(
            subtract(&c, &[(0x0, 0x2000)]),
            [(0x2000, 0x2000), (0x5000, 0x1000)]
        );
        assert_eq!(total(&normalize(&c)), 0x4000);
        // A hole in the middle and a range covering several.
        assert_eq!(
            subtract(&[(0, 0x10000)], &[(0x2000, 0x1000), (0x8000, 0x1000)]),
            [(0, 0x2000), (0x3000, 0x5000), (0x9000, 0x7000)]
        );
        assert_eq!(
            intersect(&[(0, 0x10000)], &[(0x2000, 0x1000), (0x8000, 0x1000)]),
            [(0x2000, 0x1000), (0x8000, 0x1000)]
        );
    }

    #[test]
    fn ranges_file_matches_the_holder_format() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r");
        write_ranges(&p, &[(0x7f00_0000_0000, 0x21000), (0x1000, 0x1000)]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "7f0000000000 21000\n1000 1000\n"
        );
    }
}
