//! pmig's migration algorithms.
//!
//! Every algorithm is one module behind one small trait, [`Strategy`], with three
//! phases seen from the source:
//!
//! 1. [`Strategy::prepare`]: the process still runs (pre-copy rounds, sending the
//!    layout, building the skeleton on the destination, …);
//! 2. [`Strategy::handover`]: the process is stopped; returns once it runs on the
//!    destination (what [`Report::down_ms`] measures);
//! 3. [`Strategy::post`]: the process runs on the destination; residual work (pushing
//!    or serving pages) until nothing is owed any more.
//!
//! and [`Strategy::destination`], the destination's side of all three, driven by the
//! source's messages. [`migrate`] (source) and [`serve_offer`] (destination) run a
//! strategy, keep the figures, and keep the promise of issue 3, "nothing lost": before
//! the handover completes, every failure resumes the source process exactly as it was.
//!
//! The node-specific services (spawning helpers, the pmig binary, the state
//! directory) come from the daemon through [`Host`].

pub mod assisted;
pub mod auto;
pub mod clock;
pub mod delta;
pub mod demand_paging;
pub mod error;
pub mod flushing;
pub mod freeze_free;
pub mod holder;
pub mod post_copy;
pub mod pre_copy;
pub mod queued_pre_copy;
pub mod report;
pub mod sent_copies;
pub mod skeleton;
pub mod stop_copy;
pub mod takeover;

pub use error::{Result, StrategyError};
pub use report::{Outcome, PhaseBytes, Report, Residual};

use clock::{mono_ns, ms_between};
use error::io_err;
use pmig_proto::blocking::Channel;
use pmig_proto::{code, Config, Msg, Offer};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::str::FromStr;
use std::time::Duration;

/// Every strategy named by issue 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    StopCopy,
    PreCopy,
    QueuedPreCopy,
    DemandPaging,
    Flushing,
    FreezeFree,
    PostCopy,
    AssistedPostCopy,
    Ampom,
    Auto,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 10] = [
        StrategyKind::StopCopy,
        StrategyKind::PreCopy,
        StrategyKind::QueuedPreCopy,
        StrategyKind::DemandPaging,
        StrategyKind::Flushing,
        StrategyKind::FreezeFree,
        StrategyKind::PostCopy,
        StrategyKind::AssistedPostCopy,
        StrategyKind::Ampom,
        StrategyKind::Auto,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::StopCopy => "stop-copy",
            StrategyKind::PreCopy => "pre-copy",
            StrategyKind::QueuedPreCopy => "queued-pre-copy",
            StrategyKind::DemandPaging => "demand-paging",
            StrategyKind::Flushing => "flushing",
            StrategyKind::FreezeFree => "freeze-free",
            StrategyKind::PostCopy => "post-copy",
            StrategyKind::AssistedPostCopy => "assisted-post-copy",
            StrategyKind::Ampom => "ampom",
            StrategyKind::Auto => "auto",
        }
    }

    /// The implementation, or a one-line error naming the strategy.
    pub fn implementation(self) -> Result<Box<dyn Strategy>> {
        match self {
            StrategyKind::StopCopy => Ok(Box::new(stop_copy::StopCopy)),
            StrategyKind::PostCopy => Ok(Box::<post_copy::PostCopy>::default()),
            StrategyKind::Ampom => Ok(Box::new(post_copy::PostCopy::ampom())),
            StrategyKind::PreCopy => {
                Ok(Box::new(pre_copy::Iterative::new(pre_copy::Policy::Plain)))
            }
            StrategyKind::QueuedPreCopy => {
                Ok(Box::new(pre_copy::Iterative::new(pre_copy::Policy::Queued)))
            }
            StrategyKind::DemandPaging => Ok(Box::<demand_paging::DemandPaging>::default()),
            StrategyKind::Flushing => Ok(Box::new(flushing::Flushing::new())),
            StrategyKind::FreezeFree => Ok(Box::new(freeze_free::FreezeFree::default())),
            StrategyKind::AssistedPostCopy => Ok(Box::<assisted::AssistedPostCopy>::default()),
            other => Err(StrategyError::NotImplemented(
                other.as_str().into(),
                implemented_names(),
            )),
        }
    }

    /// Parses a name and checks that it is implemented.
    pub fn implemented(name: &str) -> Result<StrategyKind> {
        let k: StrategyKind = name.parse()?;
        // `auto` has no implementation of its own: the source resolves it to
        // a concrete strategy before the offer (see `auto`).
        if k != StrategyKind::Auto {
            k.implementation()?;
        }
        Ok(k)
    }
}

