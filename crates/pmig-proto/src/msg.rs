//! Typed messages and their encoding (postcard).
//!
//! A frame body is `postcard(Msg)` optionally followed by raw *attachment* bytes (bulk
//! data such as page contents, which are not copied through serde). [`decode`] accepts a
//! body without attachment; [`decode_with_attachment`] returns the attachment too.
//!
//! **Compatibility rules** (see `docs/protocol.md`): variant indices are part of the wire
//! format. `Hello` must stay variant 0 and `Error` variant 1 with their fields unchanged
//! forever, so that any two versions can at least exchange `Hello` and refuse each other
//! cleanly. New messages are appended at the end of [`Msg`].

use serde::{Deserialize, Serialize};

use crate::error::ProtoError;

/// The protocol version this build speaks. 26: a destination restores a
/// unix socket with no name and no live peer (fd kind `UnixLone` of image
/// part `files`, part `lonesockets`, format 1.19); a source moves such a
/// process only to a version-26 destination. 25: a destination restores a
/// unix socket pair the process held alone (fd kind `UnixPair` of image
/// part `files`, part `socketpairs`, format 1.18); a source moves such a
/// process only to a version-25 destination. 24: a destination restores a
/// named pipe the process held (fd kind `Fifo` of image part `files`,
/// format 1.16); a source moves such a process only to a version-24
/// destination, which a version-23 one would refuse only once the image
/// had travelled, with a message that does not say why; older versions are
/// still spoken (for every other process). 23: a destination restores a
/// process's seccomp filters (image part `seccomp`, format 1.15); a source
/// moves a process with filters only to a version-23 destination, since an
/// older one would restore it without them, so older versions are still
/// spoken (for every other process). 22: an ampom destination asks
/// for the pages it predicts in `PrefetchRequest`, apart from the pages its
/// faults wait for (`PageRequest`), and asks again in a `PageRequest` for a
/// predicted page a fault then waits for; the source answers faults first
/// and lets only a bounded amount of predicted pages be on their way ahead
/// of the next fault's answer (§6.3a); only to a version-22 source, so
/// older versions are still spoken (their predictions are page requests).
/// 21: the destination of
/// iterative rounds answers each `RoundDone` with `RoundStored` once it has
/// stored the round and made room for the next one, and the source waits
/// for it before it goes on (or stops the process), so that a stop never
/// waits behind pages the destination has yet to store (§6.3b); only to a
/// version-21 source, and a source waits for it only from a version-21
/// destination, so older versions are still spoken (their sources wait for
/// the link to carry the round). 20: assisted-post-copy's source
/// offers a skeleton after round 0 (`Skeleton`, §6.3e), so that its stop
/// only brings that skeleton up; only to a version-20 destination, so older
/// versions are still spoken (they restore at the stop). 19: a run of pages may travel
/// as its LZ4 block (`PageLz4`) wherever pages travel as `PageData`, and a
/// piece of an image file as its LZ4 block (`ImageLz4`) wherever it would
/// travel as `ImageChunk`, when the sender finds its link slow (§6.1,
/// "Pages compressed"); only to a version-19 destination, so older
/// versions are still spoken (their pages and images go as they are). 18: a page that an iterative
/// migration sends again may travel as what changed in it since the copy
/// the destination holds (`PageDeltas`, §6.1, "Pages sent again as their
/// changes"); only to a version-18 destination, so older versions are still
/// spoken (their pages go whole). 17: a run of pages that are all
/// zeros may travel as `PageZeros`, an address and a count, wherever pages
/// travel as `PageData` (§6.1, "Pages of zeros"); only to a version-17
/// destination, so older versions are still spoken (their pages carry
/// every byte). 16: a file of an image may
/// carry runs of zero bytes as `ImageZeros`, a length, instead of the bytes
/// (§6.3, "Runs of zeros"); only to a version-16 destination, so older
/// versions are still spoken (their images carry every byte). 15: the destination keeps the
/// page data of the skeleton's image (`pages.pmig`) until the image of the
/// stop is in, and the source sends that image's page data against it too,
/// page by page at the same address (§6.3i); only to a version-15
/// destination, so older versions are still spoken (their stops carry every
/// page saved). 14: the image of the stop that
/// follows a held skeleton may take runs of bytes from the skeleton's
/// image, which the destination has already (`ImageCopy`, §6.3i), instead
/// of carrying them again; only to a version-14 destination, so older
/// versions are still spoken (their stops carry every byte). 13: a migration's source first
/// sends `Listening`, the address its daemon listens on, so that a
/// destination whose daemon has no `--peer` entry for it can still open the
/// answers' connection and take a migration over after a crash (§6.3a);
/// only to a version-13 destination, so older versions are still spoken
/// (without `--peer`, their answers travel with the push). 12: the destination of a lazy
/// migration sends its page requests on the answers' connection once that
/// is up, and the source reads them there (§6.3a); only to a version-12
/// source, so older versions are still spoken (their requests travel with
/// the push). 11: a post-copy, ampom,
/// demand-paging or freeze-free source
/// may capture the process while it runs and send that image first, as a
/// skeleton (`Skeleton`, then the image's files), which the destination
/// restores and holds ahead of the stop and answers with `SkeletonReady`
/// (§6.3i); only to a version-11 destination, so older versions are still
/// spoken (their stops are longer). 10: the destination of a lazy
/// migration (post-copy, ampom, assisted-post-copy, freeze-free) sends
/// `FaultWaits`, how long its faults waited, before `PagesDone`; only to a
/// version-10 source, so older versions are still spoken (their reports
/// lack the figures). 9: `freeze-free` resumes the
/// process before the page store is written (§6.3d): `PageStore` comes
/// first, then demand-paging's preparation and handover, and the store is
/// complete when the file `complete` appears in it. Both sides refuse
/// `freeze-free` with a version-7 or -8 peer, which would flush at the
/// stop; every other strategy is unchanged, so those versions are still
/// spoken. 8: the holder of a frozen
/// original passes the signals sent to it after its capture to the
/// destination (`Signals`, §6.3h); a version-7 destination refuses them
/// (unexpected message) and they are lost, as they were before, so version
/// 7 is still spoken. 7: the destination of a lazy
/// migration (post-copy, ampom, demand-paging, assisted-post-copy) opens a
/// second connection, `Answers`, on which the source answers page requests
/// apart from the background push (§6.3a); a version-6 source would refuse
/// it. 6: a demand-paging source sends
/// post-copy's round of file copies before the stop and `NotOwed` after it
/// (§6.3c), which a version-5 destination refuses. 5: a post-copy or ampom source
/// may send the private copies of file mappings as a round of `PageData`
/// before the image of the stop (§6.5), which a version-4 destination
/// refuses. 4: a post-copy or ampom image
/// lists writable private anonymous memory as wholly owed, and the source
/// sends `NotOwed` for the pages it never had once the process runs at the
/// destination (§6.5); a version-3 destination would never learn them. 3: a stop-copy image carries no
/// private anonymous pages, which follow it as `PageData` (docs/protocol.md
/// §6.3); a version-2 destination would restore it without them. 2: a
/// pre-copy destination restores lazily from its local copy and reports
/// `PagesDone` before the source commits (§6.3b).
pub const PROTO_VERSION: u16 = 26;
/// The first version whose destinations restore a unix socket with no
/// name and no live peer (Java's pre-close socket).
pub const UNIX_LONE: u16 = 26;
/// The first version whose destinations restore unix socket pairs.
pub const UNIX_PAIRS: u16 = 25;
/// The first version whose destinations restore named pipes.
pub const NAMED_PIPES: u16 = 24;
/// The first version whose destinations restore seccomp filters.
pub const SECCOMP_FILTERS: u16 = 23;
/// The first version that takes `PrefetchRequest`.
pub const PREFETCH_REQUEST: u16 = 22;
/// The first version that answers `RoundDone` with `RoundStored`.
pub const ROUND_STORED: u16 = 21;
/// The first version that takes a `Skeleton` after assisted-post-copy's
/// round 0.
pub const ASSISTED_SKELETON: u16 = 20;
/// The first version that takes `PageLz4`.
pub const PAGE_LZ4: u16 = 19;
/// Most pages one `PageLz4` carries.
pub const MAX_LZ4_PAGES: u32 = 256;
/// Most bytes one `ImageLz4` stands for.
pub const MAX_IMAGE_LZ4: u32 = 1 << 20;
/// The first version that takes `PageDeltas`.
pub const PAGE_DELTAS: u16 = 18;
/// Most pages one `PageDeltas` carries.
pub const MAX_DELTA_PAGES: u32 = 4096;
/// The first version that takes `PageZeros`.
pub const PAGE_ZEROS: u16 = 17;
/// Most pages one `PageZeros` stands for.
pub const MAX_ZERO_PAGES: u32 = 256;
/// The first version that takes `ImageZeros`.
pub const IMAGE_ZEROS: u16 = 16;
/// The first version whose destinations keep the page data of a skeleton's
/// image until the image of the stop is in, so that the source may send
/// that image's page data against it too (`ImageCopy` into `pages.pmig`).
pub const PAGES_AGAINST_SKELETON: u16 = 15;
/// The first version that takes `ImageCopy`.
pub const IMAGE_COPY: u16 = 14;
/// The first version whose migration sources send `Listening`.
pub const LISTENING: u16 = 13;
/// The first version whose lazy destinations send their page requests on
/// the answers' connection, and whose sources read them there.
pub const REQUESTS_ON_ANSWERS: u16 = 12;
/// The first version that takes a skeleton (`Skeleton`).
pub const SKELETON: u16 = 11;
/// The first version whose lazy destinations send `FaultWaits`.
pub const FAULT_WAITS: u16 = 10;
/// Buckets of `FaultWaits::hist`: at most 5, 10, 20, 50, 100 ms, and longer.
pub const FAULT_WAIT_BUCKETS: usize = 6;
/// The first version whose `freeze-free` flushes after the resume.
pub const FREEZE_FREE_AFTER_RESUME: u16 = 9;
/// `Hello::features` bit: this node accepts AES-GCM transports and its CPU
/// accelerates AES-GCM. A node that prefers AES-GCM itself reaches such a peer
/// with it (docs/protocol.md §2), and every other peer with ChaChaPoly.
pub const FEATURE_AESGCM: u64 = 1;
/// The oldest protocol version this build can still speak.
pub const MIN_PROTO_VERSION: u16 = 7;

