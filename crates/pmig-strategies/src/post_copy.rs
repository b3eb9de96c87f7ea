//! `post-copy`: resume first, then move the memory.
//!
//! Source: freeze the process and capture its state with only the pages the
//! restore itself touches (rseq areas, the pages under each stack pointer);
//! send that small image; once the destination runs the process, keep the
//! frozen original as the page store: answer page requests first, and push
//! every other owed page in address order in the background, until the
//! destination reports that nothing is owed (`PagesDone`). Then the original
//! is killed: the residual dependency ends.
//!
//! Destination: restore lazily (private anonymous memory registered with a
//! userfaultfd that the process itself keeps), take a copy of that
//! userfaultfd, reply `Restored`, then serve faults: each fault on an owed
//! page becomes a `PageRequest`; pages the source never had are zero pages;
//! arriving pages are installed with UFFDIO_COPY. When nothing is owed the
//! registrations are removed, the process's own userfaultfd closed, and
//! `PagesDone` sent.
//!
//! Risk: between `Restored` and `PagesDone` the process depends on both
//! nodes. If the source disappears, the pages it owed are gone: the
//! destination kills the process and reports it lost. If the destination
//! daemon dies, the process keeps its userfaultfd, so faults wait instead of
//! reading zeros (memory is never silently corrupted), and a restarted
//! daemon takes the migration over ([`crate::takeover`]).

use crate::clock::{mark, mono_ns};
use crate::demand_paging::Stash;
use crate::error::{io_err, Result, StrategyError};
use crate::holder::{CaptureMode, Holder};
use crate::pre_copy::{
    compose_either_way, receive_rounds, send_round, subtract, write_ranges, FINAL_DIR, TRACKED_FILE,
};
use crate::stop_copy::{
    prespawn_restore, receive_image, receive_image_after, restore_from, send_image,
};
use crate::{Destination, Progress, Source, Strategy, StrategyKind};
use pmig_engine::dirty::{DirtyTracker, Scope};
use pmig_engine::image::ProcessImage;
use pmig_engine::lazy::LazyMemory;
use pmig_engine::pagestore::PageStore;
use pmig_engine::resources::memory::private_file_copies;
use pmig_engine::resources::memory::Backing;
use pmig_proto::{code, Msg};
use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

const PAGE: u64 = 4096;
/// Pages per background push message, at most.
const PUSH_PAGES: usize = 256;
/// The queue the push may build in the network, in time at the measured
/// rate: a fault's answer waits behind about this much push data (plus one
/// push message).
const PUSH_SLICE_NS: u64 = 2_000_000;
/// The push rate is measured over periods at least this long (and at least
/// two round trips).
const RATE_PERIOD_NS: u64 = 10_000_000;
/// Bounds of the push window (bytes of push data in the network).
const INITIAL_WINDOW: u64 = 16 << 10;
const MAX_WINDOW: u64 = 64 << 20;
/// A push message's bytes on the wire besides its pages (message and frame).
const PUSH_OVERHEAD: u64 = 64;

/// Keeps the background push from building a queue in the network.
///
/// A fault's answer travels in the same TCP stream as the push, so it waits
/// behind every push byte ahead of it: the data the kernel has not sent, the
/// data in flight, and the queue the push builds at the link's bottleneck
/// (a qdisc, a router). Left to TCP, that queue is as deep as the congestion
/// control lets it be (BBR's start-up, a tbf or router buffer full up to its
/// drops, and retransmissions ahead of the answer): 50–200 ms per fault were
/// measured on a 10 Mbit link. So the push only writes while the bytes the
/// kernel holds for the connection (unsent plus unacknowledged, read from
/// `TCP_INFO`) are below a window of about one bandwidth-delay product plus
/// [`PUSH_SLICE_NS`] of the measured rate; answers are written at once,
/// whatever the window. The window grows while the push is held back by it
/// and the round trip shows no queue, and otherwise follows the rate the
/// receiver acknowledges, so the link stays busy with a standing queue of
/// about [`PUSH_SLICE_NS`].
#[derive(Debug, Clone)]
struct PushWindow {
    /// Bytes of push data that may be in the network.
    window: u64,
    /// Pages per push message.
    chunk: usize,
    /// Start of the current measurement period: time, bytes acknowledged.
    period_start: u64,
    period_acked: u64,
    /// Whether the window held the push back during this period.
    limited: bool,
}

/// What the kernel reports about the connection (`TCP_INFO`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TcpState {
    /// Bytes written and not yet acknowledged (sent or not).
    pub(crate) in_network: u64,
    /// Of those, the bytes not sent yet (still in this socket's queue).
    unsent: u64,
    /// Bytes acknowledged since the connection began.
    acked: u64,
    /// Smallest and smoothed round trip, ns (0: not known yet).
    min_rtt_ns: u64,
    srtt_ns: u64,
    /// Reset or closed: nothing more will be acknowledged.
    pub(crate) closed: bool,
}

impl TcpState {
    /// The connection's bytes written so far (its stream offset).
    fn written(&self) -> u64 {
        self.acked + self.in_network
    }

    /// Whether the byte before stream offset `end` has left this socket
    /// and is not acknowledged yet: it is in the network, ahead of
    /// anything written from now on.
    fn on_the_wire(&self, end: u64) -> bool {
        end > self.acked && end <= self.written() - self.unsent
    }

    pub(crate) fn of(s: &std::net::TcpStream) -> Option<TcpState> {
        use std::os::fd::AsRawFd;
        // SAFETY: tcp_info is plain data; all-zero is a valid value.
        let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `ti`, which is
        // that large, and stores the length written in `len`.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut ti as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        // Kernels before 4.10 report no tcpi_min_rtt.
        let need = std::mem::offset_of!(libc::tcp_info, tcpi_min_rtt) + 4;
        if r != 0 || (len as usize) < need {
            return None;
        }
        // A connection reset or closed acknowledges nothing any more, yet
        // TIOCOUTQ still counts what was unacknowledged when it ended (a
        // caller waiting for it to drain would wait out its timeout).
        const TCP_TIME_WAIT: u8 = 6;
        const TCP_CLOSE: u8 = 7;
        if ti.tcpi_state == TCP_CLOSE || ti.tcpi_state == TCP_TIME_WAIT {
            return Some(TcpState {
                closed: true,
                ..TcpState::default()
            });
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ) on a TCP socket stores one int: the
        // bytes written and not yet acknowledged.
        if unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut queued) } != 0 {
            return None;
        }
        let mut unsent: libc::c_int = 0;
        // SAFETY: SIOCOUTQNSD on a TCP socket stores one int: the bytes
        // written and not sent yet. Unknown, all of them count as unsent.
        if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCOUTQNSD, &mut unsent) } != 0 {
            unsent = queued;
        }
        Some(TcpState {
            in_network: queued.max(0) as u64,
            unsent: unsent.clamp(0, queued.max(0)) as u64,
            acked: ti.tcpi_bytes_acked,
            min_rtt_ns: ti.tcpi_min_rtt as u64 * 1000,
            srtt_ns: ti.tcpi_rtt as u64 * 1000,
            closed: false,
        })
    }
}

/// The most bytes a lazily restored process's daemon lets wait, received
/// and not yet read, in its connection's receive queue while pages are
/// owed (see [`bound_receive_queue`]).
const RECEIVE_QUEUE: usize = 1 << 20;
/// [`RECEIVE_QUEUE`] only applies to connections whose shortest round trip
/// is at most this: beyond it, the bound could hold the push below the
/// link's rate, and the round trip dominates a fault's wait anyway.
const RECEIVE_QUEUE_MAX_RTT_NS: u64 = 1_000_000;

/// Installs the pages of a `PageData` or `PageZeros` (`inc`, whose
/// [`Incoming::pages`] gave `addr` and `data`) that are still owed: zeros
/// as the zero page ([`LazyMemory::install_zeros`]), data as
/// [`install_filled`] does. Every receiver of pages into a lazily
/// restored or held process (stop-copy's, post-copy's push and answers)
/// goes through here.
pub(crate) fn install_pages(
    lm: &LazyMemory,
    inc: &pmig_proto::blocking::Incoming,
    addr: u64,
    data: &[u8],
) -> pmig_engine::Result<u64> {
    if inc.is_zeros() {
        lm.install_zeros(addr, data)
    } else {
        install_filled(lm, addr, data)
    }
}

/// Installs a long run of pages nothing waits for yet, read from a local
/// store or sent as data by a peer that does not send `PageZeros`: each run
/// of pages that hold only zeros as the zero page
/// ([`LazyMemory::install_zeros`]), the rest in pieces
/// ([`LazyMemory::install_bulk`]). Returns the pages installed.
pub(crate) fn install_filled(lm: &LazyMemory, addr: u64, data: &[u8]) -> pmig_engine::Result<u64> {
    let pg = PAGE as usize;
    let zero = |i: usize| pmig_proto::msg::is_zero(&data[i * pg..(i + 1) * pg]);
    let n = data.len() / pg;
    let mut installed = 0;
    let mut i = 0;
    while i < n {
        let z = zero(i);
        let mut j = i + 1;
        while j < n && zero(j) == z {
            j += 1;
        }
        let (at, run) = (addr + (i * pg) as u64, &data[i * pg..j * pg]);
        installed += if z {
            lm.install_zeros(at, run)?
        } else {
            lm.install_bulk(at, run)?
        };
        i = j;
    }
    Ok(installed)
}

/// Bounds the receive queue of the connection a lazily restored process's
/// pages arrive on. A fault's answer is read after every push byte ahead of
/// it, and the source's [`PushWindow`] only bounds the bytes not yet
/// acknowledged: once this kernel has acknowledged them, they wait in the
/// receive queue, which autotuning lets grow to tens of MB whenever
/// installing is slower than the link (2.2 MB median, 10 MB at most, and
/// faults waiting up to 37 ms, were measured on the local unlimited link).
/// A fixed receive buffer turns that queue into data the source has not
/// had acknowledged, which its window counts. Set once, before the push
/// starts; on a long path (or without `TCP_INFO`) autotuning is left alone.
pub(crate) fn bound_receive_queue(s: &std::net::TcpStream) {
    let Some(t) = TcpState::of(s) else { return };
    if t.min_rtt_ns == 0 || t.min_rtt_ns > RECEIVE_QUEUE_MAX_RTT_NS {
        return;
    }
    if let Err(e) =
        nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::RcvBuf, &RECEIVE_QUEUE)
    {
        tracing::warn!("cannot bound the connection's receive queue: {e}");
    }
}

impl PushWindow {
    fn new(now: u64, acked: u64) -> PushWindow {
        PushWindow {
            window: INITIAL_WINDOW,
            chunk: (INITIAL_WINDOW / 2 / PAGE) as usize,
            period_start: now,
            period_acked: acked,
            limited: false,
        }
    }

    /// Pages in the next push message.
    fn chunk(&self) -> usize {
        self.chunk
    }

    /// Whether a push message may be written now, with `in_network` bytes
    /// in the network. Remembers a refusal (the window limited the push).
    fn may_send(&mut self, in_network: u64) -> bool {
        let ok = in_network < self.window;
        self.limited |= !ok;
        ok
    }

    /// How long to wait before looking again, when [`Self::may_send`]
    /// refused: about the time the excess takes to drain at the rate the
    /// window implies, within [20 µs, 1 ms].
    fn wait_ns(&self, in_network: u64, srtt_ns: u64) -> u64 {
        let excess = in_network.saturating_sub(self.window) + 1;
        let per = PUSH_SLICE_NS + srtt_ns;
        let ns = (excess as u128 * per as u128 / self.window.max(1) as u128) as u64;
        ns.clamp(20_000, 1_000_000)
    }

    /// Takes a sample of the connection at `now`; at the end of each period,
    /// resizes the window and the push messages.
    fn update(&mut self, now: u64, t: &TcpState) {
        let dt = now.saturating_sub(self.period_start);
        if dt < RATE_PERIOD_NS.max(2 * t.srtt_ns) {
            return;
        }
        let acked = t.acked.saturating_sub(self.period_acked);
        let rate = acked as f64 / dt as f64; // bytes per ns
        let min_rtt = if t.min_rtt_ns > 0 {
            t.min_rtt_ns
        } else {
            t.srtt_ns
        };
        // The link's bandwidth-delay product plus the queue allowed.
        let target = (rate * (min_rtt + PUSH_SLICE_NS) as f64) as u64;
        let queue_ns = t.srtt_ns.saturating_sub(min_rtt);
        let mut window = if self.limited && queue_ns < PUSH_SLICE_NS / 2 {
            // Held back by the window and no queue yet: the link may have
            // room for more.
            target.max(self.window + self.window / 4)
        } else {
            target
        };
        let chunk = ((rate * PUSH_SLICE_NS as f64) as u64 / PAGE).clamp(1, PUSH_PAGES as u64);
        // At least one push message must fit.
        window = window.clamp(chunk * PAGE + PUSH_OVERHEAD, MAX_WINDOW);
        self.window = window;
        self.chunk = chunk as usize;
        self.period_start = now;
        self.period_acked = t.acked;
        self.limited = false;
    }
}

/// The pages the push still owes, in address order, and where it goes
/// next. After an answer the push continues right after the page asked for
/// (a program that faulted on a page mostly needs the pages after it next:
/// arrays walked in order, rows of a matrix), then on to the end and around
/// to the first page still unsent. Every page is sent once: answered pages
/// are not pushed again, and a page already pushed is not answered again
/// (the pushed copy is ahead in the same stream).
#[derive(Debug)]
struct PushOrder {
    pages: Vec<u64>,
    sent: Vec<bool>,
    /// For a pushed page, the push connection's stream offset at the end of
    /// the message that carried it (0: not pushed, or not known).
    pushed_end: Vec<u64>,
    left: usize,
    cursor: usize,
}

impl PushOrder {
    /// `pages` sorted, without duplicates.
    fn new(pages: Vec<u64>) -> PushOrder {
        let n = pages.len();
        PushOrder {
            pages,
            sent: vec![false; n],
            pushed_end: vec![0; n],
            left: n,
            cursor: 0,
        }
    }

    fn is_done(&self) -> bool {
        self.left == 0
    }

