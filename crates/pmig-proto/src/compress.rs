//! Pages compressed on slow links (protocol 19, docs/protocol.md §6.1,
//! "Pages compressed").
//!
//! Where a link is slower than a CPU compresses, a page that compresses
//! crosses it sooner as its LZ4 block (`PageLz4`) than as its bytes: a
//! fault's answer waits less, and a push or a stop carries fewer bytes.
//! Where the link is as fast as the CPU, compressing only takes CPU from
//! the program and the other side's installs, so by default
//! ([`Mode::Auto`]) a sender compresses only towards a peer whose links it
//! has seen deliver less than [`AUTO_BELOW`] bytes a second.
//!
//! How fast a link is: the kernel's own measure of each TCP connection,
//! `tcpi_delivery_rate` (bytes acknowledged per interval, `TCP_INFO`), from
//! samples the kernel does not mark application-limited (the sender kept
//! the link busy). A single sample can be far off: the burst a shaper lets
//! through after a pause reads as the speed of the wire before it (a
//! 100 Mbit link measured here read 1 GB/s for its first 50 KB, then 12 MB/s
//! for every sample after). So the estimate is the median of the last
//! [`SAMPLES`] samples of the last [`HORIZON`], over every connection to
//! the same peer address: a push's connection tells the answers'
//! connection beside it, whose single pages the kernel marks
//! application-limited.
//!
//! Data that does not compress (random bytes, compressed files) costs
//! one attempt, then fewer and fewer: after each miss the sender skips
//! twice as many runs before it tries again (at most [`MAX_SKIP`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Whether the pages a process sends travel compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Towards peers whose links deliver less than [`AUTO_BELOW`].
    #[default]
    Auto,
    /// Always (to peers that take `PageLz4`).
    Always,
    /// Never.
    Never,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "always" => Ok(Mode::Always),
            "never" => Ok(Mode::Never),
            _ => Err(format!(
                "compression mode {s:?}: expected auto, always or never"
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Always => "always",
            Mode::Never => "never",
        })
    }
}

/// Links that deliver less than this many bytes a second get compressed
/// pages under [`Mode::Auto`]: 200 MB/s, 1.6 Gbit/s. LZ4 compresses pages
/// of a program's heap at about 500 MB/s a core (measured here), so below
/// this the CPU keeps ahead of the link: a python3 dict went over 1 Gbit
/// in a quarter of the time. Above it the wire no longer limits a move.
pub const AUTO_BELOW: u64 = 200_000_000;

/// How many samples the link estimate keeps per peer.
pub const SAMPLES: usize = 7;

/// How long a sample counts.
pub const HORIZON: Duration = Duration::from_secs(10);

/// Most runs skipped after misses in a row.
pub const MAX_SKIP: u32 = 63;

/// A run compresses if its block is at most this fraction (in eighths)
/// of its bytes.
const KEEP_EIGHTHS: usize = 7;

static MODE: OnceLock<Mode> = OnceLock::new();

/// Sets this process's mode once, before any page is sent (the daemon's
/// `--compress`). Returns false if a mode was already in use.
pub fn set_mode(m: Mode) -> bool {
    MODE.set(m).is_ok()
}

/// This process's mode ([`Mode::Auto`] unless [`set_mode`] said otherwise).
pub fn mode() -> Mode {
    *MODE.get_or_init(Mode::default)
}

/// A link's delivery-rate samples: when, and bytes a second.
type Samples = Vec<(Instant, u64)>;

fn links() -> &'static Mutex<HashMap<IpAddr, Samples>> {
    static LINKS: OnceLock<Mutex<HashMap<IpAddr, Samples>>> = OnceLock::new();
    LINKS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Records a delivery-rate sample towards `peer` (`None`: nothing new, or
/// a sample marked application-limited) and returns the estimate of that
/// link's rate, the median of its samples of the last [`HORIZON`] (at most
/// [`SAMPLES`]); `None` with none.
pub fn observe(peer: IpAddr, rate: Option<u64>, now: Instant) -> Option<u64> {
    let mut t = links().lock().unwrap_or_else(|e| e.into_inner());
    let v = t.entry(peer).or_default();
    v.retain(|&(at, _)| now.saturating_duration_since(at) < HORIZON);
    if let Some(r) = rate {
        if v.len() == SAMPLES {
            v.remove(0);
        }
        v.push((now, r));
    }
    let mut rates: Vec<u64> = v.iter().map(|&(_, r)| r).collect();
    rates.sort_unstable();
    rates.get(rates.len() / 2).copied()
}

/// The kernel's delivery rate of a TCP connection, bytes a second
/// (`tcpi_delivery_rate`), and whether the kernel marks it
/// application-limited (the sender left the link idle, so the rate says
/// less than the link could do); `None` if the socket is not TCP, the
/// kernel does not report it (before 4.18), or before its first sample.
pub fn delivery_rate(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u64, bool)> {
    use std::os::fd::AsRawFd;
    // struct tcp_info (linux/tcp.h): tcpi_delivery_rate is the u64 at
    // byte 160, present since 4.18; 232 bytes in all on 6.x kernels. Bit 0
    // of byte 7 is tcpi_delivery_rate_app_limited.
    const RATE_AT: usize = 160;
    let mut buf = [0u8; 232];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes and the kernel writes at
    // most `len` of them, returning how many in `len`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 || (len as usize) < RATE_AT + 8 {
        return None;
    }
    let rate = u64::from_ne_bytes(buf[RATE_AT..RATE_AT + 8].try_into().ok()?);
    (rate > 0).then_some((rate, buf[7] & 1 != 0))
}

