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
    /// Internal: hold process PID frozen after capturing it into --image-dir (the
    /// daemon's helper; reads `kill` or `resume` on stdin).
    #[arg(long, hide = true, value_name = "PID", requires = "image_dir")]
    hold: Option<i32>,
    #[arg(long, hide = true, value_name = "DIR")]
    image_dir: Option<PathBuf>,
    /// Internal: which pages the holder captures (full, handover, written:FILE).
    #[arg(long, hide = true, default_value = "full")]
    hold_mode: String,
}

pub fn run(a: Args) -> Result<i32> {
    if let (Some(pid), Some(dir)) = (a.hold, &a.image_dir) {
        let mode = pmig_strategies::holder::CaptureMode::parse(&a.hold_mode)
            .with_context(|| format!("bad --hold-mode {}", a.hold_mode))?;
        return Ok(pmig_strategies::holder::holder_main(pid, dir, &mode));
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
    pmig_daemon::run(cfg)?;
    Ok(0)
}
