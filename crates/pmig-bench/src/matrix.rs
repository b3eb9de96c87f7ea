//! `pmig bench`: every strategy × link × workload on a local cluster, the way a
//! user would run it (`pmig cluster up`, `pmig cluster exec … workload`,
//! `pmig cluster exec n1 -- pmig migrate … --json`), k repetitions each, with an
//! unmigrated baseline of every workload and the raw TCP throughput of every
//! link measured in the same run.
//!
//! The plan (which sizes on which link) is [`plan`]; one measured migration is a
//! [`Record`]; [`crate::report`] turns the records into tables, plots, CSV and JSON.

use crate::{BenchError, Result};
use pmig_cluster::only_stdio;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ALL_STRATEGIES: [&str; 10] = [
    "stop-copy",
    "pre-copy",
    "queued-pre-copy",
    "post-copy",
    "assisted-post-copy",
    "demand-paging",
    "flushing",
    "freeze-free",
    "ampom",
    "auto",
];
/// Noack's five implemented algorithms (his tables' rows).
pub const NOACK_STRATEGIES: [&str; 5] = [
    "stop-copy",
    "pre-copy",
    "queued-pre-copy",
    "post-copy",
    "assisted-post-copy",
];
/// AMPoM's comparison: openMosix (total copy), NoPrefetch (copy on reference,
/// no push: pmig's demand-paging), and AMPoM; plus pmig's post-copy (push, no
/// prefetch).
pub const AMPOM_STRATEGIES: [&str; 4] = ["stop-copy", "demand-paging", "post-copy", "ampom"];
pub const ALL_LINKS: [&str; 4] = ["10mbit", "100mbit", "1gbit", "unlimited"];
pub const NOACK_WORKLOADS: [&str; 3] = ["getpid", "rma", "reference"];
pub const KERNELS: [&str; 5] = ["stream", "dgemm", "randomaccess", "fft", "dgemm_sparse"];
pub const ALL_WORKLOADS: [&str; 9] = [
    "getpid",
    "rma",
    "reference",
    "stream",
    "dgemm",
    "dgemm_sparse",
    "randomaccess",
    "fft",
    "dirtier",
];
/// Pages of migrated programs longer than this are logged by the workload
/// (`--pause-log-ms`), so that stalls after the handover can be told apart
/// from the freeze itself.
pub const PAUSE_LOG_MS: u64 = 5;

/// One combination of the matrix (repeated `reps` times).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Cell {
    pub workload: String,
    /// Memory size in KiB; 0 = the workload's fixed size (getpid).
    pub kib: u64,
    pub link: String,
    pub strategy: String,
}

impl Cell {
    fn new(w: &str, kib: u64, link: &str, s: &str) -> Cell {
        Cell {
            workload: w.into(),
            kib,
            link: link.into(),
            strategy: s.into(),
        }
    }
    /// "rma 4 MiB" etc.
    pub fn size_label(&self) -> String {
        size_label(&self.workload, self.kib)
    }
}

