//! `pmig migrate`: ask this node's daemon to move a process to another node.

use anyhow::{bail, Result};
use pmig_daemon::control::{self, Event, MigrateRequest, Request};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Process to migrate (on this node).
    #[arg(long)]
    pid: i32,
    /// Destination: a node name (of the local test cluster's state file, else
    /// one the daemon knows from its `--peer NAME=ADDR:PORT`), or ADDR:PORT.
    #[arg(long, value_name = "NODE|ADDR:PORT")]
    to: String,
    /// stop-copy, pre-copy, queued-pre-copy, demand-paging, flushing, freeze-free,
    /// post-copy, assisted-post-copy, ampom or auto.
    #[arg(long, default_value = "stop-copy")]
    strategy: String,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Longest wait for any single answer from the destination, in seconds.
    #[arg(long, default_value_t = 60, value_name = "S")]
    timeout: u64,
    /// pre-copy, queued-pre-copy: most reruns after the initial full round
    /// [default: 6].
    #[arg(long, value_name = "N")]
    max_rounds: Option<u32>,
    /// pre-copy, queued-pre-copy: stop rerunning once a round leaves at most this
    /// fraction of the address space (the populated pages at round 0) dirty,
    /// or queued [default: 0.30].
    #[arg(long, value_name = "F")]
    max_dirty_fraction: Option<f64>,
    /// pre-copy: a down-time budget. Once the fraction is met, rounds go on
    /// (up to --max-rounds) while the last one took longer than this to send
    /// and each round still sends less than the one before [default: off,
    /// Noack's rule alone].
    #[arg(long, value_name = "MS")]
    max_down_ms: Option<f64>,
    /// flushing, freeze-free: the page store, a directory on a file system
    /// that every node shares (the local test cluster's nodes share the root
    /// file system) [default: /var/tmp/pmig-pagestore].
    #[arg(long, value_name = "DIR")]
    page_store: Option<PathBuf>,
    /// Cluster whose state file resolves node names [default: $PMIG_CLUSTER_PREFIX, else pmig].
    #[arg(long, value_name = "PREFIX")]
    cluster_prefix: Option<String>,
    /// State directory of that cluster [default: $PMIG_CLUSTER_DIR, else /run/pmig-cluster].
    #[arg(long, value_name = "DIR")]
    cluster_dir: Option<PathBuf>,
}

/// `NODE` through the cluster state file; else `ADDR:PORT` as given, or the
/// name for the daemon to look up among its peers (`--peer NAME=ADDR:PORT`).
fn resolve(a: &Args) -> Result<(String, Option<String>)> {
    if a.to.parse::<std::net::SocketAddr>().is_ok() {
        return Ok((a.to.clone(), None));
    }
    let prefix = a
        .cluster_prefix
        .clone()
        .or_else(|| std::env::var("PMIG_CLUSTER_PREFIX").ok())
        .unwrap_or_else(|| pmig_cluster::DEFAULT_PREFIX.into());
    let dir = a
        .cluster_dir
        .clone()
        .or_else(|| std::env::var_os("PMIG_CLUSTER_DIR").map(PathBuf::from));
    match pmig_cluster::Cluster::load(&prefix, dir.as_deref()) {
        Ok(c) => match c.node(&a.to) {
            Ok(n) => Ok((n.listen.to_string(), Some(n.name.clone()))),
            Err(e) => bail!("{e}"),
        },
        Err(e) => {
            tracing::debug!("{e}; the daemon resolves {}", a.to);
            Ok((a.to.clone(), None))
        }
    }
}

pub fn run(a: Args) -> Result<i32> {
    // Refuse unknown or unimplemented strategies here already, with one line.
    pmig_strategies::StrategyKind::implemented(&a.strategy)?;
    pmig_strategies::PreCopyParams::new(a.max_rounds, a.max_dirty_fraction, a.max_down_ms)?;
    if a.max_down_ms.is_some() && a.strategy != "pre-copy" {
        anyhow::bail!(
            "--max-down-ms applies to pre-copy only, not to {}",
            a.strategy
        );
    }
    let (to, to_name) = resolve(&a)?;
    let req = Request::Migrate(MigrateRequest {
        pid: a.pid,
        to,
        to_name,
        strategy: a.strategy.clone(),
        timeout_s: Some(a.timeout),
        max_rounds: a.max_rounds,
        max_dirty_fraction: a.max_dirty_fraction,
        max_down_ms: a.max_down_ms,
        page_store: a
            .page_store
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
    });
    let tty = std::io::stderr().is_terminal();
    let mut bar: Option<indicatif::ProgressBar> = None;
    let t0 = std::time::Instant::now();
    let ev = control::request(control::CONTROL_NAME, &req, |ev| {
        if let Event::Progress { phase, done, total } = ev {
            // Only for long transfers: big images, or once half a second has passed.
            if !tty || (*total < (64 << 20) && t0.elapsed().as_millis() < 500) {
                return;
            }
            let b = bar.get_or_insert_with(|| {
                let b = indicatif::ProgressBar::new(*total);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                b
            });
            b.set_message(phase.clone());
            b.set_length(*total);
            b.set_position(*done);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match ev {
        Event::Done { outcome } => {
            if a.json {
                println!("{}", serde_json::to_string(&outcome)?);
            } else {
                println!("{}", outcome.summary());
            }
            Ok(0)
        }
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}