    /// Page `page` was asked for: whether to answer it (it is not a pushed
    /// page). Marks it sent and moves the push to the page after it.
    fn answer(&mut self, page: u64) -> bool {
        match self.pages.binary_search(&page) {
            Ok(i) => {
                self.cursor = i + 1;
                if self.sent[i] {
                    return false;
                }
                self.sent[i] = true;
                self.left -= 1;
                true
            }
            // Not one of the pushed pages (or nothing is pushed): answer.
            Err(_) => true,
        }
    }

    /// The run of `n` pages from `start` (from [`Self::next_run`]) was
    /// pushed in a message ending at stream offset `end`.
    fn pushed(&mut self, start: u64, n: usize, end: u64) {
        if let Ok(i) = self.pages.binary_search(&start) {
            let k = n.min(self.pages.len() - i);
            self.pushed_end[i..i + k].fill(end);
        }
    }

    /// Where the pushed copy of `page` ends in the push connection's
    /// stream, if it was pushed.
    fn pushed_end(&self, page: u64) -> Option<u64> {
        let i = self.pages.binary_search(&page).ok()?;
        (self.sent[i] && self.pushed_end[i] > 0).then_some(self.pushed_end[i])
    }

    /// Page `page` is about to be sent apart from the push (a predicted
    /// page): whether it is still unsent (or not one of the pushed pages).
    /// Marks it sent; the push goes on where it was.
    fn claim(&mut self, page: u64) -> bool {
        match self.pages.binary_search(&page) {
            Ok(i) if self.sent[i] => false,
            Ok(i) => {
                self.sent[i] = true;
                self.left -= 1;
                true
            }
            Err(_) => true,
        }
    }

    /// Page `page` went out already (an answer sent before this order was
    /// known): it is not pushed.
    fn mark_sent(&mut self, page: u64) {
        if let Ok(i) = self.pages.binary_search(&page) {
            if !self.sent[i] {
                self.sent[i] = true;
                self.left -= 1;
            }
        }
    }

    /// The next run of at most `max` consecutive unsent pages, marked sent:
    /// (first page, count).
    fn next_run(&mut self, max: usize) -> Option<(u64, usize)> {
        if self.left == 0 {
            return None;
        }
        let n = self.pages.len();
        let mut i = self.cursor % n;
        while self.sent[i] {
            i = (i + 1) % n;
        }
        let start = self.pages[i];
        let mut k = 0;
        while k < max
            && i + k < n
            && !self.sent[i + k]
            && self.pages[i + k] == start + k as u64 * PAGE
        {
            self.sent[i + k] = true;
            k += 1;
        }
        self.left -= k;
        self.cursor = i + k;
        Some((start, k))
    }
}

/// Page ranges as (start, length).
type Ranges = Vec<(u64, u64)>;

/// What the source owes after a lazy handover.
#[derive(Debug, Clone)]
pub(crate) enum Owing {
    /// Known at the stop: these page ranges.
    Known(Ranges),
    /// The image listed writable private anonymous memory as wholly owed
    /// (`claimed`, [`CaptureMode::HandoverDeferred`]), so that the stop
    /// need not scan it. Once the process runs at the destination the
    /// source scans its frozen copy (`found`: the pages it has), tells the
    /// destination which claimed pages it never had (`NotOwed`), and
    /// pushes the rest.
    Deferred {
        claimed: Ranges,
        found: Option<Ranges>,
    },
}

impl Owing {
    /// Of a handover image made with `mode`.
    pub(crate) fn of(pi: &ProcessImage, mode: &CaptureMode) -> Owing {
        let claimed = owed_of(pi).0;
        if *mode == CaptureMode::HandoverDeferred {
            Owing::Deferred {
                claimed,
                found: None,
            }
        } else {
            Owing::Known(claimed)
        }
    }
}

/// Sends the claimed pages the source does not have as `NotOwed`; returns
/// the bytes sent.
fn send_not_owed(
    tx: &mut pmig_proto::blocking::Sender<std::net::TcpStream>,
    id: u64,
    claimed: &[(u64, u64)],
    found: &[(u64, u64)],
) -> Result<u64> {
    let none = pmig_engine::resources::memory::subtract_ranges(claimed, found);
    // At least one message, the last, even when the list is empty.
    let mut chunks: Vec<&[(u64, u64)]> = none.chunks(pmig_proto::msg::MAX_PAGE_REQUEST).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let n = chunks.len();
    let mut bytes = 0;
    for (i, c) in chunks.into_iter().enumerate() {
        tx.send(&Msg::NotOwed {
            id,
            ranges: c.to_vec(),
            last: i + 1 == n,
        })?;
        bytes += 32 + 16 * c.len() as u64;
    }
    Ok(bytes)
}

/// Owed page ranges and registered ranges of a (lazy) image.
pub(crate) fn owed_of(pi: &ProcessImage) -> (Ranges, Ranges) {
    let anon = pi.memory.vmas.iter().filter(|v| v.backing == Backing::Anon);
    let owed = anon.clone().flat_map(|v| v.owed()).collect();
    let registered = anon
        .filter(|v| v.owes_pages())
        .map(|v| (v.start, v.len()))
        .collect();
    (owed, registered)
}

pub(crate) fn read_image(dir: &std::path::Path) -> Result<ProcessImage> {
    let img = pmig_image::Image::open(dir).map_err(|e| StrategyError::Other(e.to_string()))?;
    ProcessImage::read(&img).map_err(|e| StrategyError::Other(e.to_string()))
}

/// `post-copy`, and with AMPoM's prefetching on every fault, `ampom`: the
/// same exchange, only the destination's fault handling differs.
#[derive(Default)]
pub struct PostCopy {
    pub prefetch: bool,
    /// The private copies of file mappings sent while the process ran.
    copies: Option<FileCopies>,
}

impl std::fmt::Debug for PostCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostCopy")
            .field("prefetch", &self.prefetch)
            .field("copies_sent", &self.copies.is_some())
            .finish()
    }
}

impl PostCopy {
    pub fn ampom() -> PostCopy {
        PostCopy {
            prefetch: true,
            copies: None,
        }
    }
}

/// Private copies of file mappings (a library's written data: 1.3 MiB of
/// python3's 2 MiB at the stop) are not memory the destination can fault in
/// through a userfaultfd, so without this they go with the state, and the
/// stop waits for them. Instead they are sent while the process runs, as a
/// round of `PageData` (protocol 5), with their mappings write-tracked
/// ([`Scope::PrivateFiles`]); the stop then carries only those written since.
pub(crate) struct FileCopies {
    tracker: DirtyTracker,
    /// Pages the round could not read: the stop saves them whole.
    missed: Vec<(u64, u64)>,
}

impl FileCopies {
    /// Tracks the private file mappings of the process and sends their
    /// private copies. None when there is nothing to send or the
    /// tracking cannot be set up (the stop then saves them, as before).
    fn send(m: &mut Source) -> Result<Option<FileCopies>> {
        let tracker = match DirtyTracker::attach_scoped(m.pid, Scope::PrivateFiles) {
            Ok(t) => t,
            Err(e) => {
                tracing::info!(
                    "process {}: private copies of file mappings go with the state: {e}",
                    m.pid
                );
                return Ok(None);
            }
        };
        let copies = private_file_copies(m.pid, &tracker.tracked())?;
        if copies.is_empty() {
            return Ok(None);
        }
        let mut missed = Vec::new();
        let sent = send_round(m, 0, &copies, Some(&tracker), None, &mut missed)?;
        tracing::info!(
            "process {}: {} KiB of private copies of file mappings sent before the stop",
            m.pid,
            sent >> 10
        );
        Ok(Some(FileCopies { tracker, missed }))
    }

    /// The preparation of post-copy, ampom and demand-paging: [`Self::send`],
    /// with its error told as such. On failure nothing is kept: dropping
    /// the tracker removes the write protection.
    pub(crate) fn prepare(m: &mut Source) -> Result<Option<FileCopies>> {
        FileCopies::send(m).map_err(|e| StrategyError::During {
            what: "sending the private copies of file mappings (write tracking removed)".into(),
            source: Box::new(e),
        })
    }

    /// The whole preparation of the lazy strategies whose stop is a
    /// handover capture (post-copy, ampom, demand-paging, freeze-free):
    /// [`Self::prepare`], then the skeleton ([`crate::skeleton::offer`]),
    /// captured as the stop will be.
    pub(crate) fn prepare_with_skeleton(m: &mut Source) -> Result<Option<FileCopies>> {
        let copies = FileCopies::prepare(m)?;
        let mode = match &copies {
            Some(c) => c.mode(m)?,
            None => HANDOVER,
        };
        crate::skeleton::offer(m, &mode)?;
        Ok(copies)
    }

    /// Their handover: the stop saves, of the tracked mappings, the pages
    /// written since the copies went (or everything, without copies);
    /// captured or failed (and the process resumes), the tracking has then
    /// served its purpose. A failed handover removes it at once, before
    /// the process resumes. A handover that succeeded returns the copies,
    /// for the caller to drop once nothing is read from the frozen process
    /// any more: removing the tracking takes that process's memory lock
    /// for milliseconds (1.9 ms for a JVM's), which the source's first
    /// answers to faults would wait for.
    pub(crate) fn handover(
        copies: Option<FileCopies>,
        m: &mut Source,
    ) -> Result<Option<FileCopies>> {
        let mode = match &copies {
            Some(c) => c.mode(m),
            None => Ok(HANDOVER),
        };
        mode.and_then(|mode| handover_lazy(m, &mode))?;
        Ok(copies)
    }

    /// The holder's mode: the tracked ranges whose pages were sent go to a
    /// file in the staging directory.
    fn mode(&self, m: &Source) -> Result<CaptureMode> {
        std::fs::create_dir_all(&m.staging)
            .map_err(io_err(format!("create {}", m.staging.display())))?;
        let list = m.staging.join(TRACKED_FILE);
        write_ranges(&list, &subtract(&self.tracker.tracked(), &self.missed))?;
        Ok(CaptureMode::HandoverDeferredWritten(list))
    }
}

impl Strategy for PostCopy {
    fn kind(&self) -> StrategyKind {
        if self.prefetch {
            StrategyKind::Ampom
        } else {
            StrategyKind::PostCopy
        }
    }

    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        self.copies = None;
        self.copies = FileCopies::prepare_with_skeleton(m)?;
        Ok(())
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        self.copies = FileCopies::handover(self.copies.take(), m)?;
        Ok(())
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        let r =
            read_image(&m.staging).and_then(|pi| serve_source(m, Owing::of(&pi, &HANDOVER), None));
        // Their tracking goes only now (see `FileCopies::handover`).
        self.copies = None;
        r
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        receive_with_copies(d)?;
        destination_lazy(d, self.prefetch, false, true, None, None)
    }
}