fn implemented_names() -> String {
    StrategyKind::ALL
        .iter()
        .filter(|k| k.implementation_exists())
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl StrategyKind {
    fn implementation_exists(self) -> bool {
        matches!(
            self,
            StrategyKind::StopCopy | StrategyKind::PostCopy | StrategyKind::Ampom
        ) || matches!(self, StrategyKind::PreCopy | StrategyKind::QueuedPreCopy)
            || matches!(self, StrategyKind::DemandPaging)
            || matches!(self, StrategyKind::Flushing)
            || matches!(self, StrategyKind::FreezeFree)
            || matches!(self, StrategyKind::AssistedPostCopy)
            || self == StrategyKind::Auto
    }
}

impl FromStr for StrategyKind {
    type Err = StrategyError;
    fn from_str(s: &str) -> Result<Self> {
        StrategyKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| StrategyError::UnknownStrategy {
                name: s.chars().take(64).collect(),
                all: StrategyKind::ALL
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Test hooks, only honoured by daemons started with `PMIG_TEST_HOOKS=1` (see the
/// daemon crate). They simulate failures at precise points.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    /// The destination daemon kills itself (SIGKILL) after receiving this many image bytes.
    pub die_after_bytes: Option<u64>,
    /// The destination stops reading (for 60 s, or until `<state dir>/release-stall`
    /// exists, which it then removes) once it has received this many image bytes,
    /// logging one line when it stalls (to cut the link, or change the process, at a
    /// known point).
    pub stall_after_bytes: Option<u64>,
    /// The destination refuses to restore (as if the restore failed).
    pub fail_restore: bool,
    /// The destination never answers after the image (to test the timeout).
    pub hang_before_restore: bool,
    /// `flushing`'s source: the pre-flush is given up after its first pass
    /// as if the process wrote too much during it (`PRE_FLUSH_GIVE_UP`).
    pub give_up_pre_flush: bool,
    /// `flushing`/`freeze-free` (page store) and `pre-copy`/`queued-pre-copy`
    /// (the destination's own copy): the destination's background fill starts
    /// this many ms after the restore (faults are served meanwhile), logging
    /// one line, so that pages are surely owed.
    pub stall_fill_ms: Option<u64>,
    /// Source of a lazy migration: the answers' connection (protocol 7)
    /// fails after this many answer messages (to test the fallback).
    pub answers_fail_after: Option<u64>,
    /// The newest protocol version this daemon speaks in its migrations
    /// (to test an older peer's behaviour); at least the oldest it speaks.
    pub speak_version: Option<u16>,
    /// freeze-free's source: the flush to the page store waits, logging one
    /// line, until `<state dir>/release-flush` exists (at most 60 s), so
    /// that the store is surely incomplete meanwhile.
    pub hold_flush: bool,
    /// Source: after the handover the frozen original is kept (not killed)
    /// until `<state dir>/release-original` exists (at most 60 s), logging
    /// one line, so that signals can be sent to it at a known point.
    pub hold_original: bool,
    /// Source of a lazy migration: after the handover it neither answers
    /// nor pushes a page until `<state dir>/release-answers` exists (at most
    /// 60 s), logging one line, so that pages are surely still owed.
    pub hold_answers: bool,
    /// Source of a migration with a skeleton: once the destination holds
    /// it, the stop waits until `<state dir>/release-skeleton` exists (at
    /// most 60 s), logging one line, so that the process can change
    /// between the skeleton's capture and the stop's.
    pub hold_skeleton: bool,
    /// Source of `pre-copy`, `queued-pre-copy` and `assisted-post-copy`:
    /// after the last round the stop waits until
    /// `<state dir>/release-rounds` exists (at most 60 s), logging one
    /// line, so that the process can change between the last round and the
    /// stop.
    pub hold_rounds: bool,
}

/// For the test hooks that hold a step: waits (at most 60 s) until `file`
/// exists, then removes it; false if it never came.
pub(crate) fn await_release(file: &Path) -> bool {
    for _ in 0..6000 {
        if std::fs::remove_file(file).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// What a strategy needs from the node it runs on.
pub trait Host: Send + Sync {
    /// This node's name (`n1`).
    fn node(&self) -> &str;
    /// The `pmig` binary, for helper processes.
    fn exe(&self) -> &Path;
    /// The daemon's state directory (logs and stdio files of restored processes).
    fn state_dir(&self) -> &Path;
    /// Where image data is staged (tmpfs: `/dev/shm`), one subdirectory per migration.
    fn staging_root(&self) -> &Path;
    /// Spawns a helper process that the caller will wait for with [`Host::wait`] (the
    /// daemon's reaper leaves it alone).
    fn spawn(&self, cmd: &mut Command) -> std::io::Result<Child>;
    /// Waits for a helper started with [`Host::spawn`].
    fn wait(&self, child: &mut Child) -> std::io::Result<ExitStatus>;
    /// The cluster key (node-to-node authentication).
    fn cluster_key(&self) -> &pmig_proto::ClusterKey;
    /// Test hooks in force for this migration.
    fn hooks(&self) -> Hooks {
        Hooks::default()
    }
    /// Destination: files (paths) to connect the incoming process's fds 0-2 to when
    /// they were a terminal or a pipe, instead of `/dev/null` and the output file —
    /// for a process that keeps its home (the exec service's relay). `peer` is the
    /// source node.
    fn stdio_for(&self, peer: &str, offer: &Offer) -> Option<[PathBuf; 3]> {
        let _ = (peer, offer);
        None
    }
    /// Destination: last changes to the `pmig restore` command of an incoming process
    /// before it is spawned (e.g. a job's session: the exec service runs the restore
    /// inside a new session on a new pty).
    fn wrap_restore(&self, peer: &str, offer: &Offer, cmd: &mut Command) {
        let _ = (peer, offer, cmd);
    }
    /// Protocol configuration (node name, timeouts).
    fn proto_config(&self) -> Config {
        let mut c = Config::new(self.node());
        if let Some(v) = self.hooks().speak_version {
            c.proto_version = v.max(c.min_version);
        }
        c
    }
    /// Process `pid` is still arriving here (`true`: its pages are being
    /// filled in and it will be traced once more), or is done (`false`). A
    /// daemon does not start moving it on meanwhile.
    fn arriving(&self, _pid: i32, _active: bool) {}
    /// Source: process `pid` is frozen and captured, and nothing of it has
    /// left this node. A last word on whether it may go: the daemon checks
    /// again, now that its credentials cannot change, that whoever asked may
    /// move it (it could have run a set-user-ID program since the request
    /// was authorized). An error resumes it and fails the migration.
    fn may_leave(&self, _pid: i32) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Destination: how much of the source's CPU the restores here demand
    /// (`pmig daemon --cpu-check`); `None`: the restore's own default
    /// (`$PMIG_CPU_CHECK`, else every feature).
    fn cpu_check(&self) -> Option<pmig_engine::resources::cpu::CpuCheck> {
        None
    }
    /// `ADDR:PORT` of node `name`'s daemon, if this host knows the cluster.
    fn peer_addr(&self, _name: &str) -> Option<String> {
        None
    }
    /// `ADDR:PORT` this host's daemon listens on (its `--listen`), which a
    /// migration's source announces to the destination (`Listening`).
    fn listen_addr(&self) -> Option<String> {
        None
    }
    /// Source of a post-copy migration whose destination vanished: waits up
    /// to `within` for the restarted destination daemon `peer` to reconnect
    /// with `Resume { id }`, and returns that connection.
    fn await_resume(
        &self,
        _id: u64,
        _peer: &str,
        _within: std::time::Duration,
    ) -> Option<Channel<TcpStream>> {
        None
    }
    /// Source of a lazy migration: from now on, the connection the
    /// destination `peer` opens with `Answers { id }` (for the answers to its
    /// page requests) is handed to the returned receiver, until
    /// [`Host::forget_answers`]. `None`: this host takes no such connection.
    fn expect_answers(
        &self,
        _id: u64,
        _peer: &str,
    ) -> Option<std::sync::mpsc::Receiver<Channel<TcpStream>>> {
        None
    }
    /// Ends what [`Host::expect_answers`] began.
    fn forget_answers(&self, _id: u64) {}
    /// Destination: process `pid` runs here now, restored for migration
    /// `id` from `peer`, whose holder may pass it signals sent to the
    /// original (`Signals`) until the migration ends; `tids`: each thread's
    /// id in the original and here, whom a signal sent to a thread goes to.
    fn restored_here(&self, _id: u64, _peer: &str, _pid: i32, _tids: &[(i32, i32)]) {}
}

/// Progress of a migration, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub phase: &'static str,
    pub done: u64,
    pub total: u64,
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Request {
    pub pid: i32,
    /// `ADDR:PORT` of the destination daemon.
    pub to: String,
    /// The destination's name for reports (defaults to `to`).
    pub to_name: Option<String>,
    pub strategy: StrategyKind,
    /// Longest wait for any answer from the destination (the image transfer itself
    /// is not bounded by it, only every single read and write).
    pub timeout: Duration,
    /// When the rounds of `pre-copy` and `queued-pre-copy` stop.
    pub precopy: PreCopyParams,
    /// `flushing`, `freeze-free`: the page store (a directory on a file
    /// system every node shares); each migration uses `<page_store>/<id>`.
    pub page_store: PathBuf,
}

/// The page store when none is given: all nodes of the local test cluster
/// share the root file system.
pub const DEFAULT_PAGE_STORE: &str = "/var/tmp/pmig-pagestore";

/// When the rounds of `pre-copy` and `queued-pre-copy` stop (Noack: after the
/// first rerun that leaves at most 30 % of the address space dirty, or after 6
/// reruns). The address space is the total of the populated, saveable pages at
/// round 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreCopyParams {
    /// Most reruns after the initial full round.
    pub max_rounds: u32,
    /// Stop once a round's dirty (pre-copy) or queued (queued-pre-copy) bytes
    /// are at most this fraction of the address space.
    pub max_dirty_fraction: f64,
    /// pre-copy only, off by default: once the fraction is met, go on with
    /// rounds while the last one took longer than this to send (the stop
    /// sends what was written meanwhile) and the rounds still shrink.
    pub max_down_ms: Option<f64>,
}

impl Default for PreCopyParams {
    fn default() -> Self {
        PreCopyParams {
            max_rounds: 6,
            max_dirty_fraction: 0.30,
            max_down_ms: None,
        }
    }
}

impl PreCopyParams {
    /// Checked parameters; `None` takes the default.
    pub fn new(
        max_rounds: Option<u32>,
        max_dirty_fraction: Option<f64>,
        max_down_ms: Option<f64>,
    ) -> Result<Self> {
        let d = PreCopyParams::default();
        let p = PreCopyParams {
            max_rounds: max_rounds.unwrap_or(d.max_rounds),
            max_dirty_fraction: max_dirty_fraction.unwrap_or(d.max_dirty_fraction),
            max_down_ms,
        };
        if let Some(ms) = max_down_ms {
            if !(ms.is_finite() && ms > 0.0) {
                return Err(StrategyError::Other(format!(
                    "--max-down-ms {ms} is not a positive number of milliseconds"
                )));
            }
        }
        if p.max_rounds > pre_copy::MAX_ROUNDS_LIMIT {
            return Err(StrategyError::Other(format!(
                "--max-rounds {} is above the limit of {}",
                p.max_rounds,
                pre_copy::MAX_ROUNDS_LIMIT
            )));
        }
        if !(0.0..=1.0).contains(&p.max_dirty_fraction) {
            return Err(StrategyError::Other(format!(
                "--max-dirty-fraction {} is not a fraction between 0 and 1",
                p.max_dirty_fraction
            )));
        }
        Ok(p)
    }
}

/// The phase a migration is in (see the state machine in docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Preparation,
    Down,
    Post,
}

/// The source side of one migration, handed to the strategy's phases.
pub struct Source<'a> {
    pub id: u64,
    pub pid: i32,
    /// The start time of process `pid` when the migration began
    /// ([`pmig_engine::procfs::start_time`]): every capture checks it, so
    /// that a pid freed and reused meanwhile is never frozen.
    pub started: Option<u64>,
    pub comm: String,
    pub host: &'a dyn Host,
    pub ch: Channel<TcpStream>,
    pub peer: String,
    pub timeout: Duration,
    /// Staging directory for the image (tmpfs), removed at the end.
    pub staging: PathBuf,
    /// The frozen process (between the stop and the commit).
    pub holder: Option<holder::Holder<'a>>,
    /// A holder prepared while the process runs (pre-copy's rounds), told
    /// to go at the stop.
    pub primed: Option<holder::Primed<'a>>,
    pub phase: Phase,
    pub bytes: PhaseBytes,
    pub pages_sent: u64,
    pub rounds: u32,
    pub remote_faults: u64,
    pub prefetched_pages: u64,
    pub prefetch_hits: u64,
    /// Pages sent again as their changes (see [`sent_copies`]).
    pub pages_as_changes: u64,
    /// How long the destination's faults waited (`Msg::FaultWaits`).
    pub fault_waits: Option<report::FaultWaits>,
    /// What became of the skeleton, if one was tried (see [`skeleton`]).
    pub skeleton: Option<report::SkeletonUse>,
    /// The image of a skeleton the destination holds, read: the images
    /// sent after it are sent against it ([`delta`]).
    pub(crate) delta_base: Option<std::rc::Rc<stop_copy::DeltaBase>>,
    /// When pre-copy rounds stop (from the request).
    pub precopy: PreCopyParams,
    /// The page store root (from the request).
    pub page_store: PathBuf,
    /// Round-trip time to the destination, measured with `Ping` before anything else.
    pub rtt_ns: u64,
    /// CLOCK_MONOTONIC of the stop, set by the strategy.
    pub stopped_ns: Option<u64>,
    /// CLOCK_MONOTONIC at which the process resumed on the destination (estimated from
    /// the reply and the round-trip time), set by [`Source::restored`].
    pub resumed_ns: Option<u64>,
    pub new_pid: Option<i32>,
    /// Set once the source copy is gone (after [`Source::commit`]).
    pub committed: bool,
    pub residual: Residual,
    pub progress: &'a mut dyn FnMut(Progress),
}

impl Source<'_> {
    /// A test hook that holds a step of the source: logs `test hook: {what}
    /// of migration {id} waits for {file}` and waits (at most 60 s) for
    /// `<state dir>/{release}`, which it then removes.
    pub(crate) fn hold_for_test(&self, release: &str, what: &str) {
        let f = self.host.state_dir().join(release);
        tracing::warn!(
            "test hook: {what} of migration {} waits for {}",
            self.id,
            f.display()
        );
        await_release(&f);
    }

    /// Counts bytes sent or received in the current phase.
    pub fn count(&mut self, n: u64) {
        match self.phase {
            Phase::Preparation => self.bytes.preparation += n,
            Phase::Down => self.bytes.down += n,
            Phase::Post => self.bytes.post += n,
        }
    }

    /// Sets the socket timeout for every read and write from now on, and how
    /// long sent data may stay unacknowledged ([`set_link_timeout`]): `t`, or
    /// with `None` (after the handover) [`POST_LINK_GRACE`].
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<()> {
        let s = self.ch.stream();
        s.set_read_timeout(t)
            .and_then(|_| s.set_write_timeout(t))
            .and_then(|_| set_link_timeout(s, t.unwrap_or(POST_LINK_GRACE)))
            .map_err(io_err("set the connection timeout"))
    }

    /// Receives the next message, turning `Error`/`Abort` into errors.
    pub fn recv(&mut self, expected: &'static str) -> Result<Msg> {
        let m = self.ch.recv()?;
        self.count(64);
        match m {
            Msg::Error { code, text } => Err(StrategyError::Refused {
                node: self.peer.clone(),
                code,
                text,
            }),
            Msg::Abort { reason, .. } => Err(StrategyError::Refused {
                node: self.peer.clone(),
                code: code::INTERNAL,
                text: reason,
            }),
            m => {
                tracing::trace!("got {} (expected {expected})", m.kind());
                Ok(m)
            }
        }
    }

    /// Waits for the destination's `Restored` and records it.
    pub fn await_restored(&mut self) -> Result<()> {
        let t = mono_ns();
        match self.recv("Restored")? {
            Msg::Restored {
                id,
                pid,
                since_resume_us,
                restore_us,
                ..
            } if id == self.id => {
                tracing::info!(
                    "{} restored process {} as pid {pid} in {:.1} ms (waited {:.1} ms)",
                    self.peer,
                    self.pid,
                    restore_us as f64 / 1e3,
                    (mono_ns() - t) as f64 / 1e6
                );
                self.restored(pid, since_resume_us);
                Ok(())
            }
            other => Err(StrategyError::Protocol {
                node: self.peer.clone(),
                what: format!("expected Restored, got {}", other.kind()),
            }),
        }
    }

    /// Records the destination's `Restored` reply, received now.
    pub fn restored(&mut self, pid: i32, since_resume_us: u64) {
        let now = mono_ns();
        self.new_pid = Some(pid);
        let to = self.ch.stream().peer_addr().ok().map(|a| (a, self.id));
        if let Some(h) = self.holder.as_mut() {
            h.handed_over(to);
        }
        self.resumed_ns =
            Some(now.saturating_sub(self.rtt_ns / 2 + since_resume_us.saturating_mul(1000)));
    }

    /// The destination runs the process: remove the source copy and tell the
    /// destination the migration is final.
    pub fn commit(&mut self) -> Result<()> {
        if let Some(h) = self.holder.take() {
            h.kill()?;
        }
        self.committed = true;
        self.ch.send(&Msg::Commit { id: self.id })?;
        self.count(16);
        Ok(())
    }

    /// After the handover, when the process cannot be completed on the
    /// destination: the frozen original is killed (it must not run a second
    /// time) and the migration ends with `why`, the process lost.
    pub fn lost(&mut self, why: String) -> StrategyError {
        if let Some(h) = self.holder.take() {
            let _ = h.kill();
        }
        self.committed = true;
        StrategyError::Other(why)
    }
}

/// How long a connection whose process depends on it after the handover
/// (pages owed) rides out a cut link: far beyond TCP's default retransmission
/// limit (`tcp_retries2`, about 15 minutes), which would end the connection
/// and lose the process. Once the link is back, TCP's backoff (at most
/// 2 minutes between retransmissions) resumes the transfer.
pub const POST_LINK_GRACE: Duration = Duration::from_secs(6 * 3600);

/// `TCP_USER_TIMEOUT`: the connection fails once data it sent has stayed
/// unacknowledged for `t`. Before the handover this bounds a send to a cut
/// link by the migration's timeout: a socket send timeout alone restarts with
/// every partial write into the kernel's send buffer. A slow link is not
/// affected (its acknowledgements keep coming).
pub fn set_link_timeout(s: &TcpStream, t: Duration) -> std::io::Result<()> {
    let ms = u32::try_from(t.as_millis()).unwrap_or(u32::MAX).max(1);
    nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::TcpUserTimeout, &ms)
        .map_err(std::io::Error::from)
}

/// Marks `s` as carrying latency-sensitive traffic (the answers to page
/// faults): `SO_PRIORITY` 6 (`TC_PRIO_INTERACTIVE`, which the kernel's
/// priority-aware queues such as `prio`, `pfifo_fast` and the local
/// cluster's links serve first), and the low-delay DSCP class on the wire
/// (`IP_TOS` / `IPV6_TCLASS` 0x10) for routers that honour it. A FIFO
/// bottleneck ignores both. Best effort: a refusal changes nothing else.
pub fn mark_latency_sensitive(s: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    const LOW_DELAY: i32 = libc::IPTOS_LOWDELAY as i32;
    let tos = match s.local_addr() {
        Ok(std::net::SocketAddr::V6(_)) => setsockopt(s, sockopt::Ipv6TClass, &LOW_DELAY),
        _ => setsockopt(s, sockopt::IpTos, &LOW_DELAY),
    };
    // After IP_TOS, which sets the priority from the TOS on its own.
    let prio = setsockopt(s, sockopt::Priority, &6);
    if let Err(e) = tos.and(prio) {
        tracing::debug!("cannot mark the answers' connection as low-delay: {e}");
    }
}

/// The pid of `pid` in a pid namespace below this process's, if it runs in
/// one (`NSpid` lists more levels for it than for this process).
fn pid_in_own_namespace(pid: i32) -> Option<u32> {
    let levels = |p: &str| -> Option<Vec<u32>> {
        let st = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
        let l = st.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
        l.split_whitespace().map(|x| x.parse().ok()).collect()
    };
    let (theirs, ours) = (levels(&pid.to_string())?, levels("self")?);
    if theirs.len() > ours.len() {
        theirs.last().copied()
    } else {
        None
    }
}

/// The destination side of one migration.
pub struct Destination<'a> {
    pub offer: Offer,
    pub host: &'a dyn Host,
    pub ch: Channel<TcpStream>,
    pub peer: String,
    /// `ADDR:PORT` of the source's daemon, if known (its `--peer` entry
    /// here, else its `Listening`): for the answers' connection and a
    /// takeover.
    pub source_addr: Option<String>,
    /// Staging directory for the incoming image (tmpfs), removed at the end.
    pub staging: PathBuf,
    pub hooks: Hooks,
    /// Bytes received so far (for the test hook).
    pub received: u64,
    /// A `pmig restore` started before the image arrived (see
    /// [`stop_copy::Prespawned`]).
    pub(crate) restorer: Option<stop_copy::Prespawned<'a>>,
    /// The System V shared memory the restore made (`Restored::sysv_made`):
    /// removed with the process if it is killed after the restore.
    pub(crate) made_segments: Vec<pmig_engine::resources::sysvshm::MadeSegment>,
    /// A directory holding an image this daemon composed itself, from an
    /// image it verified and pages the authenticated channel brought: its
    /// checksums were computed as it was written, so the restore does not
    /// read it all again to check them (the manifest is still checked).
    pub(crate) composed: Option<PathBuf>,
    /// A skeleton the source offered (see [`skeleton`]), held until the
    /// image of the stop comes.
    pub(crate) skeleton: Option<skeleton::Offered<'a>>,
    /// The skeleton's image as it was received: the files whose bytes
    /// `ImageCopy` takes ([`delta`]).
    pub(crate) delta_base: Option<stop_copy::SkeletonBase>,
    /// The `pmig restore`s that reported their process running, left to
    /// exit; waited for at the end of the migration.
    pub(crate) exiting: Vec<stop_copy::Exiting<'a>>,
}

