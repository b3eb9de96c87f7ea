//! `assisted-post-copy` (Noack §2.3.6): one full copy while the process
//! runs, then post-copy for only the pages written since.
//!
//! Source, preparation: pre-copy's round 0 and nothing more: the
//! [`DirtyTracker`](pmig_engine::dirty::DirtyTracker) is attached first, then
//! every populated page of the tracked memory is sent (`PageData`,
//! `RoundDone`). The destination keeps them aside in a
//! [`PageStore`].
//!
//! Source, handover: the holder freezes the process and captures it as a
//! post-copy handover does, with nothing of writable private anonymous
//! memory but the pages the restore touches, and of the other ranges
//! round 0 sent (private copies of file mappings) only the pages written
//! since ([`crate::holder::CaptureMode::HandoverWritten`]; everything else
//! whole); the holder's page scan at the freeze
//! names the pages written since round 0. Those, and the pages round 0 did
//! not send (memory mapped or first touched since), are *not* sent: the
//! image goes over, then their list (`Owed`). So the stop neither copies
//! the dirtied memory nor the memory allocated since round 0. The tracker
//! is dropped at `Restored` (or at any failure before, which resumes the
//! process as it was).
//!
//! Destination: the store absorbs the small image, forgets the owed pages
//! (its round-0 copies are stale) and composes the complete image, which is
//! set aside as a local copy; a small image is restored lazily. After the
//! resume the clean pages are installed from the local copy (faults first, and
//! by a thread that installs them all), and only the owed pages come from
//! the source, on fault and by post-copy's background push. The source kills
//! its frozen copy when `PagesDone` arrives.
//!
//! With a version-20 destination, a skeleton follows round 0
//! ([`crate::skeleton::offer_primed`], captured by the holder primed for
//! the stop): the destination restores it ahead of the stop, lazily, with
//! round 0's copies of its private file mappings and none of its anonymous
//! pages, and at the stop brings it up to the image of the stop instead of
//! restoring a small image.

use crate::clock::mark;
use crate::error::{io_err, Result, StrategyError};
use crate::post_copy::{destination_lazy, serve_source, Owing};
use crate::pre_copy::{
    await_restored, cannot_compose, in_image, intersect, receive_rounds, set_aside_small,
    stop_holder, subtract, write_ranges, Iterative, Policy, FINAL_DIR, TRACKED_FILE,
};
use crate::skeleton::Copies;
use crate::stop_copy::{receive_image_after, send_image};
use crate::{Destination, Residual, Source, Strategy, StrategyKind};
use pmig_engine::image::ProcessImage;
use pmig_engine::pagestore::PageStore;
use pmig_proto::Msg;

const PAGE: u64 = 4096;
/// Destination: the subdirectory of the staging directory that receives
/// round 0's pages and then holds the complete image, set aside at the stop
/// as the local copy.
const ROUNDS_DIR: &str = "rounds";
/// Most `Owed` messages a destination accepts.
const MAX_OWED_MESSAGES: usize = 1 << 20;

/// `assisted-post-copy`.
pub struct AssistedPostCopy {
    it: Iterative,
    /// Source pages owed after the handover, as ranges.
    owed: Vec<(u64, u64)>,
}

impl Default for AssistedPostCopy {
    fn default() -> Self {
        AssistedPostCopy {
            it: Iterative::new(Policy::Plain).capturing_a_handover(),
            owed: Vec::new(),
        }
    }
}