/// Destination of post-copy and ampom: the image of the stop, into the
/// staging directory, and before it the private copies of file mappings
/// the source may have sent while the process ran ([`FileCopies`]): then the
/// image of the stop goes aside and the image to restore is composed from
/// both.
pub(crate) fn receive_with_copies(d: &mut Destination) -> Result<()> {
    let staging = d.staging.clone();
    prespawn_restore(d, &staging, true);
    let mut first = d.ch.recv_with()?;
    let mut store = None;
    if !matches!(first.msg, Msg::ImageFile { .. } | Msg::Skeleton { .. }) {
        let mut s = PageStore::create(&staging)?;
        first = receive_rounds(d, &mut s, Some(first), false)?;
        store = Some(s);
    }
    if matches!(first.msg, Msg::Skeleton { .. }) {
        // What runs is the skeleton, or the image of the stop restored
        // from another directory than the one the helper waits for.
        drop(d.restorer.take());
        let copies = match store {
            Some(s) => crate::skeleton::Copies::Store(Box::new(s)),
            None => crate::skeleton::Copies::None,
        };
        let offered = crate::skeleton::receive(d, copies)?;
        d.skeleton = Some(offered);
        let dir = crate::skeleton::final_dir(d);
        std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        receive_image_after(d, &dir, None)?;
        mark("dst: image received");
        return Ok(());
    }
    let Some(store) = store else {
        receive_image_after(d, &staging, Some(first))?;
        mark("dst: image received");
        return Ok(());
    };
    let dir = staging.join(FINAL_DIR);
    std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
    receive_image_after(d, &dir, Some(first))?;
    mark("dst: image received");
    let composed = compose_either_way(store, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = composed {
        return Err(crate::pre_copy::cannot_compose(d, e));
    }
    mark("dst: image composed");
    d.composed = Some(staging);
    Ok(())
}

/// CPU share of `pid` since the last call (AMPoM's C_i).
struct CpuShare {
    pid: i32,
    last: Option<(std::time::Instant, u64)>,
}

impl CpuShare {
    fn ticks(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let f: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    }

    fn sample(&mut self) -> f64 {
        let now = std::time::Instant::now();
        let t = self.ticks().unwrap_or(0);
        let share = match self.last {
            // Ticks are 10 ms: over short spans assume the process is busy.
            Some((t0, c0)) if now.duration_since(t0).as_secs_f64() >= 0.05 => {
                let wall = now.duration_since(t0).as_secs_f64();
                ((t.saturating_sub(c0)) as f64 * 0.01 / wall).clamp(0.01, 1.0)
            }
            Some(_) => return 1.0,
            None => 1.0,
        };
        self.last = Some((now, t));
        share
    }
}

/// How post-copy and ampom capture at the stop: the handover pages only, and
/// writable private anonymous memory left unscanned ([`Owing::Deferred`]).
const HANDOVER: CaptureMode = CaptureMode::HandoverDeferred;

/// Source: freeze, capture the state with the handover pages only (`mode`:
/// [`CaptureMode::Handover`] or [`CaptureMode::HandoverDeferred`]), send
/// it, wait until the destination runs the process.
pub(crate) fn handover_lazy(m: &mut Source, mode: &CaptureMode) -> Result<()> {
    std::fs::create_dir_all(&m.staging)
        .map_err(io_err(format!("create {}", m.staging.display())))?;
    let staging = m.staging.clone();
    // A holder primed for a skeleton captures in its own mode (the same).
    let holder = match m.primed.take() {
        Some(p) => p.go()?,
        None => Holder::start_with(m.host, m.pid, m.started, &staging, mode)?,
    };
    mark("src: holder reported the capture");
    m.stopped_ns = Some(holder.captured.frozen_ns);
    m.pages_sent = holder.captured.page_bytes / PAGE;
    m.holder = Some(holder);
    send_image(m, &staging)?;
    mark("src: image sent");
    crate::skeleton::outcome(m)?;
    m.await_restored()?;
    mark("src: Restored received");
    Ok(())
}

/// Source, after the handover: serve requests first, push the rest, until
/// `PagesDone`; with a `stash` (demand-paging: the owed pages copied aside,
/// the original already gone), serve requests from it and push nothing. On
/// failure the process is lost (the destination copy has run): the frozen
/// original is killed rather than resumed.
pub(crate) fn serve_source(m: &mut Source, mut owing: Owing, stash: Option<&Stash>) -> Result<()> {
    if m.host.hooks().hold_answers {
        m.hold_for_test("release-answers", "the pages");
    }
    let mut r = serve_source_inner(m, &mut owing, stash);
    // The destination vanished: its daemon may come back and take over.
    for _ in 0..8 {
        match &r {
            Err(StrategyError::Proto(e)) if e.is_disconnect() => {}
            _ => break,
        }
        tracing::warn!(
            "lost {} during the post-copy of {} ({}); waiting up to {:?} for its daemon to take over",
            m.peer,
            m.pid,
            r.as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
            crate::takeover::RESUME_GRACE
        );
        let Some(ch) = m
            .host
            .await_resume(m.id, &m.peer, crate::takeover::RESUME_GRACE)
        else {
            break;
        };
        tracing::info!(
            "{} took migration {} over; serving its pages again",
            m.peer,
            m.id
        );
        m.ch = ch;
        r = serve_source_inner(m, &mut owing, stash);
    }
    if let Err(e) = &r {
        let peer = m.peer.clone();
        return Err(m.lost(format!(
            "the process ran on {peer} while pages were still owed, and {e}: it is lost"
        )));
    }
    r
}

fn serve_source_inner(m: &mut Source, owing: &mut Owing, stash: Option<&Stash>) -> Result<()> {
    // The pages to push, if known yet, and the claimed ones to narrow down.
    let (known, claimed) = match &*owing {
        Owing::Known(r) => (Some(r.clone()), None),
        Owing::Deferred { claimed, found } => (found.clone(), Some(claimed.clone())),
    };
    // The pages of ranges, counted and listed (one per page started).
    let count = |r: &[(u64, u64)]| -> u64 { r.iter().map(|x| x.1.div_ceil(PAGE)).sum() };
    let pages_of = |r: &[(u64, u64)]| -> Vec<u64> {
        let mut v = Vec::with_capacity(count(r) as usize);
        v.extend(
            r.iter()
                .flat_map(|&(a, l)| (a..a + l).step_by(PAGE as usize)),
        );
        v
    };
    let claimed_pages: u64 = claimed.iter().flatten().map(|r| r.1 / PAGE).sum();
    let mut total = known.as_deref().map(count).unwrap_or(0);
    m.residual = crate::Residual {
        what: match &known {
            Some(_) => format!("{total} pages of private memory"),
            None => format!("at most {claimed_pages} pages of private memory"),
        },
        node: Some(m.host.node().into()),
        until: "every page has moved (PagesDone)".into(),
    };
    // A long push must not trip the per-read timeout; the connection's own
    // failure ends it instead.
    m.set_timeout(None)?;
    let pid = m.pid;
    let id = m.id;
    // The push's order, and the pages answered before the scan below ended
    // (not pushed again).
    let push = Mutex::new(PushState {
        order: PushOrder::new(match (&known, stash) {
            (Some(r), None) => pages_of(r),
            _ => Vec::new(),
        }),
        tcp: None,
        acked_at_ns: 0,
        acked_rate: 0.0,
        rate_from: (0, 0),
        early: Vec::new(),
        scan_pending: known.is_none(),
    });
    let requests: Mutex<Requests> = Mutex::new(Requests::default());
    // Wakes the push loop and the answering thread when a request arrives,
    // the peer is done, or the answers' connection fails.
    let wake = Condvar::new();
    let done = AtomicBool::new(false);
    let failed: Mutex<Option<StrategyError>> = Mutex::new(None);
    let stats: Mutex<Option<(u64, u64, u64, u64)>> = Mutex::new(None);
    let waits: Mutex<Option<crate::report::FaultWaits>> = Mutex::new(None);
    let mut sent_bytes = 0u64;
    let mut sent_pages = 0u64;
    let mut answered = 0u64;
    // Requests not answered: the pushed copy was on its way.
    let mut left_to_push = 0u64;
    let progress = &mut m.progress;
    let stream =
        m.ch.stream()
            .try_clone()
            .map_err(io_err("clone the socket"))?;
    let mut window = TcpState::of(&stream).map(|t| PushWindow::new(mono_ns(), t.acked));
    if window.is_none() {
        tracing::warn!("no TCP_INFO on the connection: the push is not windowed, and faults may wait behind it");
    }
    // The destination's second connection, for the answers (protocol 7):
    // while it is up, requests are answered there, not in the push loop.
    let side = m.host.expect_answers(id, &m.peer);
    let side_up = AtomicBool::new(false);
    // The answers' connection failed (or the destination said so): answers
    // sent there may be lost, so every request is answered from now on,
    // even for a page already pushed or answered.
    let side_failed = AtomicBool::new(false);
    let side_stream: Mutex<Option<std::net::TcpStream>> = Mutex::new(None);
    let fail_after = m.host.hooks().answers_fail_after;
    let peer = m.peer.clone();
    // The scan's pages, with the push's order of them.
    let scanned: Mutex<Option<Result<(Ranges, PushOrder)>>> = Mutex::new(None);
    let scanning = AtomicBool::new(known.is_none() && stash.is_none());
    let mut found: Option<Ranges> = None;
    // Deferred and not scanned yet: the pages to push are not known (a
    // deferred migration taken over knows them from its record).
    let awaiting_scan = |found: &Option<Ranges>| known.is_none() && found.is_none();
    let mut not_owed_bytes = 0u64;
    let asked_on_side = AtomicU64::new(0);
    let read_pages = |addr: u64, b: &mut [u8]| -> Result<()> {
        let got = match stash {
            Some(st) => st.read(addr, b)?,
            None => pmig_engine::sys::process_vm_read(pid, addr, b)
                .map_err(|e| StrategyError::Other(e.to_string()))?,
        };
        if got != b.len() {
            return Err(StrategyError::Other(format!(
                "short read of the frozen process at {addr:#x}"
            )));
        }
        Ok(())
    };
    let (tx, rx) = m.ch.halves();
    let r = std::thread::scope(|s| -> Result<()> {
        if let (Some(c), Some(f)) = (&claimed, &known) {
            // Again (a takeover): the destination may not have it all.
            not_owed_bytes += send_not_owed(tx, id, c, f)?;
        }
        let answering = side.map(|side| {
            let a = Answering {
                id,
                side,
                requests: &requests,
                wake: &wake,
                done: &done,
                up: &side_up,
                failed: &side_failed,
                stream: &side_stream,
                push: &push,
                read: &read_pages,
                asked_here: &asked_on_side,
                fail_after,
            };
            s.spawn(move || a.run())
        });
        s.spawn(|| {
            favour_this_thread();
            loop {
                match rx.recv() {
                    Ok(Msg::PageRequest { id: i, pages }) if i == id => {
                        requests.lock().unwrap().add_faults(pages);
                        wake.notify_all();
                    }
                    Ok(Msg::PrefetchRequest { id: i, pages }) if i == id => {
                        let mut q = requests.lock().unwrap();
                        let up = side_up.load(Ordering::Acquire);
                        q.add_predicted(pages, up);
                        wake.notify_all();
                    }
                    Ok(Msg::Answers { id: i }) if i == id => {
                        // The destination lost the answers' connection:
                        // answer here from now on (the requests it asks
                        // again follow on this connection).
                        let mut q = requests.lock().unwrap();
                        side_up.store(false, Ordering::Release);
                        side_failed.store(true, Ordering::Release);
                        q.side_down();
                        if let Some(st) = side_stream.lock().unwrap().take() {
                            let _ = st.shutdown(std::net::Shutdown::Both);
                        }
                        tracing::warn!(
                            "{peer} lost the answers' connection of migration {id}; answering with the push"
                        );
                        wake.notify_all();
                    }
                    Ok(Msg::FaultWaits {
                        id: i,
                        max_us,
                        total_us,
                        hist,
                    }) if i == id => {
                        *waits.lock().unwrap() =
                            Some(crate::report::FaultWaits::from_us(max_us, total_us, hist));
                    }
                    Ok(Msg::PagesDone {
                        id: i,
                        installed,
                        remote_faults,
                        prefetched,
                        prefetch_hits,
                    }) if i == id => {
                        *stats.lock().unwrap() =
                            Some((installed, remote_faults, prefetched, prefetch_hits));
                        break;
                    }
                    Ok(other) => {
                        *failed.lock().unwrap() = Some(StrategyError::Other(format!(
                            "unexpected {} while serving pages",
                            other.kind()
                        )));
                        break;
                    }
                    Err(e) => {
                        *failed.lock().unwrap() = Some(e.into());
                        break;
                    }
                }
            }
            done.store(true, Ordering::Release);
            // Taking the lock orders this with the push loop's check of `done`.
            let _q = requests.lock().unwrap();
            wake.notify_all();
        });
        // Started after the threads that receive and answer requests: on
        // two CPUs shared with the resumed process, a thread started
        // after this scan got its first turn milliseconds later.
        if scanning.load(Ordering::Acquire) {
            let c = claimed.as_deref().unwrap_or(&[]);
            let (scanned, scanning, requests, wake) = (&scanned, &scanning, &requests, &wake);
            s.spawn(move || {
                // Work for the push, which waits for it: after the program
                // and the threads on a fault's path, as the push is.
                if let Err(e) = set_nice(this_tid(), PUSH_NICE) {
                    tracing::debug!("cannot lower the priority of the scan's thread: {e}");
                }
                let r = pmig_engine::resources::memory::populated_anon(pid, c)
                    .map_err(|e| StrategyError::Other(format!("scan the frozen process: {e}")));
                mark("src: owed pages scanned");
                // Built here, not in the push loop, which until the
                // answers' connection is up also answers faults; nor under
                // the push's lock, which the answering thread takes for
                // every answer (at 4 GiB the order holds a million pages,
                // and building it under the lock made a fault wait 29 ms).
                let r = r.map(|f| {
                    let order = PushOrder::new(pages_of(&f));
                    (f, order)
                });
                mark("src: push order built");
                *scanned.lock().unwrap() = Some(r);
                let _q = requests.lock().unwrap();
                scanning.store(false, Ordering::Release);
                wake.notify_all();
            });
        }
        let mut buf = vec![0u8; PUSH_PAGES * PAGE as usize];
        type Tx = pmig_proto::blocking::Sender<std::net::TcpStream>;
        let mut read_and_send = |tx: &mut Tx, addr: u64, n: usize, buf: &mut [u8]| -> Result<()> {
            let b = &mut buf[..n * PAGE as usize];
            read_pages(addr, b)?;
            sent_bytes += tx.send_pages(id, addr, b)?.wire();
            sent_pages += n as u64;
            Ok(())
        };
        // On failure the connection is shut down, which also ends the
        // thread reading from it (the scope waits for it).
        let served = (|| -> Result<()> {
            let mut background = Background::new();
            loop {
                // Idle: the push's pages are not known yet.
                background.set_idle(side_up.load(Ordering::Acquire), awaiting_scan(&found));
                // The scan of the frozen copy has ended: tell the destination
                // what it need not wait for, and push the rest.
                if awaiting_scan(&found) && !scanning.load(Ordering::Acquire) {
                    if let Some(r) = scanned.lock().unwrap().take() {
                        let (f, order) = r?;
                        not_owed_bytes +=
                            send_not_owed(tx, id, claimed.as_deref().unwrap_or(&[]), &f)?;
                        let mut p = push.lock().unwrap();
                        p.order = order;
                        let early = std::mem::take(&mut p.early);
                        for pg in early {
                            p.order.mark_sent(pg);
                        }
                        p.scan_pending = false;
                        total = p.order.pages.len() as u64;
                        found = Some(f);
                    }
                }
                // Faults go ahead of the push, whatever the window (unless
                // the answering thread takes them).
                let req = {
                    let mut q = requests.lock().unwrap();
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                    let scan_ended = awaiting_scan(&found) && !scanning.load(Ordering::Acquire);
                    let side = side_up.load(Ordering::Acquire);
                    let push_done = push.lock().unwrap().order.is_done();
                    if (q.faults.is_empty() || side) && push_done && !scan_ended {
                        // Nothing to push: wait for a request.
                        let (mut q2, _) = wake.wait_timeout(q, Duration::from_millis(50)).unwrap();
                        if side_up.load(Ordering::Acquire) {
                            None
                        } else {
                            q2.faults.pop_front()
                        }
                    } else if side {
                        None
                    } else {
                        q.faults.pop_front()
                    }
                };
                if let Some(p) = req {
                    let answer = {
                        let mut ps = push.lock().unwrap();
                        let a = ps.order.answer(p);
                        if a && ps.scan_pending {
                            ps.early.push(p);
                        }
                        a || side_failed.load(Ordering::Acquire)
                    };
                    if answer {
                        read_and_send(&mut *tx, p, 1, &mut buf)?;
                        answered += 1;
                    }
                    continue;
                }
                if push.lock().unwrap().order.is_done() {
                    continue;
                }
                if let Some(w) = &mut window {
                    let Some(t) = TcpState::of(&stream) else {
                        window = None;
                        continue;
                    };
                    push.lock().unwrap().saw(t);
                    w.update(mono_ns(), &t);
                    if !w.may_send(t.in_network) {
                        let wait = Duration::from_nanos(w.wait_ns(t.in_network, t.srtt_ns));
                        let q = requests.lock().unwrap();
                        if (q.faults.is_empty() || side_up.load(Ordering::Acquire))
                            && !done.load(Ordering::Acquire)
                        {
                            let _ = wake.wait_timeout(q, wait).unwrap();
                        }
                        continue;
                    }
                }
                // The next run of consecutive pages, up to the window's chunk.
                let max = window.as_ref().map(|w| w.chunk()).unwrap_or(16);
                let (run, left) = {
                    let mut ps = push.lock().unwrap();
                    (ps.order.next_run(max), ps.order.left)
                };
                let Some((start, n)) = run else {
                    continue;
                };
                read_and_send(&mut *tx, start, n, &mut buf)?;
                if let Some(t) = TcpState::of(&stream) {
                    let mut ps = push.lock().unwrap();
                    ps.order.pushed(start, n, t.written());
                    ps.saw(t);
                }
                progress(Progress {
                    phase: "push",
                    done: total - left as u64,
                    total,
                });
            }
            Ok(())
        })();
        if served.is_err() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            // The answering thread waits for `done` too.
            done.store(true, Ordering::Release);
            let _q = requests.lock().unwrap();
            wake.notify_all();
        }
        if let Some(h) = answering {
            if let Ok((bytes, pages, n, left)) = h.join() {
                sent_bytes += bytes;
                sent_pages += pages;
                answered += n;
                left_to_push += left;
            }
        }
        served
    });
    m.host.forget_answers(id);
    r?;
    m.count(sent_bytes + not_owed_bytes);
    m.pages_sent += sent_pages;
    if let (Owing::Deferred { found: f, .. }, Some(got)) = (&mut *owing, found) {
        m.residual.what = format!("{total} pages of private memory");
        *f = Some(got);
    }
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(e);
    }
    if let Some((_installed, faults, prefetched, hits)) = *stats.lock().unwrap() {
        m.remote_faults = faults;
        m.prefetched_pages = prefetched;
        m.prefetch_hits = hits;
    }
    if let Some(w) = waits.lock().unwrap().take() {
        m.fault_waits = Some(w);
    }
    let (predicted, predicted_sent) = {
        let q = requests.lock().unwrap();
        (q.predicted_asked, q.predicted_answered)
    };
    tracing::info!("post-copy of {pid}: {sent_pages} pages sent ({answered} on request, {} requests read on the answers' connection, {left_to_push} requests left to the pushed copy on its way, {predicted} pages asked for as predictions, {predicted_sent} of them answered after the faults); nothing is owed any more", asked_on_side.load(Ordering::Relaxed));
    m.residual.until = format!(
        "{:.1} ms after the resume (all pages moved)",
        (mono_ns().saturating_sub(m.resumed_ns.unwrap_or(0))) as f64 / 1e6
    );
    m.commit()
}