pub fn size_label(workload: &str, kib: u64) -> String {
    if kib == 0 {
        return workload.to_string();
    }
    if kib & 1023 == 0 {
        format!("{workload} {} MiB", kib / 1024)
    } else {
        format!("{workload} {kib} KiB")
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// The pmig binary (drives the cluster and migrates).
    pub pmig: PathBuf,
    pub out: PathBuf,
    pub quick: bool,
    pub reps: usize,
    pub strategies: Option<Vec<String>>,
    pub links: Option<Vec<String>>,
    pub workloads: Option<Vec<String>>,
    /// Sizes in MiB for the sized workloads (all but getpid and reference).
    pub sizes_mib: Option<Vec<f64>>,
    pub nodes: usize,
    /// Cluster name prefix (unique per run).
    pub prefix: String,
}

impl Options {
    /// Shortest unmigrated run of a workload, in seconds.
    pub fn min_run_s(&self) -> f64 {
        1.0
    }
    pub fn tcp_secs(&self) -> f64 {
        if self.quick {
            0.4
        } else {
            1.0
        }
    }
}

fn per_link_size(link: &str, sizes: [u64; 4]) -> u64 {
    let i = ALL_LINKS.iter().position(|l| *l == link).unwrap_or(3);
    sizes[i]
}

/// The default matrix. Sizes are chosen per link so that one transfer takes
/// about a second or two at the link's rate (10 Mbit moves about 1.2 MB/s).
fn default_cells(quick: bool) -> Vec<Cell> {
    let mut v = Vec::new();
    if quick {
        for s in NOACK_STRATEGIES {
            v.push(Cell::new("getpid", 0, "1gbit", s));
            v.push(Cell::new("rma", 4096, "1gbit", s));
            v.push(Cell::new("reference", 100, "10mbit", s));
        }
        for s in AMPOM_STRATEGIES {
            v.push(Cell::new("stream", 8 << 10, "unlimited", s));
            v.push(Cell::new("randomaccess", 8 << 10, "unlimited", s));
        }
        for s in ["stop-copy", "post-copy", "ampom"] {
            for mib in [8u64, 32] {
                v.push(Cell::new("dirtier", mib << 10, "unlimited", s));
            }
        }
        return v;
    }
    for link in ALL_LINKS {
        for s in ALL_STRATEGIES {
            v.push(Cell::new("getpid", 0, link, s));
            v.push(Cell::new("reference", 100, link, s));
            v.push(Cell::new(
                "rma",
                per_link_size(link, [512, 4096, 4096, 4096]),
                link,
                s,
            ));
            v.push(Cell::new(
                "dirtier",
                per_link_size(link, [512, 4 << 10, 64 << 10, 64 << 10]),
                link,
                s,
            ));
            // 256 MiB with the strategies whose down time grows with it.
            if link == "unlimited"
                && matches!(
                    s,
                    "stop-copy" | "pre-copy" | "queued-pre-copy" | "post-copy" | "ampom"
                )
            {
                v.push(Cell::new("dirtier", 256 << 10, link, s));
            }
        }
        if link == "unlimited" {
            for s in ["stop-copy", "post-copy", "ampom"] {
                v.push(Cell::new("dirtier", 16 << 10, link, s));
                v.push(Cell::new("dirtier", 1 << 20, link, s));
            }
        }
        for k in KERNELS {
            let sizes = if k == "dgemm_sparse" {
                [5 << 9, 40 << 10, 160 << 10, 160 << 10]
            } else {
                [1 << 10, 16 << 10, 64 << 10, 64 << 10]
            };
            for s in AMPOM_STRATEGIES {
                v.push(Cell::new(k, per_link_size(link, sizes), link, s));
            }
        }
    }
    v
}

fn fixed_size(workload: &str) -> bool {
    matches!(workload, "getpid" | "reference")
}

/// The cells of this run: the default matrix, narrowed by `--links` and
/// `--workloads`; `--strategies` replaces the strategies of every workload and
/// `--sizes` the sizes of every sized workload.
pub fn plan(o: &Options) -> Result<Vec<Cell>> {
    for (what, given, known) in [
        ("strategy", &o.strategies, &ALL_STRATEGIES[..]),
        ("link", &o.links, &ALL_LINKS[..]),
        ("workload", &o.workloads, &ALL_WORKLOADS[..]),
    ] {
        for g in given.iter().flatten() {
            if !known.contains(&g.as_str()) {
                return Err(BenchError::Failed(format!(
                    "unknown {what} `{g}`; known: {}",
                    known.join(", ")
                )));
            }
        }
    }
    let mut cells = default_cells(o.quick);
    if let Some(ls) = &o.links {
        cells.retain(|c| ls.contains(&c.link));
    }
    if let Some(ws) = &o.workloads {
        cells.retain(|c| ws.contains(&c.workload));
        // A workload the default plan does not run on a chosen link: give it
        // the sizes of dirtier there.
        for w in ws {
            if !cells.iter().any(|c| &c.workload == w) {
                let links: Vec<String> = o
                    .links
                    .clone()
                    .unwrap_or_else(|| vec![if o.quick { "unlimited" } else { "1gbit" }.into()]);
                for l in links {
                    let kib = if w == "getpid" {
                        0
                    } else if w == "reference" {
                        100
                    } else {
                        per_link_size(&l, [2048, 16 << 10, 64 << 10, 64 << 10])
                    };
                    cells.push(Cell::new(w, kib, &l, "stop-copy"));
                }
            }
        }
    }
    if let Some(ss) = &o.strategies {
        let mut seen = std::collections::BTreeSet::new();
        let mut v = Vec::new();
        for c in &cells {
            for s in ss {
                let n = Cell::new(&c.workload, c.kib, &c.link, s);
                if seen.insert(n.clone()) {
                    v.push(n);
                }
            }
        }
        cells = v;
    }
    if let Some(sz) = &o.sizes_mib {
        let mut seen = std::collections::BTreeSet::new();
        let mut v = Vec::new();
        for c in &cells {
            let kibs: Vec<u64> = if fixed_size(&c.workload) {
                vec![c.kib]
            } else {
                sz.iter().map(|m| (m * 1024.0).round() as u64).collect()
            };
            for kib in kibs {
                let n = Cell::new(&c.workload, kib, &c.link, &c.strategy);
                if seen.insert(n.clone()) {
                    v.push(n);
                }
            }
        }
        cells = v;
    }
    if cells.is_empty() {
        return Err(BenchError::Failed(
            "the chosen --links/--workloads/--strategies/--sizes leave nothing to run".into(),
        ));
    }
    // One cluster per link, in the order of ALL_LINKS.
    cells.sort_by_key(|c| ALL_LINKS.iter().position(|l| *l == c.link));
    Ok(cells)
}

/// A workload's output lines, parsed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunOutput {
    pub pid: Option<i32>,
    pub rss_kib: Option<u64>,
    pub iter: Option<u64>,
    pub elapsed_ms: Option<f64>,
    pub checksum: Option<String>,
    pub verify_ok: bool,
    pub max_pause_us: Option<u64>,
    /// Its clock (CLOCK_MONOTONIC) at t = 0, ns.
    pub t0_ns: Option<u64>,
    /// Every gap longer than PAUSE_LOG_MS: when it began (ms after t = 0)
    /// and how long it lasted (µs).
    pub pauses: Vec<(u64, u64)>,
    pub done: bool,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Parses READY, PAUSE and DONE lines of the common workload interface.
pub fn parse_output(text: &str) -> RunOutput {
    let mut r = RunOutput::default();
    for line in text.lines() {
        if line.starts_with("READY") {
            r.pid = field(line, "pid").and_then(|v| v.parse().ok());
            r.rss_kib = field(line, "rss_kib").and_then(|v| v.parse().ok());
            r.t0_ns = field(line, "t0_ns").and_then(|v| v.parse().ok());
        } else if line.starts_with("PAUSE") {
            let t = field(line, "t_ms").and_then(|v| v.parse().ok());
            if let Some(g) = field(line, "gap_us").and_then(|v| v.parse().ok()) {
                r.pauses.push((t.unwrap_or(0), g));
            }
        } else if line.starts_with("DONE") {
            r.done = true;
            r.iter = field(line, "iter").and_then(|v| v.parse().ok());
            r.elapsed_ms = field(line, "elapsed_ms").and_then(|v| v.parse().ok());
            r.checksum = field(line, "checksum").map(str::to_string);
            r.verify_ok = field(line, "verify") == Some("ok");
            r.max_pause_us = field(line, "max_pause_us").and_then(|v| v.parse().ok());
        }
    }
    r
}

/// Measured raw TCP throughput of a link (n1 → n2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TcpRecord {
    pub link: String,
    pub rep: usize,
    pub ok: bool,
    pub error: Option<String>,
    pub bytes: u64,
    pub secs: f64,
    pub bytes_per_s: f64,
}

/// One unmigrated run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineRecord {
    pub workload: String,
    pub kib: u64,
    pub link: String,
    pub iterations: u64,
    pub rep: usize,
    pub ok: bool,
    pub error: Option<String>,
    pub elapsed_ms: f64,
    pub max_pause_ms: f64,
    pub checksum: Option<String>,
}

/// Serde's default for a measurement missing from an older record.
fn nan() -> f64 {
    f64::NAN
}