/// Largest frame body (and so largest encoded message plus attachment), in bytes.
pub const MAX_MESSAGE_SIZE: usize = 256 << 20;
/// Longest node name accepted in `Hello`.
pub const MAX_NODE_NAME: usize = 64;
/// Longest address accepted in `Listening`.
pub const MAX_LISTEN_ADDR: usize = 256;
/// Longest text accepted in `Error`.
pub const MAX_ERROR_TEXT: usize = 4096;
/// Largest number of pages in one `PageRequest`.
pub const MAX_PAGE_REQUEST: usize = 4096;
/// Largest number of signals in one `Signals`.
pub const MAX_LATE_SIGNALS: usize = 4096;
/// Size of a raw `siginfo_t` in `Signals`.
pub const SIGINFO_LEN: usize = 128;

/// Error codes carried by [`Msg::Error`].
pub mod code {
    /// The peers' protocol versions do not overlap.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// A message could not be decoded.
    pub const MALFORMED: u32 = 2;
    /// A well-formed message arrived in a state where it is not allowed.
    pub const UNEXPECTED: u32 = 3;
    /// The request was understood but refused (permissions, policy).
    pub const REFUSED: u32 = 4;
    /// The peer failed internally while handling the request.
    pub const INTERNAL: u32 = 5;
    /// Codes from this value on are free for the migration messages.
    pub const FIRST_APPLICATION_CODE: u32 = 100;
    /// Migration: the destination does not implement the requested strategy.
    pub const UNSUPPORTED_STRATEGY: u32 = 100;
    /// Migration: the image arrived incomplete or failed verification.
    pub const BAD_IMAGE: u32 = 101;
    /// Migration: the destination could not restore the process.
    pub const RESTORE_FAILED: u32 = 102;
    /// Migration: the destination cannot take the process (busy, no space, …).
    pub const MIGRATION_REFUSED: u32 = 103;
}

/// Feature bits announced in [`Hello::features`]; the connection uses the intersection.
pub mod feature {
    /// No optional features are defined yet.
    pub const NONE: u64 = 0;
}

/// First message on every connection, in both directions, right after the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The newest protocol version the sender speaks.
    pub proto_version: u16,
    /// The oldest protocol version the sender still speaks.
    pub min_version: u16,
    /// The sender's node name (e.g. `n2`).
    pub node: String,
    /// Optional feature bits (see [`feature`]).
    pub features: u64,
}

impl Hello {
    /// The version both sides will use, or `None` if their ranges do not overlap.
    ///
    /// The rule is symmetric: `v = min(a.proto, b.proto)` and both minimums must be `<= v`.
    pub fn negotiate(&self, peer: &Hello) -> Option<u16> {
        let v = self.proto_version.min(peer.proto_version);
        (v >= self.min_version && v >= peer.min_version && v > 0).then_some(v)
    }
}