impl Destination<'_> {
    /// Tells the source that `got` came where `expected` should have (one
    /// `Error { UNEXPECTED }`, best effort) and returns the error.
    pub(crate) fn unexpected(&mut self, expected: &str, got: &Msg) -> StrategyError {
        let what = format!("expected {expected}, got {}", got.kind());
        let _ = self.ch.send(&Msg::Error {
            code: code::UNEXPECTED,
            text: what.clone(),
        });
        StrategyError::Protocol {
            node: self.peer.clone(),
            what,
        }
    }

    /// Refuses the migration with `code` and `text` (one `Error`, best
    /// effort) and returns the error.
    pub(crate) fn refuse(&mut self, code: u32, text: String) -> StrategyError {
        let _ = self.ch.send(&Msg::Error {
            code,
            text: text.clone(),
        });
        StrategyError::Other(text)
    }

    /// The error for the source's `Abort { reason }`.
    pub(crate) fn source_aborted(&self, reason: String) -> StrategyError {
        StrategyError::Refused {
            node: self.peer.clone(),
            code: code::INTERNAL,
            text: format!("the source aborted: {reason}"),
        }
    }

    /// Counts `n` received image bytes and applies the byte-count test hooks
    /// (`die-after-bytes`, `stall-after-bytes`).
    pub fn count_received(&mut self, n: u64) {
        let before = self.received;
        self.received += n;
        if let Some(limit) = self.hooks.die_after_bytes {
            if self.received >= limit {
                tracing::error!(
                    "test hook: destination daemon dies after receiving {} bytes",
                    self.received
                );
                // SAFETY: sending SIGKILL to ourselves (simulated crash).
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
        }
        if let Some(limit) = self.hooks.stall_after_bytes {
            // Once, when the count crosses the limit.
            if before < limit && self.received >= limit {
                tracing::warn!(
                    "test hook: destination stalls after receiving {} bytes",
                    self.received
                );
                await_release(&self.host.state_dir().join("release-stall"));
                tracing::warn!("test hook: destination stall over");
            }
        }
    }
}