/// The pages the destination asked for and the source has not answered
/// yet (under one lock, with the condition variable that wakes the threads
/// that answer them).
#[derive(Debug, Default)]
struct Requests {
    /// Pages faults wait for (`PageRequest`), in the order asked.
    faults: VecDeque<u64>,
    /// Pages predicted (`PrefetchRequest`, version 22), answered on the
    /// answers' connection when no fault waits, and only while few of them
    /// are on their way there: a fault's answer written after them waits
    /// behind them, on the link and in its queue.
    predicted: VecDeque<u64>,
    /// Predicted pages written on the answers' connection: a fault's
    /// request for one is not answered again, the copy being ahead of any
    /// answer on that connection.
    predicted_sent: HashSet<u64>,
    /// Pages asked for and not answered, a copy being on its way (pushed,
    /// or sent as a prediction): one asked for again is answered.
    skipped: HashSet<u64>,
    /// Predicted pages asked for (`PrefetchRequest`), and answered as
    /// predictions on the answers' connection, in all.
    predicted_asked: u64,
    predicted_answered: u64,
}

impl Requests {
    /// `pages` asked for by a `PageRequest`.
    fn add_faults(&mut self, pages: Vec<u64>) {
        if !self.predicted.is_empty() {
            // Asked again for a fault: answered as one, not as a prediction.
            let asked: HashSet<u64> = pages.iter().copied().collect();
            self.predicted.retain(|p| !asked.contains(p));
        }
        self.faults.extend(pages);
    }

    /// `pages` asked for by a `PrefetchRequest`: predictions while the
    /// answers' connection is `up`, else answered as faults are (the push
    /// loop answers those on the first connection).
    fn add_predicted(&mut self, pages: Vec<u64>, up: bool) {
        self.predicted_asked += pages.len() as u64;
        if up {
            self.predicted.extend(pages);
        } else {
            self.faults.extend(pages);
        }
    }

    /// The answers' connection is down: every prediction not answered is
    /// answered as a fault, and those sent there may be lost.
    fn side_down(&mut self) {
        let p = std::mem::take(&mut self.predicted);
        self.faults.extend(p);
        self.predicted_sent.clear();
        self.skipped.clear();
    }
}

/// The push's state, shared by the push loop and the answering thread.
struct PushState {
    order: PushOrder,
    /// What the push loop last read of its socket (after its last message).
    tcp: Option<TcpState>,
    /// When the push loop last saw more of the push acknowledged (mono ns).
    acked_at_ns: u64,
    /// The push's acknowledged rate (bytes per ns) over its last period of
    /// at least [`RATE_PERIOD_NS`], and where that period started (mono
    /// ns, bytes acknowledged).
    acked_rate: f64,
    rate_from: (u64, u64),
    /// Pages answered while the pages to push were not known yet.
    early: Vec<u64>,
    /// The scan that tells which pages to push has not ended.
    scan_pending: bool,
}

impl PushState {
    /// The push loop read its socket: `t`.
    fn saw(&mut self, t: TcpState) {
        self.saw_at(t, mono_ns());
    }

    fn saw_at(&mut self, t: TcpState, now: u64) {
        if self.tcp.is_none_or(|old| t.acked > old.acked) {
            self.acked_at_ns = now;
        }
        if self.tcp.is_none() {
            self.rate_from = (now, t.acked);
        }
        let (t0, a0) = self.rate_from;
        if now.saturating_sub(t0) >= RATE_PERIOD_NS {
            self.acked_rate = t.acked.saturating_sub(a0) as f64 / (now - t0) as f64;
            self.rate_from = (now, t.acked);
        }
        self.tcp = Some(t);
    }

    /// Whether a pushed copy ending at stream offset `end`, on the wire,
    /// will likely be acknowledged soon: the bytes up to it, at the rate
    /// the push was acknowledged over its last period, take less than two
    /// round trips (at least [`PUSH_SOON_NS`]), and something of the push
    /// was acknowledged within twice that. A link's queue that serves the
    /// answers first can starve the push while a program faults all the
    /// time.
    fn arrives_soon(&self, end: u64, now: u64) -> bool {
        let Some(t) = self.tcp else {
            return false;
        };
        let soon = (2 * t.srtt_ns).max(PUSH_SOON_NS);
        if now.saturating_sub(self.acked_at_ns) >= 2 * soon || self.acked_rate <= 0.0 {
            return false;
        }
        (end.saturating_sub(t.acked) as f64 / self.acked_rate) < soon as f64
    }
}

/// A pushed copy is left to arrive when it should be acknowledged within
/// this long (or two round trips, if longer).
const PUSH_SOON_NS: u64 = 5_000_000;

/// The nice value of the threads on a fault's path.
const FAULT_NICE: i32 = -10;

/// The threads on a fault's path (asking, reading requests, answering,
/// installing answers) run at a higher priority than the push and the
/// workload they share the CPUs with: a fault's wait is mostly their wake-up.
fn favour_this_thread() {
    if let Err(e) = set_nice(this_tid(), FAULT_NICE) {
        tracing::debug!("cannot raise the priority of a fault thread: {e}");
    }
}

fn this_tid() -> libc::id_t {
    nix::unistd::gettid().as_raw() as libc::id_t
}

/// Sets the nice value of thread `tid` of this process. Raising it needs
/// CAP_SYS_NICE (or RLIMIT_NICE), which a root daemon has.
fn set_nice(tid: libc::id_t, n: i32) -> std::io::Result<()> {
    // SAFETY: setpriority takes no pointers; with PRIO_PROCESS and a thread
    // id it changes that thread only.
    match unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, n) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The nice value of the push's thread at both ends (see [`Background`]).
const PUSH_NICE: i32 = 10;

/// The push's thread at [`PUSH_NICE`] while faults are answered apart
/// from it, or at its own nice value (see [`Background::set`]).
///
/// The background push, at the source and at the destination, goes after
/// the migrated program and after the threads on a fault's path (nice
/// −10) whenever they want the same CPU. The program stalls only when it
/// faults; when the push competes with it and with the fault path for a
/// CPU, each of its faults also waits for the push's turn to end, and the
/// program for its own after each. The locks the push shares with the
/// fault path are held briefly (the lazy memory's a piece of
/// [`pmig_engine::lazy::BULK_PIECE`] pages at a time, then handed over),
/// but a push preempted while it holds one holds up a fault until it runs
/// again (which may be how one fault of the bench's at 4 GiB waited 35 ms,
/// where the others waited 15 ms at most). On the 2-vCPU test machine,
/// where both nodes share the CPUs, this halved the program's pauses over
/// 10 ms at 4 GiB and lowered the mean fault wait, the push as fast
/// (BENCHMARKS.md, "Post-copy faults behind the push"). The thread's own
/// value comes back when this is dropped.
///
/// A thread with nothing to push yet, which answers faults alone (the
/// source's push loop before the answers' connection is up and its scan
/// has ended, [`Background::set_idle`]), is on a fault's path and runs at
/// [`FAULT_NICE`]: at the nice value it inherits, on two CPUs shared with
/// the resumed program, a JVM's first faults waited 1.5-4 ms for its turn.
struct Background {
    tid: libc::id_t,
    /// The thread's own nice value, when below [`PUSH_NICE`] (a daemon
    /// started at a higher one keeps it throughout).
    own: Option<i32>,
    /// The nice value set now (None: its own).
    now: Option<i32>,
}

impl Background {
    fn new() -> Background {
        let tid = this_tid();
        Background {
            tid,
            own: nice_of(tid).filter(|&n| n < PUSH_NICE),
            now: None,
        }
    }

    /// `below`: the answers to faults travel apart from the push (on the
    /// second connection), and the thread goes to [`PUSH_NICE`]. Else this
    /// thread carries them too (a peer that cannot open the second
    /// connection, or after it failed) and runs at its own priority.
    fn set(&mut self, below: bool) {
        self.set_idle(below, false);
    }

