//! `pmig daemon`: the node daemon (see the pmig-daemon crate).

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// This node's name (n1, n2, …).
    #[arg(long, required_unless_present = "hold")]
    node: Option<String>,
    /// Address and port for the other nodes, e.g. 10.77.0.1:7070.
    #[arg(long, value_name = "ADDR:PORT", required_unless_present = "hold")]
    listen: Option<String>,
    /// Cluster key file (64 hex digits, mode 0600).
    #[arg(long, value_name = "FILE", required_unless_present = "hold")]
    key_file: Option<PathBuf>,
    /// State directory (stdio files of restored processes) [default: /var/lib/pmig/NODE].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// A node of the cluster, for the cluster services (repeat for every node,
    /// this one included).
    #[arg(long = "peer", value_name = "NAME=ADDR:PORT")]
    peers: Vec<String>,
    /// Cipher of the connections this node opens: `auto` prefers AES-GCM where
    /// the CPU accelerates it, `aesgcm` whatever the CPU, `chachapoly` never. A
    /// node that prefers AES-GCM offers it, and uses it to peers that offer it
    /// too (ChaChaPoly to the others). Connections from other nodes may use either.
    #[arg(long, default_value = "auto", value_parser = ["auto", "aesgcm", "chachapoly"])]
    cipher: String,
    /// TCP congestion control of the connections between nodes: one the
    /// kernel offers (`cubic`, `reno`, `bbr`, …), or `system` for the
    /// system's default. `cubic` unless told: with BBR, post-copy's faults
    /// waited in bursts every ten seconds (BENCHMARKS.md).
    #[arg(long, default_value = pmig_proto::congestion::DEFAULT, value_name = "NAME|system")]
    tcp_congestion: String,
    /// Pages this node sends compressed (LZ4, to nodes of protocol 19 and
    /// later): `auto` on links the kernel measures slower than 1.6 Gbit/s,
    /// `always`, or `never`. Pages that do not compress go as they are.
    #[arg(long, default_value = "auto", value_name = "auto|always|never")]
    compress: pmig_proto::compress::Mode,
    /// How much of the CPU a process ran on this node's CPU must have for
    /// the process to be restored here: `features`, every instruction-set
    /// feature a program may pick its code by (AVX2, AVX-512, AES-NI, ...)
    /// and every FPU state component its threads hold; or `xsave`, only the
    /// state components (for nodes of slightly different CPUs whose
    /// programs are known not to use what one lacks). Default: the
    /// daemon's $PMIG_CPU_CHECK, else `features`.
    #[arg(long, value_name = "features|xsave")]
    cpu_check: Option<pmig_engine::resources::cpu::CpuCheck>,
    /// Host selection: where the load comes from: `system` (/proc/loadavg and
    /// terminal input) or `netns` (runnable threads in this network namespace,
    /// owner activity only from `pmig owner active`; for local test clusters).
    #[arg(long, default_value = "system", value_name = "system|netns")]
    load_source: String,
    /// Host selection: the node is idle below this load …
    #[arg(long, default_value_t = 1.0, value_name = "LOAD")]
    idle_load: f64,
    /// … and with no owner activity for this many seconds.
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    idle_owner_secs: f64,
    /// Host selection: how often this node measures and reports to the selector.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    report_interval_ms: u64,
    /// Host selection, `netns` load: time constant of the load average.
    #[arg(long, default_value_t = 60.0, value_name = "S")]
    load_tau_secs: f64,
    /// Host selection: never offer this node for foreign work.
    #[arg(long)]
    no_foreign_work: bool,
    /// Eviction: where foreign processes go when the owner becomes active or on
    /// `pmig evict`: `home` (a job's home, or the node a process came from) or
    /// `idle` (an idle host from the selector, else home).
    #[arg(long, default_value = "home", value_name = "home|idle")]
    evict_to: String,
    /// Eviction: the migration strategy (pre-copy: nothing is left behind on
    /// this node, and the freeze is short).
    #[arg(long, default_value = "pre-copy", value_name = "S")]
    evict_strategy: String,
    /// Load balancing (openMosix): move long-running CPU-bound jobs and
    /// migrated processes from this node to the least-loaded one.
    #[arg(long)]
    balance: bool,
    /// Load balancing: how often the policy runs.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    balance_interval_ms: u64,
    /// Load balancing: processes younger than this never move.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    balance_min_age_secs: f64,
    /// Load balancing: a candidate must have used at least this share of a CPU
    /// over the last interval.
    #[arg(long, default_value_t = 0.5, value_name = "SHARE")]
    balance_min_cpu: f32,
    /// Load balancing: move only when this node's load exceeds the least-loaded
    /// node's by more than this (at least 1: one move then never invites a move
    /// back) …
    #[arg(long, default_value_t = 1.5, value_name = "LOAD")]
    balance_margin: f32,
    /// … for this many consecutive intervals.
    #[arg(long, default_value_t = 3, value_name = "N")]
    balance_patience: u32,
    /// Load balancing: no decision for this long after a move.
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    balance_cooldown_secs: f64,
    /// Load balancing: the migration strategy of its moves.
    #[arg(long, default_value = "pre-copy", value_name = "S")]
    balance_strategy: String,
    /// Internal: hold process PID frozen after capturing it into --image-dir (the
    /// daemon's helper; reads `kill` or `resume` on stdin).
    #[arg(long, hide = true, value_name = "PID", requires = "image_dir")]
    hold: Option<i32>,
    #[arg(long, hide = true, value_name = "DIR")]
    image_dir: Option<PathBuf>,
    /// Internal: which pages the holder captures (full, handover, written:FILE).
    #[arg(long, hide = true, default_value = "full")]
    hold_mode: String,
    /// Internal: the holder prepares (checks, mappings) and waits for `go` on
    /// stdin before it freezes the process (`refresh` reads the mappings again).
    #[arg(long, hide = true, requires = "hold")]
    hold_wait: bool,
    /// Internal: the start time (clock ticks after boot) the migration
    /// recorded for --hold PID; the holder touches no other process.
    #[arg(long, hide = true, requires = "hold", value_name = "TICKS")]
    hold_started: Option<u64>,
}

