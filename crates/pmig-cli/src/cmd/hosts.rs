//! `pmig hosts request|status`, `pmig owner active`, `pmig evict`, `pmig balance status`,
//! `pmig bench selector`: host selection (pmig-services::selector).

use anyhow::{bail, Context, Result};
use pmig_daemon::control::{self, Event, Request};
use pmig_services::selector::{bench as sbench, Class, Client};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct HostsArgs {
    #[command(subcommand)]
    cmd: HostsCmd,
}

#[derive(clap::Subcommand)]
enum HostsCmd {
    /// Get idle hosts and hold them: while CMD runs (the hosts in $PMIG_HOSTS as
    /// `name=addr:port …` and $PMIG_HOST_NAMES), or, without CMD, print them
    /// (`name addr:port`, one a line) and hold them until stdin closes. Hosts
    /// taken back meanwhile are reported as `revoked NAME CLASS: reason`.
    Request(RequestArgs),
    /// The selector's table: every node, idle or not, its load, owner idle
    /// time, and who holds it.
    Status {
        /// Print the table as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct RequestArgs {
    /// Application class: one application of each class per host.
    #[arg(long, default_value = "short", value_parser = ["short", "long"])]
    class: String,
    /// How many hosts (fewer if fewer are free).
    #[arg(short = 'n', long, default_value_t = 1)]
    count: u32,
    /// This node may be given too.
    #[arg(long)]
    include_self: bool,
    /// Print the hosts as one JSON array.
    #[arg(long)]
    json: bool,
    /// Command to run while the hosts are held.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<OsString>,
}

#[derive(clap::Args)]
pub struct OwnerArgs {
    #[command(subcommand)]
    cmd: OwnerCmd,
}

#[derive(clap::Subcommand)]
enum OwnerCmd {
    /// The owner is active now: the node is not idle for the owner threshold
    /// (--idle-owner-secs), and its foreign processes are evicted.
    Active {
        /// Node (default: this one).
        #[arg(long)]
        node: Option<String>,
    },
}

#[derive(clap::Args)]
pub struct EvictArgs {
    /// Node (default: this one).
    node: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct BalanceArgs {
    #[command(subcommand)]
    cmd: BalanceCmd,
}

#[derive(clap::Subcommand)]
enum BalanceCmd {
    /// Every node's recent load-balancing decisions and evictions.
    Status {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
        /// Show this many decisions per node (newest).
        #[arg(long, default_value_t = 10)]
        last: usize,
    },
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Idle hosts in the in-process selector's table.
    #[arg(long, default_value_t = 64)]
    hosts: usize,
    /// Client counts, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    clients: Vec<usize>,
    /// Seconds per row.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Go through this node's daemon (control socket → daemon → selector)
    /// instead of an in-process selector; run inside a node, e.g.
    /// `pmig cluster exec n2 -- pmig bench selector --local`.
    #[arg(long)]
    local: bool,
    /// Also print the rows as JSON.
    #[arg(long)]
    json: bool,
}

pub fn hosts(a: HostsArgs) -> Result<i32> {
    match a.cmd {
        HostsCmd::Request(r) => request(r),
        HostsCmd::Status { json } => status(json),
    }
}

fn request(a: RequestArgs) -> Result<i32> {
    let class: Class = a.class.parse().map_err(anyhow::Error::msg)?;
    let mut c = Client::local()?;
    let exclude: Vec<String> = if a.include_self {
        vec![]
    } else {
        vec!["@self".into()]
    };
    let hosts = c.request_excluding(class, a.count, &exclude)?;
    let out = std::io::stdout();
    let print_revoked = |r: &pmig_services::selector::Revoked| {
        let mut o = out.lock();
        let _ = writeln!(o, "revoked {} {}: {}", r.host, r.class, r.reason);
        let _ = o.flush();
    };
    if let Some((prog, args)) = a.cmd.split_first() {
        let list: Vec<String> = hosts
            .iter()
            .map(|h| format!("{}={}", h.name, h.addr))
            .collect();
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        let mut child = std::process::Command::new(prog)
            .args(args)
            .env("PMIG_HOSTS", list.join(" "))
            .env("PMIG_HOST_NAMES", names.join(" "))
            .spawn()
            .with_context(|| format!("cannot run {}", prog.to_string_lossy()))?;
        loop {
            if let Some(st) = child.try_wait()? {
                use std::os::unix::process::ExitStatusExt;
                return Ok(st.code().unwrap_or(128 + st.signal().unwrap_or(0)));
            }
            if let Some(r) = c.wait_revoked(Duration::from_millis(200))? {
                eprintln!(
                    "pmig: host {} ({}) taken back: {}",
                    r.host, r.class, r.reason
                );
            }
        }
    }
    {
        let mut o = out.lock();
        if a.json {
            writeln!(o, "{}", serde_json::to_string(&hosts)?)?;
        } else {
            for h in &hosts {
                writeln!(o, "{} {}", h.name, h.addr)?;
            }
        }
        o.flush()?;
    }
    // Hold until stdin closes.
    let closed = Arc::new(AtomicBool::new(false));
    {
        let closed = closed.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut i = std::io::stdin().lock();
            while matches!(i.read(&mut buf), Ok(n) if n > 0) {}
            closed.store(true, Ordering::SeqCst);
        });
    }
    while !closed.load(Ordering::SeqCst) {
        if let Some(r) = c.wait_revoked(Duration::from_millis(100))? {
            print_revoked(&r);
        }
    }
    Ok(0)
}