    /// As [`Self::set`]; a thread that carries the answers and has
    /// nothing to push (`idle`) runs at [`FAULT_NICE`].
    fn set_idle(&mut self, below: bool, idle: bool) {
        let Some(own) = self.own else {
            return;
        };
        let want = if below {
            Some(PUSH_NICE)
        } else if idle {
            Some(FAULT_NICE.min(own))
        } else {
            None
        };
        if want == self.now {
            return;
        }
        let n = want.unwrap_or(own);
        match set_nice(self.tid, n) {
            Ok(()) => self.now = want,
            Err(e) => tracing::debug!("cannot set the push's thread to nice {n}: {e}"),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// The nice value of thread `tid` (None if it cannot be read).
fn nice_of(tid: libc::id_t) -> Option<i32> {
    // getpriority may return -1 as a value: errno tells the two apart.
    nix::errno::Errno::clear();
    // SAFETY: getpriority takes no pointers.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    (n != -1 || nix::errno::Errno::last_raw() == 0).then_some(n)
}

/// Most pages per answer message on the answers' connection.
const ANSWER_PAGES: usize = 64;

/// A page a fault has waited for this long since it was asked for (or
/// eight times the measured latency of a request, if longer) is asked for
/// again ([`LazyMemory::overdue`]); the source answers a page asked for a
/// second time whatever it counted on before.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(30);
/// Predicted pages may always have this much on their way on the answers'
/// connection, whatever its window (a fault's answer may wait behind it).
const PREDICTED_AT_LEAST: u64 = 4 * PAGE;
/// How often the destination looks for such pages.
const OVERDUE_LOOK: Duration = Duration::from_millis(10);

/// Source: answers page requests on the destination's second connection
/// (`Answers`), apart from the push, for as long as that connection works.
/// Should it fail, the requests not answered go back to the queue, and the
/// push loop answers them on the first connection, as before protocol 7.
struct Answering<'a, F: Fn(u64, &mut [u8]) -> Result<()>> {
    id: u64,
    side: std::sync::mpsc::Receiver<pmig_proto::blocking::Channel<std::net::TcpStream>>,
    requests: &'a Mutex<Requests>,
    wake: &'a Condvar,
    done: &'a AtomicBool,
    /// Answers go on the second connection (set here, cleared on failure,
    /// here or by the reader of the first connection, under the requests'
    /// lock).
    up: &'a AtomicBool,
    failed: &'a AtomicBool,
    /// The second connection, for the reader of the first to shut down.
    stream: &'a Mutex<Option<std::net::TcpStream>>,
    push: &'a Mutex<PushState>,
    read: &'a F,
    /// Page requests read on this connection (version 12).
    asked_here: &'a AtomicU64,
    /// Test hook: the connection fails after this many answer messages.
    fail_after: Option<u64>,
}

impl<F: Fn(u64, &mut [u8]) -> Result<()>> Answering<'_, F> {
    /// Of the pages asked for in `batch`, those to answer: not one whose
    /// pushed copy has left the push's socket and is not acknowledged yet.
    /// That copy is in the network, ahead of an answer sent now: on a link
    /// that is the bottleneck both wait in the same queue, so the answer
    /// would come after it and only take the link's time (a program that
    /// sweeps its memory in order faults just behind the push). A pushed
    /// copy still in the socket's queue may be overtaken, and one already
    /// acknowledged waits in the destination's receive queue, which an
    /// answer overtakes: those are answered. Returns the pages skipped.
    ///
    /// The push's socket is judged by what the push loop last read of it
    /// ([`PushState::tcp`]), not read here: reading `TCP_INFO` takes the
    /// socket's lock, which the push's sends hold for as long as they copy
    /// and transmit (`perf` caught this thread waiting for it, in bursts,
    /// at 4 GiB on a 1 Gbit link). That reading is
    /// at most one push message old: a page it shows in the network may have
    /// been acknowledged since (its copy then waits in the destination's
    /// receive queue, bounded, and comes soon), and one pushed after it is
    /// answered (sent twice, as before the window existed).
    ///
    /// A link's queue that serves the answers first (as this cluster's
    /// does) can hold that pushed copy back for as long as answers keep
    /// the link busy: seconds, when a program faults all the time on a
    /// slow link. So a copy is left to arrive only if, at the rate the
    /// push has been acknowledged lately, it should be within a couple of
    /// round trips ([`PushState::arrives_soon`]); and the destination asks
    /// again for a page a fault has waited for too long, which is then
    /// answered whatever the push's state.
    fn skip_pushed(&self, batch: &mut Vec<u64>) -> Vec<u64> {
        let mut skipped = Vec::new();
        let mut ps = self.push.lock().unwrap();
        let Some(t) = ps.tcp else {
            return skipped;
        };
        let now = mono_ns();
        batch.retain(|&p| match ps.order.pushed_end(p) {
            Some(end) if t.on_the_wire(end) && ps.arrives_soon(end, now) => {
                // Marks nothing new; the push goes on after the fault.
                ps.order.answer(p);
                skipped.push(p);
                false
            }
            _ => true,
        });
        skipped
    }

    /// Returns the bytes and pages sent, the requests answered, and the
    /// requests left to pushed copies on their way.
    fn run(self) -> (u64, u64, u64, u64) {
        favour_this_thread();
        let nothing = (0, 0, 0, 0);
        // The connection comes soon after the resume, or never (a cut link).
        let mut ch = loop {
            if self.done.load(Ordering::Acquire) {
                return nothing;
            }
            match self.side.recv_timeout(Duration::from_millis(50)) {
                Ok(ch) => break ch,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return nothing,
            }
        };
        {
            let _q = self.requests.lock().unwrap();
            if self.failed.load(Ordering::Acquire) {
                return nothing;
            }
            crate::mark_latency_sensitive(ch.stream());
            *self.stream.lock().unwrap() = ch.stream().try_clone().ok();
            self.up.store(true, Ordering::Release);
        }
        let reads = ch.peer().version >= pmig_proto::msg::REQUESTS_ON_ANSWERS;
        let (tx, rx) = ch.halves();
        let (id, done, up, requests, wake, asked_here) = (
            self.id,
            self.done,
            self.up,
            self.requests,
            self.wake,
            self.asked_here,
        );
        std::thread::scope(|s| {
            s.spawn(move || {
                if !reads {
                    return;
                }
                // The page requests a version-12 destination sends on this
                // connection (they do not wait for the push's socket, whose
                // lock its sends hold), into the queue answered here, until
                // the migration ends or the connection fails. On a failure
                // the connection is shut down: the destination then asks
                // again on the first one.
                while !done.load(Ordering::Acquire) && up.load(Ordering::Acquire) {
                    let why = match rx.recv_with_within(Duration::from_millis(20)) {
                        Ok(None) => continue,
                        Ok(Some(inc)) => match inc.into_parts().0 {
                            Msg::PageRequest { id: i, pages } if i == id => {
                                requests.lock().unwrap().add_faults(pages);
                                wake.notify_all();
                                asked_here.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Msg::PrefetchRequest { id: i, pages } if i == id => {
                                let mut q = requests.lock().unwrap();
                                q.add_predicted(pages, up.load(Ordering::Acquire));
                                wake.notify_all();
                                asked_here.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            other => format!("unexpected {}", other.kind()),
                        },
                        Err(e) => e.to_string(),
                    };
                    if !done.load(Ordering::Acquire) {
                        tracing::info!("page requests on the answers' connection of migration {id} ended ({why})");
                        let _ = rx.stream().shutdown(std::net::Shutdown::Both);
                    }
                    return;
                }
            });
            self.answer(tx)
        })
    }

    /// Whether predicted pages may be written on the answers' connection
    /// `s` now: Ok(how many, at most), or Err(how long to wait before
    /// looking again). Without `TCP_INFO` they go as they come.
    fn predictions_may_go(
        &self,
        s: &std::net::TcpStream,
        window: &mut Option<PushWindow>,
    ) -> std::result::Result<usize, Duration> {
        let Some(w) = window else {
            return Ok(ANSWER_PAGES);
        };
        let Some(t) = TcpState::of(s) else {
            *window = None;
            return Ok(ANSWER_PAGES);
        };
        w.update(mono_ns(), &t);
        if w.may_send(t.in_network) {
            Ok(w.chunk().min(ANSWER_PAGES))
        } else if t.in_network + PAGE <= PREDICTED_AT_LEAST {
            // On a slow link the window holds about one page.
            Ok(((PREDICTED_AT_LEAST - t.in_network) / PAGE) as usize)
        } else {
            Err(Duration::from_nanos(w.wait_ns(t.in_network, t.srtt_ns)))
        }
    }

    /// Takes up to `n` predicted pages off the queue to answer now, in the
    /// order predicted; those already sent (pushed, or answered) are
    /// dropped, and those taken are marked sent, so the push skips them.
    fn claim_predicted(&self, q: &mut Requests, n: usize) -> Vec<u64> {
        let mut ps = self.push.lock().unwrap();
        let mut b = Vec::with_capacity(n);
        while b.len() < n {
            let Some(p) = q.predicted.pop_front() else {
                break;
            };
            if q.predicted_sent.contains(&p) || !ps.order.claim(p) {
                continue;
            }
            if ps.scan_pending {
                ps.early.push(p);
            }
            b.push(p);
        }
        // Runs of consecutive pages go in one message each.
        b.sort_unstable();
        b.dedup();
        b
    }

    /// Answers the queued requests on `ch` until the migration ends or the
    /// connection fails; returns what [`Self::run`] does.
    fn answer(
        &self,
        ch: &mut pmig_proto::blocking::Sender<std::net::TcpStream>,
    ) -> (u64, u64, u64, u64) {
        let mut sent = (0, 0, 0, 0);
        let mut buf = vec![0u8; ANSWER_PAGES * PAGE as usize];
        let mut messages = 0u64;
        // What predicted pages may have on their way on this connection:
        // about 2 ms of its rate beyond its round trip, as for the push.
        let mut window = TcpState::of(ch.stream()).map(|t| PushWindow::new(mono_ns(), t.acked));
        loop {
            let (mut batch, again, predicted): (Vec<u64>, Vec<u64>, bool) = {
                let mut q = self.requests.lock().unwrap();
                loop {
                    // `up` is cleared under this lock: a request taken here
                    // is one the push loop will not answer.
                    if self.done.load(Ordering::Acquire) || !self.up.load(Ordering::Acquire) {
                        return sent;
                    }
                    if !q.faults.is_empty() {
                        let asked: Vec<u64> = q.faults.drain(..).collect();
                        let (mut b, mut again) = (Vec::new(), Vec::new());
                        for p in asked {
                            if q.skipped.remove(&p) {
                                again.push(p);
                            } else if q.predicted_sent.contains(&p) {
                                q.skipped.insert(p);
                                sent.3 += 1;
                            } else {
                                b.push(p);
                            }
                        }
                        break (b, again, false);
                    }
                    let mut wait = Duration::from_millis(50);
                    if !q.predicted.is_empty() {
                        match self.predictions_may_go(ch.stream(), &mut window) {
                            Ok(n) => {
                                let b = self.claim_predicted(&mut q, n);
                                if b.is_empty() {
                                    continue;
                                }
                                break (b, Vec::new(), true);
                            }
                            Err(w) => wait = w,
                        }
                    }
                    q = self.wake.wait_timeout(q, wait).unwrap().0;
                }
            };
            if !predicted {
                let skipped = self.skip_pushed(&mut batch);
                sent.3 += skipped.len() as u64;
                self.requests.lock().unwrap().skipped.extend(skipped);
                // Asked for again: answered first.
                if !again.is_empty() {
                    batch.splice(0..0, again);
                }
            }
            let mut i = 0;
            while i < batch.len() {
                // A run of consecutive pages, answered in one message.
                let mut n = 1;
                while i + n < batch.len()
                    && n < ANSWER_PAGES
                    && batch[i + n] == batch[i] + n as u64 * PAGE
                {
                    n += 1;
                }
                let b = &mut buf[..n * PAGE as usize];
                if self.fail_after == Some(messages) {
                    tracing::warn!("test hook: the answers' connection fails now");
                    let _ = ch.stream().shutdown(std::net::Shutdown::Both);
                }
                messages += 1;
                let r = (self.read)(batch[i], b).and_then(|()| {
                    ch.send_pages(self.id, batch[i], b)
                        .map_err(StrategyError::from)
                });
                let wire = match r {
                    Ok(s) => s.wire(),
                    Err(e) => {
                        if self.done.load(Ordering::Acquire) {
                            // Nothing is owed any more: the destination closed it.
                            return sent;
                        }
                        // Back to the push loop, on the first connection.
                        tracing::warn!(
                        "the answers' connection of migration {} failed ({e}); answering with the push",
                        self.id
                    );
                        // Shut down, so that the destination learns it (from a
                        // send that timed out the connection may still be up)
                        // and asks again on the first connection: requests it
                        // sent here are no longer read.
                        let _ = ch.stream().shutdown(std::net::Shutdown::Both);
                        let mut q = self.requests.lock().unwrap();
                        for &p in batch[i..].iter().rev() {
                            q.faults.push_front(p);
                        }
                        q.side_down();
                        self.up.store(false, Ordering::Release);
                        self.failed.store(true, Ordering::Release);
                        self.wake.notify_all();
                        return sent;
                    }
                };
                if predicted {
                    // Claimed before they went (`claim_predicted`).
                    let mut q = self.requests.lock().unwrap();
                    q.predicted_sent.extend(&batch[i..i + n]);
                    q.predicted_answered += n as u64;
                } else {
                    // Not pushed again (a copy already pushed may still be
                    // on its way: the first to arrive is installed).
                    let mut ps = self.push.lock().unwrap();
                    for k in 0..n {
                        let p = batch[i + k];
                        if ps.order.answer(p) && ps.scan_pending {
                            ps.early.push(p);
                        }
                    }
                }
                sent.0 += wire;
                sent.1 += n as u64;
                sent.2 += n as u64;
                i += n;
            }
        }
    }
}

/// A lazily restored process on the destination.
pub(crate) struct Lazy {
    pub pid: i32,
    /// The number of the userfaultfd inside the process.
    pub ufd: i32,
    pub lm: LazyMemory,
    /// The takeover record, if one was asked for.
    pub record: Option<crate::takeover::Active>,
}

/// How a restarted daemon would serve a lazily restored process (the
/// takeover record's flags).
#[derive(Debug, Clone)]
pub(crate) struct Resumable {
    pub prefetch: bool,
    pub until_exit: bool,
    /// Pages served from this page store, not by the source daemon.
    pub store: Option<std::path::PathBuf>,
    /// freeze-free: the page store the source is still writing; until it
    /// is complete the source serves the pages.
    pub pending_store: Option<std::path::PathBuf>,
    /// assisted-post-copy: the local copy ([`Serve::local`]).
    pub local: Option<std::path::PathBuf>,
}

/// Destination: kills the restored process, which cannot be completed, and
/// tells the source.
pub(crate) fn fail_lost(d: &mut Destination, pid: i32, e: String) -> StrategyError {
    kill_restored(pid, &d.made_segments);
    let _ = d.ch.send(&Msg::Error {
        code: code::RESTORE_FAILED,
        text: e.clone(),
    });
    StrategyError::Other(e)
}

/// Destination: kills the restored process `pid`, which cannot be
/// completed, and then removes the System V shared memory its restore made
/// (`made`, see `Restored::sysv_made`), whose attaches end with it.
pub(crate) fn kill_restored(pid: i32, made: &[pmig_engine::resources::sysvshm::MadeSegment]) {
    // SAFETY: killing the process we restored, which cannot be completed.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    if made.is_empty() {
        return;
    }
    // Its attaches go with its memory, before it is a zombie. Bounded: 5 s.
    let gone = || {
        pmig_engine::procfs::stat_fields(pid)
            .map_or(true, |f| f.first().is_some_and(|s| s == "Z" || s == "X"))
    };
    for _ in 0..500 {
        if gone() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    pmig_engine::resources::sysvshm::remove_made(made);
}

/// Destination: receive the (small) image, restore it lazily, take a copy of
/// the process's userfaultfd and reply `Restored`. With `composed`, the
/// image is already in the staging directory. With `resumable` (pages served
/// by a source daemon), a takeover record is written before `Restored`.
pub(crate) fn start_lazy(
    d: &mut Destination,
    composed: bool,
    resumable: Option<Resumable>,
) -> Result<Lazy> {
    let staging = d.staging.clone();
    if !composed {
        prespawn_restore(d, &staging, true);
    }
    // From the stop until the fault thread runs, this thread is on the
    // fault path: after the resume the first faults wait for its steps,
    // and at the nice value it inherits they waited for its turns on the
    // CPUs the resumed program shares. Set after the restorer's start,
    // which would inherit it; its own value comes back when dropped.
    let mut favoured = Background::new();
    favoured.set_idle(false, true);
    if !composed {
        receive_image(d)?;
        mark("dst: image received");
    }
    // The image decoded while the restore runs (on the other CPU), not
    // after it, when the first faults wait for this thread's steps.
    let mut early: Option<(PathBuf, Result<ProcessImage>)> = None;
    let mut decode = |dir: &Path| {
        early = Some((dir.to_path_buf(), read_image(dir)));
        mark("dst: image decoded during the restore");
    };
    let restored = match d.skeleton.take() {
        Some(offered) => {
            let fin = crate::skeleton::final_dir(d);
            match pmig_image::Image::open_verified(&fin) {
                Ok(_) => crate::skeleton::start(d, offered, &fin, &mut decode),
                Err(e) => Err((
                    code::BAD_IMAGE,
                    format!("the image failed verification: {e}"),
                )),
            }
        }
        None => restore_from(d, &staging, true, &mut decode).map(|s| (s, staging.clone())),
    };
    let (started, image_dir) = match restored {
        Ok(s) => s,
        Err((c, e)) => {
            let text = format!("{}: {e}", d.host.node());
            let _ = d.ch.send(&Msg::Error {
                code: c,
                text: text.clone(),
            });
            return Err(StrategyError::Other(text));
        }
    };
    let pid = started.pid;
    let fail = |d: &mut Destination, e: String| fail_lost(d, pid, e);
    let Some(ufd) = started.uffd_fd else {
        return Err(fail(d, "the lazy restore reported no userfaultfd".into()));
    };
    mark("dst: restored");
    // The image was verified before the restore started; decoded during it.
    let pi = match early.take() {
        Some((dir, Ok(pi))) if dir == image_dir => Ok(pi),
        _ => read_image(&image_dir),
    };
    let pi = match pi {
        Ok(pi) => pi,
        Err(e) => return Err(fail(d, format!("read the restored image: {e}"))),
    };
    mark("dst: image read");
    let uffd = match pmig_engine::dirty::take_fd(pid, ufd) {
        Ok(f) => f,
        Err(e) => {
            return Err(fail(
                d,
                format!("take the restored process's userfaultfd: {e}"),
            ))
        }
    };
    let (owed, registered) = owed_of(&pi);
    mark("dst: owed pages listed");
    let record = match resumable {
        Some(r) => match begin_record(d, pid, ufd, r, &owed, &registered, &started) {
            Ok(x) => Some(x),
            Err(e) => {
                // The migration goes on; only a takeover would be impossible.
                tracing::warn!("no takeover record for migration {}: {e}", d.offer.id);
                None
            }
        },
        None => None,
    };
    mark("dst: takeover record written");
    let lm = LazyMemory::new(uffd, &owed, registered);
    lm.rewrite_owners(started.pid, started.ids.clone());
    mark("dst: lazy memory built");
    let record = record.map(|(act, journal)| {
        lm.set_journal(journal);
        act
    });
    d.host
        .restored_here(d.offer.id, &d.peer, pid, &started.tids);
    d.made_segments = started.sysv_made.clone();
    d.ch.send(&Msg::Restored {
        id: d.offer.id,
        pid,
        original_pid: started.original_pid,
        restore_us: 0,
        since_resume_us: mono_ns().saturating_sub(started.resumed_ns) / 1000,
    })?;
    mark("dst: Restored sent");
    Ok(Lazy {
        pid,
        ufd,
        lm,
        record,
    })
}

fn begin_record(
    d: &Destination,
    pid: i32,
    ufd: i32,
    r: Resumable,
    owed: &[(u64, u64)],
    registered: &[(u64, u64)],
    started: &crate::stop_copy::Started,
) -> Result<(crate::takeover::Active, std::fs::File)> {
    // A page store needs no source; anything else resumes at the source.
    let source_addr = match &r.store {
        Some(_) => String::new(),
        None => d.source_addr.clone().ok_or_else(|| {
            StrategyError::Other(format!(
                "the address of {} is unknown (this daemon has no --peer for it, and it did not say where it listens)",
                d.offer.source_node
            ))
        })?,
    };
    let start_time = pmig_engine::procfs::start_time(pid)
        .ok_or_else(|| StrategyError::Other(format!("process {pid} vanished")))?;
    crate::takeover::begin(
        d.host,
        &crate::takeover::Record {
            version: crate::takeover::RECORD_VERSION,
            id: d.offer.id,
            source_node: d.offer.source_node.clone(),
            source_addr,
            pid,
            start_time,
            ufd,
            prefetch: r.prefetch,
            until_exit: r.until_exit,
            comm: d.offer.comm.clone(),
            owed: owed.to_vec(),
            registered: registered.to_vec(),
            store: r.store,
            pending_store: r.pending_store,
            local: r.local,
            ids: started.ids.clone(),
            tids: started.tids.clone(),
            made: started.sysv_made.clone(),
        },
    )
}

/// Destination: lazy restore, then serve faults until nothing is owed;
/// with `prefetch`, each fault also asks for the pages AMPoM predicts.
/// With `until_exit` (demand-paging), the migration also ends when the
/// process exits with pages still owed: `PagesDone` then tells the source.
/// With `composed`, the image is already in the staging directory.
///
/// With `store` (freeze-free), the source writes the whole process into
/// that page store directory meanwhile; once it is complete the rest is read
/// from there (see [`Serve::store`]).
pub(crate) fn destination_lazy(
    d: &mut Destination,
    prefetch: bool,
    until_exit: bool,
    composed: bool,
    store: Option<std::path::PathBuf>,
    local: Option<(&std::path::Path, &crate::flushing::StorePages)>,
) -> Result<i32> {
    let Lazy {
        pid,
        ufd,
        lm,
        record,
    } = start_lazy(
        d,
        composed,
        Some(Resumable {
            prefetch,
            until_exit,
            store: None,
            pending_store: store.clone(),
            local: local.map(|(dir, _)| dir.to_path_buf()),
        }),
    )?;
    serve_faults(Serve {
        host: d.host,
        store,
        ch: &mut d.ch,
        id: d.offer.id,
        pid,
        ufd,
        lm,
        prefetch,
        until_exit,
        comm: d.offer.comm.clone(),
        node: d.host.node().to_string(),
        peer: d.peer.clone(),
        record,
        answers: d.source_addr.clone().map(|addr| answers_from(d.host, addr)),
        answers_after_resume: false,
        local: local.map(|(_, p)| p),
        made: d.made_segments.clone(),
    })
}

/// How a lazily restored process's daemon opens the second connection, for
/// the answers to its page requests (protocol 7).
pub(crate) type AnswersFrom<'a> =
    Box<dyn FnOnce() -> Result<pmig_proto::blocking::Channel<std::net::TcpStream>> + Send + 'a>;

/// Connects to the source daemon at `addr` for the answers.
pub(crate) fn answers_from(host: &dyn crate::Host, addr: String) -> AnswersFrom<'_> {
    Box::new(move || {
        let ch =
            pmig_proto::blocking::connect(addr.as_str(), host.cluster_key(), &host.proto_config())?;
        crate::mark_latency_sensitive(ch.stream());
        Ok(ch)
    })
}

/// Pages read and installed at a time from assisted-post-copy's local copy.
const LOCAL_FILL_PAGES: usize = 256;

/// A lazily restored process being served (after the restore, or after a
/// takeover by a restarted daemon).
pub(crate) struct Serve<'a> {
    pub host: &'a dyn crate::Host,
    /// freeze-free: the page store the source is writing the process into.
    /// When it is complete (`STORE_COMPLETE` in it), the fault loop stops
    /// asking the source: it marks the store taken (`STORE_TAKEN`), switches
    /// its takeover record to the store, sends `PagesDone`, and serves the
    /// rest from the store ([`crate::flushing::serve_store`]), which it then
    /// removes.
    pub store: Option<std::path::PathBuf>,
    pub ch: &'a mut pmig_proto::blocking::Channel<std::net::TcpStream>,
    pub id: u64,
    pub pid: i32,
    pub ufd: i32,
    pub lm: LazyMemory,
    pub prefetch: bool,
    pub until_exit: bool,
    pub comm: String,
    /// This node's name and the source's, for messages.
    pub node: String,
    pub peer: String,
    pub record: Option<crate::takeover::Active>,
    /// Opens the second connection, for the answers (none: they come with
    /// the push).
    pub answers: Option<AnswersFrom<'a>>,
    /// A takeover: open the second connection only once a message came from
    /// the source on the first. The source may not have noticed yet that
    /// the daemon before this one died, and a connection it took then would
    /// end with its serving of that daemon.
    pub answers_after_resume: bool,
    /// assisted-post-copy: the destination's own copy of the pages not
    /// written since round 0. A fault on one of them is answered from it, and
    /// a thread installs them all meanwhile; only the others are asked for.
    pub local: Option<&'a crate::flushing::StorePages>,
    /// The System V shared memory the restore made (`Restored::sysv_made`),
    /// removed if the process is lost.
    pub made: Vec<pmig_engine::resources::sysvshm::MadeSegment>,
}

/// Destination: serve faults until nothing is owed; with `prefetch`, each
/// fault also asks for the pages AMPoM predicts. With `until_exit`
/// (demand-paging), the migration also ends when the process exits with
/// pages still owed: `PagesDone` then tells the source.
pub(crate) fn serve_faults(sv: Serve) -> Result<i32> {
    let Serve {
        host,
        store,
        ch,
        id,
        pid,
        ufd,
        lm,
        prefetch,
        until_exit,
        comm,
        node,
        peer,
        record,
        answers,
        answers_after_resume,
        local,
        made,
    } = sv;
    // Until nothing is owed, a migration onward waits for the rest: the push
    // brings it, or (`until_exit`) the pull it asks for first.
    let _arriving = crate::flushing::Arriving::new(host, pid);
    let end_record = || {
        if let Some(r) = &record {
            r.remove();
        }
    };
    let fail = |ch: &mut pmig_proto::blocking::Channel<std::net::TcpStream>, e: String| {
        kill_restored(pid, &made);
        end_record();
        let _ = ch.send(&Msg::Error {
            code: code::RESTORE_FAILED,
            text: e.clone(),
        });
        StrategyError::Other(e)
    };
    let watch = if until_exit {
        match crate::demand_paging::Watch::new(pid) {
            Ok(w) => Some(w),
            Err(e) => return Err(fail(ch, format!("watch process {pid}: {e}"))),
        }
    } else {
        None
    };
    let exited = AtomicBool::new(false);
    let _ = ch.stream().set_read_timeout(None);
    // The process waits on this connection: ride out a cut link.
    if let Err(e) = crate::set_link_timeout(ch.stream(), crate::POST_LINK_GRACE) {
        tracing::warn!("cannot set the connection's TCP_USER_TIMEOUT: {e}");
    }
    bound_receive_queue(ch.stream());
    let done = AtomicBool::new(false);
    let side_lost = AtomicBool::new(false);
    // The answers come on the second connection (see `Background`).
    let side_up = AtomicBool::new(false);
    let failed: Mutex<Option<String>> = Mutex::new(None);
    // freeze-free: the store is complete and taken; the rest comes from it.
    let switched = AtomicBool::new(false);
    let send_waits = ch.peer().version >= pmig_proto::msg::FAULT_WAITS;
    // Page requests go on the answers' connection while it is up, with a
    // source that reads them there (version 12): on the first, they wait
    // for its socket's lock, which the push's receiving holds.
    let requests_on_side = ch.peer().version >= pmig_proto::msg::REQUESTS_ON_ANSWERS;
    // ampom's predictions go apart from the faults' pages (version 22).
    let predict_apart = prefetch && ch.peer().version >= pmig_proto::msg::PREFETCH_REQUEST;
    let side_tx: Mutex<Option<pmig_proto::blocking::Sender<std::net::TcpStream>>> =
        Mutex::new(None);
    // Something came on the first connection (see `answers_after_resume`).
    let heard = AtomicBool::new(!answers_after_resume);
    // A second thread installs pushed pages alongside the receiving one:
    // where copying into fresh memory is slow (a VM whose host backs it on
    // first touch) or the link fast, one thread's copies bound the push.
    let (give, take) = std::sync::mpsc::sync_channel::<pmig_proto::blocking::Incoming>(1);
    let (back, returned) = std::sync::mpsc::channel::<Vec<u8>>();
    // Messages given to that helper and not installed yet.
    let helping = AtomicU64::new(0);
    let (tx, rx) = ch.halves();
    std::thread::scope(|s| {
        // Faults: ask for owed pages (zero pages are handled inside).
        s.spawn(|| {
            favour_this_thread();
            let mut ampom = pmig_engine::ampom::Ampom::default();
            let mut cpu = CpuShare { pid, last: None };
            let t_start = std::time::Instant::now();
            let mut looked = std::time::Instant::now();
            let mut looked_overdue = std::time::Instant::now();
            while !done.load(Ordering::Acquire) {
                if let Some(dir) = store.as_deref() {
                    if looked.elapsed() >= STORE_LOOK {
                        if take_store(dir) {
                            switched.store(true, Ordering::Release);
                            done.store(true, Ordering::Release);
                            return;
                        }
                        looked = std::time::Instant::now();
                    }
                }
                if side_lost.swap(false, Ordering::AcqRel) {
                    // Answers from now on on this connection, and again for
                    // every page asked for and not here yet.
                    side_tx.lock().unwrap().take();
                    let again = lm.requested_pages();
                    let r = tx.send(&Msg::Answers { id }).and_then(|()| {
                        for chunk in again.chunks(pmig_proto::msg::MAX_PAGE_REQUEST) {
                            tx.send(&Msg::PageRequest {
                                id,
                                pages: chunk.to_vec(),
                            })?;
                        }
                        Ok(())
                    });
                    if let Err(e) = r {
                        *failed.lock().unwrap() = Some(format!("ask the source for pages: {e}"));
                        done.store(true, Ordering::Release);
                        return;
                    }
                }
                if let Some(w) = &watch {
                    match w.step(&lm, id, send_waits) {
                        crate::demand_paging::Step::Exited(msgs) => {
                            exited.store(true, Ordering::Release);
                            if let Err(e) = msgs.iter().try_for_each(|m| tx.send(m)) {
                                *failed.lock().unwrap() =
                                    Some(format!("tell the source of the exit: {e}"));
                            }
                            done.store(true, Ordering::Release);
                            return;
                        }
                        crate::demand_paging::Step::Ask(all) => {
                            for chunk in all.chunks(pmig_proto::msg::MAX_PAGE_REQUEST) {
                                let _ = ask_for(tx, &side_tx, &side_lost, id, chunk, false);
                            }
                        }
                        crate::demand_paging::Step::Run => {}
                    }
                }
                if looked_overdue.elapsed() >= OVERDUE_LOOK {
                    looked_overdue = std::time::Instant::now();
                    let after = lm
                        .measured()
                        .0
                        .map(|l| Duration::from_secs_f64(l * 8.0))
                        .unwrap_or_default()
                        .max(ASK_AGAIN_AFTER);
                    let again = lm.overdue(after);
                    if !again.is_empty() {
                        tracing::debug!(
                            "migration {id}: {} pages asked for again, faults waited over {after:?} for them",
                            again.len()
                        );
                    }
                    for chunk in again.chunks(pmig_proto::msg::MAX_PAGE_REQUEST) {
                        if let Err(e) = ask_for(tx, &side_tx, &side_lost, id, chunk, false) {
                            *failed.lock().unwrap() = Some(format!("ask the source for pages: {e}"));
                            done.store(true, Ordering::Release);
                            return;
                        }
                    }
                }
                if !lm.wait(10) {
                    continue;
                }
                match lm.handle_events() {
                    Ok(h) => {
                        let mut ask = h.ask;
                        // Predictions: asked for apart from the faults'
                        // pages, from a source that answers them after
                        // those; a fault on one asks for it again.
                        let mut predicted = Vec::new();
                        if predict_apart {
                            ask.extend(h.promote);
                        }
                        if prefetch && !h.faults.is_empty() {
                            // Latency and per-page time as measured so far
                            // (one-way latency: half the request round trip).
                            let (lat, td) = lm.measured();
                            let t0 = lat.map(|l| l / 2.0).unwrap_or(100e-6);
                            let td = td.unwrap_or(4096.0 / 100e6);
                            let share = cpu.sample();
                            let mut want = Vec::new();
                            for f in &h.faults {
                                let t = t_start.elapsed().as_secs_f64();
                                for p in ampom.on_fault(f / PAGE, t, share, t0, td) {
                                    want.push(p * PAGE);
                                }
                            }
                            let p = lm.prefetch(&want);
                            if predict_apart {
                                predicted = p;
                            } else {
                                ask.extend(p);
                            }
                        }
                        if let Some(lp) = local {
                            // Pages of the local copy are installed here.
                            lm.answered_here(
                                h.faults.iter().filter(|&&p| lp.has(p)).count() as u64,
                            );
                            let (here, there): (Vec<u64>, Vec<u64>) =
                                ask.into_iter().partition(|&p| lp.has(p));
                            ask = there;
                            let mut buf = [0u8; PAGE as usize];
                            for p in here {
                                if let Err(e) =
                                    lp.read(p, &mut buf).and_then(|_| lm.install(p, &buf))
                                {
                                    *failed.lock().unwrap() =
                                        Some(format!("install a page of the local copy: {e}"));
                                    done.store(true, Ordering::Release);
                                    return;
                                }
                            }
                        }
                        let asks = ask
                            .chunks(pmig_proto::msg::MAX_PAGE_REQUEST)
                            .map(|c| (c, false))
                            .chain(
                                predicted
                                    .chunks(pmig_proto::msg::MAX_PAGE_REQUEST)
                                    .map(|c| (c, true)),
                            );
                        for (chunk, predicted) in asks {
                            if let Err(e) =
                                ask_for(tx, &side_tx, &side_lost, id, chunk, predicted)
                            {
                                *failed.lock().unwrap() =
                                    Some(format!("ask the source for pages: {e}"));
                                done.store(true, Ordering::Release);
                                return;
                            }
                        }
                    }
                    Err(_) if watch.is_some() => continue, // exited: seen above
                    Err(e) => {
                        *failed.lock().unwrap() = Some(format!("serve faults: {e}"));
                        done.store(true, Ordering::Release);
                        return;
                    }
                }
            }
        });
        // assisted-post-copy: the local copy, installed meanwhile (the
        // pages already here, or asked for and answered, are skipped).
        if let Some(lp) = local {
            let (done, failed, lm) = (&done, &failed, &lm);
            s.spawn(move || {
                let mut buf = vec![0u8; LOCAL_FILL_PAGES * PAGE as usize];
                for (addr, len) in lp.runs() {
                    let mut a = addr;
                    while a < addr + len && !done.load(Ordering::Acquire) {
                        let b = &mut buf
                            [..((addr + len - a) as usize).min(LOCAL_FILL_PAGES * PAGE as usize)];
                        if let Err(e) = lp.read(a, b).and_then(|_| install_filled(lm, a, b)) {
                            *failed.lock().unwrap() = Some(format!("install the local copy: {e}"));
                            done.store(true, Ordering::Release);
                            return;
                        }
                        a += b.len() as u64;
                    }
                }
            });
        }
        // Answers on the second connection, installed as they arrive.
        if let Some(open) = answers {
            let (done, exited, failed, lm) = (&done, &exited, &failed, &lm);
            let (side_lost, side_tx, side_up, heard) = (&side_lost, &side_tx, &side_up, &heard);
            s.spawn(move || {
                // However it ends before the migration does, answers sent on
                // it may be lost: the fault loop tells the source, and asks
                // again for every page still on its way.
                favour_this_thread();
                while !heard.load(Ordering::Acquire) {
                    if done.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                let lost = || {
                    side_up.store(false, Ordering::Release);
                    side_tx.lock().unwrap().take();
                    if !done.load(Ordering::Acquire) {
                        side_lost.store(true, Ordering::Release);
                    }
                };
                let side = match open().and_then(|mut c| {
                    c.send(&Msg::Answers { id })?;
                    Ok(c)
                }) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::info!("no second connection for the answers of migration {id} ({e}): they come with the push");
                        lost();
                        return;
                    }
                };
                let (stx, mut srx) = side.split();
                if requests_on_side {
                    *side_tx.lock().unwrap() = Some(stx);
                }
                side_up.store(true, Ordering::Release);
                while !done.load(Ordering::Acquire) {
                    match srx.recv_with_within(Duration::from_millis(20)) {
                        Ok(None) => {}
                        Ok(Some(inc)) => match inc.pages() {
                            Some((i, addr, data)) if i == id => {
                                if exited.load(Ordering::Acquire) {
                                    continue;
                                }
                                if let Err(e) = install_pages(lm, &inc, addr, data) {
                                    *failed.lock().unwrap() = Some(format!("install pages: {e}"));
                                    done.store(true, Ordering::Release);
                                    return;
                                }
                                srx.recycle(inc.into_body());
                            }
                            _ => {
                                tracing::warn!("{} on the answers' connection of migration {id}; the answers come with the push", inc.msg.kind());
                                lost();
                                return;
                            }
                        },
                        Err(e) => {
                            if !done.load(Ordering::Acquire) {
                                tracing::warn!("the answers' connection of migration {id} ended ({e}); the answers come with the push");
                            }
                            lost();
                            return;
                        }
                    }
                }
            });
        }
        {
            let (done, exited, failed, lm, side_up, helping) =
                (&done, &exited, &failed, &lm, &side_up, &helping);
            s.spawn(move || {
                let mut background = Background::new();
                while let Ok(inc) = take.recv() {
                    background.set(side_up.load(Ordering::Acquire));
                    if let Some((_, addr, data)) = inc.pages() {
                        if !exited.load(Ordering::Acquire) && !done.load(Ordering::Acquire) {
                            if let Err(e) = install_pages(lm, &inc, addr, data) {
                                failed
                                    .lock()
                                    .unwrap()
                                    .get_or_insert(format!("install pages: {e}"));
                                done.store(true, Ordering::Release);
                            }
                        }
                    }
                    helping.fetch_sub(1, Ordering::AcqRel);
                    let _ = back.send(inc.into_body());
                }
            });
        }
        let mut background = Background::new();
        while (!done.load(Ordering::Acquire) || exited.load(Ordering::Acquire))
            && lm.owed_pages() > 0
        {
            background.set(side_up.load(Ordering::Acquire));
            for b in returned.try_iter() {
                rx.recycle(b);
            }
            // Within a time: the last owed pages may come as answers on the
            // second connection, and then nothing more comes on this one;
            // or the helper installs them.
            let wait = if helping.load(Ordering::Acquire) > 0 {
                1
            } else {
                20
            };
            match rx.recv_with_within(Duration::from_millis(wait)) {
                Ok(None) => {}
                Ok(Some(inc)) => {
                    heard.store(true, Ordering::Release);
                    if inc.pages().is_some_and(|p| p.0 == id) {
                        helping.fetch_add(1, Ordering::AcqRel);
                        let inc = match give.try_send(inc) {
                            Ok(()) => continue,
                            Err(std::sync::mpsc::TrySendError::Full(inc))
                            | Err(std::sync::mpsc::TrySendError::Disconnected(inc)) => {
                                helping.fetch_sub(1, Ordering::AcqRel);
                                inc
                            }
                        };
                        let Some((_, addr, data)) = inc.pages() else {
                            continue;
                        };
                        if !exited.load(Ordering::Acquire) {
                            if let Err(e) = install_pages(&lm, &inc, addr, data) {
                                failed
                                    .lock()
                                    .unwrap()
                                    .get_or_insert(format!("install pages: {e}"));
                                break;
                            }
                        }
                        rx.recycle(inc.into_body());
                        continue;
                    }
                    match inc.msg {
                        Msg::Commit { id: i } if i == id && exited.load(Ordering::Acquire) => break,
                        Msg::NotOwed { id: i, ranges, .. } if i == id => lm.not_owed(&ranges),
                        other => {
                            *failed.lock().unwrap() =
                                Some(format!("unexpected {} while pages are owed", other.kind()));
                            break;
                        }
                    }
                }
                Err(_) if exited.load(Ordering::Acquire) => break,
                Err(e) => {
                    *failed.lock().unwrap() = Some(format!(
                        "the source disappeared with {} pages owed ({e})",
                        lm.owed_pages()
                    ));
                    break;
                }
            }
        }
        drop(background);
        // The helper ends once it has installed what it was given.
        drop(give);
        done.store(true, Ordering::Release);
    });
    if let Some(e) = failed.lock().unwrap().take() {
        // assisted-post-copy's pages dirtied since round 0 come as post-copy's.
        let how = match (until_exit, prefetch) {
            (true, _) => "demand paging",
            (false, true) => "ampom",
            (false, false) => "post-copy",
        };
        tracing::error!("{how} of {comm} (pid {pid}): {e}; the process is lost");
        return Err(fail(ch, format!("{node}: {e}; the process is lost")));
    }
    if switched.load(Ordering::Acquire) {
        let dir = store.unwrap_or_default();
        return from_store(
            host,
            ch,
            id,
            pid,
            ufd,
            lm,
            &dir,
            record.as_ref(),
            (&comm, &made),
            &node,
            &peer,
        );
    }
    let st = lm.stats();
    if exited.load(Ordering::Acquire) {
        end_record();
        tracing::info!("demand paging of {comm} (pid {pid}) ended with its exit: {st:?}");
        return Ok(pid);
    }
    if let Err(e) = lm.finish_in_process(pid, ufd) {
        tracing::warn!("could not close the userfaultfd inside {pid}: {e}");
    }
    // Nothing is owed: a takeover is no longer needed.
    end_record();
    let how = if prefetch { "ampom" } else { "post-copy" };
    tracing::info!("{how} of {comm} (pid {pid}) complete: {st:?}");
    send_fault_waits(ch, id, &st)?;
    ch.send(&Msg::PagesDone {
        id,
        installed: st.installed_pages,
        remote_faults: st.remote_faults,
        prefetched: st.prefetched,
        prefetch_hits: st.prefetch_hits,
    })?;
    await_final_commit(ch, id, pid, &peer)
}