/// Every message of the protocol. Append new variants at the end only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Variant 0, frozen: version and identity exchange.
    Hello(Hello),
    /// Variant 1, frozen: the sender refuses or failed; usually followed by a close.
    Error {
        code: u32,
        text: String,
    },
    /// Liveness and round-trip measurement; answered by `Pong` with the same `seq`.
    Ping {
        seq: u64,
    },
    Pong {
        seq: u64,
    },
    // Migration messages are appended below (see docs/protocol.md, "Migration messages").
    /// 4, source → destination: asks the destination to take a process.
    MigrateOffer(Offer),
    /// 5, destination → source: the offer is accepted; image data may follow.
    MigrateAccept {
        id: u64,
    },
    /// 6, source → destination: the next `size` bytes of image data belong to file `name`
    /// of the image directory; they follow in `ImageChunk` messages.
    ImageFile {
        id: u64,
        name: String,
        size: u64,
    },
    /// 7, source → destination: attachment = bytes of the current file, at `offset`
    /// (chunks arrive in order, without gaps).
    ImageChunk {
        id: u64,
        offset: u64,
    },
    /// 8, source → destination: every file was sent (`files` files, `bytes` bytes in
    /// all); the process is stopped on the source. The destination verifies and restores.
    ImageDone {
        id: u64,
        files: u32,
        bytes: u64,
    },
    /// 9, destination → source: the process runs on the destination as `pid`.
    /// `restore_us`: from `ImageDone` to the resume; `since_resume_us`: from the
    /// resume to sending this message.
    Restored {
        id: u64,
        pid: i32,
        original_pid: i32,
        restore_us: u64,
        since_resume_us: u64,
    },
    /// 10, source → destination: the source copy is gone; the migration is final.
    Commit {
        id: u64,
    },
    /// 11, either direction: migration `id` is abandoned; the receiver undoes its part.
    Abort {
        id: u64,
        reason: String,
    },
    /// 12, source → destination: pages of the process at source address
    /// `addr`, as the attachment (a multiple of 4096 bytes). Pre-copy rounds,
    /// post-copy pushes and answers to `PageRequest` all use it.
    PageData {
        id: u64,
        addr: u64,
    },
    /// 13, destination → source: send these source pages first (faults,
    /// then prefetch). At most `MAX_PAGE_REQUEST` pages.
    PageRequest {
        id: u64,
        pages: Vec<u64>,
    },
    /// 14, source → destination: pre-copy round `round` is complete.
    RoundDone {
        id: u64,
        round: u32,
        pages: u64,
    },
    /// 15, destination → source: nothing is owed any more (post-copy); the
    /// source may let its copy go.
    PagesDone {
        id: u64,
        installed: u64,
        remote_faults: u64,
        prefetched: u64,
        prefetch_hits: u64,
    },
    /// 16, source → destination (flushing, freeze-free): the pages not in the
    /// image that follows are in the page store image at `path` (a directory
    /// on a file system both nodes share, named after the migration id).
    PageStore {
        id: u64,
        path: String,
    },
    /// 17, source → destination (assisted-post-copy): these source pages,
    /// written since pre-copy round 0, are owed: the destination's copy from
    /// round 0 is stale. `last` ends the list. At most `MAX_PAGE_REQUEST`
    /// page-aligned ranges (start, length) per message.
    Owed {
        id: u64,
        ranges: Vec<(u64, u64)>,
        last: bool,
    },
    /// 18, either direction: a message of a cluster service (remote execution,
    /// host selection, …; see [`service`]). The body is the service's own
    /// message, encoded by that service (postcard) and versioned by it, sent
    /// as the frame's attachment. The first `Service` message on a connection
    /// picks the service for the rest of the connection.
    Service {
        service: u16,
    },
    /// 19, destination → source, first message on a new connection: the
    /// destination daemon restarted during the post-copy phase of migration
    /// `id` and took the process (now `pid` there) over; the source serves
    /// its owed pages on this connection from now on.
    Resume {
        id: u64,
        pid: i32,
    },
    /// 20, source → destination (post-copy, ampom; protocol 4): the image
    /// listed these source pages as owed, but the source never had them
    /// (never touched, or released): they are zero pages, and nothing is
    /// owed there. Sent once the process runs at the destination, after the
    /// source has scanned its frozen copy. `last` ends the list. At most
    /// `MAX_PAGE_REQUEST` page-aligned ranges (start, length) per message.
    NotOwed {
        id: u64,
        ranges: Vec<(u64, u64)>,
        last: bool,
    },
    /// 21, destination → source, first message on a second connection of a
    /// lazy migration `id` (protocol 7): from now on the source sends the
    /// answers to page requests (`PageData`) on this connection, while the
    /// background push stays on the first, so that an answer never waits
    /// behind pushed pages queued in the network or in the destination's
    /// receive queue. The requests themselves still come on the first
    /// connection. Nothing else is sent on it, in either direction.
    Answers {
        id: u64,
    },
    /// 22, source node → destination, first message on a new connection
    /// (protocol 8), from the holder of the frozen original of migration
    /// `id`: signals sent to the original after its capture (it stays
    /// frozen while pages are owed). The destination delivers them to the
    /// process it restored for `id` and answers `SignalsDelivered`. At
    /// most `MAX_LATE_SIGNALS`.
    Signals {
        id: u64,
        signals: Vec<LateSignal>,
    },
    /// 23, destination → source: of the last `Signals`, how many were
    /// delivered.
    SignalsDelivered {
        id: u64,
        delivered: u32,
    },
    /// 24, destination → source, just before `PagesDone` (version 10): how
    /// long the process's faults on owed pages waited for their page, from
    /// the fault read to the page installed: the longest, the sum, and how
    /// many waited at most 5, 10, 20, 50, 100 ms and longer
    /// (`FAULT_WAIT_BUCKETS` counts).
    FaultWaits {
        id: u64,
        max_us: u64,
        total_us: u64,
        hist: Vec<u64>,
    },
    /// 25, source → destination, during the preparation (version 11): the
    /// image whose files follow (`ImageFile`, `ImageChunk`, `ImageDone`) is
    /// a capture made while the process runs, to be restored as a skeleton
    /// and held until the image of the stop (§6.3i).
    Skeleton {
        id: u64,
    },
    /// 26, destination → source: the skeleton is restored and held
    /// (`ready`), or it is not, and `why` (the migration goes on without
    /// it).
    SkeletonReady {
        id: u64,
        ready: bool,
        why: String,
    },
    /// 27, destination → source, right before `Restored`, when it held a
    /// skeleton: whether the process that runs is that skeleton brought up
    /// to the image of the stop (`used`), or, because it could not follow
    /// the process's changes (`why`), that image restored the ordinary way.
    SkeletonUsed {
        id: u64,
        used: bool,
        why: String,
    },
    /// 28, source → destination, before `MigrateOffer` (version 13): the
    /// `ADDR:PORT` the sender's daemon listens on (its `--listen`). The
    /// destination reaches the source there for the answers' connection
    /// and for a takeover when its own `--peer` list does not name the
    /// source; an unspecified or loopback address stands for the one this
    /// connection comes from ([`reachable_at`]).
    Listening {
        addr: String,
    },
    /// 29, source → destination, within an image that follows a held
    /// skeleton (version 14): the next `len` bytes of the current file are
    /// those at `from` in the file of the same name of the skeleton's
    /// image, as the destination received it (§6.3i). Like `ImageChunk`,
    /// it continues the file where it ended.
    ImageCopy {
        id: u64,
        from: u64,
        len: u64,
    },
    /// 30, source → destination, within any image (version 16): the next
    /// `len` bytes of the current file are zeros. Like `ImageChunk`, it
    /// continues the file where it ended.
    ImageZeros {
        id: u64,
        len: u64,
    },
    /// 31, source → destination, wherever `PageData` may come (version
    /// 17): the `pages` pages of the process at source address `addr` are
    /// all zeros. It stands for a `PageData` of that many zero bytes, and
    /// the destination treats it as one. 1..=`MAX_ZERO_PAGES` pages.
    PageZeros {
        id: u64,
        addr: u64,
        pages: u32,
    },
    /// 32, source → destination, among the rounds of an iterative migration
    /// (version 18): `pages` pages, each as the bytes that changed since the
    /// copy the destination holds of it; the attachment is their records
    /// ([`crate::page_delta`]). 1..=`MAX_DELTA_PAGES` pages.
    PageDeltas {
        id: u64,
        pages: u32,
    },
    /// 33, source → destination, wherever `PageData` may come (version
    /// 19): the `pages` pages of the process at source address `addr`, as
    /// one LZ4 block (the attachment) that gives exactly `pages * 4096`
    /// bytes. It stands for the `PageData` of those bytes, and the
    /// destination's receiver turns it into one before anything else sees
    /// it ([`crate::compress`]). 1..=`MAX_LZ4_PAGES` pages.
    PageLz4 {
        id: u64,
        addr: u64,
        pages: u32,
    },
    /// 34, source → destination, within any image (version 19): the next
    /// `len` bytes of the current file, at `offset`, as one LZ4 block (the
    /// attachment). It stands for the `ImageChunk` of those bytes, and the
    /// destination's receiver turns it into one before anything else sees
    /// it. 1..=`MAX_IMAGE_LZ4` bytes.
    ImageLz4 {
        id: u64,
        offset: u64,
        len: u32,
    },
    /// 35, destination → source, after each `RoundDone` (version 21): every
    /// page of round `round` is stored, and the destination has made room
    /// for the next round. The source sends nothing more until it has it.
    RoundStored {
        id: u64,
        round: u32,
    },
    /// 36, destination → source (version 22): pages predicted to be needed
    /// soon (ampom's prefetch), to send behind any `PageRequest`'s pages.
    /// At most `MAX_PAGE_REQUEST` pages.
    PrefetchRequest {
        id: u64,
        pages: Vec<u64>,
    },
}

