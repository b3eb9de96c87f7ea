//! Taking a post-copy migration over after the destination daemon died.
//!
//! While pages are owed, the restored process keeps its own userfaultfd, so a
//! fault waits instead of reading zeros when the daemon serving it dies. For
//! a restarted daemon to carry on, the destination writes, before the process
//! may fault at all, a *record* of the migration (`<state dir>/takeover/
//! <source>-<id>.json`: which pages the source owed at the handover, the
//! registered ranges, where the process's userfaultfd is) and keeps a
//! *journal* (`….journal`, see [`pmig_engine::lazy::Journal`]) of every page
//! installed, released or moved since.
//!
//! A restarted daemon ([`pending`] + [`resume`]): checks that the process is
//! still the same (pid and start time), takes its userfaultfd again with
//! `pidfd_getfd`, rebuilds the owed pages from the record and the journal,
//! connects to the source and sends `Resume { id, pid }`, wakes every thread
//! that may wait on a fault the dead daemon had read, and serves faults as
//! before. The source, which kept the frozen original while it waited for the
//! resume (up to [`RESUME_GRACE`]), pushes every page it owed again; pages
//! already here are skipped.
//!
//! `freeze-free` before its page store is complete is taken over like
//! post-copy, and the restarted daemon keeps looking for the store
//! ([`Record::pending_store`]).
//! `flushing`, `freeze-free` once its page store is complete (its record is
//! then switched to the store, [`switch_to_store`]), and pre-copy during its
//! local fill need no source: their record names the store of pages (the
//! shared page store, or the destination's own copy), and the restarted
//! daemon serves faults and fills the owed pages from it, as the dead one
//! did ([`crate::flushing::serve_store`]).

use crate::error::{io_err, Result, StrategyError};
use crate::Host;
use pmig_engine::procfs::start_time;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How long a source keeps the frozen original of a post-copy migration whose
/// destination vanished, waiting for a restarted destination daemon.
pub const RESUME_GRACE: Duration = Duration::from_secs(60);
/// Version of the takeover record format.
pub const RECORD_VERSION: u32 = 1;

/// What a restarted daemon needs to take a lazily restored process over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub id: u64,
    pub source_node: String,
    /// `ADDR:PORT` of the source daemon.
    pub source_addr: String,
    pub pid: i32,
    /// Field 22 of `/proc/PID/stat`: tells a reused pid apart.
    pub start_time: u64,
    /// The userfaultfd's number inside the process.
    pub ufd: i32,
    pub prefetch: bool,
    pub until_exit: bool,
    pub comm: String,
    /// Source page ranges owed at the handover.
    pub owed: Vec<(u64, u64)>,
    /// Ranges registered with the userfaultfd at the restore.
    pub registered: Vec<(u64, u64)>,
    /// `flushing`/`freeze-free` (the page store) and pre-copy (the
    /// destination's own copy): the directory the owed pages are read from.
    /// Nothing is needed from the source then (`source_addr` is empty): a
    /// takeover serves the process from the store alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<PathBuf>,
    /// freeze-free before its page store is complete: the store the source
    /// is writing. The source serves the pages until then; a takeover keeps
    /// looking for the store, and switches to it as the dead daemon would
    /// have ([`switch_to_store`] clears this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_store: Option<PathBuf>,
    /// assisted-post-copy: the destination's own copy of the pages not
    /// written since round 0, installed from there while the others come
    /// from the source; removed when nothing is owed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<PathBuf>,
    /// The threads' ids the restore rewrote (old, new): a restarted daemon
    /// rewrites the mutexes they hold in the pages it installs, as the dead
    /// one did (`LazyMemory::rewrite_owners`). Empty when the ids were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<(i32, i32)>,
    /// Every thread's id in the original and here (`restored_here`): a
    /// restarted daemon passes on the signals sent to the frozen original
    /// as the dead one did (§6.3h). Empty in a record of an older daemon,
    /// whose late signals then go to the process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tids: Vec<(i32, i32)>,
    /// The System V shared memory the restore made (`Restored::sysv_made`):
    /// removed with the process if a restarted daemon loses it. Empty in a
    /// record of an older daemon, whose made segments then stay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub made: Vec<pmig_engine::resources::sysvshm::MadeSegment>,
}

