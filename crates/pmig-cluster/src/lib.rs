//! A local multi-"host" test cluster built from network namespaces.
//!
//! Layout for prefix `P` (default `pmig`) and N nodes:
//!
//! ```text
//!  netns P-hub:  bridge P-br0 ── veth P-n1 ── P-n2 ── … ── P-nN      (no address)
//!                                  │          │             │
//!  netns P-nK:                   eth0 10.77.S.K/24 (lo up), daemon listening on :7070
//! ```
//!
//! The root network namespace is not touched. Each node's link is shaped with `tc`
//! in both directions (a `tbf` rate limit on the node's `eth0` and on the hub's
//! `P-nK`, plus a `netem` delay on the node side when the kernel has netem).
//! Under each tbf a `pfifo_fast` queue, as on a host with the default queue,
//! serves packets by their priority: the answers to page faults, marked
//! interactive, pass the bulk data queued before them. The hub's tbf has
//! twice the node's burst, so that what one node's tbf let through is not
//! queued again there (a packet's priority is lost at the veth, and the
//! hub's queue would be a FIFO); several nodes sending to one are still
//! held to the link's rate at the hub.
//! Addresses are private to these namespaces; nothing leaves the machine.
//!
//! State is recorded as JSON in `<state dir>/cluster.json`.

pub mod error;
pub mod pidns;
pub mod sys;

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use error::{ClusterError, Result};
pub use sys::run_in_netns;

/// Default name prefix of everything the cluster creates.
pub const DEFAULT_PREFIX: &str = "pmig";
/// Default state directory for the default prefix.
pub const DEFAULT_STATE_DIR: &str = "/run/pmig-cluster";
/// Port the node daemons listen on.
pub const DEFAULT_PORT: u16 = 7070;
/// Name of the state file inside the state directory.
pub const STATE_FILE: &str = "cluster.json";
/// Most nodes a cluster may have.
pub const MAX_NODES: usize = 250;
/// Interface name inside each node namespace.
pub const NODE_IF: &str = "eth0";

/// Link shaping presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Link {
    #[serde(rename = "10mbit")]
    Mbit10,
    #[serde(rename = "100mbit")]
    Mbit100,
    #[serde(rename = "1gbit")]
    Gbit1,
    #[serde(rename = "unlimited")]
    Unlimited,
}

impl Link {
    pub const ALL: [Link; 4] = [Link::Mbit10, Link::Mbit100, Link::Gbit1, Link::Unlimited];

    /// Rate limit in bits per second, `None` for unlimited.
    pub fn rate_bps(self) -> Option<u64> {
        match self {
            Link::Mbit10 => Some(10_000_000),
            Link::Mbit100 => Some(100_000_000),
            Link::Gbit1 => Some(1_000_000_000),
            Link::Unlimited => None,
        }
    }

    /// One-way delay added on each node's egress (so node-to-node RTT is twice this).
    pub fn delay_us(self) -> u64 {
        match self {
            Link::Mbit10 => 2000,
            Link::Mbit100 => 500,
            Link::Gbit1 => 100,
            Link::Unlimited => 0,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Link::Mbit10 => "10mbit",
            Link::Mbit100 => "100mbit",
            Link::Gbit1 => "1gbit",
            Link::Unlimited => "unlimited",
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Link {
    type Err = ClusterError;
    fn from_str(s: &str) -> Result<Self> {
        Link::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                ClusterError::Invalid(format!(
                    "unknown link `{s}`; use 10mbit, 100mbit, 1gbit or unlimited"
                ))
            })
    }
}

/// Options for [`Cluster::up`].
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    /// Number of nodes (1..=250), named n1..nN.
    pub nodes: usize,
    pub link: Link,
    /// Prefix of namespace and interface names (1..=10 of `[a-z0-9]`, starting with a
    /// letter). Tests use their own prefix to run in parallel.
    pub prefix: String,
    /// Where the state file, generated key, node directories and logs go;
    /// `None`: [`default_state_dir`].
    pub state_dir: Option<PathBuf>,
    /// Cluster key file; `None`: use (or generate) `<state dir>/cluster.key`.
    pub key_file: Option<PathBuf>,
    /// Third octet of the subnet 10.77.X.0/24; `None`: derived from the prefix
    /// (0 for `pmig`).
    pub subnet: Option<u8>,
    /// The `pmig` binary to start daemons with; `None`: no daemons. Daemons are only
    /// started if `<bin> daemon --help` succeeds.
    pub daemon_bin: Option<PathBuf>,
    /// Daemon listen port.
    pub port: u16,
    /// How long to wait for each daemon to listen.
    pub daemon_timeout: Duration,
    /// Extra daemon arguments (after `--load-source netns`, which every daemon of
    /// a local cluster gets: its nodes share one kernel's load average).
    pub daemon_args: Vec<String>,
    /// Give every node its own pid namespace (needs `daemon_bin`), as separate
    /// machines have: a process moved to another node can keep its pid and
    /// thread ids there, since the frozen original holds them only in its own
    /// node's namespace. Node k's pids start above k × 10000. Every node then
    /// has its own IPC namespace too (System V IPC, POSIX message queues).
    pub pid_ns: bool,
    /// Start every daemon with `--peer NAME=ADDR:PORT` for every node (the
    /// default). Without it the daemons know no other node, as daemons
    /// started by hand on separate machines may not: node names resolve
    /// through the state file only, and the cluster services (host
    /// selection, eviction, balancing) see no other node.
    pub peer_list: bool,
}