/// One measured migration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    pub workload: String,
    pub kib: u64,
    pub link: String,
    pub strategy: String,
    pub rep: usize,
    pub ok: bool,
    pub error: Option<String>,
    /// What the migration reported as its strategy (auto says what it chose).
    pub chosen: Option<String>,
    pub iterations: u64,
    pub rss_kib: f64,
    pub preparation_ms: f64,
    pub down_ms: f64,
    pub post_ms: f64,
    pub total_ms: f64,
    pub bytes_total: f64,
    pub bytes_post: f64,
    /// bytes_total ÷ (RSS at READY).
    pub bytes_per_rss: f64,
    /// Raw TCP throughput of this link, measured in this run (median).
    pub tcp_bytes_per_s: f64,
    /// bytes_total ÷ total_ms, as a fraction of the raw TCP throughput.
    pub rate_frac_tcp: f64,
    /// First-touch bandwidth of fresh anonymous memory of the workload's
    /// size (at most 1 GiB), measured just before this migration.
    pub first_touch_bytes_per_s: f64,
    /// What moved during the stop, (bytes_total − bytes_post) ÷ down_ms, as a
    /// fraction of the slower of the raw TCP throughput and the first-touch
    /// bandwidth: the stop-copy target's figure (a total copy moves
    /// everything in the stop).
    pub stop_rate_frac_limit: f64,
    /// Background push after the handover (bytes_post ÷ post_ms) as a fraction
    /// of the raw TCP throughput; NaN when nothing moved after the handover.
    pub post_rate_frac_tcp: f64,
    /// The same push as a fraction of the slower of the raw TCP throughput
    /// and the first-touch bandwidth: "the same limit as stop-copy" of the
    /// drain target (every pushed page lands in fresh memory).
    pub post_rate_frac_limit: f64,
    pub pages_sent: f64,
    pub rounds: f64,
    pub remote_faults: f64,
    pub prefetched_pages: f64,
    pub prefetch_hits: f64,
    /// prefetch_hits ÷ (remote_faults + prefetch_hits): the share of would-be
    /// faults the prefetcher prevented; NaN when there was neither.
    pub prefetch_share: f64,
    /// Work-loop time of the migrated run.
    pub elapsed_ms: f64,
    /// Median work-loop time of the unmigrated runs (same arguments).
    pub baseline_ms: f64,
    /// elapsed_ms − baseline_ms.
    pub delay_ms: f64,
    /// The program's longest pause (the freeze as the program saw it).
    pub max_pause_ms: f64,
    /// Its longest stall besides the freeze, of the pauses that ended after
    /// `pmig migrate` began (see [`stall_of`] and [`pauses_since`]; 0 when
    /// no such pause was over PAUSE_LOG_MS).
    pub stall_ms: f64,
    /// The longest wait of one fault for its page, as the destination
    /// measured it (`fault_waits.max_ms` of the report; NaN when absent).
    /// Apart from `stall_ms`, which may hold several faults in a row.
    #[serde(default = "nan")]
    pub fault_wait_max_ms: f64,
    /// Whether the process that ran on the destination was restored ahead
    /// of the stop (the report's `skeleton.used`; None: no skeleton tried).
    #[serde(default)]
    pub skeleton_used: Option<bool>,
    /// How long the skeleton's capture paused the process during the
    /// preparation (`skeleton.pause_ms`; NaN when none was tried): a pause
    /// besides the stop.
    #[serde(default = "nan")]
    pub skeleton_pause_ms: f64,
    /// verify=ok and the checksum of the unmigrated run.
    pub self_check: bool,
    /// Wall time of the whole cell (start to DONE).
    pub wall_s: f64,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub command: String,
    pub started: String,
    pub machine: Machine,
    pub quick: bool,
    pub reps: usize,
    pub plan: Vec<Cell>,
    pub tcp: Vec<TcpRecord>,
    pub baselines: Vec<BaselineRecord>,
    pub records: Vec<Record>,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub kernel: String,
    pub cpu_model: String,
    pub mem_gib: f64,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_default();
        let mem_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            })
            .map(|kb| kb / (1024.0 * 1024.0))
            .unwrap_or(f64::NAN);
        Machine {
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpu_model,
            mem_gib,
        }
    }
}

/// Progress callbacks (the CLI draws them with indicatif).
pub trait Progress {
    fn phase(&self, msg: &str);
    fn cell_done(&self, msg: &str);
}

/// Child processes of the run and the cluster: torn down on drop, also on
/// panic or error.
struct Guard {
    prefix: String,
    state_dir: PathBuf,
    children: Vec<Child>,
    up: bool,
}

impl Guard {
    fn down(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
        if self.up {
            let _ = pmig_cluster::down(&self.prefix, Some(&self.state_dir));
            self.up = false;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.down();
    }
}

struct Run<'a> {
    o: &'a Options,
    work: PathBuf,
    g: Guard,
    seq: usize,
}

fn io<E: Into<std::io::Error>>(what: impl Into<String>) -> impl FnOnce(E) -> BenchError {
    let w = what.into();
    move |e| BenchError::Io(w, e.into())
}