/// The files of one active record; removed when the migration ends.
#[derive(Debug)]
pub struct Active {
    pub json: PathBuf,
    pub journal: PathBuf,
}

impl Active {
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.json);
        let _ = std::fs::remove_file(&self.journal);
    }
}

fn dir(host: &dyn Host) -> PathBuf {
    host.state_dir().join("takeover")
}

/// Writes the record (atomically) and creates the empty journal; returns the
/// journal opened for appending.
pub fn begin(host: &dyn Host, rec: &Record) -> Result<(Active, std::fs::File)> {
    let d = dir(host);
    std::fs::create_dir_all(&d).map_err(io_err(format!("create {}", d.display())))?;
    let base = format!("{}-{}", rec.source_node, rec.id);
    let act = Active {
        json: d.join(format!("{base}.json")),
        journal: d.join(format!("{base}.journal")),
    };
    let journal = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&act.journal)
        .map_err(io_err(format!("create {}", act.journal.display())))?;
    let tmp = d.join(format!(".{base}.tmp"));
    let text = serde_json::to_vec(rec).map_err(|e| StrategyError::Other(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(io_err(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, &act.json).map_err(io_err(format!("write {}", act.json.display())))?;
    Ok((act, journal))
}

/// freeze-free: the pages still owed now come from the page store `store`,
/// not the source: the record says so (rewritten atomically; the journal
/// goes on).
pub fn switch_to_store(act: &Active, store: &std::path::Path) -> Result<()> {
    let text = std::fs::read(&act.json).map_err(io_err(format!("read {}", act.json.display())))?;
    let mut rec: Record =
        serde_json::from_slice(&text).map_err(|e| StrategyError::Other(e.to_string()))?;
    rec.store = Some(store.to_path_buf());
    rec.pending_store = None;
    rec.source_addr = String::new();
    let tmp = act.json.with_extension("tmp");
    let text = serde_json::to_vec(&rec).map_err(|e| StrategyError::Other(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(io_err(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, &act.json).map_err(io_err(format!("write {}", act.json.display())))
}

/// Records left by a daemon that died during post-copy migrations.
pub fn pending(host: &dyn Host) -> Vec<(Record, Active)> {
    let Ok(rd) = std::fs::read_dir(dir(host)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let act = Active {
            journal: p.with_extension("journal"),
            json: p.clone(),
        };
        match std::fs::read(&p)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
        {
            Some(r) if r.version == RECORD_VERSION => out.push((r, act)),
            _ => {
                tracing::error!("unreadable takeover record {}; removing it", p.display());
                act.remove();
            }
        }
    }
    out
}

/// Kills the process of `rec`, which cannot be completed (if it is still
/// the one restored: same start time), with the System V segments its
/// restore made.
fn lose(rec: &Record, act: &Active, why: &str) -> StrategyError {
    let pid = rec.pid;
    if start_time(pid) == Some(rec.start_time) {
        crate::post_copy::kill_restored(pid, &rec.made);
    }
    act.remove();
    StrategyError::Other(format!("{why}; the process {pid} is lost"))
}

/// Takes the migration of `rec` over (see the module documentation) and
/// serves it to the end. Returns the process's pid.
pub fn resume(host: &dyn Host, rec: Record, act: Active) -> Result<i32> {
    let pid = rec.pid;
    if start_time(pid) != Some(rec.start_time) {
        act.remove();
        if let Some(store) = &rec.store {
            // Nobody reads these pages any more.
            let _ = std::fs::remove_dir_all(store);
        }
        return Err(StrategyError::Other(format!(
            "process {pid} of migration {} from {} is gone; nothing to take over",
            rec.id, rec.source_node
        )));
    }
    let uffd = pmig_engine::dirty::take_fd(pid, rec.ufd).map_err(|e| {
        lose(
            &rec,
            &act,
            &format!("cannot take its userfaultfd back: {e}"),
        )
    })?;
    let journal = std::fs::read(&act.journal).unwrap_or_default();
    let (lm, torn) =
        pmig_engine::lazy::LazyMemory::recover(uffd, &rec.owed, rec.registered.clone(), &journal);
    lm.rewrite_owners(pid, rec.ids.clone());
    if !rec.source_addr.is_empty() {
        // The source's holder may still pass on signals sent to the frozen
        // original.
        host.restored_here(rec.id, &rec.source_node, pid, &rec.tids);
    }
    if torn {
        tracing::warn!(
            "the journal of migration {} ends in a torn record (ignored)",
            rec.id
        );
    }
    let append = std::fs::OpenOptions::new()
        .append(true)
        .open(&act.journal)
        .map_err(|e| lose(&rec, &act, &format!("reopen the journal: {e}")))?;
    lm.set_journal(append);
    if let Some(store) = &rec.store {
        tracing::info!(
            "took over migration {} of {} (pid {pid}) from the page store {}: {} pages still owed",
            rec.id,
            rec.comm,
            store.display(),
            lm.owed_pages()
        );
        lm.wake_all();
        let r = crate::flushing::StorePages::open(store)
            .map_err(|e| e.to_string())
            .and_then(|pages| {
                crate::flushing::serve_store(host, &pages, lm, pid, rec.ufd, store, None)
            });
        return match r {
            Ok(_) => {
                act.remove();
                Ok(pid)
            }
            Err(e) => Err(lose(&rec, &act, &e)),
        };
    }
    let mut ch = connect(host, &rec.source_addr).map_err(|e| {
        lose(
            &rec,
            &act,
            &format!(
                "cannot reach the source {} ({}): {e}",
                rec.source_node, rec.source_addr
            ),
        )
    })?;
    ch.send(&pmig_proto::Msg::Resume { id: rec.id, pid })
        .map_err(|e| lose(&rec, &act, &format!("resume at the source: {e}")))?;
    tracing::info!(
        "took over migration {} of {} (pid {pid}) from {}: {} pages still owed{}",
        rec.id,
        rec.comm,
        rec.source_node,
        lm.owed_pages(),
        match &rec.pending_store {
            Some(s) => format!(", until the page store {} is complete", s.display()),
            None => String::new(),
        }
    );
    lm.wake_all();
    let local = match &rec.local {
        Some(dir) => match crate::flushing::StorePages::open(dir) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(
                    "the local copy {} of migration {} cannot be read ({e}): the source serves those pages too",
                    dir.display(),
                    rec.id
                );
                None
            }
        },
        None => None,
    };
    let r = crate::post_copy::serve_faults(crate::post_copy::Serve {
        host,
        store: rec.pending_store.clone(),
        ch: &mut ch,
        id: rec.id,
        pid,
        ufd: rec.ufd,
        lm,
        prefetch: rec.prefetch,
        until_exit: rec.until_exit,
        comm: rec.comm.clone(),
        node: host.node().to_string(),
        peer: rec.source_node.clone(),
        record: Some(act),
        answers: Some(crate::post_copy::answers_from(
            host,
            rec.source_addr.clone(),
        )),
        answers_after_resume: true,
        local: local.as_ref(),
        made: rec.made.clone(),
    });
    if let Some(dir) = &rec.local {
        let _ = std::fs::remove_dir_all(dir);
    }
    r
}

fn connect(
    host: &dyn Host,
    addr: &str,
) -> Result<pmig_proto::blocking::Channel<std::net::TcpStream>> {
    // The pages still owed come on this connection.
    Ok(pmig_proto::blocking::connect_for_bulk(
        addr,
        host.cluster_key(),
        &host.proto_config(),
    )?)
}