impl AssistedPostCopy {
    fn stop_and_send(&mut self, m: &mut Source) -> Result<()> {
        // The ranges round 0 sent (less the pages it missed, which are
        // owed below like memory mapped since).
        let tracked = self
            .it
            .tracked_and_sent()
            .ok_or_else(|| StrategyError::Other("internal error: no write tracking".into()))?;
        let dir = m.staging.join(FINAL_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        // The holder primed after round 0, if it could be started; of the
        // ranges listed, it saves only the pages written since.
        let list = write_tracked(m, &tracked)?;
        let mode = self.it.stop_mode(&list);
        let holder = stop_holder(m, &dir, &mode)?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        m.pages_sent += holder.captured.page_bytes / PAGE;
        m.holder = Some(holder);
        // The image holds nothing of writable private anonymous memory but
        // the pages the restore touches. Of that memory, the pages written
        // since round 0, and those round 0 did not send (mapped or first
        // touched since, or missed), are owed; the destination has the
        // others from round 0. The pages the image holds are not owed.
        let (written, pi) = self.it.written_at_stop(&dir, &list, &tracked)?;
        let lazy: Vec<(u64, u64)> = pi
            .memory
            .vmas
            .iter()
            .filter(|v| v.deferrable())
            .flat_map(|v| v.present.iter().copied())
            .collect();
        let since = [written, subtract(&lazy, &tracked)].concat();
        self.owed = subtract(&intersect(&since, &lazy), &in_image(&pi));
        mark("src: owed pages listed");
        tracing::info!(
            "process {} stopped: {} pages written or mapped since round 0 are owed",
            m.pid,
            self.owed.iter().map(|(_, l)| l / PAGE).sum::<u64>()
        );
        // Against the skeleton's image, if the destination holds one.
        send_image(m, &dir)?;
        let chunks: Vec<&[(u64, u64)]> = if self.owed.is_empty() {
            vec![&[]]
        } else {
            self.owed
                .chunks(pmig_proto::msg::MAX_PAGE_REQUEST)
                .collect()
        };
        let n = chunks.len();
        for (i, c) in chunks.into_iter().enumerate() {
            m.ch.send(&Msg::Owed {
                id: m.id,
                ranges: c.to_vec(),
                last: i + 1 == n,
            })?;
            m.count(16 + 16 * c.len() as u64);
        }
        crate::skeleton::outcome(m)?;
        await_restored(m)
    }
}

impl Strategy for AssistedPostCopy {
    fn kind(&self) -> StrategyKind {
        StrategyKind::AssistedPostCopy
    }

    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        // Round 0 only.
        m.precopy.max_rounds = 0;
        self.it.prepare(m)?;
        // Then the skeleton, captured by the holder primed for the stop
        // (version 20): the stop only brings it up. That capture, like the
        // stop's, saves of the ranges round 0 sent only the pages written
        // since. Any error resumes the process as it was, its writes no
        // longer tracked.
        if m.ch.peer().version >= pmig_proto::msg::ASSISTED_SKELETON {
            let offered = match self.it.tracked_and_sent() {
                Some(t) => write_tracked(m, &t).and_then(|_| crate::skeleton::offer_primed(m)),
                None => Err(StrategyError::Other(
                    "internal error: no write tracking after round 0".into(),
                )),
            };
            offered.inspect_err(|_| self.it.untrack())?;
        }
        Ok(())
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        // A failed handover removes the write tracking before the process
        // resumes. After one that succeeded it goes when the post ends:
        // removing it takes the frozen process's memory lock for
        // milliseconds, which the first answers to faults would wait for.
        self.stop_and_send(m).inspect_err(|_| self.it.untrack())
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        let owed = std::mem::take(&mut self.owed);
        let served = serve_source(m, Owing::Known(owed.clone()), None);
        self.it.untrack();
        served?;
        m.residual = Residual {
            what: format!(
                "{} pages written since round 0",
                owed.iter().map(|(_, l)| l / PAGE).sum::<u64>()
            ),
            ..m.residual.clone()
        };
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        // Round 0's pages, and at the stop the complete image, go into a
        // directory of their own, which becomes the local copy.
        let rounds = d.staging.join(ROUNDS_DIR);
        std::fs::create_dir(&rounds).map_err(io_err(format!("create {}", rounds.display())))?;
        let mut store = PageStore::create(&rounds)?;
        // Without a skeleton, the image composed at the stop is restored
        // from the staging directory: start the restore now (see
        // `Prespawned`).
        let staging = d.staging.clone();
        crate::stop_copy::prespawn_restore(d, &staging, true);
        let first = receive_rounds(d, &mut store, None, false)?;
        // A skeleton after round 0 (version 20): restored now, lazily, with
        // round 0's copies of its private file mappings and none of its
        // anonymous pages; the image of the stop brings it up.
        let first = if matches!(first.msg, Msg::Skeleton { .. }) {
            drop(d.restorer.take());
            let offered = crate::skeleton::receive(d, Copies::Round0(&mut store))?;
            d.skeleton = Some(offered);
            None
        } else {
            Some(first)
        };
        let dir = d.staging.join(FINAL_DIR);
        std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        receive_image_after(d, &dir, first)?;
        mark("dst: image of the stop received");
        let mut owed = Vec::new();
        let mut last = false;
        for _ in 0..MAX_OWED_MESSAGES {
            match d.ch.recv()? {
                Msg::Owed {
                    id,
                    ranges,
                    last: l,
                } if id == d.offer.id => {
                    owed.extend(ranges);
                    if l {
                        last = true;
                        break;
                    }
                }
                other => return Err(d.unexpected("Owed", &other)),
            }
        }
        if !last {
            return Err(StrategyError::Protocol {
                node: d.peer.clone(),
                what: "the list of owed pages does not end".into(),
            });
        }
        mark("dst: owed pages received");
        let composed = compose(store, &dir, &owed).map_err(|e| cannot_compose(d, e))?;
        // The skeleton is brought up to the image of the stop itself.
        let skeleton = d.skeleton.is_some();
        if !skeleton {
            let _ = std::fs::remove_dir_all(&dir);
        }
        tracing::info!(
            "assisted post-copy: image composed from round 0 and the stop; {} pages owed",
            owed.iter().map(|(_, l)| l / PAGE).sum::<u64>()
        );
        // The clean pages are not written into the process at the stop: a
        // small image is restored (or the skeleton brought up), and they
        // are installed from the local copy after the resume, while the
        // owed ones come from the source.
        let (local, pages) = set_aside_small(d, composed, &rounds, !skeleton)?;
        let r = destination_lazy(d, false, false, true, None, Some((&local, &pages)));
        if let Err(e) = std::fs::remove_dir_all(&local) {
            tracing::warn!("cannot remove the local copy {}: {e}", local.display());
        }
        r
    }
}

/// Source: lists `tracked` (the ranges round 0 sent) in the staging
/// directory for the holder ([`crate::holder::CaptureMode::HandoverWritten`]); returns the
/// list's path.
fn write_tracked(m: &Source, tracked: &[(u64, u64)]) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(&m.staging)
        .map_err(io_err(format!("create {}", m.staging.display())))?;
    let list = m.staging.join(TRACKED_FILE);
    write_ranges(&list, tracked)?;
    Ok(list)
}

/// Destination: the store absorbs the image of the stop, forgets the owed
/// (stale) pages and writes the complete image.
fn compose(
    mut store: PageStore,
    dir: &std::path::Path,
    owed: &[(u64, u64)],
) -> Result<(ProcessImage, pmig_image::Manifest)> {
    let img = pmig_image::Image::open_verified(dir)?;
    let pi = ProcessImage::read(&img)?;
    mark("dst: image of the stop decoded");
    store.absorb(&img, &pi)?;
    for &(s, l) in owed {
        store.forget(s, l);
    }
    mark("dst: owed pages forgotten");
    let mut manifest = img.manifest.clone();
    manifest.parts.clear();
    let (manifest, pi) = store.finish_image(pi, manifest)?;
    Ok((pi, manifest))
}
