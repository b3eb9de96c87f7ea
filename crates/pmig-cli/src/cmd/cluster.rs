//! `pmig cluster up|down|exec|status`: the local test cluster (network namespaces).

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use pmig_cluster::{Cluster, ClusterError, ClusterOpts, Link};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Create N nodes n1..nN (network namespaces joined by a bridge, links shaped with
    /// tc) and start `pmig daemon` in each.
    Up(UpArgs),
    /// Stop the daemons and remove the namespaces (idempotent; works without state).
    Down(Common),
    /// Run a command inside a node: `pmig cluster exec n2 -- ip addr`.
    Exec(ExecArgs),
    /// Show the nodes, their addresses and daemons.
    Status(StatusArgs),
    /// (internal) pid 1 of a node's pid namespace (`up --pid-ns`).
    #[command(hide = true)]
    Init {
        #[arg(long)]
        last_pid: u32,
    },
    /// (internal) run a command in the namespaces of a node's init.
    #[command(hide = true)]
    Enter {
        #[arg(long)]
        init: i32,
        #[arg(long)]
        wd: PathBuf,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
}

#[derive(clap::Args)]
struct Common {
    /// State directory [default: /run/pmig-cluster].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Name prefix of namespaces and interfaces (lets several clusters coexist).
    #[arg(long, default_value = pmig_cluster::DEFAULT_PREFIX)]
    prefix: String,
}

#[derive(clap::Args)]
struct UpArgs {
    /// Number of nodes.
    #[arg(long)]
    nodes: usize,
    /// Link shaping of every node.
    #[arg(long, default_value = "unlimited",
          value_parser = ["10mbit", "100mbit", "1gbit", "unlimited"])]
    link: String,
    /// Cluster key file [default: <state dir>/cluster.key, generated if missing].
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Only create the network; start no daemons.
    #[arg(long)]
    no_daemons: bool,
    /// Give every node its own pid and IPC namespaces, as separate machines
    /// have: a process moved to another node keeps its pid and thread ids
    /// there, and its System V shared memory is made again there.
    #[arg(long, conflicts_with = "no_daemons")]
    pid_ns: bool,
    /// Start the daemons without `--peer` for the other nodes, as daemons
    /// started by hand on separate machines may be: node names resolve
    /// through the cluster's state file only, and the cluster services
    /// (host selection, eviction, balancing) know no other node.
    #[arg(long, conflicts_with = "no_daemons")]
    no_peer_list: bool,
    /// Port the daemons listen on.
    #[arg(long, default_value_t = pmig_cluster::DEFAULT_PORT)]
    port: u16,
    /// An extra argument for every daemon, e.g. `--daemon-arg=--idle-owner-secs=5`
    /// (repeat).
    #[arg(long = "daemon-arg", value_name = "ARG", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args)]
struct ExecArgs {
    /// Node name (n1, n2, …).
    node: String,
    /// Command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<OsString>,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args)]
struct StatusArgs {
    /// Print the state and live status as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

pub fn run(args: Args) -> Result<i32> {
    match args.cmd {
        Sub::Up(a) => up(a),
        Sub::Down(c) => down(c),
        Sub::Exec(a) => Ok(pmig_cluster::exec(
            &a.common.prefix,
            a.common.state_dir.as_deref(),
            &a.node,
            &a.cmd,
        )?),
        Sub::Status(a) => status(a),
        Sub::Init { last_pid } => match pmig_cluster::pidns::init(last_pid) {
            Ok(never) => match never {},
            Err(e) => Err(anyhow::anyhow!("pmig cluster init: {e}")),
        },
        Sub::Enter { init, wd, cmd } => pmig_cluster::pidns::enter(init, &wd, &cmd)
            .map_err(|e| anyhow::anyhow!("pmig cluster enter: {e}")),
    }
}

fn up(a: UpArgs) -> Result<i32> {
    let mut o = ClusterOpts::new(a.nodes);
    o.link = a.link.parse::<Link>()?;
    o.prefix = a.common.prefix;
    o.state_dir = a.common.state_dir;
    o.key_file = a.key_file;
    o.port = a.port;
    o.daemon_args = a.daemon_args;
    o.pid_ns = a.pid_ns;
    o.peer_list = !a.no_peer_list;
    if !a.no_daemons {
        o.daemon_bin = Some(std::env::current_exe()?);
    }
    let c = Cluster::up(&o)?;
    let st = c.state();
    let shaping = match st.rate_bps {
        None => "unlimited".to_string(),
        Some(_) if st.delay_us > 0 => format!("{}, {} us one-way delay", st.link, st.delay_us),
        Some(_) => format!("{}, no added delay", st.link),
    };
    println!(
        "pmig: cluster `{}` up: {} nodes on {}, links {shaping}",
        st.prefix,
        st.nodes.len(),
        st.subnet
    );
    for n in &st.nodes {
        let daemon = match (n.daemon_pid, &n.daemon_log) {
            (Some(p), Some(l)) => format!("daemon pid {p} on {}, log {}", n.listen, l.display()),
            _ => "no daemon".into(),
        };
        println!(
            "  {:<4} {:<15} netns {:<12} {daemon}",
            n.name, n.addr, n.netns
        );
    }
    println!(
        "  key {}; state {}",
        st.key_file.display(),
        st.state_dir.join(pmig_cluster::STATE_FILE).display()
    );
    for note in &st.notes {
        println!("  note: {note}");
    }
    Ok(0)
}

fn down(c: Common) -> Result<i32> {
    let r = pmig_cluster::down(&c.prefix, c.state_dir.as_deref())?;
    if r.is_empty() {
        println!("pmig: cluster `{}` was not up; nothing to remove", c.prefix);
    } else {
        println!(
            "pmig: cluster `{}` down: removed {} namespaces, stopped {} processes",
            c.prefix,
            r.namespaces_removed.len(),
            r.processes_killed
        );
    }
    Ok(0)
}

fn status(a: StatusArgs) -> Result<i32> {
    let c = match Cluster::load(&a.common.prefix, a.common.state_dir.as_deref()) {
        Ok(c) => c,
        Err(e @ ClusterError::NotUp { .. }) => {
            if a.json {
                println!("{}", serde_json::json!({ "up": false }));
            } else {
                println!("pmig: {e}");
            }
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    };
    let st = c.state();
    let live = c.status();
    let healthy = live.iter().all(|s| {
        s.netns_present && (!st.daemons_started || (s.daemon_alive && s.daemon_listening))
    });
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "up": true, "healthy": healthy, "state": st, "nodes": live,
            }))?
        );
    } else {
        println!(
            "cluster `{}`: {} nodes on {}, link {}{}",
            st.prefix,
            st.nodes.len(),
            st.subnet,
            st.link,
            if healthy { "" } else { " — DEGRADED" }
        );
        for s in &live {
            let ns = if s.netns_present { "ok" } else { "MISSING" };
            let d = match s.daemon_pid {
                None => "no daemon".to_string(),
                Some(p) if s.daemon_listening => format!("daemon {p} listening"),
                Some(p) if s.daemon_alive => format!("daemon {p} NOT LISTENING"),
                Some(p) => format!("daemon {p} DEAD"),
            };
            println!(
                "  {:<4} {:<15} netns {} {ns:<7} {d}",
                s.name, s.addr, s.netns
            );
        }
    }
    Ok(if healthy { 0 } else { 1 })
}
