//! Remote execution with a home node: `pmig run`, `pmig ps`, `pmig kill` (issue 5).
//!
//! Three parties (`docs/protocol.md` §7 and §8.1):
//!
//! * the **client** (`pmig run`) talks to its own node's daemon, the **home**, over the
//!   control socket: one JSON request line, one JSON answer line, then length-prefixed
//!   [`ExecMsg`] frames both ways ([`write_frame`], [`FrameReader`]);
//! * the **home daemon** ([`home`]) authorizes the caller (`SO_PEERCRED`), records the
//!   job, connects to the target node's daemon with `Msg::Service { EXEC }` and relays;
//! * the **remote daemon** ([`remote`]) spawns the command (new session, pty or pipes,
//!   the caller's credentials, env and cwd) and relays its stdio, stops and exit.
//!
//! Every job has a cluster-unique id `<home node>:<n>`. The home records the jobs it
//! started, the node where each one runs records it too; `pmig ps` merges the tables of
//! every node, `pmig kill` asks every node to signal the job wherever it runs.

pub mod home;
pub mod remote;
mod spawn;

use crate::Peer;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Version of the exec service's messages, carried by every first message.
pub const VERSION: u16 = 1;
/// Largest frame on the control socket (and largest stdio chunk is far below it).
pub const MAX_FRAME: usize = 1 << 20;
/// Bytes of stdio per message.
pub const CHUNK: usize = 16 << 10;

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Proto(#[from] pmig_proto::ProtoError),
    #[error("bad exec message: {0}")]
    Malformed(String),
    #[error("{0}")]
    Refused(String),
    #[error("no host selector is known to this daemon yet: use --on NODE")]
    NoSelector,
}

pub type Result<T, E = ExecError> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ExecError {
    let what = what.into();
    move |source| ExecError::Io { what, source }
}

/// Terminal size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Winsize {
    pub rows: u16,
    pub cols: u16,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitKind {
    Code(i32),
    Signal(i32),
}

impl ExitKind {
    /// The status a shell would report: the code, or 128 + the signal.
    pub fn shell_status(self) -> i32 {
        match self {
            ExitKind::Code(c) => c,
            ExitKind::Signal(s) => 128 + s,
        }
    }
}

/// What `pmig run` asks its home daemon (the JSON request line `{"run":{…}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    pub argv: Vec<String>,
    /// The caller's environment, in order.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// The caller's working directory.
    pub cwd: String,
    /// Target node (`--on`); `None` with `idle`.
    #[serde(default)]
    pub on: Option<String>,
    /// Let the host selector pick an idle node (`--idle`).
    #[serde(default)]
    pub idle: bool,
    /// `short` or `long` (for the host selector).
    #[serde(default)]
    pub class: Option<String>,
    /// The caller's terminal size when it runs on a terminal: the job gets a pty.
    #[serde(default)]
    pub tty: Option<Winsize>,
}

/// First message of a job connection (home → remote).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub version: u16,
    pub job: String,
    pub home: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// The caller's credentials, as established by the home daemon.
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub tty: Option<Winsize>,
}

/// One job as `pmig ps` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    /// `<home node>:<n>`.
    pub id: String,
    pub home: String,
    /// Node it runs on now.
    pub node: String,
    /// Its pid (and process group) on that node.
    pub pid: i32,
    pub uid: u32,
    pub argv: Vec<String>,
    /// `running` or `stopped`.
    pub state: String,
    /// Every node it has run on, oldest first (the last is `node`).
    pub history: Vec<String>,
    /// Start time, ms since the epoch.
    pub started_ms: u64,
}