/// Asks the source for `pages`: on the answers' connection while it takes
/// requests (`side`), else on the first. Should the answers' connection
/// fail, it is given up (`side_lost`: the fault loop tells the source and
/// asks again there for every page still awaited) and the request goes on
/// the first.
fn ask_for(
    tx: &mut pmig_proto::blocking::Sender<std::net::TcpStream>,
    side: &Mutex<Option<pmig_proto::blocking::Sender<std::net::TcpStream>>>,
    side_lost: &AtomicBool,
    id: u64,
    pages: &[u64],
    predicted: bool,
) -> std::result::Result<(), pmig_proto::ProtoError> {
    let pages = pages.to_vec();
    let msg = if predicted {
        Msg::PrefetchRequest { id, pages }
    } else {
        Msg::PageRequest { id, pages }
    };
    {
        let mut side = side.lock().unwrap();
        if let Some(stx) = side.as_mut() {
            match stx.send(&msg) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!("a page request on the answers' connection of migration {id} failed ({e}); asking on the first");
                    *side = None;
                    side_lost.store(true, Ordering::Release);
                }
            }
        }
    }
    tx.send(&msg)
}

/// Tells a version-10 source how long the faults waited (`FaultWaits`),
/// before `PagesDone`; an older one would refuse the message.
fn send_fault_waits(
    ch: &mut pmig_proto::blocking::Channel<std::net::TcpStream>,
    id: u64,
    st: &pmig_engine::lazy::LazyStats,
) -> Result<()> {
    if ch.peer().version < pmig_proto::msg::FAULT_WAITS {
        return Ok(());
    }
    ch.send(&Msg::FaultWaits {
        id,
        max_us: st.fault_wait_max_us,
        total_us: st.fault_wait_total_us,
        hist: st.fault_wait_hist.to_vec(),
    })?;
    Ok(())
}