impl Run<'_> {
    fn pmig(&self) -> Command {
        let mut c = Command::new(&self.o.pmig);
        c.stdin(Stdio::null());
        only_stdio(&mut c);
        c
    }

    /// `pmig cluster exec NODE -- argv…`.
    fn exec_cmd(&self, node: &str, argv: &[&std::ffi::OsStr]) -> Command {
        let mut c = self.pmig();
        c.args(["cluster", "exec", "--prefix", &self.o.prefix, "--state-dir"])
            .arg(&self.g.state_dir)
            .arg(node)
            .arg("--")
            .args(argv);
        c
    }

    fn cluster_up(&mut self, link: &str) -> Result<()> {
        let out = self
            .pmig()
            .args(["cluster", "down", "--prefix", &self.o.prefix, "--state-dir"])
            .arg(&self.g.state_dir)
            .output()
            .map_err(io("pmig cluster down"))?;
        let _ = out;
        self.g.up = true;
        let out = self
            .pmig()
            .args([
                "cluster",
                "up",
                "--nodes",
                &self.o.nodes.to_string(),
                "--link",
                link,
            ])
            .args(["--prefix", &self.o.prefix, "--state-dir"])
            .arg(&self.g.state_dir)
            .output()
            .map_err(io("pmig cluster up"))?;
        if !out.status.success() {
            return Err(BenchError::Failed(format!(
                "pmig cluster up --link {link}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    fn cluster_down(&mut self) {
        self.g.down();
    }

    fn cluster(&self) -> Result<pmig_cluster::Cluster> {
        pmig_cluster::Cluster::load(&self.o.prefix, Some(&self.g.state_dir))
            .map_err(|e| BenchError::Failed(format!("cluster state: {e}")))
    }

    fn tcp(&mut self, link: &str, reps: usize) -> Vec<TcpRecord> {
        let mut v = Vec::new();
        let r = (|| -> Result<Vec<TcpRecord>> {
            let c = self.cluster()?;
            let addr = c
                .node("n2")
                .map_err(|e| BenchError::Failed(e.to_string()))?
                .addr;
            let port = 7199u16;
            let mut srv = self
                .exec_cmd(
                    "n2",
                    &[
                        self.o.pmig.as_os_str(),
                        "bench".as_ref(),
                        "tcp-server".as_ref(),
                        "--listen".as_ref(),
                        format!("0.0.0.0:{port}").as_ref(),
                        "--conns".as_ref(),
                        reps.to_string().as_ref(),
                    ],
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(io("tcp server"))?;
            let so = srv.stdout.take();
            self.g.children.push(srv);
            let mut line = String::new();
            if let Some(so) = so {
                // Blocks until the server listens (or exits: EOF).
                BufReader::new(so)
                    .read_line(&mut line)
                    .map_err(io("tcp server output"))?;
            }
            if !line.starts_with("LISTENING") {
                return Err(BenchError::Failed("the TCP server did not start".into()));
            }
            let mut out = Vec::new();
            for rep in 0..reps {
                let o = self
                    .exec_cmd(
                        "n1",
                        &[
                            self.o.pmig.as_os_str(),
                            "bench".as_ref(),
                            "tcp-client".as_ref(),
                            "--to".as_ref(),
                            format!("{addr}:{port}").as_ref(),
                            "--secs".as_ref(),
                            self.o.tcp_secs().to_string().as_ref(),
                        ],
                    )
                    .output()
                    .map_err(io("tcp client"))?;
                let rec = match serde_json::from_slice::<crate::tcp::TcpResult>(&o.stdout) {
                    Ok(t) => TcpRecord {
                        link: link.into(),
                        rep,
                        ok: true,
                        error: None,
                        bytes: t.bytes,
                        secs: t.secs,
                        bytes_per_s: t.bytes_per_s,
                    },
                    Err(_) => TcpRecord {
                        link: link.into(),
                        rep,
                        ok: false,
                        error: Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                        bytes: 0,
                        secs: f64::NAN,
                        bytes_per_s: f64::NAN,
                    },
                };
                out.push(rec);
            }
            Ok(out)
        })();
        match r {
            Ok(x) => v.extend(x),
            Err(e) => v.push(TcpRecord {
                link: link.into(),
                rep: 0,
                ok: false,
                error: Some(e.to_string()),
                bytes: 0,
                secs: f64::NAN,
                bytes_per_s: f64::NAN,
            }),
        }
        v
    }

    fn workload_args(w: &str, kib: u64) -> Vec<String> {
        let mut a = Vec::new();
        match w {
            // pmig restores under the original pid only when it is free on the
            // destination; in a local cluster the frozen original still holds it.
            "getpid" => a.push("--allow-pid-change".into()),
            "reference" => a.extend(["--kib".into(), kib.to_string()]),
            _ => a.extend(["--mib".into(), format!("{}", kib as f64 / 1024.0)]),
        }
        if w == "dirtier" {
            a.extend(["--dirty-rate".into(), "1000".into()]);
        }
        a.extend([
            "--report-ms".into(),
            "0".into(),
            "--pause-log-ms".into(),
            PAUSE_LOG_MS.to_string(),
        ]);
        a
    }

    /// Starts a workload inside n1 with its stdout in a file of its own.
    fn start(&mut self, w: &str, kib: u64, extra: &[String]) -> Result<(PathBuf, usize)> {
        let bin = crate::workload(w)?;
        self.seq += 1;
        let out = self.work.join(format!("{:04}-{w}.out", self.seq));
        let mut argv: Vec<std::ffi::OsString> = vec![bin.into_os_string()];
        argv.extend(Self::workload_args(w, kib).into_iter().map(Into::into));
        argv.extend(extra.iter().map(Into::into));
        let refs: Vec<&std::ffi::OsStr> = argv.iter().map(|a| a.as_os_str()).collect();
        let f = std::fs::File::create(&out).map_err(io(format!("create {}", out.display())))?;
        let child = self
            .exec_cmd("n1", &refs)
            .current_dir(&self.work)
            .stdout(Stdio::from(f))
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("start workload"))?;
        self.g.children.push(child);
        Ok((out, self.g.children.len() - 1))
    }

    /// Waits (bounded) until the workload's file has a line starting with `what`.
    fn wait_for(
        &mut self,
        file: &Path,
        what: &str,
        child: usize,
        limit: Duration,
    ) -> Result<RunOutput> {
        let t = Instant::now();
        let mut exited_at: Option<Instant> = None;
        loop {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            if text.lines().any(|l| l.starts_with(what)) {
                return Ok(parse_output(&text));
            }
            // The source-side `cluster exec` ends when the workload moves away;
            // only the time limit ends the wait for DONE.
            if what == "READY" && exited_at.is_none() {
                if let Ok(Some(st)) = self.g.children[child].try_wait() {
                    exited_at = Some(Instant::now());
                    let _ = st;
                }
            }
            if let Some(e) = exited_at {
                if e.elapsed() > Duration::from_millis(500) {
                    return Err(BenchError::Failed(format!(
                        "the workload exited before {what}: {}",
                        text.lines().last().unwrap_or("(no output)")
                    )));
                }
            }
            if t.elapsed() > limit {
                return Err(BenchError::Failed(format!(
                    "no {what} line within {} s",
                    limit.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn reap(&mut self, child: usize) {
        let c = &mut self.g.children[child];
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Iterations per second of a workload (a short timed run).
    fn calibrate(&mut self, w: &str, kib: u64) -> Result<f64> {
        let secs = if self.o.quick { 0.25 } else { 0.5 };
        let (f, ch) = self.start(w, kib, &["--seconds".into(), secs.to_string()])?;
        let r = self.wait_for(&f, "DONE", ch, Duration::from_secs(120));
        self.reap(ch);
        let r = r?;
        match (r.iter, r.elapsed_ms) {
            (Some(i), Some(ms)) if ms > 0.0 && i > 0 => Ok(i as f64 / (ms / 1000.0)),
            _ => Err(BenchError::Failed(format!(
                "{w}: calibration run gave no DONE figures"
            ))),
        }
    }

    fn baseline(
        &mut self,
        w: &str,
        kib: u64,
        link: &str,
        iters: u64,
        rep: usize,
    ) -> BaselineRecord {
        let mut b = BaselineRecord {
            workload: w.into(),
            kib,
            link: link.into(),
            iterations: iters,
            rep,
            ok: false,
            error: None,
            elapsed_ms: f64::NAN,
            max_pause_ms: f64::NAN,
            checksum: None,
        };
        let r = (|| {
            let (f, ch) = self.start(w, kib, &["--iterations".into(), iters.to_string()])?;
            let r = self.wait_for(&f, "DONE", ch, Duration::from_secs(300));
            self.reap(ch);
            // Gone, with its memory freed, before anything else is
            // measured (see `migrate_inner`).
            if let Some(pid) = r.as_ref().ok().and_then(|r| r.pid) {
                wait_exited(pid, Duration::from_secs(30));
            }
            r
        })();
        match r {
            Ok(r) if r.verify_ok => {
                b.ok = true;
                b.elapsed_ms = r.elapsed_ms.unwrap_or(f64::NAN);
                b.max_pause_ms = r
                    .max_pause_us
                    .map(|u| u as f64 / 1000.0)
                    .unwrap_or(f64::NAN);
                b.checksum = r.checksum;
            }
            Ok(_) => b.error = Some("the unmigrated run failed its own verification".into()),
            Err(e) => b.error = Some(e.to_string()),
        }
        b
    }

    fn migrate(
        &mut self,
        cell: &Cell,
        rep: usize,
        iters: u64,
        base: &[&BaselineRecord],
        tcp: f64,
        xfer_s: f64,
    ) -> Record {
        let mut r = Record {
            workload: cell.workload.clone(),
            kib: cell.kib,
            link: cell.link.clone(),
            strategy: cell.strategy.clone(),
            rep,
            iterations: iters,
            ..Record::default()
        };
        // Nothing measured yet: a failure leaves NaN, never a zero.
        r.clear_measurements();
        r.tcp_bytes_per_s = tcp;
        let t0 = Instant::now();
        let res = self.migrate_inner(cell, iters, &mut r, base, xfer_s);
        r.wall_s = t0.elapsed().as_secs_f64();
        if let Err(e) = res {
            r.ok = false;
            r.error = Some(e.to_string());
        }
        r
    }

    fn migrate_inner(
        &mut self,
        cell: &Cell,
        iters: u64,
        r: &mut Record,
        base: &[&BaselineRecord],
        xfer_s: f64,
    ) -> Result<()> {
        // First touch of as much fresh memory as the workload's size, before
        // the workload starts: measured while it ran, it shared the CPUs
        // with the workload and ate into its run, which is sized to outlast
        // the migration only (`run_secs`); on a VM whose host backs fresh
        // memory slowly, 1 GiB took long enough for the workload to end
        // before `pmig migrate` began.
        let bytes = (cell.kib << 10).clamp(1 << 20, 1 << 30);
        r.first_touch_bytes_per_s = crate::engine::first_touch_gbps(bytes)? * 1e9;
        let (f, ch) = self.start(
            &cell.workload,
            cell.kib,
            &["--iterations".into(), iters.to_string()],
        )?;
        let ready = self.wait_for(&f, "READY", ch, Duration::from_secs(120))?;
        let pid = ready
            .pid
            .ok_or_else(|| BenchError::Failed("READY without pid".into()))?;
        r.rss_kib = ready.rss_kib.map(|k| k as f64).unwrap_or(f64::NAN);
        // Pauses before this are not the migration's.
        let migrate_ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
            .map_err(|e| BenchError::Failed(format!("read the clock: {e}")))?;
        let out = self
            .exec_cmd(
                "n1",
                &[
                    self.o.pmig.as_os_str(),
                    "migrate".as_ref(),
                    "--pid".as_ref(),
                    pid.to_string().as_ref(),
                    "--to".as_ref(),
                    "n2".as_ref(),
                    "--strategy".as_ref(),
                    cell.strategy.as_ref(),
                    "--json".as_ref(),
                    "--cluster-prefix".as_ref(),
                    self.o.prefix.as_ref(),
                    "--cluster-dir".as_ref(),
                    self.g.state_dir.as_os_str(),
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(io("pmig migrate"))?;
        if !out.status.success() {
            self.reap(ch);
            return Err(BenchError::Failed(format!(
                "pmig migrate: {}",
                String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or("failed")
            )));
        }
        let j: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| BenchError::Failed(format!("pmig migrate --json: {e}")))?;
        let num = |k: &str| j.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        r.chosen = j
            .get("strategy")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        r.preparation_ms = num("preparation_ms");
        r.down_ms = num("down_ms");
        r.post_ms = num("post_ms");
        r.total_ms = num("total_ms");
        r.bytes_total = num("bytes_total");
        r.bytes_post = j
            .get("bytes_per_phase")
            .and_then(|p| p.get("post"))
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        r.pages_sent = num("pages_sent");
        r.rounds = num("rounds");
        r.remote_faults = num("remote_faults");
        r.prefetched_pages = num("prefetched_pages");
        r.prefetch_hits = num("prefetch_hits");
        r.fault_wait_max_ms = j
            .get("fault_waits")
            .and_then(|w| w.get("max_ms"))
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::NAN);
        let skeleton = j.get("skeleton");
        r.skeleton_used = skeleton
            .and_then(|k| k.get("used"))
            .and_then(|v| v.as_bool());
        r.skeleton_pause_ms = skeleton
            .and_then(|k| k.get("pause_ms"))
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::NAN);
        let new_pid = j.get("new_pid").and_then(|v| v.as_i64());
        // Wait for the migrated workload to finish (it writes to the same file,
        // reopened on n2 at its offset).
        let limit =
            Duration::from_secs_f64(60.0 + 4.0 * xfer_s + 4.0 * iters as f64 / 1e9_f64.max(1.0));
        let done = self.wait_for(&f, "DONE", ch, limit.max(Duration::from_secs(120)));
        self.reap(ch);
        let done = match done {
            Ok(d) => d,
            Err(e) => {
                if let Some(p) = new_pid {
                    // SAFETY: kill(2) on the pid the migration reported for our workload.
                    unsafe { libc::kill(p as i32, libc::SIGKILL) };
                }
                return Err(e);
            }
        };
        // The next migration starts once this one's processes have let go of
        // their memory: a large workload exiting holds a CPU in the kernel
        // for a good part of a second while it frees its pages, and a small
        // move measured right after it stopped two to three times as long
        // (BENCHMARKS.md, the 56th stop). The original at the source ends
        // once its last page has moved.
        for p in [Some(pid as i64), new_pid].into_iter().flatten() {
            wait_exited(p as i32, Duration::from_secs(30));
        }
        // demand-paging: pmig migrate returned at the handover; the faults were
        // counted by n2's daemon until the process exited.
        if cell.strategy == "demand-paging" {
            if let Some(p) = new_pid {
                if let Some(f) = self.exit_faults(p) {
                    r.remote_faults = f.0;
                    r.prefetched_pages = f.1;
                    r.prefetch_hits = f.2;
                }
            }
        }
        r.elapsed_ms = done.elapsed_ms.unwrap_or(f64::NAN);
        r.max_pause_ms = done
            .max_pause_us
            .map(|u| u as f64 / 1000.0)
            .unwrap_or(f64::NAN);
        r.stall_ms = stall_of(&pauses_since(&done, ready.t0_ns, migrate_ns), r.down_ms);
        let sums: Vec<&str> = base.iter().filter_map(|b| b.checksum.as_deref()).collect();
        r.self_check = done.verify_ok
            && done.checksum.is_some()
            && !sums.is_empty()
            && sums.iter().all(|s| Some(*s) == done.checksum.as_deref());
        let bl: Vec<f64> = base.iter().filter(|b| b.ok).map(|b| b.elapsed_ms).collect();
        r.baseline_ms = crate::stats::summarize(&bl).median;
        r.delay_ms = r.elapsed_ms - r.baseline_ms;
        let rss_b = r.rss_kib * 1024.0;
        r.bytes_per_rss = r.bytes_total / rss_b;
        r.rate_frac_tcp = r.bytes_total / (r.total_ms / 1000.0) / r.tcp_bytes_per_s;
        r.stop_rate_frac_limit = (r.bytes_total - r.bytes_post.max(0.0))
            / (r.down_ms / 1000.0)
            / r.tcp_bytes_per_s.min(r.first_touch_bytes_per_s);
        r.post_rate_frac_tcp = if r.bytes_post > 0.0 && r.post_ms > 0.0 {
            r.bytes_post / (r.post_ms / 1000.0) / r.tcp_bytes_per_s
        } else {
            f64::NAN
        };
        r.post_rate_frac_limit = r.post_rate_frac_tcp * r.tcp_bytes_per_s
            / r.tcp_bytes_per_s.min(r.first_touch_bytes_per_s);
        let would = r.remote_faults + r.prefetch_hits;
        r.prefetch_share = if would > 0.0 {
            r.prefetch_hits / would
        } else {
            f64::NAN
        };
        if !done.verify_ok {
            return Err(BenchError::Failed(
                "the migrated workload failed its own verification".into(),
            ));
        }
        if !r.self_check {
            return Err(BenchError::Failed(format!(
                "the migrated run's checksum {:?} differs from the unmigrated run's {:?}",
                done.checksum, sums
            )));
        }
        r.ok = true;
        Ok(())
    }

    /// (remote faults, prefetched, prefetch hits) that n2's daemon logged when
    /// a demand-paged process exited.
    fn exit_faults(&self, pid: i64) -> Option<(f64, f64, f64)> {
        let c = self.cluster().ok()?;
        let log = c.node("n2").ok()?.daemon_log.clone()?;
        let needle = format!("(pid {pid}) ended with its exit");
        for _ in 0..200 {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(l) = text.lines().rev().find(|l| l.contains(&needle)) {
                let g = |k: &str| {
                    l.split(&format!("{k}: "))
                        .nth(1)
                        .and_then(|r| r.split([',', ' ', '}']).next())
                        .and_then(|v| v.parse::<f64>().ok())
                };
                return Some((
                    g("remote_faults")?,
                    g("prefetched").unwrap_or(0.0),
                    g("prefetch_hits").unwrap_or(0.0),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// The state directory of the cluster [`run`] brings up.
fn cluster_dir(o: &Options) -> Result<PathBuf> {
    Ok(std::path::absolute(o.out.join("work"))
        .map_err(io("out dir"))?
        .join("cluster"))
}

/// Tears down the cluster of [`run`] (its daemons, its workloads and its
/// namespaces) if the bench is interrupted by SIGINT, SIGTERM or SIGHUP,
/// then exits with 128 + the signal's number, as the signal would have.
/// Dropping [`Run`]'s guard covers errors and panics, but a signal's
/// default action ends the process without it, and left the cluster up.
///
/// Called from the main thread before any other thread starts: the signals
/// are blocked in it, and so in every thread started after, and a thread
/// of its own waits for them. (Programs it starts begin with no signal
/// blocked: `std::process::Command` clears the mask in the child.)
pub fn tear_down_on_signal(o: &Options) -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let state_dir = cluster_dir(o)?;
    let prefix = o.prefix.clone();
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block()
        .map_err(|e| BenchError::Io("block the termination signals".into(), e.into()))?;
    std::thread::Builder::new()
        .name("pmig-bench-signals".into())
        .spawn(move || {
            let Ok(sig) = set.wait() else {
                return;
            };
            eprintln!("\npmig bench: {sig} received: tearing down the cluster `{prefix}`");
            if let Err(e) = pmig_cluster::down(&prefix, Some(&state_dir)) {
                eprintln!("pmig bench: the cluster `{prefix}` could not be torn down: {e}");
            }
            std::process::exit(128 + sig as i32);
        })
        .map_err(io("start the thread that waits for signals"))?;
    Ok(())
}

/// Runs the plan. `progress` sees every step.
pub fn run(o: &Options, cells: &[Cell], command: &str, progress: &dyn Progress) -> Result<Results> {
    let t0 = Instant::now();
    std::fs::create_dir_all(&o.out).map_err(io(format!("create {}", o.out.display())))?;
    let work = std::path::absolute(o.out.join("work")).map_err(io("out dir"))?;
    std::fs::create_dir_all(&work).map_err(io(format!("create {}", work.display())))?;
    pmig_cluster::validate_prefix(&o.prefix).map_err(|e| BenchError::Failed(e.to_string()))?;
    let state_dir = cluster_dir(o)?;
    let mut run = Run {
        o,
        work: work.clone(),
        g: Guard {
            prefix: o.prefix.clone(),
            state_dir,
            children: Vec::new(),
            up: false,
        },
        seq: 0,
    };
    let mut res = Results {
        command: command.into(),
        started: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        machine: Machine::read(),
        quick: o.quick,
        reps: o.reps,
        plan: cells.to_vec(),
        tcp: Vec::new(),
        baselines: Vec::new(),
        records: Vec::new(),
        wall_s: 0.0,
    };
    let mut rates: BTreeMap<(String, u64), std::result::Result<f64, String>> = BTreeMap::new();
    for link in ALL_LINKS {
        let lc: Vec<&Cell> = cells.iter().filter(|c| c.link == link).collect();
        if lc.is_empty() {
            continue;
        }
        progress.phase(&format!("{link}: cluster up"));
        if let Err(e) = run.cluster_up(link) {
            for c in &lc {
                for rep in 0..o.reps {
                    res.records.push(failed(c, rep, &e.to_string()));
                    progress.cell_done(&format!("{link} {}: FAILED", c.strategy));
                }
            }
            run.cluster_down();
            continue;
        }
        progress.phase(&format!("{link}: raw TCP throughput"));
        let tcp = run.tcp(link, o.reps);
        // Child processes of the TCP measurement are done: drop them.
        for mut c in run.g.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let tcp_ok: Vec<f64> = tcp.iter().filter(|t| t.ok).map(|t| t.bytes_per_s).collect();
        let tcp_med = crate::stats::summarize(&tcp_ok).median;
        res.tcp.extend(tcp);
        // Unmigrated runs: as long as the migration takes, at least min_run.
        let mut groups: Vec<(String, u64)> =
            lc.iter().map(|c| (c.workload.clone(), c.kib)).collect();
        groups.dedup();
        groups.sort();
        groups.dedup();
        // Iterations per (workload, size, strategy): the run must outlast the
        // migration (see `run_secs`); unmigrated runs per distinct count.
        let mut iters_of: BTreeMap<(String, u64, String), u64> = BTreeMap::new();
        for (w, kib) in &groups {
            let key = (w.clone(), *kib);
            if !rates.contains_key(&key) {
                progress.phase(&format!("{link}: calibrating {}", size_label(w, *kib)));
                let r = run.calibrate(w, *kib).map_err(|e| e.to_string());
                rates.insert(key.clone(), r);
            }
            let mut counts: Vec<u64> = Vec::new();
            for c in lc.iter().filter(|c| &c.workload == w && c.kib == *kib) {
                if let Some(Ok(rate)) = rates.get(&key) {
                    let secs = run_secs(&c.strategy, *kib, tcp_med, o.min_run_s());
                    let n = ((rate * secs).ceil() as u64).max(1);
                    iters_of.insert((w.clone(), *kib, c.strategy.clone()), n);
                    if !counts.contains(&n) {
                        counts.push(n);
                    }
                }
            }
            for rep in 0..o.reps {
                if let Some(Err(e)) = rates.get(&key) {
                    res.baselines.push(BaselineRecord {
                        workload: w.clone(),
                        kib: *kib,
                        link: link.into(),
                        iterations: 0,
                        rep,
                        ok: false,
                        error: Some(e.clone()),
                        elapsed_ms: f64::NAN,
                        max_pause_ms: f64::NAN,
                        checksum: None,
                    });
                }
                for &n in &counts {
                    progress.phase(&format!(
                        "{link}: unmigrated {} ({rep})",
                        size_label(w, *kib)
                    ));
                    let b = run.baseline(w, *kib, link, n, rep);
                    res.baselines.push(b);
                }
            }
            for mut c in run.g.children.drain(..) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for c in &lc {
            for rep in 0..o.reps {
                progress.phase(&format!(
                    "{link}: {} {} ({rep})",
                    c.size_label(),
                    c.strategy
                ));
                let key = (c.workload.clone(), c.kib, c.strategy.clone());
                let rec = match iters_of.get(&key) {
                    None => failed(
                        c,
                        rep,
                        "no calibration: the workload did not run unmigrated",
                    ),
                    Some(&n) => {
                        let base: Vec<BaselineRecord> = res
                            .baselines
                            .iter()
                            .filter(|b| {
                                b.workload == c.workload
                                    && b.kib == c.kib
                                    && b.link == link
                                    && b.iterations == n
                            })
                            .cloned()
                            .collect();
                        let br: Vec<&BaselineRecord> = base.iter().collect();
                        if !br.iter().any(|b| b.ok) {
                            failed(c, rep, "every unmigrated run failed")
                        } else {
                            run.migrate(c, rep, n, &br, tcp_med, xfer_secs(c.kib, tcp_med))
                        }
                    }
                };
                for mut ch in run.g.children.drain(..) {
                    let _ = ch.kill();
                    let _ = ch.wait();
                }
                progress.cell_done(&format!(
                    "{link} {} {}: {}",
                    c.size_label(),
                    c.strategy,
                    if rec.ok {
                        format!("down {:.1} ms", rec.down_ms)
                    } else {
                        format!("FAILED: {}", rec.error.as_deref().unwrap_or(""))
                    }
                ));
                res.records.push(rec);
            }
        }
        run.cluster_down();
    }
    res.wall_s = t0.elapsed().as_secs_f64();
    Ok(res)
}

/// How long the unmigrated run of a migrated workload lasts: long enough to
/// outlive the migration. Pre-copy strategies run up to 7 rounds over a
/// workload that dirties everything (10 transfers and a second leave room
/// for noise); `auto` first probes the link with 8 MiB (4 times that is allowed).
pub fn run_secs(strategy: &str, kib: u64, tcp_bytes_per_s: f64, min_run_s: f64) -> f64 {
    let xfer = xfer_secs(kib, tcp_bytes_per_s);
    let s = match strategy {
        // Every round also has a fixed cost (tens of ms on this machine).
        "pre-copy" | "queued-pre-copy" | "assisted-post-copy" => 10.0 * xfer + 1.0,
        "auto" => 10.0 * xfer + 1.0 + 4.0 * xfer_secs(8 << 10, tcp_bytes_per_s),
        _ => 1.5 * xfer,
    };
    s.max(min_run_s).min(60.0)
}

/// Seconds to move `kib` at `bytes_per_s`, or at 300 MB/s if that is less
/// (about what a migration moves on this kind of machine): a planning
/// figure for run lengths and time limits, never reported.
fn xfer_secs(kib: u64, bytes_per_s: f64) -> f64 {
    let b = (kib.max(64) * 1024) as f64;
    if bytes_per_s.is_finite() && bytes_per_s > 0.0 {
        b / bytes_per_s.min(300e6)
    } else {
        b / 1e6
    }
}

impl Record {
    /// Sets every measured figure to NaN (not measured).
    fn clear_measurements(&mut self) {
        for x in [
            &mut self.rss_kib,
            &mut self.preparation_ms,
            &mut self.down_ms,
            &mut self.post_ms,
            &mut self.total_ms,
            &mut self.bytes_total,
            &mut self.bytes_post,
            &mut self.bytes_per_rss,
            &mut self.tcp_bytes_per_s,
            &mut self.rate_frac_tcp,
            &mut self.post_rate_frac_tcp,
            &mut self.post_rate_frac_limit,
            &mut self.first_touch_bytes_per_s,
            &mut self.stop_rate_frac_limit,
            &mut self.pages_sent,
            &mut self.rounds,
            &mut self.remote_faults,
            &mut self.prefetched_pages,
            &mut self.prefetch_hits,
            &mut self.prefetch_share,
            &mut self.elapsed_ms,
            &mut self.baseline_ms,
            &mut self.delay_ms,
            &mut self.max_pause_ms,
            &mut self.stall_ms,
            &mut self.fault_wait_max_ms,
            &mut self.skeleton_pause_ms,
        ] {
            *x = f64::NAN;
        }
    }
}

fn failed(c: &Cell, rep: usize, e: &str) -> Record {
    let mut r = Record {
        workload: c.workload.clone(),
        kib: c.kib,
        link: c.link.clone(),
        strategy: c.strategy.clone(),
        rep,
        ok: false,
        error: Some(e.to_string()),
        ..Record::default()
    };
    r.clear_measurements();
    r
}

/// The lengths (µs) of the pauses of `out` that ended after `since_ns`
/// (CLOCK_MONOTONIC), given the program's clock at t = 0 (`t0_ns`); all of
/// them when that is not known (a workload that does not say).
fn pauses_since(out: &RunOutput, t0_ns: Option<u64>, since_ns: u64) -> Vec<u64> {
    out.pauses
        .iter()
        .filter(|&&(t_ms, gap_us)| match t0_ns {
            Some(t0) => t0 + t_ms * 1_000_000 + gap_us * 1000 > since_ns,
            None => true,
        })
        .map(|&(_, gap_us)| gap_us)
        .collect()
}

/// The program's longest stall besides the freeze, ms, from its pauses
/// (µs) and the migration's down time: the longest pause counts as the
/// freeze, and of it only what lasted beyond the down time counts as a
/// stall (the first faults after the resume, if they wait, extend the
/// pause the freeze began); any other pause counts whole. The bench knows
/// when the migration began ([`pauses_since`]) but not when within it the
/// stop fell, so where the longest pause was not the freeze this
/// undercounts it by the down time: a lower bound of the longest stall,
/// never below the second-longest pause (the measure before 2026-11-28)
/// and never above the longest.
fn stall_of(pauses_us: &[u64], down_ms: f64) -> f64 {
    let mut p: Vec<f64> = pauses_us.iter().map(|&u| u as f64 / 1000.0).collect();
    p.sort_unstable_by(|a, b| b.total_cmp(a));
    let beyond_freeze = match p.first() {
        Some(&longest) if down_ms.is_finite() => (longest - down_ms).max(0.0),
        _ => 0.0,
    };
    beyond_freeze.max(p.get(1).copied().unwrap_or(0.0))
}

/// Waits, at most `limit`, until process `pid` is gone or a zombie: its
/// memory has been freed by then (the kernel frees it before the process
/// becomes a zombie).
fn wait_exited(pid: i32, limit: Duration) {
    let t = Instant::now();
    while t.elapsed() < limit {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the name, which ends with the last ')'.
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if matches!(state, None | Some('Z') | Some('X')) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(quick: bool) -> Options {
        Options {
            pmig: "pmig".into(),
            out: "/tmp/x".into(),
            quick,
            reps: 1,
            strategies: None,
            links: None,
            workloads: None,
            sizes_mib: None,
            nodes: 2,
            prefix: "pbx".into(),
        }
    }

    #[test]
    fn the_wait_for_an_exit_ends_at_the_zombie_and_at_its_limit() {
        let mut done = Command::new("true").spawn().unwrap();
        let t = Instant::now();
        // Not reaped yet: a zombie once it has exited.
        wait_exited(done.id() as i32, Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_secs(20));
        done.wait().unwrap();
        let mut running = Command::new("sleep").arg("60").spawn().unwrap();
        let t = Instant::now();
        wait_exited(running.id() as i32, Duration::from_millis(100));
        let waited = t.elapsed();
        let _ = running.kill();
        let _ = running.wait();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
    }

    #[test]
    fn a_stall_is_what_outlasts_the_freeze_or_another_pause() {
        // The first faults after the resume waited: the pause at the move
        // outlasts the 3 ms down time by 57 ms.
        assert_eq!(stall_of(&[60_000, 6_000], 3.0), 57.0);
        // A longer pause than the freeze's elsewhere: taken for the freeze,
        // so undercounted by the down time (9 ms lasted 6 beyond it).
        assert_eq!(stall_of(&[3_200, 9_000, 5_000], 3.0), 6.0);
        // Never below the second-longest pause.
        assert_eq!(stall_of(&[3_200, 5_000, 2_000], 3.0), 3.2);
        assert_eq!(stall_of(&[2_500], 3.0), 0.0);
        assert_eq!(stall_of(&[], 3.0), 0.0);
        // Without a down time, the second-longest pause.
        assert_eq!(stall_of(&[60_000, 6_000], f64::NAN), 6.0);
    }

    #[test]
    fn parses_workload_lines() {
        let t = "READY pid=42 rss_kib=4200 t0_ns=5000000000\nPAUSE t_ms=3 gap_us=9000\n\
                 PAUSE t_ms=9 gap_us=120000\n\
                 DONE iter=7 elapsed_ms=1234 max_pause_ms=120 checksum=abcd verify=ok max_pause_us=120000\n";
        let r = parse_output(t);
        assert_eq!(r.pid, Some(42));
        assert_eq!(r.rss_kib, Some(4200));
        assert_eq!(r.t0_ns, Some(5_000_000_000));
        assert_eq!(r.pauses, vec![(3, 9000), (9, 120000)]);
        // The first pause ended 12 ms after t = 0, the second 129 ms after.
        assert_eq!(pauses_since(&r, r.t0_ns, 5_011_000_000), vec![9000, 120000]);
        assert_eq!(pauses_since(&r, r.t0_ns, 5_012_000_000), vec![120000]);
        assert_eq!(pauses_since(&r, r.t0_ns, 5_129_000_000), Vec::<u64>::new());
        // A workload that does not say when its t = 0 was: every pause.
        assert_eq!(pauses_since(&r, None, u64::MAX), vec![9000, 120000]);
        assert_eq!(r.iter, Some(7));
        assert_eq!(r.elapsed_ms, Some(1234.0));
        assert_eq!(r.checksum.as_deref(), Some("abcd"));
        assert!(r.verify_ok && r.done);
        let f = parse_output("DONE iter=7 elapsed_ms=1 checksum=ab verify=FAIL reason=x");
        assert!(f.done && !f.verify_ok);
    }

    #[test]
    fn plans() {
        let q = plan(&opts(true)).unwrap();
        // Every table of the report has its cells in quick mode.
        assert!(q
            .iter()
            .any(|c| c.workload == "getpid" && c.link == "1gbit"));
        assert!(q.iter().any(|c| c.workload == "rma" && c.link == "1gbit"));
        assert!(q
            .iter()
            .any(|c| c.workload == "reference" && c.link == "10mbit"));
        assert!(q.iter().any(|c| c.strategy == "demand-paging"));
        let full = plan(&opts(false)).unwrap();
        for s in ALL_STRATEGIES {
            for l in ALL_LINKS {
                assert!(
                    full.iter().any(|c| c.strategy == s && c.link == l),
                    "{s} {l}"
                );
            }
        }
        for w in ALL_WORKLOADS {
            assert!(full.iter().any(|c| c.workload == w), "{w}");
        }
        let mut o = opts(true);
        o.strategies = Some(vec!["ampom".into()]);
        o.links = Some(vec!["unlimited".into()]);
        o.sizes_mib = Some(vec![2.0, 4.0]);
        let p = plan(&o).unwrap();
        assert!(p
            .iter()
            .all(|c| c.strategy == "ampom" && c.link == "unlimited"));
        assert!(p.iter().any(|c| c.kib == 4096) && p.iter().any(|c| c.kib == 2048));
        o.links = Some(vec!["2mbit".into()]);
        assert!(plan(&o).is_err());
    }
}