/// The exec service's messages: the attachment of `Msg::Service { EXEC }` between
/// daemons, and the frames of a `run` control connection after its JSON lines.
/// Variant indices are wire format: append only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ExecMsg {
    /// 0, first: start a job (home → remote).
    Start(Start),
    /// 1, first: list the jobs this node knows (any → any); answered by `Jobs`.
    List { version: u16 },
    /// 2, first: signal job `job` if it runs here, on behalf of `uid`; answered by
    /// `Killed` or `Refused`.
    Kill {
        version: u16,
        job: String,
        signal: i32,
        uid: u32,
    },
    /// 3: the job runs, as `pid` (remote → home → client).
    Started { pid: i32 },
    /// 4: a refusal or failure, one line (either way); ends the connection.
    Refused { text: String },
    /// 5: bytes for the job's stdin (client → home → remote).
    Stdin(Vec<u8>),
    /// 6: the client's stdin is at its end.
    StdinEof,
    /// 7: bytes the job wrote to its stdout (or its pty).
    Stdout(Vec<u8>),
    /// 8: bytes the job wrote to its stderr (pipes only).
    Stderr(Vec<u8>),
    /// 9: the client's terminal changed size.
    Winsize(Winsize),
    /// 10: deliver this signal to the job's process group.
    Signal(i32),
    /// 11: the job stopped (Ctrl-Z, SIGSTOP): the client stops too.
    Stopped { signal: i32 },
    /// 12: the job continued.
    Continued,
    /// 13: the job ended; the last message. `remote_us`: spawn to exit at the remote
    /// daemon; `home_us`: request to exit at the home daemon (filled in by the home).
    Exited {
        status: ExitKind,
        remote_us: u64,
        home_us: u64,
    },
    /// 14: answer to `List`.
    Jobs(Vec<JobInfo>),
    /// 15: answer to `Kill`: the job runs on `node` and was signalled.
    Killed { node: String },
    /// 16: the job is being migrated to `to` (old node → home): the home holds the
    /// client's input until the job is back (`Moved` + `Reattach`, or `Stayed`).
    Moving { to: String },
    /// 17: the migration failed; the job runs on here, as before (old node → home).
    Stayed,
    /// 18: the job now runs on `to`; the last message on this connection (old node →
    /// home). The new node reattaches with `Reattach`.
    Moved { to: String },
    /// 19, first: a job process is about to arrive by migration (old node → new node):
    /// prepare its stdio; answered by `Ready`.
    Arrival(Arrival),
    /// 20: answer to `Arrival` and to `Commit`.
    Ready,
    /// 21: the migration of the announced process succeeded; it runs here as `new_pid`
    /// (old node → new node).
    Commit { new_pid: i32 },
    /// 22, first: job `job` runs here now, as `pid` (new node → home); answered by
    /// `Reattached`, after which the connection carries the job as after `Started`.
    Reattach { version: u16, job: String, pid: i32 },
    /// 23: answer to `Reattach`.
    Reattached,
}

/// What the new node needs to know of a job that arrives by migration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub version: u16,
    pub job: String,
    pub home: String,
    pub uid: u32,
    pub argv: Vec<String>,
    pub history: Vec<String>,
    pub started_ms: u64,
    /// The process's pid on the old node (the migration offer's `pid`).
    pub pid: i32,
    /// Its terminal, if it runs on a pty: the new node makes a new one like it.
    pub tty: Option<PtyState>,
}

/// A job's terminal: size and modes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PtyState {
    pub size: Winsize,
    /// `termios` flags and control characters (`c_iflag`, `c_oflag`, `c_cflag`,
    /// `c_lflag`, `c_cc`), if they could be read.
    pub modes: Option<TermModes>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TermModes {
    pub iflag: u32,
    pub oflag: u32,
    pub cflag: u32,
    pub lflag: u32,
    pub cc: Vec<u8>,
}

impl ExecMsg {
    pub fn encode(&self) -> Result<Vec<u8>> {
        postcard::to_allocvec(self).map_err(|e| ExecError::Malformed(e.to_string()))
    }
    pub fn decode(b: &[u8]) -> Result<ExecMsg> {
        postcard::from_bytes(b).map_err(|e| ExecError::Malformed(e.to_string()))
    }
}

/// Writes one control-socket frame: `u32` little-endian length, then `postcard(msg)`.
pub fn write_frame(mut w: impl Write, msg: &ExecMsg) -> io::Result<()> {
    let b = msg
        .encode()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut v = Vec::with_capacity(4 + b.len());
    v.extend_from_slice(&(b.len() as u32).to_le_bytes());
    v.extend_from_slice(&b);
    w.write_all(&v)
}

/// Reassembles control-socket frames from whatever reads return.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Adds bytes read from the socket.
    pub fn push(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// The next complete frame, if any.
    pub fn next_msg(&mut self) -> Result<Option<ExecMsg>> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let n = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if n > MAX_FRAME {
            return Err(ExecError::Malformed(format!(
                "frame of {n} bytes (at most {MAX_FRAME})"
            )));
        }
        if self.buf.len() < 4 + n {
            return Ok(None);
        }
        let m = ExecMsg::decode(&self.buf[4..4 + n]);
        self.buf.drain(..4 + n);
        m.map(Some)
    }
    /// Blocks on `r` until a whole frame is there; `Ok(None)` at a clean end of stream.
    pub fn read_from(&mut self, mut r: impl Read) -> Result<Option<ExecMsg>> {
        let mut b = [0u8; CHUNK + 64];
        loop {
            if let Some(m) = self.next_msg()? {
                return Ok(Some(m));
            }
            match r.read(&mut b) {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => return Err(ExecError::Malformed("truncated frame".into())),
                Ok(n) => self.push(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("read a frame")(e)),
            }
        }
    }
}

