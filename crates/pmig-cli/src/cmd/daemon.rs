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
    pmig_daemon::run(cfg)?;
    Ok(0)
}
