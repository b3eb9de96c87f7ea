use anyhow::{bail, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    #[command(flatten)]
    run: RunArgs,
}

/// `pmig bench` without a subcommand: the strategy comparison.
#[derive(clap::Args)]
struct RunArgs {
    /// A small matrix (about a minute) that still produces every table and plot.
    #[arg(long)]
    quick: bool,
    /// Output directory [default: bench-results/<UTC timestamp>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Repetitions per combination [default: 1 with --quick, else 2].
    #[arg(long, value_name = "K")]
    reps: Option<usize>,
    /// Strategies to run (replaces each workload's default set).
    #[arg(long, value_delimiter = ',')]
    strategies: Option<Vec<String>>,
    /// Links to run: 10mbit, 100mbit, 1gbit, unlimited.
    #[arg(long, value_delimiter = ',')]
    links: Option<Vec<String>>,
    /// Workloads to run (bench/workloads).
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    /// Sizes in MiB of the sized workloads (all but getpid and reference).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<f64>>,
    /// Nodes of the local cluster (the migration goes n1 → n2).
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Cluster name prefix [default: pb<pid>].
    #[arg(long)]
    prefix: Option<String>,
    /// Print the plan and exit.
    #[arg(long)]
    dry_run: bool,
}

#[derive(clap::Subcommand)]
enum What {
    /// Dump and restore throughput against disk-write and first-touch bandwidth.
    Engine {
        /// Sizes of touched memory, in MiB.
        #[arg(long, value_delimiter = ',', default_value = "64,1024,4096")]
        sizes: Vec<u64>,
        /// Repetitions per size (median and range are reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Image directory (its file system is what the dump is compared with).
        #[arg(long, default_value = "/var/tmp/pmig-bench")]
        dir: PathBuf,
        /// Also write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Remote execution overhead: `pmig run` of a null program against a local
    /// fork+exec+wait (run inside a node: `pmig cluster exec n1 -- pmig bench exec`).
    Exec(super::exec_bench::Args),
    /// Host selection: request + return pairs per second and their latency.
    Selector(super::hosts::BenchArgs),
    /// Every strategy × link × workload (the same as `pmig bench` without a subcommand).
    Run(RunArgs),
    /// Raw TCP throughput, receiving side (used by `pmig bench` inside a node).
    #[command(hide = true)]
    TcpServer {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long, default_value_t = 1)]
        conns: usize,
    },
    /// Raw TCP throughput, sending side; prints one JSON object.
    #[command(hide = true)]
    TcpClient {
        #[arg(long)]
        to: std::net::SocketAddr,
        #[arg(long, default_value_t = 1.0)]
        secs: f64,
    },
}

pub fn run(a: Args) -> Result<i32> {
    match a.what {
        Some(What::Exec(a)) => super::exec_bench::run(a),
        Some(What::Selector(b)) => super::hosts::bench(b),
        None => matrix(a.run),
        Some(What::Run(r)) => matrix(r),
        Some(What::TcpServer { listen, conns }) => {
            pmig_bench::tcp::serve(listen, conns)?;
            Ok(0)
        }
        Some(What::TcpClient { to, secs }) => {
            let r = pmig_bench::tcp::send(to, std::time::Duration::from_secs_f64(secs))?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(0)
        }
        Some(What::Engine {
            sizes,
            reps,
            dir,
            json,
        }) => {
            let o = pmig_bench::engine::Options {
                pmig: std::env::current_exe()?,
                dir,
                sizes_mib: sizes,
                reps,
            };
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            let rows = pmig_bench::engine::run(&o, &|m| bar.set_message(m.to_string()))?;
            bar.finish_and_clear();
            print!("{}", pmig_bench::engine::markdown(&rows));
            if let Some(p) = json {
                std::fs::write(&p, serde_json::to_string_pretty(&rows)?)?;
            }
            Ok(0)
        }
    }
}

/// A progress bar on a terminal; one line per migration otherwise (CI logs).
struct Bar(indicatif::ProgressBar, bool);

impl pmig_bench::matrix::Progress for Bar {
    fn phase(&self, msg: &str) {
        self.0.set_message(msg.to_string());
    }
    fn cell_done(&self, msg: &str) {
        self.0.inc(1);
        if !self.1 {
            eprintln!(
                "[{}/{} {:.0} s] {msg}",
                self.0.position(),
                self.0.length().unwrap_or(0),
                self.0.elapsed().as_secs_f64()
            );
        } else if msg.contains("FAILED") {
            self.0.println(msg);
        }
    }
}

fn matrix(a: RunArgs) -> Result<i32> {
    if !nix::unistd::geteuid().is_root() {
        bail!("pmig bench needs root (network namespaces, ptrace)");
    }
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench-results").join(chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string())
    });
    let o = pmig_bench::matrix::Options {
        pmig: std::env::current_exe()?,
        out: out.clone(),
        quick: a.quick,
        reps: a.reps.unwrap_or(if a.quick { 1 } else { 2 }).max(1),
        strategies: a.strategies,
        links: a.links,
        workloads: a.workloads,
        sizes_mib: a.sizes,
        nodes: a.nodes.max(2),
        prefix: a
            .prefix
            .unwrap_or_else(|| format!("pb{}", std::process::id() % 100_000)),
    };
    let cells = pmig_bench::matrix::plan(&o)?;
    println!(
        "pmig bench{}: {} combinations × {} repetitions = {} migrations, n1 → n2 of a {}-node cluster `{}`",
        if o.quick { " --quick" } else { "" },
        cells.len(),
        o.reps,
        cells.len() * o.reps,
        o.nodes,
        o.prefix
    );
    for link in pmig_bench::matrix::ALL_LINKS {
        let lc: Vec<_> = cells.iter().filter(|c| c.link == link).collect();
        if lc.is_empty() {
            continue;
        }
        let mut groups: Vec<String> = Vec::new();
        for c in &lc {
            let g = c.size_label();
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        println!("  {link:<9} {} combinations:", lc.len());
        for g in groups {
            let ss: Vec<&str> = lc
                .iter()
                .filter(|c| c.size_label() == g)
                .map(|c| c.strategy.as_str())
                .collect();
            println!("    {g:<20} {}", ss.join(", "));
        }
    }
    if a.dry_run {
        return Ok(0);
    }
    // Before the progress bar's thread starts (see the function).
    pmig_bench::matrix::tear_down_on_signal(&o)?;
    let cmd: Vec<String> = std::env::args().collect();
    let cmd = format!(
        "pmig {}",
        cmd.iter().skip(1).cloned().collect::<Vec<_>>().join(" ")
    );
    let bar = indicatif::ProgressBar::new((cells.len() * o.reps) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "[{elapsed_precise}] {bar:30} {pos}/{len} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    let res = pmig_bench::matrix::run(
        &o,
        &cells,
        &cmd,
        &Bar(
            bar.clone(),
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ),
    );
    bar.finish_and_clear();
    let res = res?;
    let report = pmig_bench::report::write_all(&out, &res)?;
    let failed = res.records.iter().filter(|r| !r.ok).count();
    println!(
        "pmig bench: {} migrations ({failed} failed) in {:.0} s; report {}",
        res.records.len(),
        res.wall_s,
        report.display()
    );
    Ok(0)
}