/// What the exec service needs from the daemon that hosts it.
pub trait ExecHost: Send + Sync {
    fn node(&self) -> &str;
    /// Every node of the cluster, this one included.
    fn peers(&self) -> &[Peer];
    fn cluster_key(&self) -> &pmig_proto::ClusterKey;
    fn proto_config(&self) -> pmig_proto::Config {
        pmig_proto::Config::new(self.node())
    }
    /// Spawns `cmd` so that the daemon's reaper leaves its status to the caller, who
    /// waits for it and then calls [`ExecHost::release`].
    fn spawn_owned(&self, cmd: &mut Command) -> io::Result<Child>;
    fn release(&self, pid: i32);
    /// The cluster's host selector, if one is known (for `--idle`).
    fn selector(&self) -> Option<Peer> {
        None
    }
    /// Takes `pid` (a child of the daemon, e.g. a migrated job) away from the reaper.
    fn own(&self, pid: i32);
    /// The job tables.
    fn exec(&self) -> &Exec;
}

/// A job running on this node.
#[derive(Clone)]
pub(crate) struct Running {
    pub info: JobInfo,
    /// Process group that signals go to (the command itself).
    pub pgid: i32,
    /// The process the daemon waits for (the session keeper with a pty).
    pub leader: i32,
    /// It has a pty (and a session keeper): the master.
    pub master: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    pub ctl: std::sync::Arc<remote::JobCtl>,
}

/// The job tables of one daemon.
#[derive(Default)]
pub struct Exec {
    next: AtomicU64,
    /// Jobs whose home is this node.
    pub(crate) homed: Mutex<HashMap<String, JobInfo>>,
    /// Jobs running on this node.
    pub(crate) running: Mutex<HashMap<String, Running>>,
    /// One authenticated, unused connection per node, dialled in the background after
    /// a job started there, so that the next job to that node skips the handshake.
    pub(crate) spares: home::Spares,
    /// Stdio prepared for processes announced by `Arrival`, by (old node, old pid):
    /// the process's ends (stdin read end, stdout and stderr write ends) and ours.
    pub(crate) arriving: Mutex<HashMap<(String, i32), remote::Prepared>>,
    /// Relays of the jobs homed here, by job id, waiting for a `Reattach`.
    pub(crate) reattach: Mutex<HashMap<String, std::sync::mpsc::Sender<home::Reattaching>>>,
}

impl Exec {
    pub fn new() -> Exec {
        Exec::default()
    }