pub fn run(a: Args) -> Result<i32> {
    if let (Some(pid), Some(dir)) = (a.hold, &a.image_dir) {
        let mode = pmig_strategies::holder::CaptureMode::parse(&a.hold_mode)
            .with_context(|| format!("bad --hold-mode {}", a.hold_mode))?;
        return Ok(pmig_strategies::holder::holder_main(
            pid,
            a.hold_started,
            dir,
            &mode,
            a.hold_wait,
        ));
    }
    let cc = a.tcp_congestion.as_str();
    if cc != pmig_proto::congestion::SYSTEM && pmig_proto::congestion::available(cc) == Some(false)
    {
        anyhow::bail!(
            "--tcp-congestion {cc}: this kernel does not offer it (net.ipv4.tcp_available_congestion_control); give one it offers, or `system`"
        );
    }
    pmig_proto::congestion::set_default(cc);
    pmig_proto::compress::set_mode(a.compress);
    if a.cipher != "auto" {
        let c: pmig_proto::Cipher = a.cipher.parse().map_err(anyhow::Error::msg)?;
        pmig_proto::Cipher::set_default(c);
    }
    let node = a.node.context("--node is required")?;
    let listen = a.listen.context("--listen is required")?;
    let key = a.key_file.context("--key-file is required")?;
    let state = a
        .state_dir
        .unwrap_or_else(|| PathBuf::from("/var/lib/pmig").join(&node));
    let mut cfg = pmig_daemon::Config::new(&node, &listen, &key, &state)?;
    cfg.peers = a
        .peers
        .iter()
        .map(|p| pmig_services::Peer::parse(p).map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let secs = |what: &str, v: f64| {
        if v.is_finite() && (0.0..=86400.0 * 365.0).contains(&v) {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            anyhow::bail!("--{what} must be between 0 and a year, not {v}")
        }
    };
    cfg.selector = pmig_services::selector::Settings {
        load_source: a.load_source.parse().map_err(anyhow::Error::msg)?,
        idle_load: a.idle_load,
        idle_owner: secs("idle-owner-secs", a.idle_owner_secs)?,
        interval: std::time::Duration::from_millis(a.report_interval_ms.clamp(50, 600_000)),
        load_tau: secs("load-tau-secs", a.load_tau_secs)?,
        accepts: !a.no_foreign_work,
    };
    let strategy = |s: &str| {
        pmig_strategies::StrategyKind::implemented(s)
            .map(|_| s.to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))
    };
    cfg.evict = pmig_daemon::evict::Settings {
        to: a.evict_to.parse().map_err(anyhow::Error::msg)?,
        strategy: strategy(&a.evict_strategy)?,
    };
    if a.balance {
        if !(a.balance_margin.is_finite() && a.balance_margin >= 1.0) {
            anyhow::bail!(
                "--balance-margin must be at least 1 (one move shifts the difference by 2), not {}",
                a.balance_margin
            );
        }
        if !(a.balance_min_cpu.is_finite() && (0.0..=64.0).contains(&a.balance_min_cpu)) {
            anyhow::bail!("--balance-min-cpu must be between 0 and 64");
        }
        cfg.balance = Some(pmig_services::balance::Settings {
            interval: std::time::Duration::from_millis(a.balance_interval_ms.clamp(100, 600_000)),
            min_age: secs("balance-min-age-secs", a.balance_min_age_secs)?,
            min_cpu: a.balance_min_cpu,
            margin: a.balance_margin,
            patience: a.balance_patience.max(1),
            cooldown: secs("balance-cooldown-secs", a.balance_cooldown_secs)?,
            strategy: strategy(&a.balance_strategy)?,
        });
    }
    cfg.cpu_check = a.cpu_check;
    pmig_daemon::run(cfg)?;
    Ok(0)
}
