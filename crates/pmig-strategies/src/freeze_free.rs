//! `freeze-free` (Choices, Roush; Noack §2.3.4): the process resumes on the
//! destination right after a small image, and the source flushes its pages
//! to a page store afterwards. Until the store is complete, the source
//! answers the destination's page requests itself. After that the
//! destination reads the rest from the store, and the source is gone.
//!
//! Source: the preparation and the handover are demand-paging's: the private
//! copies of file mappings go while the process runs, and the stop takes a
//! small image with the state, the pages the restore touches (among them the
//! top of each thread's stack), the pages the threads' registers point into
//! (Choices' current code and heap pages, [`pmig_engine::lazy::ThreadPages`])
//! and the file copies written since. Code mapped from files comes from its
//! files. Before all that, `PageStore { id, path }` names the store
//! directory `<page store>/<id>`. After `Restored` a thread writes the
//! pages the frozen original has of those owed into it (read with
//! `process_vm_readv`: nothing runs in the original), then the file
//! `complete`. Meanwhile `serve_source`
//! answers requests from the frozen original, until `PagesDone`.
//!
//! Destination: demand-paging's lazy restore and fault loop, which also
//! looks for `complete` every 20 ms. When it finds it, it renames it
//! `taken`, reads the pages it had asked for from the store, switches its
//! takeover record to the store, and sends `PagesDone`. It then serves the
//! rest from the store as `flushing` does, and removes the store at the end.
//! If the process exits, or touches every owed page, before the store is
//! complete, the migration ends as demand-paging's does. The source then
//! removes the store, since `taken` is missing.
//!
//! pmig has no message channels yet, so Choices' "the process never stops
//! receiving messages" is not observable: the freeze time is the down time.
//!
//! Risk: until the store is complete, the source node must stay up (as in
//! demand-paging); after that, the store must stay readable until every page
//! is read (as in flushing).

use crate::demand_paging::{DemandPaging, Stash};
use crate::error::{io_err, Result, StrategyError};
use crate::post_copy::{destination_lazy, receive_with_copies, serve_source, Owing};
use crate::post_copy::{STORE_COMPLETE, STORE_TAKEN};
use crate::{Destination, Residual, Source, Strategy, StrategyKind};
use pmig_proto::msg::FREEZE_FREE_AFTER_RESUME;
use pmig_proto::{code, Msg};
use std::path::{Path, PathBuf};

/// `freeze-free`.
#[derive(Default)]
pub struct FreezeFree {
    inner: DemandPaging,
    /// `<page store>/<id>`, once chosen.
    store: Option<PathBuf>,
}

impl FreezeFree {
    fn store(&self) -> Result<&Path> {
        self.store
            .as_deref()
            .ok_or_else(|| StrategyError::Other("internal error: no page store chosen".into()))
    }
}

/// Writes the pages `owed` of the frozen process `pid` into the page store
/// `store` ([`crate::flushing::StorePages::FLAT_PAGES`] and
/// [`crate::flushing::StorePages::FLAT_RUNS`]), read with
/// `process_vm_readv` (nothing runs in the process), then the file that
/// says the store is complete. Returns the bytes written.
fn flush(pid: i32, owed: &[(u64, u64)], store: &Path) -> Result<u64> {
    use crate::flushing::StorePages;
    let path = store.join(StorePages::FLAT_PAGES);
    let file =
        std::fs::File::create(&path).map_err(io_err(format!("create {}", path.display())))?;
    // Small runs gathered, large ones written a piece at a time
    // (`pmig_image::WRITE_PIECE`).
    let mut out = std::io::BufWriter::with_capacity(pmig_image::WRITE_PIECE, file);
    let mut runs: Vec<(u64, u64, u64)> = Vec::new();
    let mut offset = 0u64;
    let (_, skipped) =
        pmig_engine::pagestore::read_ranges(pid, owed, 4 << 20, &mut |addr, bytes| {
            pmig_image::write_in_pieces(&mut out, bytes).map_err(|e| {
                pmig_engine::EngineError::Other(format!("write {}: {e}", path.display()))
            })?;
            let len = bytes.len() as u64;
            match runs.last_mut() {
                Some((a, l, o)) if *a + *l == addr && *o + *l == offset => *l += len,
                _ => runs.push((addr, len, offset)),
            }
            offset += len;
            Ok(())
        })?;
    if !skipped.is_empty() {
        // A page the process has and cannot be read would read as zeros.
        return Err(StrategyError::Other(format!(
            "cannot read {} owed pages of the frozen process (the first at {:#x})",
            skipped.iter().map(|r| r.1 / 4096).sum::<u64>(),
            skipped[0].0
        )));
    }
    // Closed before the marker is written: a destination that opens the
    // store after seeing the marker sees all of it (close-to-open, also on
    // NFS). No fsync: the store need not outlive a crash of this node.
    drop(
        out.into_inner()
            .map_err(|e| StrategyError::Other(format!("write {}: {e}", path.display())))?,
    );
    let runs_path = store.join(StorePages::FLAT_RUNS);
    let text = serde_json::to_vec(&runs).map_err(|e| StrategyError::Other(e.to_string()))?;
    std::fs::write(&runs_path, text).map_err(io_err(format!("write {}", runs_path.display())))?;
    let tmp = store.join(format!(".{STORE_COMPLETE}"));
    std::fs::write(&tmp, b"").map_err(io_err(format!("write {}", tmp.display())))?;
    let done = store.join(STORE_COMPLETE);
    std::fs::rename(&tmp, &done).map_err(io_err(format!("write {}", done.display())))?;
    Ok(offset)
}