/// `pages * 4096` zero bytes, for a `PageZeros` of at most
/// [`MAX_ZERO_PAGES`] pages (fewer are given if asked for more).
pub fn zero_pages(pages: u32) -> &'static [u8] {
    static ZEROS: [u8; MAX_ZERO_PAGES as usize * 4096] = [0; MAX_ZERO_PAGES as usize * 4096];
    &ZEROS[..pages.min(MAX_ZERO_PAGES) as usize * 4096]
}

/// Whether the page (or any run of bytes) `p` is all zeros. Memory that
/// holds data mostly has a non-zero byte among its first eight, which is
/// all this reads of it; zeros are read in blocks the compiler vectorizes.
pub fn is_zero(p: &[u8]) -> bool {
    let (head, rest) = p.split_at(p.len().min(8));
    head.iter().all(|&b| b == 0)
        && rest
            .chunks(64)
            .all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

/// Where the daemon that sent `Listening { addr: advertised }` on a
/// connection from `seen_from` (the connection's peer, `IP:PORT`) can be
/// reached: `advertised` itself, unless its address is unspecified
/// (`0.0.0.0`, `::`) or a loopback one seen from elsewhere, which stand for
/// the address the connection comes from, with the advertised port. `None`
/// if either is not an `IP:PORT`.
pub fn reachable_at(advertised: &str, seen_from: &str) -> Option<std::net::SocketAddr> {
    let a: std::net::SocketAddr = advertised.parse().ok()?;
    let from: std::net::SocketAddr = seen_from.parse().ok()?;
    let stands_for_peer =
        a.ip().is_unspecified() || (a.ip().is_loopback() && !from.ip().is_loopback());
    Some(if stands_for_peer {
        std::net::SocketAddr::new(from.ip(), a.port())
    } else {
        a
    })
}

/// A signal in [`Msg::Signals`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateSignal {
    /// The original thread it was sent to (`tgkill`), or 0: to the process.
    pub tid: i32,
    /// Whether that thread was the main thread.
    pub main_thread: bool,
    /// The raw `siginfo_t` (`SIGINFO_LEN` bytes) as the original had it queued.
    pub info: Vec<u8>,
}

/// Service numbers carried by [`Msg::Service`].
pub mod service {
    /// Remote execution with a home node (`pmig run`, `pmig ps`, `pmig kill`).
    pub const EXEC: u16 = 1;
    /// Host selection (Sprite's migration server).
    pub const SELECTOR: u16 = 2;
    /// Eviction and load balancing between daemons.
    pub const BALANCE: u16 = 3;
}

/// Longest strategy name accepted in [`Offer`].
pub const MAX_STRATEGY_NAME: usize = 32;
/// Longest process name (`comm`) accepted in [`Offer`].
pub const MAX_COMM: usize = 64;
/// Longest page store path accepted in `PageStore`.
pub const MAX_STORE_PATH: usize = 1024;
/// Longest image file name accepted in `ImageFile`.
pub const MAX_FILE_NAME: usize = 64;

/// Body of [`Msg::MigrateOffer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// Chosen by the source; unique per source node and run of its daemon.
    pub id: u64,
    /// Strategy name as on the command line (`stop-copy`, …).
    pub strategy: String,
    /// The process's pid on the source.
    pub pid: i32,
    /// Its real uid (the destination restores it with its own credentials).
    pub uid: u32,
    /// Its name (`/proc/PID/comm`), for logs.
    pub comm: String,
    /// The source node's name.
    pub source_node: String,
    /// Expected size of the transfer in bytes (0: unknown), for progress and space checks.
    pub bytes_hint: u64,
}