/// One sender's side: whether to try compressing the next run, the skips
/// after misses, and its reusable block buffer.
#[derive(Debug)]
pub struct Packer {
    mode: Mode,
    /// The link estimate and when it was last refreshed.
    rate: Option<u64>,
    checked: Option<Instant>,
    /// The decision last logged.
    said: Option<bool>,
    misses: u32,
    skip: u32,
    out: Vec<u8>,
}

impl Default for Packer {
    /// A packer in this process's [`mode`].
    fn default() -> Self {
        Packer::new(mode())
    }
}

/// How often a sender refreshes its link estimate.
const RECHECK: Duration = Duration::from_millis(20);

impl Packer {
    pub fn new(mode: Mode) -> Self {
        Packer {
            mode,
            rate: None,
            checked: None,
            said: None,
            misses: 0,
            skip: 0,
            out: Vec::new(),
        }
    }

    /// Whether pages go compressed now, by the mode and, under
    /// [`Mode::Auto`], the link: `sample` gives the peer's address, the
    /// connection's delivery rate and whether it is application-limited,
    /// asked at most every [`RECHECK`]. A link not measured yet counts as
    /// slow: what goes before its first measure is little, or goes on a
    /// link too slow to be measured soon.
    pub fn wanted(&mut self, sample: impl FnOnce() -> Option<(IpAddr, u64, bool)>) -> bool {
        match self.mode {
            Mode::Never => false,
            Mode::Always => true,
            Mode::Auto => {
                let now = Instant::now();
                if self
                    .checked
                    .is_none_or(|t| now.saturating_duration_since(t) >= RECHECK)
                {
                    self.checked = Some(now);
                    if let Some((peer, rate, app_limited)) = sample() {
                        self.rate = observe(peer, (!app_limited).then_some(rate), now);
                        let slow = self.slow();
                        if self.said != Some(slow) {
                            self.said = Some(slow);
                            tracing::debug!(
                                "pages to {peer} go {}: its link delivers {:?} bytes/s",
                                if slow { "compressed" } else { "as they are" },
                                self.rate
                            );
                        }
                    }
                }
                self.slow()
            }
        }
    }

    /// Whether the link last measured (or one not measured) is slower
    /// than [`AUTO_BELOW`].
    fn slow(&self) -> bool {
        self.rate.is_none_or(|r| r < AUTO_BELOW)
    }

    /// Compresses `data` if this run is tried and its block is small
    /// enough: the block, or `None` to send `data` as it is.
    pub fn pack(&mut self, data: &[u8]) -> Option<&[u8]> {
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        let max = lz4_flex::block::get_maximum_output_size(data.len());
        if self.out.len() < max {
            self.out.resize(max, 0);
        }
        let n = lz4_flex::block::compress_into(data, &mut self.out).ok()?;
        if n * 8 <= data.len() * KEEP_EIGHTHS {
            self.misses = 0;
            Some(&self.out[..n])
        } else {
            self.misses = (self.misses + 1).min(6);
            self.skip = ((1u32 << self.misses) - 1).min(MAX_SKIP);
            None
        }
    }
}

/// Decompresses a `PageLz4` block of `pages` pages into `out` (resized to
/// exactly `pages * 4096` bytes). A block that is malformed or does not
/// give exactly that many bytes is an error, named for the peer.
pub fn unpack(block: &[u8], pages: u32, out: &mut Vec<u8>) -> Result<(), String> {
    unpack_exact(block, pages as usize * 4096, out)
        .map_err(|e| format!("PageLz4 of {pages} pages: {e}"))
}

/// Decompresses an `ImageLz4` block of `len` bytes into `out`, as
/// [`unpack`] does a `PageLz4`'s.
pub fn unpack_image(block: &[u8], len: u32, out: &mut Vec<u8>) -> Result<(), String> {
    unpack_exact(block, len as usize, out).map_err(|e| format!("ImageLz4 of {len} bytes: {e}"))
}

