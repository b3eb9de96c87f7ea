//! What a daemon measures about its own node: load and owner activity, and
//! from them whether (and since when) the node is idle.
//!
//! * Load, `system`: the 1-minute load average of `/proc/loadavg`.
//! * Load, `netns`: for the local test cluster, whose nodes share one kernel
//!   (so `/proc/loadavg` is the same everywhere): the number of runnable
//!   (`R`) threads of processes in this daemon's network namespace (the daemon
//!   itself excluded), sampled every report interval and averaged
//!   exponentially with time constant `load_tau` (60 s, like the kernel's
//!   1-minute figure).
//! * Owner activity, `system`: the newest access time of the terminals
//!   (`/dev/tty*`, `/dev/pts/*`), plus `pmig owner active`. `netns`: only
//!   `pmig owner active`, since the terminals are shared by every node of a
//!   local cluster and would make every node look used.

use super::wire::Report;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// Where the load figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    System,
    Netns,
}

impl std::str::FromStr for LoadSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "system" => Ok(LoadSource::System),
            "netns" => Ok(LoadSource::Netns),
            _ => Err(format!("unknown load source `{s}` (system or netns)")),
        }
    }
}

/// The daemon's selector settings (`pmig daemon` flags).
#[derive(Debug, Clone)]
pub struct Settings {
    pub load_source: LoadSource,
    /// A node is idle below this load (`--idle-load`, 1.0).
    pub idle_load: f64,
    /// … and with no owner activity for this long (`--idle-owner-secs`, 30).
    pub idle_owner: Duration,
    /// How often a daemon measures and reports (`--report-interval-ms`, 1000).
    pub interval: Duration,
    /// Time constant of the netns load average (`--load-tau-secs`, 60).
    pub load_tau: Duration,
    /// Whether this node takes foreign work at all (`--no-foreign-work` clears it).
    pub accepts: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            load_source: LoadSource::System,
            idle_load: 1.0,
            idle_owner: Duration::from_secs(30),
            interval: Duration::from_secs(1),
            load_tau: Duration::from_secs(60),
            accepts: true,
        }
    }
}

/// The node's measured state.
#[derive(Debug)]
pub struct Sampler {
    s: Settings,
    load: f64,
    last_sample: Option<Instant>,
    /// Last owner activity (`pmig owner active` or terminal input).
    owner: Option<Instant>,
    idle_since: Option<Instant>,
    netns: Option<String>,
}