impl ClusterOpts {
    pub fn new(nodes: usize) -> Self {
        ClusterOpts {
            nodes,
            link: Link::Unlimited,
            prefix: DEFAULT_PREFIX.into(),
            state_dir: None,
            key_file: None,
            subnet: None,
            daemon_bin: None,
            port: DEFAULT_PORT,
            daemon_timeout: Duration::from_secs(10),
            daemon_args: Vec::new(),
            pid_ns: false,
            peer_list: true,
        }
    }
}

/// What was recorded about one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// `n1`, `n2`, …
    pub name: String,
    /// Its network namespace, e.g. `pmig-n1`.
    pub netns: String,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// Where its daemon listens (or would listen).
    pub listen: SocketAddrV4,
    /// Its daemon's `--state-dir`.
    pub dir: PathBuf,
    pub daemon_pid: Option<i32>,
    pub daemon_log: Option<PathBuf>,
    /// With per-node pid namespaces: the host pid of the node's init (pid 1 of
    /// its namespace). Commands enter its namespaces.
    #[serde(default)]
    pub init_pid: Option<i32>,
}

/// The state file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub format: u32,
    pub prefix: String,
    pub hub_netns: String,
    pub bridge: String,
    /// e.g. `10.77.0.0/24`.
    pub subnet: String,
    pub link: Link,
    /// Applied rate limit, bits per second.
    pub rate_bps: Option<u64>,
    /// Applied one-way delay in microseconds (0 if netem is missing).
    pub delay_us: u64,
    pub key_file: PathBuf,
    pub state_dir: PathBuf,
    pub port: u16,
    /// Whether daemons were started.
    pub daemons_started: bool,
    /// Anything the user should know (missing netem, daemons not started, …).
    pub notes: Vec<String>,
    pub nodes: Vec<NodeState>,
    /// With per-node pid namespaces: the `pmig` binary that enters a node
    /// (`pmig cluster enter`).
    #[serde(default)]
    pub enter_bin: Option<PathBuf>,
    /// The daemons were started without `--peer` (`ClusterOpts::peer_list`
    /// off).
    #[serde(default)]
    pub no_peer_list: bool,
}

/// Live status of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    pub name: String,
    pub netns: String,
    pub addr: Ipv4Addr,
    pub netns_present: bool,
    pub daemon_pid: Option<i32>,
    pub daemon_alive: bool,
    pub daemon_listening: bool,
}

/// What [`down`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DownReport {
    pub namespaces_removed: Vec<String>,
    pub processes_killed: usize,
    pub links_removed: Vec<String>,
    pub state_file_removed: bool,
}

impl DownReport {
    pub fn is_empty(&self) -> bool {
        self.namespaces_removed.is_empty()
            && self.processes_killed == 0
            && self.links_removed.is_empty()
            && !self.state_file_removed
    }
}

/// A running cluster.
#[derive(Debug)]
pub struct Cluster {
    state: ClusterState,
    children: Vec<Child>,
    /// Extra daemon flags (`ClusterOpts::daemon_args`), for restarts.
    daemon_args: Vec<String>,
}

/// Default state directory: `/run/pmig-cluster` for prefix `pmig`, else
/// `/run/pmig-cluster-<prefix>`.
pub fn default_state_dir(prefix: &str) -> PathBuf {
    if prefix == DEFAULT_PREFIX {
        PathBuf::from(DEFAULT_STATE_DIR)
    } else {
        PathBuf::from(format!("{DEFAULT_STATE_DIR}-{prefix}"))
    }
}

fn resolve_dir(prefix: &str, dir: Option<&Path>) -> PathBuf {
    dir.map(Path::to_path_buf)
        .unwrap_or_else(|| default_state_dir(prefix))
}

/// Third octet of the subnet for a prefix: 0 for `pmig`, else 1..=254 from a hash.
pub fn subnet_octet(prefix: &str) -> u8 {
    if prefix == DEFAULT_PREFIX {
        return 0;
    }
    // FNV-1a: only to spread prefixes over subnets, not for security.
    let mut h: u32 = 0x811c_9dc5;
    for b in prefix.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    1 + (h % 254) as u8
}

pub fn validate_prefix(prefix: &str) -> Result<()> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 10
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "prefix `{prefix}` must be 1 to 10 lowercase letters or digits, starting with a letter"
        )))
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Namespaces belonging to a prefix.
fn prefix_namespaces(prefix: &str) -> Result<Vec<String>> {
    let p = format!("{prefix}-");
    Ok(sys::list_netns()?
        .into_iter()
        .filter(|n| n.starts_with(&p))
        .collect())
}