/// True if `name` may be used as a file name inside a staging directory: 1..=64 bytes of
/// `[A-Za-z0-9._-]`, not starting with a dot (so never `.` or `..`, never a path).
pub fn is_safe_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FILE_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl Msg {
    /// A short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Hello(_) => "Hello",
            Msg::Error { .. } => "Error",
            Msg::Ping { .. } => "Ping",
            Msg::Pong { .. } => "Pong",
            Msg::MigrateOffer(_) => "MigrateOffer",
            Msg::MigrateAccept { .. } => "MigrateAccept",
            Msg::ImageFile { .. } => "ImageFile",
            Msg::ImageChunk { .. } => "ImageChunk",
            Msg::ImageDone { .. } => "ImageDone",
            Msg::Restored { .. } => "Restored",
            Msg::Commit { .. } => "Commit",
            Msg::Abort { .. } => "Abort",
            Msg::PageData { .. } => "PageData",
            Msg::PageRequest { .. } => "PageRequest",
            Msg::RoundDone { .. } => "RoundDone",
            Msg::PagesDone { .. } => "PagesDone",
            Msg::PageStore { .. } => "PageStore",
            Msg::Owed { .. } => "Owed",
            Msg::Service { .. } => "Service",
            Msg::Resume { .. } => "Resume",
            Msg::NotOwed { .. } => "NotOwed",
            Msg::Answers { .. } => "Answers",
            Msg::Signals { .. } => "Signals",
            Msg::SignalsDelivered { .. } => "SignalsDelivered",
            Msg::FaultWaits { .. } => "FaultWaits",
            Msg::Skeleton { .. } => "Skeleton",
            Msg::SkeletonReady { .. } => "SkeletonReady",
            Msg::SkeletonUsed { .. } => "SkeletonUsed",
            Msg::Listening { .. } => "Listening",
            Msg::ImageCopy { .. } => "ImageCopy",
            Msg::ImageZeros { .. } => "ImageZeros",
            Msg::PageZeros { .. } => "PageZeros",
            Msg::PageDeltas { .. } => "PageDeltas",
            Msg::PageLz4 { .. } => "PageLz4",
            Msg::ImageLz4 { .. } => "ImageLz4",
            Msg::RoundStored { .. } => "RoundStored",
            Msg::PrefetchRequest { .. } => "PrefetchRequest",
        }
    }

    /// Semantic checks beyond what the type system enforces.
    pub fn validate(&self) -> Result<(), ProtoError> {
        match self {
            Msg::PageData { addr, .. } if addr % 4096 != 0 => {
                return Err(ProtoError::Malformed(format!(
                    "PageData: address {addr:#x} is not page aligned"
                )));
            }
            Msg::PageZeros { addr, pages, .. }
                if addr % 4096 != 0
                    || *pages == 0
                    || *pages > MAX_ZERO_PAGES
                    || addr.checked_add(*pages as u64 * 4096).is_none() =>
            {
                return Err(ProtoError::Malformed(format!(
                    "PageZeros: {pages} pages at {addr:#x}; 1..={MAX_ZERO_PAGES} pages at a page-aligned address"
                )));
            }
            Msg::PageLz4 { addr, pages, .. }
                if addr % 4096 != 0
                    || *pages == 0
                    || *pages > MAX_LZ4_PAGES
                    || addr.checked_add(*pages as u64 * 4096).is_none() =>
            {
                return Err(ProtoError::Malformed(format!(
                    "PageLz4: {pages} pages at {addr:#x}; 1..={MAX_LZ4_PAGES} pages at a page-aligned address"
                )));
            }
            Msg::ImageLz4 { len, .. } if *len == 0 || *len > MAX_IMAGE_LZ4 => {
                return Err(ProtoError::Malformed(format!(
                    "ImageLz4: {len} bytes; 1..={MAX_IMAGE_LZ4}"
                )));
            }
            Msg::PageDeltas { pages, .. } if *pages == 0 || *pages > MAX_DELTA_PAGES => {
                return Err(ProtoError::Malformed(format!(
                    "PageDeltas: {pages} pages; 1..={MAX_DELTA_PAGES}"
                )));
            }
            Msg::PageRequest { pages, .. } | Msg::PrefetchRequest { pages, .. }
                if pages.len() > MAX_PAGE_REQUEST || pages.iter().any(|p| p % 4096 != 0) =>
            {
                return Err(ProtoError::Malformed(format!(
                    "{}: at most {MAX_PAGE_REQUEST} page-aligned addresses, got {}",
                    self.kind(),
                    pages.len()
                )));
            }
            Msg::Hello(h) => {
                if h.node.is_empty() || h.node.len() > MAX_NODE_NAME {
                    return Err(ProtoError::Malformed(format!(
                        "Hello: node name must be 1..={MAX_NODE_NAME} bytes, got {}",
                        h.node.len()
                    )));
                }
                if h.node.chars().any(|c| c.is_control()) {
                    return Err(ProtoError::Malformed(
                        "Hello: node name contains control characters".into(),
                    ));
                }
                if h.min_version > h.proto_version {
                    return Err(ProtoError::Malformed(format!(
                        "Hello: min_version {} is above proto_version {}",
                        h.min_version, h.proto_version
                    )));
                }
            }
            Msg::Error { text, .. }
            | Msg::Abort { reason: text, .. }
            | Msg::SkeletonReady { why: text, .. }
            | Msg::SkeletonUsed { why: text, .. }
                if text.len() > MAX_ERROR_TEXT =>
            {
                return Err(ProtoError::Malformed(format!(
                    "{}: text of {} bytes exceeds {MAX_ERROR_TEXT}",
                    self.kind(),
                    text.len()
                )));
            }
            Msg::MigrateOffer(o) => {
                let name_ok = |s: &str, max: usize| {
                    !s.is_empty() && s.len() <= max && !s.chars().any(|c| c.is_control())
                };
                if !name_ok(&o.strategy, MAX_STRATEGY_NAME) {
                    return Err(ProtoError::Malformed(format!(
                        "MigrateOffer: strategy name must be 1..={MAX_STRATEGY_NAME} printable bytes"
                    )));
                }
                if o.comm.len() > MAX_COMM || o.comm.chars().any(|c| c.is_control()) {
                    return Err(ProtoError::Malformed(format!(
                        "MigrateOffer: process name must be at most {MAX_COMM} printable bytes"
                    )));
                }
                if !name_ok(&o.source_node, MAX_NODE_NAME) {
                    return Err(ProtoError::Malformed(format!(
                        "MigrateOffer: node name must be 1..={MAX_NODE_NAME} printable bytes"
                    )));
                }
                if o.pid <= 0 {
                    return Err(ProtoError::Malformed(format!(
                        "MigrateOffer: invalid pid {}",
                        o.pid
                    )));
                }
            }
            Msg::Owed { ranges, .. } | Msg::NotOwed { ranges, .. }
                if ranges.len() > MAX_PAGE_REQUEST
                    || ranges.iter().any(|(s, l)| {
                        s % 4096 != 0 || l % 4096 != 0 || s.checked_add(*l).is_none()
                    }) =>
            {
                return Err(ProtoError::Malformed(format!(
                    "{}: at most {MAX_PAGE_REQUEST} page-aligned ranges, got {}",
                    self.kind(),
                    ranges.len()
                )));
            }
            Msg::PageStore { id, path } => {
                let p = std::path::Path::new(path);
                if path.len() > MAX_STORE_PATH
                    || !p.is_absolute()
                    || path.chars().any(|c| c.is_control())
                    || path
                        .split('/')
                        .skip(1)
                        .any(|c| c.is_empty() || c == "." || c == "..")
                    || p.file_name().and_then(|n| n.to_str()) != Some(&id.to_string())
                {
                    return Err(ProtoError::Malformed(format!(
                        "PageStore: the path must be absolute, normal, at most {MAX_STORE_PATH} bytes and end in the migration id {id}"
                    )));
                }
            }
            Msg::Signals { signals, .. }
                if signals.len() > MAX_LATE_SIGNALS
                    || signals
                        .iter()
                        .any(|s| s.info.len() != SIGINFO_LEN || s.tid < 0) =>
            {
                return Err(ProtoError::Malformed(format!(
                    "Signals: at most {MAX_LATE_SIGNALS} signals of {SIGINFO_LEN} bytes each, got {}",
                    signals.len()
                )));
            }
            Msg::Listening { addr }
                if addr.is_empty()
                    || addr.len() > MAX_LISTEN_ADDR
                    || addr.chars().any(|c| c.is_control()) =>
            {
                return Err(ProtoError::Malformed(format!(
                    "Listening: the address must be 1..={MAX_LISTEN_ADDR} printable bytes"
                )));
            }
            Msg::FaultWaits { hist, .. } if hist.len() != FAULT_WAIT_BUCKETS => {
                return Err(ProtoError::Malformed(format!(
                    "FaultWaits: {FAULT_WAIT_BUCKETS} counts, got {}",
                    hist.len()
                )));
            }
            Msg::ImageFile { name, .. } if !is_safe_file_name(name) => {
                return Err(ProtoError::Malformed(format!(
                    "ImageFile: invalid file name {:?} (1..={MAX_FILE_NAME} bytes of [A-Za-z0-9._-], no leading dot)",
                    name.chars().take(80).collect::<String>()
                )));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Encodes a message (without attachment) into a new buffer.
pub fn encode(msg: &Msg) -> Result<Vec<u8>, ProtoError> {
    let v = postcard::to_stdvec(msg).map_err(|e| ProtoError::Malformed(format!("encode: {e}")))?;
    if v.len() > MAX_MESSAGE_SIZE {
        return Err(ProtoError::TooLarge {
            size: v.len() as u64,
            max: MAX_MESSAGE_SIZE,
        });
    }
    Ok(v)
}

/// Appends the encoding of `msg` to `out`.
pub fn encode_into(msg: &Msg, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let v = postcard::to_extend(msg, std::mem::take(out))
        .map_err(|e| ProtoError::Malformed(format!("encode: {e}")))?;
    *out = v;
    Ok(())
}

/// Decodes one message that fills `buf` exactly. Never panics; rejects inputs above
/// [`MAX_MESSAGE_SIZE`], truncated input, unknown variants, trailing bytes and
/// semantically invalid fields.
pub fn decode(buf: &[u8]) -> Result<Msg, ProtoError> {
    let (msg, rest) = decode_with_attachment(buf)?;
    if !rest.is_empty() {
        return Err(ProtoError::Malformed(format!(
            "{} trailing bytes after {} message",
            rest.len(),
            msg.kind()
        )));
    }
    Ok(msg)
}

/// Decodes one message at the start of `buf` and returns it with the remaining bytes
/// (the attachment). Same guarantees as [`decode`].
pub fn decode_with_attachment(buf: &[u8]) -> Result<(Msg, &[u8]), ProtoError> {
    if buf.len() > MAX_MESSAGE_SIZE {
        return Err(ProtoError::TooLarge {
            size: buf.len() as u64,
            max: MAX_MESSAGE_SIZE,
        });
    }
    if buf.is_empty() {
        return Err(ProtoError::Malformed("empty message".into()));
    }
    let (msg, rest): (Msg, &[u8]) = postcard::take_from_bytes(buf).map_err(|e| {
        let ty = match leading_varint(buf) {
            Some(t) => format!("message type {t}"),
            None => "message with invalid type".to_string(),
        };
        let what = match e {
            postcard::Error::DeserializeUnexpectedEnd => "truncated".to_string(),
            postcard::Error::SerdeDeCustom | postcard::Error::DeserializeBadEnum => {
                "unknown type or invalid field".to_string()
            }
            other => other.to_string(),
        };
        ProtoError::Malformed(format!("{ty}: {what}"))
    })?;
    msg.validate()?;
    Ok((msg, rest))
}

/// The postcard varint at the start of `buf` (the enum variant index), if well-formed.
fn leading_varint(buf: &[u8]) -> Option<u32> {
    let mut v: u32 = 0;
    for (i, &b) in buf.iter().take(5).enumerate() {
        v |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(v: u16, min: u16) -> Hello {
        Hello {
            proto_version: v,
            min_version: min,
            node: "n1".into(),
            features: 0,
        }
    }

    #[test]
    fn page_store_and_owed_are_checked() {
        let ok = |m: Msg| m.validate().is_ok();
        let store = |p: &str| Msg::PageStore {
            id: 42,
            path: p.into(),
        };
        assert!(ok(store("/var/tmp/pmig-pagestore/42")));
        for bad in [
            "var/tmp/42",
            "/var/tmp/../etc/42",
            "/var/tmp/./42",
            "/var/tmp/43",
            "/",
            "/var/tmp/4\n2",
        ] {
            assert!(!ok(store(bad)), "{bad}");
        }
        assert!(!ok(store(&format!("/{}/42", "a".repeat(MAX_STORE_PATH)))));
        let owed = |r: Vec<(u64, u64)>| Msg::Owed {
            id: 1,
            ranges: r,
            last: true,
        };
        let waits = |n: usize| Msg::FaultWaits {
            id: 1,
            max_us: 10,
            total_us: 10,
            hist: vec![1; n],
        };
        assert!(ok(waits(FAULT_WAIT_BUCKETS)));
        assert!(!ok(waits(FAULT_WAIT_BUCKETS - 1)));
        assert!(!ok(waits(FAULT_WAIT_BUCKETS + 1)));
        assert!(ok(owed(vec![(0x1000, 0x2000)])));
        assert!(ok(owed(vec![])));
        assert!(!ok(owed(vec![(0x1001, 0x1000)])));
        assert!(!ok(owed(vec![(0x1000, 0x10)])));
        assert!(!ok(owed(vec![(!0xfff, 0x2000)])));
        assert!(!ok(owed(vec![(0, 4096); MAX_PAGE_REQUEST + 1])));
        let not_owed = |r: Vec<(u64, u64)>| Msg::NotOwed {
            id: 1,
            ranges: r,
            last: false,
        };
        assert!(ok(not_owed(vec![(0x1000, 0x2000)])));
        assert!(!ok(not_owed(vec![(0x1000, 0x10)])));
        assert!(!ok(not_owed(vec![(!0xfff, 0x2000)])));
        assert!(!ok(not_owed(vec![(0, 4096); MAX_PAGE_REQUEST + 1])));
        for ask in [
            |pages| Msg::PageRequest { id: 1, pages },
            |pages| Msg::PrefetchRequest { id: 1, pages },
        ] {
            assert!(ok(ask(vec![0x1000; MAX_PAGE_REQUEST])));
            assert!(!ok(ask(vec![0x1000; MAX_PAGE_REQUEST + 1])));
            assert!(!ok(ask(vec![0x1000, 0x1800])));
        }
        let m = store("/var/tmp/pmig-pagestore/42");
        assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
        let signals = |n: usize, len: usize, tid: i32| Msg::Signals {
            id: 1,
            signals: vec![
                LateSignal {
                    tid,
                    main_thread: true,
                    info: vec![0; len],
                };
                n
            ],
        };
        assert!(ok(signals(2, SIGINFO_LEN, 0)));
        assert!(!ok(signals(1, SIGINFO_LEN - 1, 0)));
        assert!(!ok(signals(1, SIGINFO_LEN, -1)));
        assert!(!ok(signals(MAX_LATE_SIGNALS + 1, SIGINFO_LEN, 0)));
    }

    #[test]
    fn roundtrip() {
        let msgs = [
            Msg::Hello(hello(1, 1)),
            Msg::Error {
                code: code::REFUSED,
                text: "nope".into(),
            },
            Msg::Ping { seq: u64::MAX },
            Msg::Pong { seq: 7 },
            Msg::MigrateOffer(Offer {
                id: 9,
                strategy: "stop-copy".into(),
                pid: 1234,
                uid: 1000,
                comm: "python3".into(),
                source_node: "n1".into(),
                bytes_hint: 1 << 30,
            }),
            Msg::MigrateAccept { id: 9 },
            Msg::ImageFile {
                id: 9,
                name: "pages.pmig".into(),
                size: 12345,
            },
            Msg::ImageChunk {
                id: 9,
                offset: 4096,
            },
            Msg::ImageDone {
                id: 9,
                files: 3,
                bytes: 99,
            },
            Msg::Restored {
                id: 9,
                pid: 77,
                original_pid: 1234,
                restore_us: 1,
                since_resume_us: 2,
            },
            Msg::Commit { id: 9 },
            Msg::Abort {
                id: 9,
                reason: "x".into(),
            },
            Msg::NotOwed {
                id: 9,
                ranges: vec![(0x7000_0000, 0x1000), (0x7000_3000, 0x4000)],
                last: true,
            },
            Msg::Answers { id: 9 },
            Msg::Signals {
                id: 9,
                signals: vec![LateSignal {
                    tid: 1235,
                    main_thread: false,
                    info: vec![7; SIGINFO_LEN],
                }],
            },
            Msg::SignalsDelivered {
                id: 9,
                delivered: 1,
            },
            Msg::FaultWaits {
                id: 9,
                max_us: 4100,
                total_us: 90_000,
                hist: vec![30, 2, 0, 0, 0, 0],
            },
            Msg::Skeleton { id: 9 },
            Msg::SkeletonReady {
                id: 9,
                ready: false,
                why: "its files changed".into(),
            },
            Msg::SkeletonUsed {
                id: 9,
                used: true,
                why: String::new(),
            },
            Msg::Listening {
                addr: "0.0.0.0:7070".into(),
            },
            Msg::ImageCopy {
                id: 9,
                from: 1 << 20,
                len: 4096,
            },
            Msg::ImageZeros { id: 9, len: 8192 },
            Msg::PageZeros {
                id: 9,
                addr: 0x7f00_0000_0000,
                pages: MAX_ZERO_PAGES,
            },
            Msg::PageDeltas {
                id: 9,
                pages: MAX_DELTA_PAGES,
            },
            Msg::PageLz4 {
                id: 9,
                addr: 0x7f00_0000_0000,
                pages: MAX_LZ4_PAGES,
            },
            Msg::ImageLz4 {
                id: 9,
                offset: 1 << 30,
                len: MAX_IMAGE_LZ4,
            },
            Msg::RoundStored { id: 9, round: 6 },
            Msg::PrefetchRequest {
                id: 9,
                pages: vec![0x1000, 0x7f00_0000_0000],
            },
        ];
        for m in msgs {
            let b = encode(&m).unwrap();
            assert_eq!(decode(&b).unwrap(), m);
            let mut b2 = b.clone();
            b2.extend_from_slice(b"attached");
            let (m2, att) = decode_with_attachment(&b2).unwrap();
            assert_eq!((m2, att), (m.clone(), &b"attached"[..]));
            assert!(decode(&b2).is_err());
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn zero_pages_are_told_from_pages_of_data() {
        let mut p = vec![0u8; 4096];
        assert!(is_zero(&p));
        assert!(is_zero(&[]));
        // A non-zero byte anywhere, in the first eight bytes, in a block,
        // or in the last byte of the last block, counts.
        for at in [0, 7, 8, 63, 64, 2049, 4095] {
            p[at] = 0x80;
            assert!(!is_zero(&p), "a byte at {at}");
            assert!(!is_zero(&p[..at + 1]), "a byte at the end, {at}");
            p[at] = 0;
        }
        assert_eq!(zero_pages(3).len(), 3 * 4096);
        assert_eq!(
            zero_pages(MAX_ZERO_PAGES + 1).len(),
            MAX_ZERO_PAGES as usize * 4096
        );
        assert!(is_zero(zero_pages(MAX_ZERO_PAGES)));
    }

    #[test]
    fn wire_layout_is_frozen() {
        // Hello is variant 0, Error variant 1: these bytes must never change.
        let b = encode(&Msg::Hello(hello(1, 1))).unwrap();
        assert_eq!(b, [0, 1, 1, 2, b'n', b'1', 0]);
        let b = encode(&Msg::Error {
            code: 1,
            text: "x".into(),
        })
        .unwrap();
        assert_eq!(b, [1, 1, 1, b'x']);
    }

    #[test]
    fn bad_inputs() {
        assert!(decode(&[]).is_err());
        let e = decode(&[100]).unwrap_err();
        assert!(e.to_string().contains("message type 100"), "{e}");
        // Hello with a 1 GiB node name length but no bytes.
        assert!(decode(&[0, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x04]).is_err());
        // Empty node name.
        assert!(decode(&[0, 1, 1, 0, 0]).is_err());
        // min above version.
        assert!(decode(&[0, 1, 2, 2, b'n', b'1', 0]).is_err());
        // Path traversal in an image file name.
        for bad in ["../etc/passwd", "a/b", ".hidden", "", "x\n"] {
            let m = Msg::ImageFile {
                id: 1,
                name: bad.into(),
                size: 0,
            };
            let b = postcard::to_stdvec(&m).unwrap();
            assert!(decode(&b).is_err(), "{bad:?}");
        }
        // Migration message indices are wire format too.
        assert_eq!(encode(&Msg::Commit { id: 5 }).unwrap(), [10, 5]);
        assert_eq!(
            encode(&Msg::ImageCopy {
                id: 1,
                from: 2,
                len: 3
            })
            .unwrap(),
            [29, 1, 2, 3]
        );
        assert_eq!(
            encode(&Msg::ImageZeros { id: 1, len: 2 }).unwrap(),
            [30, 1, 2]
        );
        assert_eq!(
            encode(&Msg::PageZeros {
                id: 1,
                addr: 4096,
                pages: 3
            })
            .unwrap(),
            [31, 1, 0x80, 0x20, 3]
        );
        let zeros = |addr: u64, pages: u32| Msg::PageZeros { id: 1, addr, pages }.validate();
        assert!(zeros(4096, 1).is_ok());
        assert!(zeros(4096, MAX_ZERO_PAGES).is_ok());
        for (addr, pages) in [
            (4096, 0),
            (4096, MAX_ZERO_PAGES + 1),
            (4095, 1),
            (u64::MAX - 4095, 2),
        ] {
            let b = postcard::to_stdvec(&Msg::PageZeros { id: 1, addr, pages }).unwrap();
            assert!(decode(&b).is_err(), "{pages} pages at {addr:#x}");
            assert!(zeros(addr, pages).is_err(), "{pages} pages at {addr:#x}");
        }
        assert_eq!(
            encode(&Msg::PageDeltas { id: 1, pages: 2 }).unwrap(),
            [32, 1, 2]
        );
        for pages in [0, MAX_DELTA_PAGES + 1] {
            let b = postcard::to_stdvec(&Msg::PageDeltas { id: 1, pages }).unwrap();
            assert!(decode(&b).is_err(), "{pages} pages");
        }
        assert_eq!(
            encode(&Msg::PageLz4 {
                id: 1,
                addr: 4096,
                pages: 3
            })
            .unwrap(),
            [33, 1, 0x80, 0x20, 3]
        );
        for (addr, pages) in [
            (4096, 0),
            (4096, MAX_LZ4_PAGES + 1),
            (4095, 1),
            (u64::MAX - 4095, 2),
        ] {
            let b = postcard::to_stdvec(&Msg::PageLz4 { id: 1, addr, pages }).unwrap();
            assert!(decode(&b).is_err(), "{pages} pages at {addr:#x}");
        }
        assert_eq!(
            encode(&Msg::ImageLz4 {
                id: 1,
                offset: 2,
                len: 3
            })
            .unwrap(),
            [34, 1, 2, 3]
        );
        for len in [0, MAX_IMAGE_LZ4 + 1] {
            let b = postcard::to_stdvec(&Msg::ImageLz4 {
                id: 1,
                offset: 0,
                len,
            })
            .unwrap();
            assert!(decode(&b).is_err(), "{len} bytes");
        }
        let big = vec![0u8; MAX_MESSAGE_SIZE + 1];
        assert!(matches!(decode(&big), Err(ProtoError::TooLarge { .. })));
    }

    #[test]
    fn a_listening_address_stands_for_the_connection_where_it_must() {
        // (advertised, the connection's peer, where the daemon is reached)
        let cases = [
            // A daemon on every address, or on loopback, is reached where
            // the connection came from, on its own port.
            ("0.0.0.0:7070", "192.0.2.1:40312", Some("192.0.2.1:7070")),
            ("[::]:7171", "[2001:db8::1]:5", Some("[2001:db8::1]:7171")),
            ("127.0.0.1:7070", "192.0.2.1:40312", Some("192.0.2.1:7070")),
            // Loopback seen from loopback, and a named address, stay as given.
            ("127.0.0.1:7070", "127.0.0.1:40312", Some("127.0.0.1:7070")),
            ("10.77.0.1:7070", "10.77.0.9:40312", Some("10.77.0.1:7070")),
            // Not an IP:PORT on either side.
            ("node-a:7070", "192.0.2.1:1", None),
            ("0.0.0.0:7070", "not an address", None),
        ];
        for (advertised, from, want) in cases {
            let got = reachable_at(advertised, from).map(|s| s.to_string());
            assert_eq!(got.as_deref(), want, "{advertised} seen from {from}");
        }
        let listening = |a: &str| Msg::Listening { addr: a.into() }.validate().is_ok();
        assert!(listening("10.77.0.1:7070"));
        assert!(!listening(""));
        assert!(!listening("10.77.0.1:7070\n"));
        assert!(!listening(&"1".repeat(MAX_LISTEN_ADDR + 1)));
    }

    #[test]
    fn negotiation() {
        assert_eq!(hello(1, 1).negotiate(&hello(1, 1)), Some(1));
        assert_eq!(hello(3, 1).negotiate(&hello(1, 1)), Some(1));
        assert_eq!(hello(3, 2).negotiate(&hello(1, 1)), None);
        assert_eq!(hello(1, 1).negotiate(&hello(3, 3)), None);
        assert_eq!(hello(4, 2).negotiate(&hello(3, 3)), Some(3));
    }
}