impl Sampler {
    pub fn new(s: Settings) -> Sampler {
        let netns = std::fs::read_link("/proc/self/ns/net")
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Sampler {
            s,
            load: 0.0,
            last_sample: None,
            owner: None,
            idle_since: None,
            netns,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.s
    }

    /// The owner is active now.
    pub fn owner_active(&mut self, now: Instant) {
        self.owner = Some(now);
        self.idle_since = None;
    }

    /// Owner activity seen at `t` (terminal input); true if the owner has just
    /// become active (was not within the threshold before): eviction time.
    pub fn observe_owner(&mut self, t: Instant, now: Instant) -> bool {
        if self.owner.is_some_and(|o| t <= o) {
            return false;
        }
        // The first sighting (daemon start) is history, not an arrival.
        let first = self.owner.is_none();
        let was_active = self.owner_idle(now).is_some_and(|d| d < self.s.idle_owner);
        self.owner = Some(t);
        let active = now.saturating_duration_since(t) < self.s.idle_owner;
        if active {
            self.idle_since = None;
        }
        active && !was_active && !first
    }

    /// Measures (at most once per half interval) and updates the idle state;
    /// true if terminal input has just made the owner active.
    pub fn sample(&mut self, now: Instant) -> bool {
        let mut became_active = false;
        if let Some(t) = self.last_sample {
            if now.saturating_duration_since(t) < self.s.interval / 2 {
                return false;
            }
        }
        let dt = self
            .last_sample
            .map(|t| now.saturating_duration_since(t))
            .unwrap_or(self.s.interval);
        self.last_sample = Some(now);
        match self.s.load_source {
            LoadSource::System => {
                if let Some(l) = system_load() {
                    self.load = l;
                }
                if let Some(t) = newest_terminal_input(now) {
                    became_active = self.observe_owner(t, now);
                }
            }
            LoadSource::Netns => {
                let n = self.netns.as_deref().map(runnable_in_netns).unwrap_or(0);
                self.load = ewma(self.load, n as f64, dt, self.s.load_tau);
            }
        }
        self.update_idle(now);
        became_active
    }

    fn owner_idle(&self, now: Instant) -> Option<Duration> {
        self.owner.map(|o| now.saturating_duration_since(o))
    }

    fn update_idle(&mut self, now: Instant) {
        let owner_ok = self.owner_idle(now).is_none_or(|d| d >= self.s.idle_owner);
        let idle = owner_ok && self.load < self.s.idle_load;
        match (idle, self.idle_since) {
            (true, None) => {
                // Idle since the later of: the owner threshold passing, now (load).
                let since = self
                    .owner
                    .map(|o| o + self.s.idle_owner)
                    .filter(|t| *t <= now)
                    .unwrap_or(now);
                self.idle_since = Some(since);
            }
            (false, _) => self.idle_since = None,
            _ => {}
        }
    }

    pub fn load(&self) -> f64 {
        self.load
    }

    pub fn report(&self, node: &str, addr: &str, now: Instant) -> Report {
        let owner_idle = self.owner_idle(now);
        Report {
            node: node.into(),
            addr: addr.into(),
            load: self.load as f32,
            owner_idle_ms: owner_idle.map(|d| d.as_millis() as u64),
            idle_for_ms: self
                .idle_since
                .map(|t| now.saturating_duration_since(t).as_millis() as u64),
            owner_active: owner_idle.is_some_and(|d| d < self.s.idle_owner),
            accepts: self.s.accepts,
        }
    }
}

/// Exponential average with time constant `tau` over a step of `dt`.
pub fn ewma(old: f64, sample: f64, dt: Duration, tau: Duration) -> f64 {
    if tau.is_zero() {
        return sample;
    }
    let e = (-dt.as_secs_f64() / tau.as_secs_f64()).exp();
    old * e + sample * (1.0 - e)
}

fn system_load() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The newest access time of the terminals, as an `Instant`.
fn newest_terminal_input(now: Instant) -> Option<Instant> {
    let mut newest: Option<SystemTime> = None;
    let mut look = |p: &Path| {
        if let Ok(t) = std::fs::metadata(p).and_then(|m| m.accessed()) {
            if newest.is_none_or(|n| t > n) {
                newest = Some(t);
            }
        }
    };
    if let Ok(rd) = std::fs::read_dir("/dev/pts") {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().parse::<u32>().is_ok() {
                look(&e.path());
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir("/dev") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            // Real terminals (tty1…, ttyS0…), not /dev/tty itself.
            if n.len() > 3 && n.starts_with("tty") {
                look(&e.path());
            }
        }
    }
    let ago = SystemTime::now()
        .duration_since(newest?)
        .unwrap_or_default();
    now.checked_sub(ago)
}

/// Runnable threads of processes whose network namespace is `netns`, this
/// process excluded.
fn runnable_in_netns(netns: &str) -> usize {
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if ns.as_os_str() != netns {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            if state == Some("R") {
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_approaches_the_sample() {
        let tau = Duration::from_secs(60);
        let mut l = 0.0;
        for _ in 0..60 {
            l = ewma(l, 1.0, Duration::from_secs(1), tau);
        }
        assert!((l - (1.0 - (-1.0f64).exp())).abs() < 1e-9, "{l}");
        assert_eq!(ewma(0.3, 2.0, Duration::from_secs(1), Duration::ZERO), 2.0);
    }

    #[test]
    fn terminal_input_after_a_quiet_spell_is_eviction_time() {
        let s = Settings {
            idle_owner: Duration::from_secs(5),
            ..Settings::default()
        };
        let mut m = Sampler::new(s);
        let t0 = Instant::now() + Duration::from_secs(100);
        // Input seen at start, even recent: history, nothing to evict.
        assert!(!m.observe_owner(t0 - Duration::from_secs(60), t0));
        let mut fresh = Sampler::new(m.settings().clone());
        assert!(!fresh.observe_owner(t0, t0));
        // Fresh input: the owner has just become active.
        assert!(m.observe_owner(t0 - Duration::from_secs(1), t0));
        // More input while active: no new eviction; the same time again: nothing.
        assert!(!m.observe_owner(t0, t0 + Duration::from_secs(1)));
        assert!(!m.observe_owner(t0, t0 + Duration::from_secs(2)));
        // After a quiet spell longer than the threshold: eviction time again.
        assert!(m.observe_owner(t0 + Duration::from_secs(20), t0 + Duration::from_secs(20)));
    }

    #[test]
    fn owner_activity_makes_the_node_busy_for_the_threshold() {
        let s = Settings {
            load_source: LoadSource::Netns,
            idle_owner: Duration::from_secs(5),
            ..Settings::default()
        };
        let mut m = Sampler::new(s);
        m.netns = None; // no measuring in a unit test: load 0
        let t0 = Instant::now();
        m.sample(t0);
        assert_eq!(m.report("n1", "a", t0).idle_for_ms, Some(0));
        m.owner_active(t0 + Duration::from_secs(1));
        let r = m.report("n1", "a", t0 + Duration::from_secs(2));
        assert!(r.owner_active && r.idle_for_ms.is_none());
        m.sample(t0 + Duration::from_secs(3));
        assert_eq!(
            m.report("n1", "a", t0 + Duration::from_secs(3)).idle_for_ms,
            None
        );
        m.sample(t0 + Duration::from_secs(7));
        let r = m.report("n1", "a", t0 + Duration::from_secs(7));
        assert!(!r.owner_active);
        // Idle since the threshold passed (t0 + 6 s).
        assert_eq!(r.idle_for_ms, Some(1000));
    }
}