/// True if `bin daemon --help` exits successfully.
pub fn daemon_supported(bin: &Path) -> bool {
    Command::new(bin)
        .args(["daemon", "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn read_state(dir: &Path) -> Result<Option<ClusterState>> {
    let path = dir.join(STATE_FILE);
    match fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| ClusterError::State {
                path,
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ClusterError::State {
            path,
            reason: e.to_string(),
        }),
    }
}

fn write_state(state: &ClusterState) -> Result<()> {
    let path = state.state_dir.join(STATE_FILE);
    let tmp = state.state_dir.join(format!(".{STATE_FILE}.tmp"));
    let serr = |e: io::Error| ClusterError::State {
        path: path.clone(),
        reason: e.to_string(),
    };
    let mut text = serde_json::to_vec_pretty(state).map_err(|e| ClusterError::State {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    text.push(b'\n');
    let mut f = fs::File::create(&tmp).map_err(serr)?;
    f.write_all(&text).map_err(serr)?;
    f.sync_all().map_err(serr)?;
    fs::rename(&tmp, &path).map_err(serr)
}

fn mkdir(path: &Path, mode: u32) -> Result<()> {
    fs::create_dir_all(path)
        .map_err(|e| ClusterError::io(format!("creating directory {}", path.display()), e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| ClusterError::io(format!("setting permissions of {}", path.display()), e))
}

impl Cluster {
    /// Creates the namespaces, bridge, veths, addresses and shaping; starts daemons if
    /// requested and supported; writes the state file. On failure, everything created
    /// so far is removed again.
    pub fn up(opts: &ClusterOpts) -> Result<Cluster> {
        validate_prefix(&opts.prefix)?;
        if opts.nodes == 0 || opts.nodes > MAX_NODES {
            return Err(ClusterError::Invalid(format!(
                "--nodes must be between 1 and {MAX_NODES}, got {}",
                opts.nodes
            )));
        }
        if !is_root() {
            return Err(ClusterError::NotRoot);
        }
        if let Some(ns) = prefix_namespaces(&opts.prefix)?.into_iter().next() {
            return Err(ClusterError::AlreadyUp {
                prefix: opts.prefix.clone(),
                netns: ns,
            });
        }
        let dir = resolve_dir(&opts.prefix, opts.state_dir.as_deref());
        mkdir(&dir, 0o755)?;
        let mut notes = Vec::new();
        let key_file = match &opts.key_file {
            Some(k) => {
                pmig_proto::load_key(k)?;
                fs::canonicalize(k)
                    .map_err(|e| ClusterError::io(format!("resolving {}", k.display()), e))?
            }
            None => {
                let k = dir.join("cluster.key");
                if k.exists() {
                    pmig_proto::load_key(&k)?;
                } else {
                    pmig_proto::generate_key_file(&k)?;
                    notes.push(format!("generated cluster key {}", k.display()));
                }
                k
            }
        };
        let mut cluster = Cluster {
            state: ClusterState {
                format: 1,
                prefix: opts.prefix.clone(),
                hub_netns: format!("{}-hub", opts.prefix),
                bridge: format!("{}-br0", opts.prefix),
                subnet: String::new(),
                link: opts.link,
                rate_bps: opts.link.rate_bps(),
                delay_us: 0,
                key_file,
                state_dir: dir,
                port: opts.port,
                daemons_started: false,
                notes,
                nodes: Vec::new(),
                enter_bin: None,
                no_peer_list: !opts.peer_list,
            },
            children: Vec::new(),
            daemon_args: Vec::new(),
        };
        match cluster.build(opts) {
            Ok(()) => Ok(cluster),
            Err(e) => {
                tracing::warn!("cluster up failed, cleaning up: {e}");
                for c in &mut cluster.children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let _ = down(&opts.prefix, Some(&cluster.state.state_dir));
                Err(e)
            }
        }
    }

    fn build(&mut self, opts: &ClusterOpts) -> Result<()> {
        let st = &mut self.state;
        let octet = opts.subnet.unwrap_or_else(|| subnet_octet(&opts.prefix));
        st.subnet = format!("10.77.{octet}.0/24");
        let hub = st.hub_netns.clone();
        let br = st.bridge.clone();
        sys::ip(&["netns", "add", &hub])?;
        sys::ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        sys::ip(&["-n", &hub, "link", "add", &br, "type", "bridge"])?;
        sys::ip(&["-n", &hub, "link", "set", &br, "up"])?;
        let mut netem: Option<bool> = None;
        for k in 1..=opts.nodes {
            let name = format!("n{k}");
            let ns = format!("{}-{name}", opts.prefix);
            let hub_if = ns.clone();
            let addr = Ipv4Addr::new(10, 77, octet, k as u8);
            let cidr = format!("{addr}/24");
            let dir = st.state_dir.join(&name);
            mkdir(&dir, 0o755)?;
            sys::ip(&["netns", "add", &ns])?;
            sys::ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            sys::ip(&[
                "-n", &hub, "link", "add", &hub_if, "type", "veth", "peer", "name", NODE_IF,
                "netns", &ns,
            ])?;
            sys::ip(&["-n", &hub, "link", "set", &hub_if, "master", &br])?;
            sys::ip(&["-n", &hub, "link", "set", &hub_if, "up"])?;
            sys::ip(&["-n", &ns, "addr", "add", &cidr, "dev", NODE_IF])?;
            sys::ip(&["-n", &ns, "link", "set", NODE_IF, "up"])?;
            if let Some(rate) = opts.link.rate_bps() {
                shape(&ns, &hub, &hub_if, rate, opts.link.delay_us(), &mut netem)?;
            }
            st.nodes.push(NodeState {
                name,
                netns: ns,
                addr,
                prefix_len: 24,
                listen: SocketAddrV4::new(addr, opts.port),
                dir,
                daemon_pid: None,
                daemon_log: None,
                init_pid: None,
            });
        }
        if opts.link.rate_bps().is_some() {
            if netem == Some(true) {
                st.delay_us = opts.link.delay_us();
            } else {
                st.notes.push(
                    "netem is not available in this kernel: links are rate-limited but get no added delay"
                        .into(),
                );
            }
        }
        write_state(&self.state)?;
        if opts.pid_ns {
            let Some(bin) = &opts.daemon_bin else {
                return Err(ClusterError::Invalid(
                    "per-node pid namespaces need the pmig binary (daemons)".into(),
                ));
            };
            self.start_inits(bin)?;
            write_state(&self.state)?;
        }
        match &opts.daemon_bin {
            Some(bin) if daemon_supported(bin) => {
                self.start_daemons(bin, opts.daemon_timeout, &opts.daemon_args)?;
                self.state.daemons_started = true;
            }
            Some(bin) => self.state.notes.push(format!(
                "daemons were not started: `{} daemon --help` failed (no daemon subcommand yet)",
                bin.display()
            )),
            None => self
                .state
                .notes
                .push("daemons were not started (none requested)".into()),
        }
        write_state(&self.state)
    }

    /// Starts the daemon of node `i` (appending to its log with `append`).
    fn spawn_daemon(&mut self, i: usize, bin: &Path, append: bool) -> Result<Child> {
        let peers: Vec<String> = match self.state.no_peer_list {
            false => self
                .state
                .nodes
                .iter()
                .map(|n| format!("{}={}", n.name, n.listen))
                .collect(),
            true => Vec::new(),
        };
        let n = &self.state.nodes[i];
        let log_path = n.dir.join("daemon.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&log_path)
            .map_err(|e| ClusterError::io(format!("creating {}", log_path.display()), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| ClusterError::io("duplicating log file handle", e))?;
        let listen = n.listen.to_string();
        // In the caller's directory, as a relative --state-dir expects.
        let wd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut cmd = self.node_command(n, bin.as_os_str(), &wd);
        cmd.args([
            "daemon",
            "--node",
            &n.name,
            "--listen",
            &listen,
            "--key-file",
        ])
        .arg(&self.state.key_file)
        .arg("--state-dir")
        .arg(&n.dir)
        .args(peers.iter().flat_map(|p| ["--peer", p.as_str()]))
        // One kernel for every node: load is counted per network namespace.
        .args(["--load-source", "netns"])
        .args(&self.daemon_args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
        // A session of its own, as a daemon run as a service has: a Ctrl-C
        // at the terminal does not reach it, and with the kernel's
        // autogroup (CPU time shared between sessions first) a busy
        // program started from the caller's shell does not starve it (a
        // program with 300 busy threads in the daemon's session made its
        // preparation take seconds).
        // SAFETY: setsid is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // A daemon outlives the command that started it: whatever else that
        // command holds (a script's lock, a job server's pipe) must not stay
        // open for the cluster's lifetime.
        only_stdio(&mut cmd);
        let child = cmd.spawn().map_err(|e| ClusterError::Spawn {
            cmd: format!("ip netns exec {} {} daemon …", n.netns, bin.display()),
            source: e,
            hint: "",
        })?;
        // In a pid namespace the daemon is the child of `pmig cluster enter`.
        let pid = match self.state.nodes[i].init_pid {
            Some(_) => sys::only_child(child.id() as i32, Duration::from_secs(5))
                .map_err(|e| ClusterError::io("finding the daemon inside its pid namespace", e))?,
            None => child.id() as i32,
        };
        let n = &mut self.state.nodes[i];
        n.daemon_pid = Some(pid);
        n.daemon_log = Some(log_path);
        Ok(child)
    }

    /// Starts each node's init, pid 1 of its own pid namespace (see
    /// [`ClusterOpts::pid_ns`]), and waits until it is ready.
    fn start_inits(&mut self, bin: &Path) -> Result<()> {
        self.state.enter_bin = Some(bin.to_path_buf());
        for k in 0..self.state.nodes.len() {
            let ns = self.state.nodes[k].netns.clone();
            // Not the caller's stderr: the init outlives `pmig cluster up`.
            let log_path = self.state.nodes[k].dir.join("init.log");
            let log = fs::File::create(&log_path)
                .map_err(|e| ClusterError::io(format!("creating {}", log_path.display()), e))?;
            let mut cmd = Command::new("ip");
            cmd.args([
                "netns",
                "exec",
                &ns,
                "unshare",
                "--pid",
                "--ipc",
                "--fork",
                "--mount-proc",
            ])
            .arg(bin)
            .args(["cluster", "init", "--last-pid"])
            .arg(((k + 1) * 10000).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0);
            let mut child = cmd.spawn().map_err(|e| ClusterError::Spawn {
                cmd: format!("ip netns exec {ns} unshare --pid --ipc --fork --mount-proc …"),
                source: e,
                hint: " (unshare is part of util-linux)",
            })?;
            let mut line = String::new();
            let out = child.stdout.take();
            let ready = out
                .map(|o| std::io::BufRead::read_line(&mut std::io::BufReader::new(o), &mut line))
                .is_some_and(|r| r.is_ok() && line.trim() == "ready");
            let init = sys::only_child(child.id() as i32, Duration::from_secs(5));
            self.children.push(child);
            match (ready, init) {
                (true, Ok(pid)) => self.state.nodes[k].init_pid = Some(pid),
                (_, e) => {
                    return Err(ClusterError::Invalid(format!(
                        "the init of node {} did not start ({}): is this kernel built with pid namespaces?",
                        self.state.nodes[k].name,
                        e.err().map(|e| e.to_string()).unwrap_or_else(|| format!("it said {:?}", line.trim()))
                    )))
                }
            }
        }
        Ok(())
    }

    /// A command running `program` in node `n`, in `wd`: in its network
    /// namespace, and in its pid and mount namespaces if it has its own.
    fn node_command(&self, n: &NodeState, program: &std::ffi::OsStr, wd: &Path) -> Command {
        match (n.init_pid, &self.state.enter_bin) {
            (Some(init), Some(bin)) => {
                let mut c = Command::new(bin);
                c.args(["cluster", "enter", "--init"])
                    .arg(init.to_string())
                    .arg("--wd")
                    .arg(wd)
                    .arg("--")
                    .arg(program);
                c.env("PMIG_NODE", &n.name);
                name_cluster(&mut c, &self.state.prefix, Some(&self.state.state_dir));
                c
            }
            _ => {
                let mut c = netns_command(&n.netns, &n.name, program);
                name_cluster(&mut c, &self.state.prefix, Some(&self.state.state_dir));
                c.current_dir(wd);
                c
            }
        }
    }

    /// Kills the daemon of `node` (SIGKILL: a crash) and waits until it is gone.
    pub fn kill_daemon(&mut self, node: &str) -> Result<()> {
        let i = self.index(node)?;
        if let Some(pid) = self.state.nodes[i].daemon_pid {
            // SAFETY: kill(2) on the daemon this cluster started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            match self.children.iter_mut().find(|c| c.id() as i32 == pid) {
                Some(c) => {
                    let _ = c.wait();
                }
                None => {
                    for _ in 0..500 {
                        if !Path::new(&format!("/proc/{pid}")).exists() {
                            break;
                        }
                        thread::sleep(Duration::from_millis(10));
                    }
                }
            }
            self.children.retain(|c| c.id() as i32 != pid);
        }
        Ok(())
    }

    /// Starts the daemon of `node` again (after [`Cluster::kill_daemon`]) and
    /// waits until it listens.
    pub fn restart_daemon(&mut self, node: &str, bin: &Path, timeout: Duration) -> Result<()> {
        let i = self.index(node)?;
        let mut child = self.spawn_daemon(i, bin, true)?;
        let t0 = Instant::now();
        let pid = self.state.nodes[i].daemon_pid.unwrap_or(child.id() as i32);
        while !sys::listening(pid, self.state.port) {
            let n = &self.state.nodes[i];
            if let Ok(Some(status)) = child.try_wait() {
                return Err(ClusterError::Daemon {
                    node: n.name.clone(),
                    reason: format!("it exited ({}): {}", describe(status), last_line(n)),
                    log: n.daemon_log.clone().unwrap_or_default(),
                });
            }
            if t0.elapsed() > timeout {
                return Err(ClusterError::Daemon {
                    node: n.name.clone(),
                    reason: format!("not listening after {timeout:?}: {}", last_line(n)),
                    log: n.daemon_log.clone().unwrap_or_default(),
                });
            }
            thread::sleep(Duration::from_millis(25));
        }
        self.children.push(child);
        write_state(&self.state)
    }

    fn index(&self, node: &str) -> Result<usize> {
        self.node(node)?;
        Ok(self
            .state
            .nodes
            .iter()
            .position(|n| n.name == node)
            .unwrap_or(0))
    }

    fn start_daemons(&mut self, bin: &Path, timeout: Duration, extra: &[String]) -> Result<()> {
        self.daemon_args = extra.to_vec();
        for i in 0..self.state.nodes.len() {
            let child = self.spawn_daemon(i, bin, false)?;
            self.children.push(child);
        }
        // Wait until every daemon listens (seen in its namespace's /proc/PID/net/tcp).
        let t0 = Instant::now();
        let mut pending: Vec<usize> = (0..self.state.nodes.len()).collect();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for i in pending {
                let n = &self.state.nodes[i];
                let pid = n.daemon_pid.unwrap_or(0);
                if let Ok(Some(status)) = self.children[i].try_wait() {
                    return Err(ClusterError::Daemon {
                        node: n.name.clone(),
                        reason: format!("it exited ({}): {}", describe(status), last_line(n)),
                        log: n.daemon_log.clone().unwrap_or_default(),
                    });
                }
                if !sys::listening(pid, self.state.port) {
                    still.push(i);
                }
            }
            pending = still;
            if !pending.is_empty() {
                if t0.elapsed() > timeout {
                    let n = &self.state.nodes[pending[0]];
                    return Err(ClusterError::Daemon {
                        node: n.name.clone(),
                        reason: format!(
                            "not listening on {} after {:?}: {}",
                            n.listen,
                            timeout,
                            last_line(n)
                        ),
                        log: n.daemon_log.clone().unwrap_or_default(),
                    });
                }
                thread::sleep(Duration::from_millis(25));
            }
        }
        Ok(())
    }

    /// Opens a cluster from its state file.
    pub fn load(prefix: &str, state_dir: Option<&Path>) -> Result<Cluster> {
        let dir = resolve_dir(prefix, state_dir);
        match read_state(&dir)? {
            Some(state) => Ok(Cluster {
                state,
                children: Vec::new(),
                daemon_args: Vec::new(),
            }),
            None => Err(ClusterError::NotUp {
                prefix: prefix.into(),
                path: dir.join(STATE_FILE),
            }),
        }
    }

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    pub fn nodes(&self) -> &[NodeState] {
        &self.state.nodes
    }

    /// A node by name (`n2`).
    pub fn node(&self, name: &str) -> Result<&NodeState> {
        self.state
            .nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| ClusterError::UnknownNode {
                node: name.into(),
                available: node_list(self.state.nodes.iter().map(|n| n.name.as_str())),
            })
    }

    /// A command that runs `program` inside `node` (`ip netns exec <ns> program`);
    /// add arguments and run it as usual. `PMIG_NODE` is set to the node name,
    /// `PMIG_CLUSTER_PREFIX` and `PMIG_CLUSTER_DIR` name this cluster.
    /// In a cluster with per-node pid namespaces the command runs in the
    /// directory that is current when this is called (see
    /// [`Cluster::command_in`]).
    pub fn command(&self, node: &str, program: impl AsRef<std::ffi::OsStr>) -> Result<Command> {
        let n = self.node(node)?;
        if n.init_pid.is_some() {
            let wd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
            return Ok(self.node_command(n, program.as_ref(), &wd));
        }
        let mut c = netns_command(&n.netns, &n.name, program.as_ref());
        name_cluster(&mut c, &self.state.prefix, Some(&self.state.state_dir));
        Ok(c)
    }

    /// Like [`Cluster::command`], in directory `wd`.
    pub fn command_in(
        &self,
        node: &str,
        program: impl AsRef<std::ffi::OsStr>,
        wd: &Path,
    ) -> Result<Command> {
        let n = self.node(node)?;
        Ok(self.node_command(n, program.as_ref(), wd))
    }

    /// Runs `argv` inside `node` with inherited stdio; returns its exit code
    /// (128 + signal number if it was killed).
    pub fn exec(&self, node: &str, argv: &[OsString]) -> Result<i32> {
        let n = self.node(node)?;
        if n.init_pid.is_some() {
            let Some((prog, args)) = argv.split_first() else {
                return Err(ClusterError::Invalid("no command given to run".into()));
            };
            let mut c = self.command(node, prog)?;
            let status = c.args(args).status().map_err(|e| ClusterError::Spawn {
                cmd: format!("pmig cluster enter … {}", prog.to_string_lossy()),
                source: e,
                hint: "",
            })?;
            return Ok(exit_code(status));
        }
        exec_in(
            &n.netns,
            &n.name,
            argv,
            (&self.state.prefix, Some(&self.state.state_dir)),
        )
    }

    /// Runs `f` on a thread inside `node`'s network namespace (see [`run_in_netns`]).
    pub fn run_in<T: Send, F: FnOnce() -> T + Send>(&self, node: &str, f: F) -> Result<T> {
        let n = self.node(node)?;
        run_in_netns(&n.netns, f)
            .map_err(|e| ClusterError::io(format!("entering namespace {}", n.netns), e))
    }

    /// Live status of every node.
    pub fn status(&self) -> Vec<NodeStatus> {
        self.state
            .nodes
            .iter()
            .map(|n| {
                let alive = n.daemon_pid.is_some_and(sys::alive);
                NodeStatus {
                    name: n.name.clone(),
                    netns: n.netns.clone(),
                    addr: n.addr,
                    netns_present: sys::netns_exists(&n.netns),
                    daemon_pid: n.daemon_pid,
                    daemon_alive: alive,
                    daemon_listening: alive
                        && n.daemon_pid
                            .is_some_and(|p| sys::listening(p, self.state.port)),
                }
            })
            .collect()
    }

    /// Stops the daemons and removes everything (see [`down`]).
    pub fn down(mut self) -> Result<DownReport> {
        let r = down(&self.state.prefix, Some(&self.state.state_dir));
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        r
    }

    /// Wraps the cluster in a guard that tears it down when dropped.
    pub fn guard(self) -> ClusterGuard {
        ClusterGuard(Some(self))
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    }
}

fn last_line(n: &NodeState) -> String {
    n.daemon_log
        .as_ref()
        .and_then(|p| fs::read_to_string(p).ok())
        .and_then(|t| {
            t.lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no log output".into())
}

fn node_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.collect();
    if v.is_empty() {
        "no nodes".into()
    } else {
        format!("nodes {}", v.join(", "))
    }
}

/// Adds a rate limit (and, if the kernel has netem, a delay) to both directions of a
/// node's link. `netem` caches whether netem works (None: not tried yet).
fn shape(
    ns: &str,
    hub: &str,
    hub_if: &str,
    rate_bps: u64,
    delay_us: u64,
    netem: &mut Option<bool>,
) -> Result<()> {
    let rate = format!("{rate_bps}bit");
    // Burst: 5 ms worth of data, at least 10 full-size frames.
    let burst = (rate_bps / 8 / 200).max(15_140).to_string();
    let tbf = ["tbf", "rate", &rate, "burst", &burst, "latency", "20ms"];
    // The tbf's own queue, 20 ms of the link plus the burst, now in each
    // band of a priority queue under it.
    let queue = rate_bps / 8 / 50 + (rate_bps / 8 / 200).max(15_140);
    let node_root = [
        "-n", ns, "qdisc", "add", "dev", NODE_IF, "root", "handle", "1:",
    ];
    if *netem != Some(false) && delay_us > 0 {
        let delay = format!("{delay_us}us");
        let mut args = node_root.to_vec();
        args.extend(["netem", "delay", &delay]);
        match sys::tc(&args) {
            Ok(_) => {
                *netem = Some(true);
                let mut args = vec![
                    "-n", ns, "qdisc", "add", "dev", NODE_IF, "parent", "1:1", "handle", "10:",
                ];
                args.extend(tbf);
                sys::tc(&args)?;
                prio_bands(ns, NODE_IF, "10:", queue);
            }
            Err(ClusterError::Command { stderr, .. })
                if stderr.to_ascii_lowercase().contains("unknown") =>
            {
                tracing::info!("netem is not available; links get a rate limit only");
                *netem = Some(false);
            }
            Err(e) => return Err(e),
        }
    } else if delay_us == 0 {
        *netem = Some(false);
    }
    if *netem == Some(false) {
        let mut args = node_root.to_vec();
        args.extend(tbf);
        sys::tc(&args)?;
        prio_bands(ns, NODE_IF, "1:", queue);
    }
    // The hub's side limits what reaches the node. Traffic from one other
    // node has passed that node's tbf already, in bursts of up to `burst`
    // at the veth's speed; a bucket no deeper than that would queue each
    // burst again, in a FIFO: the kernel sets a packet's priority to 0
    // when it crosses a veth (`____dev_forward_skb`), so the hub's queue
    // cannot tell the answers to page faults from bulk data, and they
    // would wait there behind up to a burst of it. A real sender's NIC does not burst above the link's rate,
    // and the switch port after it holds no queue. With twice the burst,
    // what one sender's tbf let through passes the hub unqueued, and
    // traffic from several senders to one node is still held to the link's
    // rate here.
    let hub_burst = (2 * (rate_bps / 8 / 200).max(15_140)).to_string();
    let mut hub_tbf = tbf;
    hub_tbf[4] = &hub_burst;
    let mut args = vec![
        "-n", hub, "qdisc", "add", "dev", hub_if, "root", "handle", "1:",
    ];
    args.extend(hub_tbf);
    sys::tc(&args)?;
    prio_bands(hub, hub_if, "1:", queue);
    Ok(())
}

/// Puts a `pfifo_fast` queue under the `tbf` with handle `tbf`, as a
/// host's default queue would be: its three bands follow the packets'
/// priority, so packets of sockets marked interactive (`SO_PRIORITY` 6,
/// such as the answers to page faults) leave before bulk data queued
/// earlier. `pfifo_fast` holds up to the device's `txqueuelen` packets per
/// band, set here to the tbf's own limit (`limit` bytes, in full-size
/// frames): a slow link keeps its 20 ms queue instead of a 1000-packet one.
/// A kernel that refuses leaves the link one FIFO (the tbf's own).
fn prio_bands(ns: &str, dev: &str, tbf: &str, limit: u64) {
    let frames = (limit / 1514).max(10).to_string();
    if let Err(e) = sys::ip(&["-n", ns, "link", "set", "dev", dev, "txqueuelen", &frames]) {
        tracing::info!("{ns}/{dev}: no priority queue ({e}): its link is one FIFO");
        return;
    }
    let parent = format!("{tbf}1");
    let r = sys::tc(&[
        "-n",
        ns,
        "qdisc",
        "add",
        "dev",
        dev,
        "parent",
        &parent,
        "handle",
        "20:",
        "pfifo_fast",
    ]);
    if let Err(e) = r {
        tracing::info!("{ns}/{dev}: no priority queue ({e}): its link is one FIFO");
    }
}

/// Makes the child of `cmd` inherit only fds 0, 1 and 2: whatever else the
/// caller holds (a test runner's or a job server's pipes) would otherwise end
/// up in the program started in a node, and in what a migration captures.
pub fn only_stdio(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range is async-signal-safe; marking the fds close-on-exec
    // (rather than closing them) keeps std's exec-error pipe working until the
    // exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        })
    }
}

fn netns_command(netns: &str, node: &str, program: &std::ffi::OsStr) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", netns]).arg(program);
    c.env("PMIG_NODE", node);
    c
}

/// Names the cluster to a command run in one of its nodes, so that `pmig`
/// there resolves node names through this cluster's state file (the
/// defaults of `pmig migrate --cluster-prefix` and `--cluster-dir`).
fn name_cluster(c: &mut Command, prefix: &str, state_dir: Option<&Path>) {
    c.env("PMIG_CLUSTER_PREFIX", prefix);
    match state_dir {
        Some(d) => c.env("PMIG_CLUSTER_DIR", d),
        None => c.env_remove("PMIG_CLUSTER_DIR"),
    };
}

fn exec_in(
    netns: &str,
    node: &str,
    argv: &[OsString],
    cluster: (&str, Option<&Path>),
) -> Result<i32> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(ClusterError::Invalid("no command given to run".into()));
    };
    let mut c = netns_command(netns, node, prog);
    name_cluster(&mut c, cluster.0, cluster.1);
    let status = c.args(args).status().map_err(|e| ClusterError::Spawn {
        cmd: format!("ip netns exec {netns} {}", prog.to_string_lossy()),
        source: e,
        hint: "",
    })?;
    Ok(exit_code(status))
}

/// A shell's view of an exit status: the code, or 128 + the signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

/// Runs `argv` inside node `node` of cluster `prefix`; works from the state file, or,
/// if there is none, from the namespace name alone.
pub fn exec(prefix: &str, state_dir: Option<&Path>, node: &str, argv: &[OsString]) -> Result<i32> {
    validate_prefix(prefix)?;
    match Cluster::load(prefix, state_dir) {
        Ok(c) => c.exec(node, argv),
        Err(ClusterError::NotUp { path, .. }) => {
            let ns = format!("{prefix}-{node}");
            if sys::netns_exists(&ns) {
                exec_in(&ns, node, argv, (prefix, state_dir))
            } else {
                let p = format!("{prefix}-");
                let nss = prefix_namespaces(prefix)?;
                if nss.is_empty() {
                    return Err(ClusterError::NotUp {
                        prefix: prefix.into(),
                        path,
                    });
                }
                Err(ClusterError::UnknownNode {
                    node: node.into(),
                    available: node_list(
                        nss.iter()
                            .filter_map(|n| n.strip_prefix(&p))
                            .filter(|n| *n != "hub"),
                    ),
                })
            }
        }
        Err(e) => Err(e),
    }
}

/// Tears down cluster `prefix`: kills every process in its namespaces (and its
/// recorded daemons), deletes the namespaces (which removes veths and the bridge),
/// removes root-namespace links named `<prefix>-*` if any, and the state file.
/// Idempotent; works without a state file.
pub fn down(prefix: &str, state_dir: Option<&Path>) -> Result<DownReport> {
    validate_prefix(prefix)?;
    let dir = resolve_dir(prefix, state_dir);
    let state = read_state(&dir).unwrap_or_else(|e| {
        tracing::warn!("ignoring unreadable state: {e}");
        None
    });
    let mut report = DownReport::default();
    let nss = prefix_namespaces(prefix)?;
    if !nss.is_empty() && !is_root() {
        return Err(ClusterError::NotRoot);
    }

    let mut pids = Vec::new();
    for ns in &nss {
        match sys::netns_pids(ns) {
            Ok(p) => pids.extend(p),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    if let Some(st) = &state {
        for n in &st.nodes {
            if let Some(pid) = n.daemon_pid {
                // Only if it is still our daemon (pids get reused).
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let needle = format!("--node\0{}\0", n.name);
                if cmdline
                    .windows(needle.len())
                    .any(|w| w == needle.as_bytes())
                {
                    pids.push(pid);
                }
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    let me = std::process::id() as i32;
    pids.retain(|&p| p != me);
    report.processes_killed = sys::terminate(&pids, Duration::from_secs(3));

    // Nodes first, the hub last.
    let mut ordered = nss.clone();
    ordered.sort_by_key(|n| n.ends_with("-hub"));
    let mut first_err = None;
    for ns in ordered {
        match sys::ip(&["netns", "del", &ns]) {
            Ok(_) => report.namespaces_removed.push(ns),
            Err(e) if !sys::netns_exists(&ns) => {
                tracing::debug!("{e}");
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }

    // Leftovers in the root namespace (older layouts, interrupted runs). Only if the
    // `ip` command is there and we are root; ignore failures to list.
    if is_root() {
        if let Ok(out) = sys::ip(&["-o", "link", "show"]) {
            let p = format!("{prefix}-");
            for line in out.lines() {
                let Some(name) = line.split(':').nth(1) else {
                    continue;
                };
                let name = name.trim().split('@').next().unwrap_or("").to_string();
                if name.starts_with(&p) {
                    match sys::ip(&["link", "del", &name]) {
                        Ok(_) => report.links_removed.push(name),
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
            }
        }
    }

    let sf = dir.join(STATE_FILE);
    match fs::remove_file(&sf) {
        Ok(()) => report.state_file_removed = true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            first_err.get_or_insert(ClusterError::io(format!("removing {}", sf.display()), e));
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Tears the cluster down when dropped (also when a test panics).
#[derive(Debug)]
pub struct ClusterGuard(Option<Cluster>);

impl ClusterGuard {
    /// Tears down now and reports errors.
    pub fn down(mut self) -> Result<DownReport> {
        match self.0.take() {
            Some(c) => c.down(),
            None => Ok(DownReport::default()),
        }
    }
}

impl std::ops::Deref for ClusterGuard {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        self.0.as_ref().expect("cluster already torn down")
    }
}

impl std::ops::DerefMut for ClusterGuard {
    fn deref_mut(&mut self) -> &mut Cluster {
        self.0.as_mut().expect("cluster already torn down")
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let prefix = c.state.prefix.clone();
            if let Err(e) = c.down() {
                eprintln!("pmig-cluster: tearing down cluster {prefix} failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse() {
        for l in Link::ALL {
            assert_eq!(l.as_str().parse::<Link>().unwrap(), l);
            let j = serde_json::to_string(&l).unwrap();
            assert_eq!(j, format!("\"{l}\""));
        }
        assert!("1GBIT".parse::<Link>().is_ok());
        let e = "2mbit".parse::<Link>().unwrap_err();
        assert!(e
            .to_string()
            .contains("10mbit, 100mbit, 1gbit or unlimited"));
    }

    #[test]
    fn prefixes() {
        assert!(validate_prefix("pmig").is_ok());
        assert!(validate_prefix("pmt3").is_ok());
        for bad in ["", "3abc", "PMIG", "a-b", "abcdefghijk"] {
            assert!(validate_prefix(bad).is_err(), "{bad}");
        }
        assert_eq!(subnet_octet("pmig"), 0);
        let o = subnet_octet("pmt3");
        assert!((1..=254).contains(&o));
        assert_ne!(subnet_octet("pmt3"), subnet_octet("pmt4"));
    }
}
