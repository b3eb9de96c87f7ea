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
//! memory but the pages the restore touches (everything else whole,
//! [`CaptureMode::Handover`]); the tracker's scan of the frozen process
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

use crate::clock::mark;
use crate::error::{io_err, Result, StrategyError};
use crate::post_copy::{destination_lazy, serve_source, Owing};
use crate::pre_copy::{
    await_restored, cannot_compose, in_image, intersect, receive_rounds, set_aside_small,
    stop_holder, subtract, Iterative, Policy, FINAL_DIR, TRACKED_FILE,
};
use crate::stop_copy::{receive_image_after, send_image};
use crate::{Destination, Residual, Source, Strategy, StrategyKind};
use pmig_engine::image::ProcessImage;
use pmig_engine::pagestore::PageStore;
use pmig_proto::Msg;

const PAGE: u64 = 4096;
/// Subdirectory of the staging directory for the image of the stop (both
/// sides).
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
        // The holder primed after round 0, if it could be started; its
        // handover capture needs no list of the tracked ranges.
        let mode = self.it.stop_mode(&m.staging.join(TRACKED_FILE));
        let holder = stop_holder(m, &dir, &mode)?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        m.pages_sent += holder.captured.page_bytes / PAGE;
        m.holder = Some(holder);
        // The image holds nothing of writable private anonymous memory but
        // the pages the restore touches. Of that memory, the pages written
        // since round 0, and those round 0 did not send (mapped or first
        // touched since, or missed), are owed; the destination has the
        // others from round 0. The pages the image holds are not owed.
        let (written, pi) = self.it.written_at_stop(&dir, &tracked)?;
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
        self.it.prepare(m)
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        let r = self.stop_and_send(m);
        self.it.untrack();
        r
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        let owed = std::mem::take(&mut self.owed);
        serve_source(m, Owing::Known(owed.clone()), None)?;
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
        let mut store = PageStore::create(&d.staging)?;
        // The image composed at the stop is restored from the staging
        // directory: start the restore now (see `Prespawned`).
        let staging = d.staging.clone();
        crate::stop_copy::prespawn_restore(d, &staging, true);
        let first = receive_rounds(d, &mut store, None)?;
        let dir = d.staging.join(FINAL_DIR);
        std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        receive_image_after(d, &dir, Some(first))?;
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
        let composed = compose(store, &dir, &owed).map_err(|e| cannot_compose(d, e))?;
        let _ = std::fs::remove_dir_all(&dir);
        tracing::info!(
            "assisted post-copy: image composed from round 0 and the stop; {} pages owed",
            owed.iter().map(|(_, l)| l / PAGE).sum::<u64>()
        );
        // The clean pages are not written into the process at the stop: a
        // small image is restored, and they are installed from the local
        // copy after the resume, while the owed ones come from the source.
        let (local, pages) = set_aside_small(d, composed)?;
        let r = destination_lazy(d, false, false, true, None, Some((&local, &pages)));
        if let Err(e) = std::fs::remove_dir_all(&local) {
            tracing::warn!("cannot remove the local copy {}: {e}", local.display());
        }
        r
    }
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
    store.absorb(&img, &pi)?;
    for &(s, l) in owed {
        store.forget(s, l);
    }
    let mut manifest = img.manifest.clone();
    manifest.parts.clear();
    let (manifest, pi) = store.finish_image(pi, manifest)?;
    Ok((pi, manifest))
}