/// After `PagesDone`: waits for the source's `Commit` (answers to requests
/// it had queued may still be on their way: they are no longer needed).
fn await_final_commit(
    ch: &mut pmig_proto::blocking::Channel<std::net::TcpStream>,
    id: u64,
    pid: i32,
    peer: &str,
) -> Result<i32> {
    let _ = ch.stream().set_read_timeout(Some(Duration::from_secs(60)));
    loop {
        match ch.recv_with() {
            Ok(inc) if inc.pages().is_some() || matches!(inc.msg, Msg::NotOwed { .. }) => continue,
            Ok(inc) => match inc.msg {
                Msg::Commit { id: i } if i == id => return Ok(pid),
                Msg::Abort { reason, .. } => {
                    tracing::warn!("the source aborted migration {id} after the pages moved ({reason}); the process {pid} keeps running here");
                    return Ok(pid);
                }
                other => {
                    return Err(StrategyError::Protocol {
                        node: peer.to_string(),
                        what: format!("expected Commit, got {}", other.kind()),
                    })
                }
            },
            Err(e) => {
                tracing::warn!("no Commit for migration {id} ({e}); the process {pid} runs here with all its pages");
                return Ok(pid);
            }
        }
    }
}

/// The file a freeze-free source writes into its page store once the store
/// holds the whole process.
pub(crate) const STORE_COMPLETE: &str = "complete";
/// What the destination renames [`STORE_COMPLETE`] to when it takes the
/// store over (the source then leaves it; else the source removes it).
pub(crate) const STORE_TAKEN: &str = "taken";
/// How often the fault loop looks for [`STORE_COMPLETE`].
const STORE_LOOK: Duration = Duration::from_millis(20);

/// Takes the page store `dir` over if it is complete.
fn take_store(dir: &std::path::Path) -> bool {
    std::fs::rename(dir.join(STORE_COMPLETE), dir.join(STORE_TAKEN)).is_ok()
}