fn ms(v: Option<u64>) -> String {
    match v {
        Some(m) => format!("{:.1}s", m as f64 / 1000.0),
        None => "-".into(),
    }
}

fn status(json: bool) -> Result<i32> {
    match control::request(control::CONTROL_NAME, &Request::HostsStatus, |_| {})? {
        Event::Hosts { selector, rows } => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "selector": selector, "hosts": rows })
                    )?
                );
                return Ok(0);
            }
            println!("selector: {selector}");
            println!(
                "{:<8} {:<8} {:>6} {:>11} {:>10} {:>8}  held by",
                "node", "state", "load", "owner idle", "idle for", "report"
            );
            for r in rows {
                let held: Vec<String> = r
                    .held
                    .iter()
                    .map(|(c, who)| format!("{c}: {who}"))
                    .collect();
                println!(
                    "{:<8} {:<8} {:>6.2} {:>11} {:>10} {:>7}ms  {}",
                    r.node,
                    r.state,
                    r.load,
                    ms(r.owner_idle_ms),
                    ms(r.idle_for_ms),
                    r.report_age_ms,
                    if held.is_empty() {
                        "-".into()
                    } else {
                        held.join(", ")
                    }
                );
            }
            Ok(0)
        }
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}

fn one_line(req: Request) -> Result<i32> {
    match control::request(control::CONTROL_NAME, &req, |_| {})? {
        Event::Ok { message } => {
            println!("{message}");
            Ok(0)
        }
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}

pub fn owner(a: OwnerArgs) -> Result<i32> {
    match a.cmd {
        OwnerCmd::Active { node } => one_line(Request::OwnerActive { node }),
    }
}

pub fn evict(a: EvictArgs) -> Result<i32> {
    match control::request(
        control::CONTROL_NAME,
        &Request::Evict { node: a.node },
        |_| {},
    )? {
        Event::Evicted { report } => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                for l in report.lines() {
                    println!("{l}");
                }
            }
            // Some process could not be moved: it runs on, and the status says so.
            Ok(if report.moved.iter().any(|m| m.error.is_some()) {
                1
            } else {
                0
            })
        }
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}

pub fn balance(a: BalanceArgs) -> Result<i32> {
    let BalanceCmd::Status { json, last } = a.cmd;
    match control::request(control::CONTROL_NAME, &Request::BalanceStatus, |_| {})? {
        Event::Balance { nodes, unreachable } => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "nodes": nodes, "unreachable": unreachable })
                    )?
                );
                return Ok(0);
            }
            for n in &nodes {
                println!(
                    "{}: balancing {}",
                    n.node,
                    if n.enabled { "on" } else { "off" }
                );
                let skip = n.decisions.len().saturating_sub(last);
                for d in &n.decisions[skip..] {
                    let rep = if d.repeat > 1 {
                        format!(" (×{})", d.repeat)
                    } else {
                        String::new()
                    };
                    println!("  {:?} {:?}{rep}: {}", d.action, d.reason, d.text);
                }
                for e in &n.evictions {
                    for l in e.lines() {
                        println!("  eviction: {l}");
                    }
                }
            }
            for u in unreachable {
                println!("unreachable: {u}");
            }
            Ok(0)
        }
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}

pub fn bench(a: BenchArgs) -> Result<i32> {
    if !(a.secs > 0.0 && a.secs <= 3600.0) {
        bail!("--secs must be in (0, 3600]");
    }
    if a.clients.is_empty() || a.clients.iter().any(|&c| c == 0 || c > 256) {
        bail!("--clients: counts between 1 and 256");
    }
    let o = sbench::Options {
        hosts: a.hosts.max(1),
        clients: a.clients,
        duration: Duration::from_secs_f64(a.secs),
        local: a.local,
    };
    let rows = sbench::run(&o, &|m| eprintln!("pmig bench selector: {m}"))?;
    print!("{}", sbench::markdown(&rows));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(0)
}