fn unpack_exact(block: &[u8], n: usize, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    out.resize(n, 0);
    match lz4_flex::block::decompress_into(block, out) {
        Ok(got) if got == n => Ok(()),
        Ok(got) => Err(format!("decompressed to {got} bytes, not {n}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap_like(pages: usize) -> Vec<u8> {
        // Small integers and pointers, as a program's heap holds them.
        let mut v = Vec::with_capacity(pages * 4096);
        let mut x = 0x5555_0000_1000u64;
        while v.len() < pages * 4096 {
            x = x.wrapping_add(48);
            v.extend_from_slice(&x.to_le_bytes());
            v.extend_from_slice(&((x >> 4) & 0xff).to_le_bytes());
        }
        v.truncate(pages * 4096);
        v
    }

    fn random(pages: usize, mut seed: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(pages * 4096);
        while v.len() < pages * 4096 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            v.extend_from_slice(&seed.to_le_bytes());
        }
        v
    }

    #[test]
    fn a_block_gives_back_its_pages_exactly() {
        let data = heap_like(8);
        let mut p = Packer::new(Mode::Always);
        let block = p.pack(&data).expect("heap-like pages compress").to_vec();
        assert!(
            block.len() * 2 < data.len(),
            "{} bytes of {}",
            block.len(),
            data.len()
        );
        let mut out = Vec::new();
        unpack(&block, 8, &mut out).unwrap();
        assert_eq!(out, data);
        // The wrong page count, a cut block and garbage are refused.
        assert!(unpack(&block, 7, &mut out).is_err());
        assert!(unpack(&block, 9, &mut out).is_err());
        assert!(unpack(&block[..block.len() / 2], 8, &mut out).is_err());
        assert!(unpack(&[0xff; 64], 1, &mut out).is_err());
    }

    #[test]
    fn data_that_does_not_compress_is_tried_less_and_less() {
        let mut p = Packer::new(Mode::Always);
        let mut tried = 0;
        for i in 0..200u64 {
            let before = p.skip;
            assert!(p.pack(&random(1, i + 1)).is_none());
            if before == 0 {
                tried += 1;
            }
        }
        // Misses 1, 2, … skip 1, 3, 7, 15, 31, 63 runs: 1+2+4+8+16+32 = 63
        // runs for the first six tries, then one try in 64.
        assert!((6..=9).contains(&tried), "tried {tried} of 200");
        // One run that compresses brings the tries back at once.
        while p.skip > 0 {
            assert!(p.pack(&heap_like(1)).is_none());
        }
        assert!(p.pack(&heap_like(1)).is_some());
        assert_eq!((p.misses, p.skip), (0, 0));
        assert!(p.pack(&heap_like(1)).is_some());
    }

    #[test]
    fn auto_follows_the_median_link_sample_to_the_peer() {
        let peer: IpAddr = "192.0.2.77".parse().unwrap();
        let mut a = Packer::new(Mode::Auto);
        assert!(a.wanted(|| None), "an unmeasured link counts as slow");
        let t0 = Instant::now();
        // A 100 Mbit link whose first sample read as the wire behind the
        // shaper: slow from the second sample on.
        assert_eq!(observe(peer, Some(1_000_000_000), t0), Some(1_000_000_000));
        assert_eq!(observe(peer, Some(12_000_000), t0), Some(1_000_000_000));
        assert_eq!(observe(peer, Some(11_900_000), t0), Some(12_000_000));
        // Application-limited samples are not kept; a second connection to
        // the same peer sees the first's estimate.
        let mut b = Packer::new(Mode::Auto);
        assert!(b.wanted(|| Some((peer, 1_000, true))));
        assert_eq!(b.rate, Some(12_000_000));
        // A fast link: most samples fast, one low (a busy receiver).
        let fast: IpAddr = "192.0.2.78".parse().unwrap();
        for r in [900_000_000, 30_000_000, 1_100_000_000, 800_000_000] {
            observe(fast, Some(r), t0);
        }
        let mut c = Packer::new(Mode::Auto);
        assert!(!c.wanted(|| Some((fast, 5_000, true))));
        assert_eq!(c.rate, Some(900_000_000));
        // Only the last SAMPLES count, and none older than HORIZON.
        for _ in 0..SAMPLES {
            observe(fast, Some(20_000_000), t0);
        }
        assert_eq!(observe(fast, None, t0), Some(20_000_000));
        assert_eq!(observe(fast, None, t0 + HORIZON), None);
        assert!(!Packer::new(Mode::Never).wanted(|| None));
        assert!(Packer::new(Mode::Always).wanted(|| Some((peer, u64::MAX, false))));
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [Mode::Auto, Mode::Always, Mode::Never] {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
        assert!("fast".parse::<Mode>().unwrap_err().contains("auto"));
    }
}