/// freeze-free, once the page store `dir` is complete and taken: the pages
/// asked of the source and not yet here are read from the store, the
/// takeover record names the store, the source is told (`PagesDone`: it
/// keeps nothing any more), and the rest is served from the store, which
/// is then removed. A process lost goes with the System V shared memory
/// its restore made (`made`).
#[allow(clippy::too_many_arguments)]
fn from_store(
    host: &dyn crate::Host,
    ch: &mut pmig_proto::blocking::Channel<std::net::TcpStream>,
    id: u64,
    pid: i32,
    ufd: i32,
    lm: LazyMemory,
    dir: &std::path::Path,
    record: Option<&crate::takeover::Active>,
    (comm, made): (&str, &[pmig_engine::resources::sysvshm::MadeSegment]),
    node: &str,
    peer: &str,
) -> Result<i32> {
    let lose = |ch: &mut pmig_proto::blocking::Channel<std::net::TcpStream>, e: String| {
        kill_restored(pid, made);
        if let Some(r) = record {
            r.remove();
        }
        let _ = std::fs::remove_dir_all(dir);
        tracing::error!("freeze-free of {comm} (pid {pid}): {e}; the process is lost");
        let e = format!("{node}: {e}; the process is lost");
        let _ = ch.send(&Msg::Error {
            code: code::RESTORE_FAILED,
            text: e.clone(),
        });
        StrategyError::Other(e)
    };
    let pages = match crate::flushing::StorePages::open(dir) {
        Ok(p) => p,
        Err(e) => {
            return Err(lose(
                ch,
                format!("read the page store {}: {e}", dir.display()),
            ))
        }
    };
    let mut buf = vec![0u8; PAGE as usize];
    for p in lm.requested_pages() {
        if let Err(e) = pages.read(p, &mut buf).and_then(|()| lm.install(p, &buf)) {
            if !pmig_engine::procfs::has_exited(pid) {
                return Err(lose(ch, format!("install a page from the store: {e}")));
            }
        }
    }
    if let Some(r) = record {
        if let Err(e) = crate::takeover::switch_to_store(r, dir) {
            tracing::warn!("takeover record of migration {id}: {e}");
        }
    }
    let st = lm.stats();
    tracing::info!(
        "freeze-free of {comm} (pid {pid}): the page store {} is complete; {} pages came from {peer} ({} faults), the rest comes from the store",
        dir.display(),
        st.installed_pages,
        st.remote_faults
    );
    send_fault_waits(ch, id, &st)?;
    ch.send(&Msg::PagesDone {
        id,
        installed: st.installed_pages,
        remote_faults: st.remote_faults,
        prefetched: 0,
        prefetch_hits: 0,
    })?;
    let pause = host.hooks().stall_fill_ms.map(|ms| {
        tracing::warn!(
            "test hook: the fill of migration {id} from {} waits {ms} ms",
            dir.display()
        );
        Duration::from_millis(ms)
    });
    let r = crate::flushing::serve_store(host, &pages, lm, pid, ufd, dir, pause);
    if let Some(r) = record {
        r.remove();
    }
    match r {
        Ok(_) => await_final_commit(ch, id, pid, peer),
        Err(e) => Err(lose(ch, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn this_nice() -> i32 {
        nice_of(this_tid()).expect("read this thread's nice value")
    }

    #[test]
    fn the_push_runs_below_the_program_only_while_answers_go_apart() {
        std::thread::spawn(|| {
            let own = this_nice();
            assert!(own < PUSH_NICE, "the test runs at nice {own}");
            // SAFETY: geteuid takes nothing.
            let root = unsafe { libc::geteuid() } == 0;
            {
                let mut b = Background::new();
                assert_eq!(this_nice(), own, "nothing changes before `set`");
                b.set(true);
                assert_eq!(this_nice(), PUSH_NICE);
                if root {
                    // The second connection failed: this thread answers.
                    b.set(false);
                    assert_eq!(this_nice(), own);
                    b.set(true);
                    assert_eq!(this_nice(), PUSH_NICE);
                }
            }
            if root {
                assert_eq!(this_nice(), own, "its own priority is back");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_push_thread_with_nothing_to_push_answers_at_the_fault_paths_priority() {
        // SAFETY: geteuid takes nothing.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: raising a thread's priority needs root");
            return;
        }
        std::thread::spawn(|| {
            let own = this_nice();
            assert!(own > FAULT_NICE, "the test runs at nice {own}");
            {
                let mut b = Background::new();
                // Its pages not known yet, the answers' connection not up.
                b.set_idle(false, true);
                assert_eq!(this_nice(), FAULT_NICE);
                // The connection came up: the answers go apart.
                b.set_idle(true, true);
                assert_eq!(this_nice(), PUSH_NICE);
                b.set_idle(false, true);
                assert_eq!(this_nice(), FAULT_NICE);
                // It pushes, and carries the answers too.
                b.set_idle(false, false);
                assert_eq!(this_nice(), own);
                b.set_idle(false, true);
                assert_eq!(this_nice(), FAULT_NICE);
            }
            assert_eq!(this_nice(), own, "its own priority is back");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_already_below_the_push_keeps_its_priority() {
        std::thread::spawn(|| {
            set_nice(this_tid(), PUSH_NICE + 5).unwrap();
            {
                let mut b = Background::new();
                b.set(true);
                assert_eq!(this_nice(), PUSH_NICE + 5);
            }
            assert_eq!(this_nice(), PUSH_NICE + 5);
        })
        .join()
        .unwrap();
    }

    fn tcp(acked: u64, min_rtt_ns: u64, srtt_ns: u64) -> TcpState {
        TcpState {
            in_network: 0,
            unsent: 0,
            acked,
            min_rtt_ns,
            srtt_ns,
            closed: false,
        }
    }

    #[test]
    fn window_follows_the_acknowledged_rate() {
        let mut w = PushWindow::new(0, 0);
        assert_eq!(w.window, INITIAL_WINDOW);
        // A period not over yet changes nothing.
        w.update(5 * MS, &tcp(6_000, 100_000, 3 * MS));
        assert_eq!(w.window, INITIAL_WINDOW);
        // 1.25 MB/s (10 Mbit/s) acknowledged over 10 ms, a queue in the
        // round trip: one 4 KiB page per message, and the window is the
        // rate times (min RTT + 2 ms), but at least one message.
        w.update(10 * MS, &tcp(12_500, 100_000, 3 * MS));
        assert_eq!(w.chunk(), 1);
        assert_eq!(w.window, PAGE + PUSH_OVERHEAD);
        // 125 MB/s (1 Gbit/s) with 0.2 ms min RTT: 2.2 ms of data in the
        // network, 2 ms per message.
        w.update(20 * MS, &tcp(12_500 + 1_250_000, 200_000, 2 * MS));
        assert_eq!(w.chunk(), 61);
        assert_eq!(w.window, 275_000);
    }

    #[test]
    fn window_grows_while_it_limits_the_push_and_no_queue_shows() {
        // A long path (50 ms) the window does not fill: 16 KiB per 50 ms.
        let mut w = PushWindow::new(0, 0);
        assert!(!w.may_send(INITIAL_WINDOW));
        w.update(100 * MS, &tcp(2 * INITIAL_WINDOW, 50 * MS, 50 * MS));
        assert!(w.window >= INITIAL_WINDOW + INITIAL_WINDOW / 4);
        // Not limited by the window (the push was short of pages or CPU):
        // the window follows the rate only.
        let before = w.window;
        assert!(w.may_send(0));
        w.update(200 * MS, &tcp(2 * INITIAL_WINDOW + 1000, 50 * MS, 50 * MS));
        assert!(w.window < before);
        // Limited, but the round trip already shows a queue: no growth
        // beyond the rate times (min RTT + 2 ms).
        let mut w = PushWindow::new(0, 0);
        assert!(!w.may_send(INITIAL_WINDOW));
        w.update(100 * MS, &tcp(125_000, MS, 10 * MS));
        // 1.25 MB/s times 3 ms is 3750 bytes, less than one message.
        assert_eq!(w.window, PAGE + PUSH_OVERHEAD);
    }

    #[test]
    fn window_wait_is_bounded() {
        let w = PushWindow::new(0, 0);
        assert_eq!(w.wait_ns(0, 0), 20_000);
        assert_eq!(w.wait_ns(u64::MAX / 2, 0), 1_000_000);
        let mid = w.wait_ns(INITIAL_WINDOW + INITIAL_WINDOW / 4, 0);
        assert!((20_000..1_000_000).contains(&mid), "{mid}");
    }

    #[test]
    fn push_order_follows_answers_and_sends_each_page_once() {
        let p = |i: u64| 0x10000 + i * PAGE;
        // Pages 0..8 and 20..22.
        let pages: Vec<u64> = (0..8).chain(20..22).map(p).collect();
        let mut o = PushOrder::new(pages);
        assert_eq!(o.next_run(3), Some((p(0), 3)));
        // A fault on page 5: answered, and the push goes on after it.
        assert!(o.answer(p(5)));
        assert_eq!(o.next_run(8), Some((p(6), 2)));
        // Runs stop at gaps in the addresses.
        assert_eq!(o.next_run(8), Some((p(20), 2)));
        // A page already pushed is not answered again; one never owed is.
        assert!(!o.answer(p(1)));
        assert!(o.answer(p(100)));
        // Around to what is left: pages 3 and 4.
        assert_eq!(o.next_run(8), Some((p(3), 2)));
        assert!(o.is_done());
        assert_eq!(o.next_run(8), None);
    }

    #[test]
    fn pushed_copies_remember_where_they_end_in_the_stream() {
        let p = |i: u64| 0x10000 + i * PAGE;
        let mut o = PushOrder::new((0..8).map(p).collect());
        assert_eq!(o.next_run(3), Some((p(0), 3)));
        // Taken for the push, not written yet: not known.
        assert_eq!(o.pushed_end(p(1)), None);
        o.pushed(p(0), 3, 50_000);
        assert_eq!(o.pushed_end(p(0)), Some(50_000));
        assert_eq!(o.pushed_end(p(2)), Some(50_000));
        // Answered, or never pushed: no pushed copy.
        assert!(o.answer(p(5)));
        assert_eq!(o.pushed_end(p(5)), None);
        assert_eq!(o.pushed_end(p(4)), None);
        assert_eq!(o.pushed_end(p(100)), None);
    }

    #[test]
    fn only_a_copy_between_the_socket_and_the_acknowledgement_is_on_the_wire() {
        // 100 000 bytes written: 60 000 acknowledged, 30 000 sent and not
        // acknowledged, 10 000 not sent.
        let t = TcpState {
            in_network: 40_000,
            unsent: 10_000,
            ..tcp(60_000, MS, MS)
        };
        assert_eq!(t.written(), 100_000);
        // Acknowledged: at the destination (maybe in its receive queue).
        assert!(!t.on_the_wire(60_000));
        assert!(t.on_the_wire(60_001));
        assert!(t.on_the_wire(90_000));
        // Still in this socket's queue: an answer may overtake it.
        assert!(!t.on_the_wire(90_001));
        assert!(!t.on_the_wire(100_000));
        // Nothing known to be unsent counts as the wire.
        let all_unsent = TcpState {
            in_network: 40_000,
            unsent: 40_000,
            ..tcp(60_000, MS, MS)
        };
        assert!(!all_unsent.on_the_wire(80_000));
    }

    #[test]
    fn a_predicted_page_is_claimed_once_and_leaves_the_push_where_it_was() {
        let p = |i: u64| 0x10000 + i * PAGE;
        let mut o = PushOrder::new((0..8).map(p).collect());
        assert_eq!(o.next_run(2), Some((p(0), 2)));
        // Pushed already: not sent again. Not pushed yet: claimed once.
        assert!(!o.claim(p(1)));
        assert!(o.claim(p(6)));
        assert!(!o.claim(p(6)));
        // Never owed: sent.
        assert!(o.claim(p(100)));
        // The push goes on from where it was, around the claimed page.
        assert_eq!(o.next_run(8), Some((p(2), 4)));
        assert_eq!(o.next_run(8), Some((p(7), 1)));
        assert!(o.is_done());
    }

    #[test]
    fn faults_take_their_pages_out_of_the_predictions() {
        let mut q = Requests::default();
        q.add_predicted(vec![0x1000, 0x2000, 0x3000], true);
        assert_eq!(q.predicted_asked, 3);
        // A fault on a predicted page: answered as a fault, once.
        q.add_faults(vec![0x2000]);
        assert_eq!(q.faults, [0x2000]);
        assert_eq!(q.predicted, [0x1000, 0x3000]);
        // Without the answers' connection, predictions are answered as
        // faults are (by the push loop).
        q.add_predicted(vec![0x4000], false);
        assert_eq!(q.faults, [0x2000, 0x4000]);
        // The connection lost: every prediction left is a fault's page, and
        // nothing sent there is counted on.
        q.predicted_sent.insert(0x5000);
        q.skipped.insert(0x6000);
        q.side_down();
        assert_eq!(q.faults, [0x2000, 0x4000, 0x1000, 0x3000]);
        assert!(q.predicted.is_empty() && q.predicted_sent.is_empty() && q.skipped.is_empty());
        assert_eq!(q.predicted_asked, 4);
    }

    #[test]
    fn a_pushed_copy_is_counted_on_only_while_the_push_moves_fast_enough() {
        let mut ps = PushState {
            order: PushOrder::new(Vec::new()),
            tcp: None,
            acked_at_ns: 0,
            acked_rate: 0.0,
            rate_from: (0, 0),
            early: Vec::new(),
            scan_pending: false,
        };
        let t0 = 1_000 * MS;
        assert!(!ps.arrives_soon(1, t0), "nothing read of the socket yet");
        ps.saw_at(tcp(0, MS, MS), t0);
        assert!(!ps.arrives_soon(1, t0), "no rate yet");
        // 1 MB acknowledged in 10 ms: 100 bytes per µs. A copy 100 KB
        // ahead comes in 1 ms; one 1 MB ahead would take 10 ms.
        ps.saw_at(tcp(1_000_000, MS, MS), t0 + 10 * MS);
        assert!(ps.arrives_soon(1_100_000, t0 + 10 * MS));
        assert!(!ps.arrives_soon(2_000_000, t0 + 10 * MS));
        // Starved: 1 KB more in the next 10 ms.
        ps.saw_at(tcp(1_001_000, MS, MS), t0 + 20 * MS);
        assert!(!ps.arrives_soon(1_005_000, t0 + 20 * MS));
        // The rate back up; then nothing acknowledged for 10 ms.
        ps.saw_at(tcp(2_001_000, MS, MS), t0 + 30 * MS);
        assert!(ps.arrives_soon(2_005_000, t0 + 30 * MS));
        assert!(!ps.arrives_soon(2_005_000, t0 + 40 * MS));
    }

    #[test]
    fn push_order_without_pages_answers_everything() {
        let mut o = PushOrder::new(Vec::new());
        assert!(o.is_done());
        assert!(o.answer(0x1000));
        assert_eq!(o.next_run(4), None);
    }
}