    /// A new cluster-unique job id `<node>:<n>`; `n` starts at the daemon's start time
    /// in ms so that a restarted daemon does not reuse ids.
    pub(crate) fn new_id(&self, node: &str) -> String {
        let _ = self.next.compare_exchange(
            0,
            now_ms() % 1_000_000_000,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        format!("{node}:{}", self.next.fetch_add(1, Ordering::SeqCst))
    }

    /// The jobs running on this node (wherever their home is), as `pmig ps`
    /// shows them: eviction and load balancing pick their candidates here.
    pub fn running_here(&self) -> Vec<JobInfo> {
        lock(&self.running)
            .values()
            .map(|r| r.info.clone())
            .collect()
    }

    /// Every job this node knows: the ones homed here and the ones running here.
    pub fn list(&self) -> Vec<JobInfo> {
        let mut v: Vec<JobInfo> = lock(&self.homed).values().cloned().collect();
        v.extend(lock(&self.running).values().map(|r| r.info.clone()));
        v
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `--idle`: asks the cluster's host selector (Sprite's migration server,
/// `crate::selector`) for one idle node other than this one, for a job of class
/// `class` (`short` by default). The returned client holds the host until it is
/// dropped (the job's end).
pub fn pick_idle_host(
    host: &dyn ExecHost,
    class: Option<&str>,
) -> Result<(Peer, crate::selector::Client)> {
    use crate::selector::{Class, Client};
    let sel = host.selector().ok_or(ExecError::NoSelector)?;
    let label = format!("pmig run on {}", host.node());
    let mut c = Client::direct(&sel.addr, host.cluster_key(), host.node(), &label)
        .map_err(|e| ExecError::Refused(format!("host selector on {}: {e}", sel.name)))?;
    let class = match class {
        Some("long") => Class::Long,
        _ => Class::Short,
    };
    let hosts = c
        .request_excluding(class, 1, &[host.node().to_string()])
        .map_err(|e| ExecError::Refused(format!("no idle host: {e}")))?;
    let p = hosts
        .into_iter()
        .next()
        .ok_or_else(|| ExecError::Refused("no idle host: the selector granted none".into()))?;
    Ok((p, c))
}

/// Merges the job lists of every node (`(reporting node, its jobs)`): one row per job
/// id. The home's record is the base (it knows the history); the record of the node
/// the home says the job runs on gives its pid and state. A job whose home did not
/// answer is shown from its running node's record.
pub fn merge(lists: Vec<(String, Vec<JobInfo>)>) -> Vec<JobInfo> {
    let mut homes: HashMap<String, JobInfo> = HashMap::new();
    let mut runs: HashMap<String, JobInfo> = HashMap::new();
    for (from, jobs) in lists {
        for j in jobs {
            if j.home == from && !homes.contains_key(&j.id) {
                homes.insert(j.id.clone(), j.clone());
            }
            if j.node == from && j.pid != 0 {
                runs.insert(j.id.clone(), j);
            }
        }
    }
    let mut out: Vec<JobInfo> = Vec::new();
    for (id, mut h) in homes {
        if let Some(r) = runs.remove(&id) {
            if r.node == h.node {
                h.pid = r.pid;
                h.state = r.state;
            }
        }
        out.push(h);
    }
    out.extend(runs.into_values());
    out.sort_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
    out
}

/// A signal by name (`TERM`, `SIGTERM`, `kill`) or number.
pub fn parse_signal(s: &str) -> Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        if (1..=64).contains(&n) {
            return Ok(n);
        }
    }
    let up = s.to_ascii_uppercase();
    let name = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    name.parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .map_err(|_| ExecError::Refused(format!("unknown signal `{s}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces() {
        let msgs = vec![
            ExecMsg::Stdin(b"hello\n".to_vec()),
            ExecMsg::Winsize(Winsize { rows: 24, cols: 80 }),
            ExecMsg::Exited {
                status: ExitKind::Signal(2),
                remote_us: 5,
                home_us: 7,
            },
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            write_frame(&mut wire, m).unwrap();
        }
        let mut r = FrameReader::default();
        let mut got = Vec::new();
        for b in wire.chunks(3) {
            r.push(b);
            while let Some(m) = r.next_msg().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn oversized_and_garbage_frames_are_refused() {
        let mut r = FrameReader::default();
        r.push(&(u32::MAX).to_le_bytes());
        assert!(r.next_msg().is_err());
        let mut r = FrameReader::default();
        r.push(&[2, 0, 0, 0, 0xff, 0xff]);
        assert!(r.next_msg().is_err());
    }

    #[test]
    fn signals_and_status() {
        assert_eq!(parse_signal("TERM").unwrap(), libc::SIGTERM);
        assert_eq!(parse_signal("sigint").unwrap(), libc::SIGINT);
        assert_eq!(parse_signal("9").unwrap(), 9);
        assert!(parse_signal("nope").is_err());
        assert_eq!(ExitKind::Signal(2).shell_status(), 130);
        assert_eq!(ExitKind::Code(7).shell_status(), 7);
    }

    #[test]
    fn merge_prefers_the_home_and_the_running_node() {
        let j = |node: &str, pid: i32, state: &str, hist: &[&str]| JobInfo {
            id: "n1:5".into(),
            home: "n1".into(),
            node: node.into(),
            pid,
            uid: 0,
            argv: vec!["sleep".into()],
            state: state.into(),
            history: hist.iter().map(|s| s.to_string()).collect(),
            started_ms: 1,
        };
        let m = merge(vec![
            ("n1".into(), vec![j("n3", 40, "running", &["n2", "n3"])]),
            ("n2".into(), vec![]),
            ("n3".into(), vec![j("n3", 77, "stopped", &["n3"])]),
        ]);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].pid, m[0].state.as_str()), (77, "stopped"));
        assert_eq!(m[0].history, vec!["n2", "n3"]);
        // Home unreachable: the running node's record is shown.
        let m = merge(vec![("n3".into(), vec![j("n3", 77, "running", &["n3"])])]);
        assert_eq!(m.len(), 1);
    }
}