/// One migration algorithm. See the crate documentation for the phases.
pub trait Strategy: Send {
    fn kind(&self) -> StrategyKind;
    /// Phase 1 (source): the process still runs.
    fn prepare(&mut self, m: &mut Source) -> Result<()>;
    /// Phase 2 (source): stop the process and make it run on the destination; must
    /// set `m.stopped_ns` when it stops the process and call [`Source::restored`] when
    /// the destination reports it running.
    fn handover(&mut self, m: &mut Source) -> Result<()>;
    /// Phase 3 (source): the process runs on the destination; finish residual work
    /// and make sure the source copy is gone ([`Source::commit`]).
    fn post(&mut self, m: &mut Source) -> Result<()>;
    /// The destination's side, from the accepted offer to the end of the migration.
    /// Returns the pid of the restored process.
    fn destination(&mut self, d: &mut Destination) -> Result<i32>;
    /// Whether the user gets the report at the handover, while [`Strategy::post`]
    /// goes on (residual work that may last as long as the process).
    fn reports_at_handover(&self) -> bool {
        false
    }
}

/// A process's real, effective, saved and filesystem uids, then its gids
/// (`/proc/PID/status`), or None if it is gone.
pub fn process_ids(pid: i32) -> Option<([u32; 4], [u32; 4])> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let four = |key: &str| -> Option<[u32; 4]> {
        let line = s.lines().find_map(|l| l.strip_prefix(key))?;
        let v: Vec<u32> = line
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        v.try_into().ok()
    };
    Some((four("Uid:")?, four("Gid:")?))
}