impl Strategy for FreezeFree {
    fn kind(&self) -> StrategyKind {
        StrategyKind::FreezeFree
    }

    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        let v = m.ch.peer().version;
        if v < FREEZE_FREE_AFTER_RESUME {
            return Err(StrategyError::Other(format!(
                "{} speaks protocol version {v}; freeze-free needs {FREEZE_FREE_AFTER_RESUME} (the flush after the resume): update it, or use flushing",
                m.peer
            )));
        }
        let store = m.page_store.join(m.id.to_string());
        std::fs::create_dir_all(&store).map_err(io_err(format!(
            "create {} in the page store (--page-store)",
            store.display()
        )))?;
        self.store = Some(store.clone());
        let path = store
            .to_str()
            .ok_or_else(|| StrategyError::Other(format!("{} is not UTF-8", store.display())))?;
        let r =
            m.ch.send(&Msg::PageStore {
                id: m.id,
                path: path.into(),
            })
            .map_err(StrategyError::from);
        m.count(32 + path.len() as u64);
        let r = r.and_then(|()| self.inner.prepare(m));
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&store);
        }
        r
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        let r = self.inner.handover(m);
        let store = self.store()?;
        if r.is_err() && m.new_pid.is_none() {
            // Not restored: the source resumes, the store is not needed.
            let _ = std::fs::remove_dir_all(store);
        }
        m.residual = Residual {
            what: format!(
                "the pages not yet referenced (in the frozen original, then in the page store {})",
                store.display()
            ),
            node: Some(m.host.node().into()),
            until: "the page store is complete (source), then every page is read (the destination then removes it)".into(),
        };
        r
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        let store = self.store()?.to_path_buf();
        let (claimed, found) = self.inner.take_owed().ok_or_else(|| {
            StrategyError::Other("internal error: nothing owed after the handover".into())
        })?;
        let stash = Stash::new(m.pid);
        let owing = Owing::Deferred {
            claimed,
            found: Some(found.clone()),
        };
        let pid = m.pid;
        let t0 = crate::clock::mono_ns();
        let release = m.host.hooks().hold_flush.then(|| {
            let f = m.host.state_dir().join("release-flush");
            tracing::warn!(
                "test hook: the flush of migration {} to {} waits for {}",
                m.id,
                store.display(),
                f.display()
            );
            f
        });
        let (served, flushed) = std::thread::scope(|s| {
            let (store, found) = (&store, &found);
            let flushing = s.spawn(move || {
                if let Some(f) = release {
                    crate::await_release(&f);
                }
                let t = crate::clock::mono_ns();
                flush(pid, found, store).map(|b| (b, crate::clock::mono_ns().saturating_sub(t)))
            });
            let served = serve_source(m, owing, Some(&stash));
            let flushed = flushing.join();
            (served, flushed)
        });
        self.inner.untrack_copies();
        let flushed = flushed
            .map_err(|_| StrategyError::Other("the flush to the page store panicked".into()))?;
        let ms = (crate::clock::mono_ns().saturating_sub(t0)) as f64 / 1e6;
        let taken = store.join(STORE_TAKEN).exists();
        match &flushed {
            Ok((bytes, took)) => tracing::info!(
                "freeze-free of {pid}: {:.1} MiB written to the page store {} in {:.1} ms; the source was needed for {ms:.1} ms after the resume{}",
                *bytes as f64 / (1u64 << 20) as f64,
                store.display(),
                *took as f64 / 1e6,
                if taken { "; the destination reads the rest from it" } else { "" }
            ),
            Err(e) => tracing::warn!(
                "freeze-free of {pid}: the page store {} could not be written ({e}); the pages were served from here",
                store.display()
            ),
        }
        if !taken {
            // The migration ended without it (the process exited, or
            // touched every page it owed, first).
            let _ = std::fs::remove_dir_all(&store);
        }
        served?;
        m.residual = if taken {
            Residual {
                what: format!("page store {}", store.display()),
                node: None,
                until: format!(
                    "every page is read (the destination then removes it); the source was needed for {ms:.1} ms after the resume"
                ),
            }
        } else {
            Residual {
                what: "nothing".into(),
                node: None,
                until: format!(
                    "the migration ended before the page store was needed ({ms:.1} ms after the resume)"
                ),
            }
        };
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        let v = d.ch.peer().version;
        if v < FREEZE_FREE_AFTER_RESUME {
            let text = format!(
                "{}: {} speaks protocol version {v}; freeze-free needs {FREEZE_FREE_AFTER_RESUME} (the flush after the resume)",
                d.host.node(),
                d.peer
            );
            return Err(d.refuse(code::UNSUPPORTED_STRATEGY, text));
        }
        let store = crate::flushing::recv_page_store(d)?;
        if !store.is_dir() {
            let text = format!(
                "{}: the page store {} is not here (the page store must be a directory every node sees at the same path, e.g. on NFS)",
                d.host.node(),
                store.display()
            );
            return Err(d.refuse(code::MIGRATION_REFUSED, text));
        }
        receive_with_copies(d)?;
        destination_lazy(d, false, true, true, Some(store), None)
    }

    fn reports_at_handover(&self) -> bool {
        true
    }
}