/// The real uid of a process.
pub fn process_uid(pid: i32) -> Option<u32> {
    process_ids(pid).map(|(uids, _)| uids[0])
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn new_id() -> u64 {
    // Unique per daemon run; the time part keeps ids of restarted daemons apart.
    let n = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (mono_ns() / 1_000_000 % 1_000_000_000) * 1000 + n % 1000
}

/// Runs a migration from this node (the source side). On any failure before the
/// handover completes the process is left running exactly as it was, and the error
/// says so.
pub fn migrate(
    host: &dyn Host,
    req: &Request,
    progress: &mut dyn FnMut(Progress),
) -> Result<Outcome> {
    migrate_with(host, req, progress, &mut |_| {})
}

/// [`migrate`], calling `handed_over` with the report as of the handover for
/// strategies that report then ([`Strategy::reports_at_handover`]); the
/// returned outcome is the final one.
pub fn migrate_with(
    host: &dyn Host,
    req: &Request,
    progress: &mut dyn FnMut(Progress),
    handed_over: &mut dyn FnMut(&Outcome),
) -> Result<Outcome> {
    let t0 = mono_ns();
    // A process still owing pages to a demand-paging source gets them all first.
    demand_paging::settle(req.pid, req.timeout);
    let pid = req.pid;
    if pid <= 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        return Err(StrategyError::Other(format!(
            "process {pid} does not exist"
        )));
    }
    if pid == 1 {
        return Err(StrategyError::Other(
            "process 1 is this node's init: it cannot leave its node; nothing was touched".into(),
        ));
    }
    if pid as u32 == std::process::id() {
        return Err(StrategyError::Denied(
            "the daemon cannot migrate itself".into(),
        ));
    }
    if pmig_engine::procfs::has_exited(pid) {
        return Err(StrategyError::Other(format!(
            "process {pid} has already exited (a zombie its parent has not reaped, or a process on its way out): there is nothing to move; nothing was touched"
        )));
    }
    // With the pid, it names this process and not one that reuses the pid
    // once it has exited (a local cluster's nodes share one pid namespace:
    // the destination's restore may take the pid as soon as it is free).
    let started = pmig_engine::procfs::start_time(pid);
    if pmig_engine::procfs::is_kernel_thread(pid) {
        return Err(StrategyError::Other(format!(
            "process {pid} is a kernel thread: only user processes move; nothing was touched"
        )));
    }
    if let Some(inner) = pid_in_own_namespace(pid) {
        return Err(StrategyError::Other(format!(
            "process {pid} runs in a pid namespace of its own (pid {inner} there{}): not supported yet; nothing was touched",
            if inner == 1 { ", its init" } else { "" }
        )));
    }
    // `auto` resolves to a concrete strategy once the link can be measured.
    let mut strategy = if req.strategy == StrategyKind::Auto {
        StrategyKind::StopCopy.implementation()?
    } else {
        req.strategy.implementation()?
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default();
    let uid = process_uid(pid).unwrap_or(0);
    let to_name = req.to_name.clone().unwrap_or_else(|| req.to.clone());
    let ctx = |e: StrategyError| {
        StrategyError::Other(format!(
            "cannot migrate process {pid} to {to_name}: {e}; the process was not touched"
        ))
    };
    let mut cfg = host.proto_config();
    cfg.handshake_timeout = Some(req.timeout.min(Duration::from_secs(10)));
    let ch = pmig_proto::blocking::connect_for_bulk(req.to.as_str(), host.cluster_key(), &cfg)
        .map_err(|e| ctx(e.into()))?;
    let peer = ch.peer().node.clone();
    if peer == host.node() {
        // Node names are unique in a cluster: the destination is this node
        // (its own address, or another daemon started under the same name).
        // Moving a process onto the node it runs on would only cost it its
        // parent and perhaps its pid.
        return Err(StrategyError::Other(format!(
            "process {pid} already runs on {peer}: the daemon at {} is this node{}; nothing was touched",
            req.to,
            if req.to_name.as_deref() == Some(peer.as_str()) {
                String::new()
            } else {
                format!(" (it calls itself `{peer}`, as this one does)")
            }
        )));
    }
    let version = ch.peer().version;
    if version < pmig_proto::msg::SECCOMP_FILTERS
        && pmig_engine::resources::seccomp::has_filters(pid)
    {
        return Err(StrategyError::Other(format!(
            "cannot migrate process {pid} to {peer}: it has seccomp filters, and {peer} speaks protocol {version}, which would restore it without them (version {} restores them); nothing was touched",
            pmig_proto::msg::SECCOMP_FILTERS
        )));
    }
    if version < pmig_proto::msg::NAMED_PIPES {
        if let Some(path) = pmig_engine::resources::fifos::held_by(pid) {
            return Err(StrategyError::Other(format!(
                "cannot migrate process {pid} to {peer}: it holds a named pipe ({path}), and {peer} speaks protocol {version}, which cannot restore one (version {} can); nothing was touched",
                pmig_proto::msg::NAMED_PIPES
            )));
        }
    }
    if version < pmig_proto::msg::UNIX_LONE {
        if let Some(fd) = pmig_engine::resources::lonesockets::held_by(pid) {
            return Err(StrategyError::Other(format!(
                "cannot migrate process {pid} to {peer}: it holds a unix socket with no name and no live peer (fd {fd}), and {peer} speaks protocol {version}, which cannot restore one (version {} can); nothing was touched",
                pmig_proto::msg::UNIX_LONE
            )));
        }
    }
    if version < pmig_proto::msg::UNIX_PAIRS {
        if let Some(fd) = pmig_engine::resources::socketpairs::held_by(pid) {
            return Err(StrategyError::Other(format!(
                "cannot migrate process {pid} to {peer}: it holds a unix socket pair (fd {fd}), and {peer} speaks protocol {version}, which cannot restore one (version {} can); nothing was touched",
                pmig_proto::msg::UNIX_PAIRS
            )));
        }
    }
    let id = new_id();
    let staging = host.staging_root().join(format!(
        "pmig-{}-{}-out-{id}",
        host.node(),
        std::process::id()
    ));
    let mut m = Source {
        id,
        pid,
        started,
        comm: comm.clone(),
        host,
        peer: peer.clone(),
        timeout: req.timeout,
        staging: staging.clone(),
        holder: None,
        primed: None,
        phase: Phase::Preparation,
        bytes: PhaseBytes::default(),
        pages_sent: 0,
        rounds: 0,
        remote_faults: 0,
        prefetched_pages: 0,
        prefetch_hits: 0,
        pages_as_changes: 0,
        fault_waits: None,
        skeleton: None,
        delta_base: None,
        precopy: req.precopy,
        page_store: req.page_store.clone(),
        rtt_ns: 0,
        stopped_ns: None,
        resumed_ns: None,
        new_pid: None,
        committed: false,
        residual: Residual {
            what: "nothing".into(),
            node: None,
            until: "handover".into(),
        },
        progress,
        ch,
    };
    m.set_timeout(Some(req.timeout)).map_err(ctx)?;
    // The round-trip time places the destination's resume on our clock:
    // the shortest of a few, since the first exchanges of a connection
    // also wait for the peer's thread to wake (one was seen at twice the
    // down time of a skeleton's 2 ms stop, which it then halved).
    let mut rtt = u64::MAX;
    for k in 0..RTT_PINGS {
        let t = mono_ns();
        let seq = id.wrapping_add(k);
        m.ch.send(&Msg::Ping { seq }).map_err(|e| ctx(e.into()))?;
        match m.recv("Pong").map_err(ctx)? {
            Msg::Pong { seq: s } if s == seq => {}
            other => {
                return Err(ctx(StrategyError::Protocol {
                    node: peer,
                    what: format!("expected Pong, got {}", other.kind()),
                }))
            }
        }
        rtt = rtt.min(mono_ns() - t);
    }
    m.rtt_ns = rtt;
    let mut kind = req.strategy;
    let mut label = req.strategy.as_str().to_string();
    if req.strategy == StrategyKind::Auto {
        let c = auto::choose(&mut m).map_err(ctx)?;
        kind = c.kind;
        m.precopy = auto::params_for(kind, m.precopy);
        label = format!("auto:{}", c.kind);
        strategy = kind.implementation()?;
    }
    // Where this daemon listens, for a destination whose `--peer` list does
    // not name it (the answers' connection, a takeover).
    if let Some(addr) = host.listen_addr() {
        if m.ch.peer().version >= pmig_proto::msg::LISTENING {
            m.ch.send(&Msg::Listening { addr })
                .map_err(|e| ctx(e.into()))?;
        }
    }
    m.ch.send(&Msg::MigrateOffer(Offer {
        id,
        strategy: kind.as_str().into(),
        pid,
        uid,
        comm: comm.chars().take(pmig_proto::msg::MAX_COMM).collect(),
        source_node: host.node().into(),
        bytes_hint: 0,
    }))
    .map_err(|e| ctx(e.into()))?;
    m.count(128);
    match m.recv("MigrateAccept").map_err(ctx)? {
        Msg::MigrateAccept { id: i } if i == id => {}
        other => {
            return Err(ctx(StrategyError::Protocol {
                node: peer,
                what: format!("expected MigrateAccept, got {}", other.kind()),
            }))
        }
    }
    let to_name2 = to_name.clone();
    let label2 = label.clone();
    let mut early = |m: &Source, prep_end: u64, resumed: u64| {
        let o = outcome_of(m, req, &label2, &to_name2, t0, prep_end, resumed, resumed);
        handed_over(&o);
    };
    let result = run_phases(strategy.as_mut(), &mut m, &mut early);
    let _ = std::fs::remove_dir_all(&staging);
    let (prep_end, resumed, end) = match result {
        Ok(x) => x,
        Err(e) => {
            let resumed = match m.holder.take() {
                Some(h) => match h.resume() {
                    Ok(()) => "the process was resumed on the source, as it was".to_string(),
                    Err(_) if exited_meanwhile(pid, started) => EXITED_MEANWHILE.into(),
                    Err(e2) => format!("resuming the process failed too: {e2}"),
                },
                None if m.committed => "the process had already moved; it may be lost".to_string(),
                // A process that ends on its own while it is being prepared
                // makes the preparation fail: say so rather than blame it.
                None if exited_meanwhile(pid, started) => EXITED_MEANWHILE.into(),
                // Not "not touched": preparing may have paused it briefly
                // (the userfaultfd that tracks its writes is created from
                // inside it), though nothing of it changed.
                None => "the process was not moved and runs on as it was".to_string(),
            };
            // Best effort: the connection may be the thing that failed (a cut link),
            // so the Abort must not hold the error report up for another timeout.
            let _ = m.set_timeout(Some(req.timeout.min(Duration::from_secs(1))));
            let _ = m.ch.send(&Msg::Abort {
                id,
                reason: truncate(&e.to_string(), pmig_proto::msg::MAX_ERROR_TEXT),
            });
            // A process that ended by itself: that first, what failed with it after.
            return Err(StrategyError::Other(if resumed == EXITED_MEANWHILE {
                format!("migration of process {pid} to {to_name} failed: {resumed} (then: {e})")
            } else {
                format!("migration of process {pid} to {to_name} failed: {e}; {resumed}")
            }));
        }
    };
    Ok(outcome_of(
        &m, req, &label, &to_name, t0, prep_end, resumed, end,
    ))
}

/// How many `Ping`s measure the round trip (see [`migrate`]).
const RTT_PINGS: u64 = 5;

/// The end of a failed migration's message when the process exited by
/// itself before its handover.
const EXITED_MEANWHILE: &str =
    "the process exited during the migration, before its handover; nothing of it moved";

/// Whether process `pid`, which started at `started` (clock ticks after
/// boot) and whose migration failed before its handover, ended by itself
/// meanwhile: its pid names no process, or another one, or it is on its
/// way out. A process seen on its way out (a thread of it exiting) may
/// still look alive for a moment after the failure its exit caused; it is
/// given up to [`EXIT_GRACE`] to end, so that the failure is told as its
/// exit and not as what the capture met. A process none of whose threads
/// is exiting is not waited for.
fn exited_meanwhile(pid: i32, started: Option<u64>) -> bool {
    use pmig_engine::procfs::{exiting, has_exited, start_time};
    if started.is_some() && start_time(pid) != started {
        return true;
    }
    if !exiting(pid) {
        return false;
    }
    let deadline = std::time::Instant::now() + EXIT_GRACE;
    while !has_exited(pid) {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// How long [`exited_meanwhile`] waits for a process on its way out.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// The outcome of a migration as of `end`.
#[allow(clippy::too_many_arguments)]
fn outcome_of(
    m: &Source,
    req: &Request,
    label: &str,
    to_name: &str,
    t0: u64,
    prep_end: u64,
    resumed: u64,
    end: u64,
) -> Outcome {
    let stopped = m.stopped_ns.unwrap_or(prep_end);
    let bytes_total = m.bytes.preparation + m.bytes.down + m.bytes.post;
    Outcome {
        pid: m.pid,
        new_pid: m.new_pid.unwrap_or(0),
        comm: m.comm.clone(),
        source: m.host.node().into(),
        destination: if req.to_name.is_some() {
            to_name.to_string()
        } else {
            m.peer.clone()
        },
        report: Report {
            strategy: label.into(),
            preparation_ms: ms_between(t0, stopped),
            down_ms: ms_between(stopped, resumed),
            post_ms: ms_between(resumed, end),
            total_ms: ms_between(t0, end),
            bytes_total,
            bytes_per_phase: m.bytes.clone(),
            pages_sent: m.pages_sent,
            rounds: m.rounds,
            remote_faults: m.remote_faults,
            prefetched_pages: m.prefetched_pages,
            prefetch_hits: m.prefetch_hits,
            pages_as_changes: m.pages_as_changes,
            residual: m.residual.clone(),
            fault_waits: m.fault_waits.clone(),
            skeleton: m.skeleton.clone(),
        },
        notes: Vec::new(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Returns (end of preparation, resume, end) as CLOCK_MONOTONIC.
fn run_phases(
    s: &mut dyn Strategy,
    m: &mut Source,
    early: &mut dyn FnMut(&Source, u64, u64),
) -> Result<(u64, u64, u64)> {
    s.prepare(m)?;
    let prep_end = mono_ns();
    m.phase = Phase::Down;
    s.handover(m)?;
    let resumed = m.resumed_ns.ok_or_else(|| {
        StrategyError::Other("internal error: the handover did not report the resume".into())
    })?;
    m.phase = Phase::Post;
    if s.reports_at_handover() {
        early(m, prep_end, resumed);
    }
    s.post(m)?;
    if !m.committed {
        m.commit()?;
    }
    Ok((prep_end, resumed, mono_ns()))
}

/// Serves an offer received by this node's daemon (the destination side). Replies
/// `MigrateAccept` or `Error`, then runs the strategy's destination side.
/// `listening`: what the source announced with `Listening` on this
/// connection, if anything (version 13).
pub fn serve_offer(
    host: &dyn Host,
    mut ch: Channel<TcpStream>,
    offer: Offer,
    listening: Option<&str>,
) -> Result<Option<i32>> {
    let peer = ch.peer().node.clone();
    // The source's daemon as this node's `--peer` list names it, else where
    // it said it listens.
    let source_addr = host.peer_addr(&offer.source_node).or_else(|| {
        let at = pmig_proto::msg::reachable_at(listening?, &ch.peer().addr)?;
        tracing::debug!(
            "{peer} is not among this daemon's peers: reaching it at {at}, where it listens"
        );
        Some(at.to_string())
    });
    let kind = match StrategyKind::implemented(&offer.strategy) {
        Ok(k) => k,
        Err(e) => {
            let _ = ch.send(&Msg::Error {
                code: code::UNSUPPORTED_STRATEGY,
                text: format!("{} {}", host.node(), e),
            });
            return Err(e);
        }
    };
    let mut s = kind.implementation()?;
    let staging = host.staging_root().join(format!(
        "pmig-{}-{}-in-{}-{}",
        host.node(),
        std::process::id(),
        peer,
        offer.id
    ));
    let _ = std::fs::remove_dir_all(&staging);
    if let Err(e) = std::fs::create_dir_all(&staging) {
        let _ = ch.send(&Msg::Error {
            code: code::MIGRATION_REFUSED,
            text: format!("{}: cannot create {}: {e}", host.node(), staging.display()),
        });
        return Err(io_err("create the staging directory")(e));
    }
    ch.send(&Msg::MigrateAccept { id: offer.id })?;
    tracing::info!(
        "accepted {} of process {} ({}) from {peer} (migration {}, protocol version {})",
        kind,
        offer.pid,
        offer.comm,
        offer.id,
        ch.peer().version
    );
    let mut d = Destination {
        hooks: host.hooks(),
        offer,
        host,
        ch,
        peer,
        source_addr,
        staging: staging.clone(),
        received: 0,
        restorer: None,
        made_segments: Vec::new(),
        composed: None,
        skeleton: None,
        delta_base: None,
        exiting: Vec::new(),
    };
    let r = s.destination(&mut d);
    drop(d.restorer.take());
    drop(d.skeleton.take());
    let _ = std::fs::remove_dir_all(&staging);
    r.map(Some)
}

/// Destination: delivers to process `pid` the signals the holder of its
/// frozen original passed on (`Signals`), each sent to a thread to the one
/// restored from it (`tids`, see `restored_here`); returns how many were
/// delivered. One that cannot be is logged (the process may have exited
/// meanwhile).
pub fn deliver_late_signals(
    pid: i32,
    tids: &[(i32, i32)],
    signals: &[pmig_proto::msg::LateSignal],
) -> u32 {
    use pmig_engine::resources::signals::{deliver_late, LateSignal};
    let mut delivered = 0;
    for s in signals {
        let late = LateSignal {
            tid: (s.tid != 0).then_some(s.tid),
            main_thread: s.main_thread,
            info: s.info.clone(),
        };
        let sig = s.info.first().copied().unwrap_or(0);
        // si_pid: the sender, for a signal a process sent.
        let from = s
            .info
            .get(16..20)
            .map_or(0, |b| i32::from_le_bytes(b.try_into().unwrap_or_default()));
        match deliver_late(pid, tids, &late) {
            Ok(to) => {
                delivered += 1;
                tracing::debug!(
                    "signal {sig} from pid {from} sent to the original (thread {}) delivered to process {pid} ({to})",
                    s.tid
                );
            }
            Err(e) => tracing::warn!("signal {sig} sent to the original of process {pid}: {e}"),
        }
    }
    delivered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_in_a_pid_namespace_of_its_own_is_told_apart() {
        assert_eq!(pid_in_own_namespace(std::process::id() as i32), None);
        assert_eq!(pid_in_own_namespace(-1), None);
        // A child in a new pid namespace is pid 1 there.
        let mut c = std::process::Command::new("unshare");
        c.args(["--pid", "--fork", "--kill-child", "sleep", "30"]);
        let Ok(mut child) = c.spawn() else {
            return; // no unshare(1) here
        };
        let mut gone = None;
        let inner = (0..200).find_map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            if let Ok(Some(st)) = child.try_wait() {
                gone = Some(st);
                return Some(None);
            }
            let kids =
                std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).ok()?;
            let k: i32 = kids.split_whitespace().next()?.parse().ok()?;
            pid_in_own_namespace(k).map(Some)
        });
        let _ = child.kill();
        let _ = child.wait();
        if let Some(st) = gone {
            eprintln!("skipped: unshare --pid could not run here ({st})");
            return;
        }
        assert_eq!(inner, Some(Some(1)));
    }

    #[test]
    fn link_timeout_is_set_on_the_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let get = |s: &TcpStream| {
            nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::TcpUserTimeout).unwrap()
        };
        set_link_timeout(&s, Duration::from_secs(5)).unwrap();
        assert_eq!(get(&s), 5000);
        set_link_timeout(&s, POST_LINK_GRACE).unwrap();
        assert_eq!(get(&s), 6 * 3600 * 1000);
    }

    #[test]
    fn answers_sockets_are_marked_interactive() {
        use nix::sys::socket::{getsockopt, sockopt};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert_eq!(getsockopt(&s, sockopt::Priority).unwrap(), 0);
        mark_latency_sensitive(&s);
        assert_eq!(getsockopt(&s, sockopt::Priority).unwrap(), 6);
        assert_eq!(getsockopt(&s, sockopt::IpTos).unwrap(), 0x10);
    }

    #[test]
    fn strategy_names() {
        for k in StrategyKind::ALL {
            assert_eq!(k.as_str().parse::<StrategyKind>().unwrap(), k);
        }
        assert!(StrategyKind::implemented("stop-copy").is_ok());
        for k in ["pre-copy", "queued-pre-copy", "post-copy"] {
            assert!(StrategyKind::implemented(k).is_ok(), "{k}");
        }
        if let Some(k) = StrategyKind::ALL
            .into_iter()
            .find(|k| !k.implementation_exists())
        {
            let e = StrategyKind::implemented(k.as_str())
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "strategy `{k}` is not implemented yet (implemented: stop-copy, pre-copy, queued-pre-copy"
                )),
                "{e}"
            );
        }
        assert!(PreCopyParams::new(None, None, None).unwrap() == PreCopyParams::default());
        assert!(PreCopyParams::new(Some(2), Some(1.5), None).is_err());
        assert!(PreCopyParams::new(Some(1_000_000), None, None).is_err());
        assert!(PreCopyParams::new(None, None, Some(0.0)).is_err());
        assert!(PreCopyParams::new(None, None, Some(f64::NAN)).is_err());
        assert_eq!(
            PreCopyParams::new(None, None, Some(20.0))
                .unwrap()
                .max_down_ms,
            Some(20.0)
        );
        assert!(PreCopyParams::new(None, Some(f64::NAN), None).is_err());
        let e = "copy".parse::<StrategyKind>().unwrap_err().to_string();
        assert!(e.starts_with("unknown strategy `copy`; use one of: stop-copy, pre-copy"));
    }

    #[test]
    fn report_has_exactly_the_fields_of_issue_3() {
        let r = Report {
            strategy: "stop-copy".into(),
            preparation_ms: 1.0,
            down_ms: 2.0,
            post_ms: 3.0,
            total_ms: 6.0,
            bytes_total: 10,
            bytes_per_phase: PhaseBytes {
                preparation: 1,
                down: 8,
                post: 1,
            },
            pages_sent: 2,
            rounds: 0,
            remote_faults: 0,
            prefetched_pages: 0,
            prefetch_hits: 0,
            pages_as_changes: 0,
            residual: Residual {
                what: "nothing".into(),
                node: None,
                until: "handover".into(),
            },
            fault_waits: None,
            skeleton: None,
        };
        let v = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "bytes_per_phase",
                "bytes_total",
                "down_ms",
                "pages_sent",
                "post_ms",
                "prefetch_hits",
                "prefetched_pages",
                "preparation_ms",
                "remote_faults",
                "residual",
                "rounds",
                "strategy",
                "total_ms"
            ]
        );
        let o = Outcome {
            pid: 1,
            new_pid: 2,
            comm: "x".into(),
            source: "n1".into(),
            destination: "n2".into(),
            report: r,
            notes: Vec::new(),
        };
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(back, o);
        assert!(o
            .summary()
            .contains("from n1 to n2 as pid 2 with stop-copy"));
        // Notes only when there are any, one line each.
        assert!(!serde_json::to_string(&o).unwrap().contains("notes"));
        let noted = Outcome {
            notes: vec!["a".into(), "b".into()],
            ..o
        };
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&noted).unwrap()).unwrap();
        assert_eq!(back, noted);
        assert!(noted.summary().ends_with("\n  note: a\n  note: b"));
        // Fault waits only when the destination told them.
        assert!(!serde_json::to_string(&noted)
            .unwrap()
            .contains("fault_waits"));
        let mut waited = noted.clone();
        waited.report.fault_waits = Some(report::FaultWaits::from_us(
            12_500,
            20_000,
            vec![3, 0, 1, 0, 0, 0],
        ));
        let v = serde_json::to_value(&waited).unwrap();
        assert_eq!(v["fault_waits"]["max_ms"], 12.5);
        assert_eq!(v["fault_waits"]["mean_ms"], 5.0);
        assert_eq!(
            v["fault_waits"]["counts"],
            serde_json::json!([3, 0, 1, 0, 0, 0])
        );
        let back: Outcome = serde_json::from_value(v).unwrap();
        assert_eq!(back, waited);
        assert!(waited.summary().contains(
            "\n  fault waits: longest 12.5 ms, mean 5.00 ms; ≤5 ms 3, ≤10 ms 0, ≤20 ms 1, ≤50 ms 0, ≤100 ms 0, >100 ms 0\n"
        ));
    }
}
