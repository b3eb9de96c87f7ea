//! The home daemon's side: a `run` control connection becomes a job on another node;
//! `ps` and `kill` ask every node.

use super::remote::{kill_here, recv, send};
use super::{
    lock, now_ms, pick_idle_host, write_frame, ExecError, ExecHost, ExecMsg, FrameReader, JobInfo,
    Result, RunRequest, Start, VERSION,
};
use crate::Peer;
use pmig_proto::blocking::{self, Channel};
use pmig_proto::{service, Msg};
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest wait for a node to connect, authenticate and answer `ps`/`kill`.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// The caller of a control request, as the kernel tells it (`SO_PEERCRED`).
#[derive(Debug, Clone)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

impl Caller {
    /// Supplementary groups of the caller, from `/proc/PID/status` (its primary
    /// group alone if that cannot be read).
    pub fn groups(&self) -> Vec<u32> {
        let text =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let mut g: Vec<u32> = text
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if g.is_empty() {
            g.push(self.gid);
        }
        g
    }
}

/// A spare connection older than this is not used (the remote daemon drops
/// connections idle for 300 s).
pub const SPARE_MAX_AGE: Duration = Duration::from_secs(120);

/// Spare connections, by node name.
pub(crate) type Spares = Arc<Mutex<HashMap<String, (Channel<TcpStream>, Instant)>>>;

fn take_spare(host: &dyn ExecHost, node: &str) -> Option<Channel<TcpStream>> {
    let (ch, at) = lock(&host.exec().spares).remove(node)?;
    (at.elapsed() < SPARE_MAX_AGE).then_some(ch)
}

/// Dials a spare connection to `p` in the background, unless there is one.
fn refill_spare(host: &dyn ExecHost, p: &Peer) {
    let spares = host.exec().spares.clone();
    if lock(&spares).contains_key(&p.name) {
        return;
    }
    let (p, key, cfg) = (p.clone(), host.cluster_key().clone(), host.proto_config());
    let _ =
        std::thread::Builder::new().name("exec-spare".into()).spawn(
            move || match blocking::connect(p.addr.as_str(), &key, &cfg) {
                Ok(ch) => {
                    lock(&spares)
                        .entry(p.name.clone())
                        .or_insert((ch, Instant::now()));
                }
                Err(e) => tracing::debug!("spare connection to {}: {e}", p.name),
            },
        );
}

/// Sends `Start` and reads the answer on `ch`.
fn try_start(
    mut ch: Channel<TcpStream>,
    start: &Start,
    peer: &str,
) -> Result<(Channel<TcpStream>, ExecMsg)> {
    send_first(&mut ch, &ExecMsg::Start(start.clone()))?;
    let inc = ch.recv_with()?;
    let m = super::remote::decode(inc, peer)?;
    Ok((ch, m))
}

/// A job started from this home, connected to the node it runs on.
pub struct Job {
    pub id: String,
    pub node: String,
    pub pid: i32,
    ch: Channel<TcpStream>,
    t0: Instant,
    /// `--idle`: the selector session that holds the host until the job ends.
    lease: Option<crate::selector::Client>,
}

fn peer_by_name<'a>(host: &'a dyn ExecHost, name: &str) -> Result<&'a Peer> {
    Peer::by_name(host.peers(), name).map_err(ExecError::Refused)
}

fn connect(host: &dyn ExecHost, p: &Peer, timeout: Option<Duration>) -> Result<Channel<TcpStream>> {
    let mut cfg = host.proto_config();
    if timeout.is_some() {
        cfg.handshake_timeout = timeout;
    }
    Ok(blocking::connect(
        p.addr.as_str(),
        host.cluster_key(),
        &cfg,
    )?)
}

fn send_first(ch: &mut Channel<TcpStream>, m: &ExecMsg) -> Result<()> {
    let b = m.encode()?;
    ch.send_with(
        &Msg::Service {
            service: service::EXEC,
        },
        &[&b],
    )?;
    Ok(())
}

/// Starts the job of `req` for `caller`: picks the node, connects to its daemon,
/// waits for `Started`.
pub fn start(host: &dyn ExecHost, caller: &Caller, req: &RunRequest) -> Result<Job> {
    let t0 = Instant::now();
    if req.argv.is_empty() {
        return Err(ExecError::Refused("no command given".into()));
    }
    if let Some(c) = &req.class {
        if c != "short" && c != "long" {
            return Err(ExecError::Refused(format!(
                "unknown class `{c}` (short or long)"
            )));
        }
    }
    let mut lease = None;
    let peer = match (&req.on, req.idle) {
        (Some(n), false) => peer_by_name(host, n)?.clone(),
        (None, true) => {
            let (p, c) = pick_idle_host(host, req.class.as_deref())?;
            lease = Some(c);
            p
        }
        _ => {
            return Err(ExecError::Refused(
                "give exactly one of --on NODE and --idle".into(),
            ))
        }
    };
    let id = host.exec().new_id(host.node());
    let start = Start {
        version: VERSION,
        job: id.clone(),
        home: host.node().into(),
        argv: req.argv.clone(),
        env: req.env.clone(),
        cwd: req.cwd.clone(),
        uid: caller.uid,
        gid: caller.gid,
        groups: caller.groups(),
        tty: req.tty,
    };
    let fresh = || -> Result<(Channel<TcpStream>, ExecMsg)> {
        let ch = connect(host, &peer, None)
            .map_err(|e| ExecError::Refused(format!("cannot reach {}: {e}", peer.name)))?;
        try_start(ch, &start, &peer.name)
    };
    // A spare that went stale fails before the remote saw the Start: retry fresh.
    let (ch, m) = match take_spare(host, &peer.name).map(|ch| try_start(ch, &start, &peer.name)) {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            tracing::debug!("spare connection to {} unusable ({e}); dialling", peer.name);
            fresh()?
        }
        None => fresh()?,
    };
    refill_spare(host, &peer);
    match m {
        ExecMsg::Started { pid } => {
            let _ = ch.stream().set_read_timeout(None);
            let _ = ch.stream().set_write_timeout(None);
            lock(&host.exec().homed).insert(
                id.clone(),
                JobInfo {
                    id: id.clone(),
                    home: host.node().into(),
                    node: peer.name.clone(),
                    pid,
                    uid: caller.uid,
                    argv: req.argv.clone(),
                    state: "running".into(),
                    history: vec![peer.name.clone()],
                    started_ms: now_ms(),
                },
            );
            tracing::info!(
                "job {id} for uid {}: {:?} runs on {} as pid {pid}",
                caller.uid,
                req.argv,
                peer.name
            );
            Ok(Job {
                id,
                node: peer.name,
                pid,
                ch,
                t0,
                lease,
            })
        }
        ExecMsg::Refused { text } => Err(ExecError::Refused(text)),
        other => Err(ExecError::Malformed(format!(
            "{} answered a job start with {other:?}",
            peer.name
        ))),
    }
}

/// A job's new node, reattaching: its connection, name and the job's pid there.
pub(crate) type Reattaching = (Channel<TcpStream>, String, i32);

/// Longest wait, after the old node said `Moved`, for the new node's `Reattach`.
pub const REATTACH_WAIT: Duration = Duration::from_secs(30);

/// The home's side of `Reattach { job, pid }` from `peer`: hands the connection to
/// the job's relay.
pub(crate) fn reattach(
    host: &dyn ExecHost,
    mut tx: blocking::Sender<TcpStream>,
    rx: blocking::Receiver<TcpStream>,
    peer: &str,
    job: &str,
    pid: i32,
) {
    let relay = lock(&host.exec().reattach).get(job).cloned();
    let Some(relay) = relay else {
        let text = format!("no job {job} is homed on {}", host.node());
        let _ = send(&mut tx, &ExecMsg::Refused { text });
        return;
    };
    if send(&mut tx, &ExecMsg::Reattached).is_ok() {
        let _ = relay.send((Channel::unsplit(tx, rx), peer.to_string(), pid));
    }
}

/// The new node's side: connects to the job's home and reattaches job `job`, now
/// running here as `pid`.
pub(crate) fn reattach_to(
    host: &dyn ExecHost,
    home: &str,
    job: &str,
    pid: i32,
) -> Result<(blocking::Sender<TcpStream>, blocking::Receiver<TcpStream>)> {
    let p = peer_by_name(host, home)?.clone();
    let mut ch = connect(host, &p, None)?;
    send_first(
        &mut ch,
        &ExecMsg::Reattach {
            version: VERSION,
            job: job.into(),
            pid,
        },
    )?;
    let inc = ch.recv_with()?;
    match super::remote::decode(inc, home)? {
        ExecMsg::Reattached => {
            let _ = ch.stream().set_read_timeout(None);
            Ok(ch.split())
        }
        ExecMsg::Refused { text } => Err(ExecError::Refused(text)),
        other => Err(ExecError::Malformed(format!(
            "{home} answered Reattach with {other:?}"
        ))),
    }
}

/// Relays between the client on `s` and the job's node until the job ends or either
/// side goes away. When the job migrates, the old node says `Moving` (the client's
/// input is held), then `Moved`; the relay carries on with the connection of the new
/// node's `Reattach`, and passes the held input on.
pub fn relay(host: &dyn ExecHost, job: Job, s: UnixStream) {
    let Job {
        id,
        mut node,
        ch,
        t0,
        lease,
        ..
    } = job;
    let _ = s.set_read_timeout(None);
    let _ = s.set_write_timeout(None);
    let (tx, mut rx) = ch.split();
    let tcp = Mutex::new(rx.stream().try_clone().ok());
    let tx = Mutex::new(tx);
    let hold: Mutex<Option<Vec<ExecMsg>>> = Mutex::new(None);
    let (re_tx, re_rx) = std::sync::mpsc::channel::<Reattaching>();
    lock(&host.exec().reattach).insert(id.clone(), re_tx);
    let table = &host.exec().homed;
    std::thread::scope(|sc| {
        // Client → job.
        let s_in = s.try_clone();
        let (id_ref, tx_ref, hold_ref, tcp_ref) = (id.as_str(), &tx, &hold, &tcp);
        let from_client = sc.spawn(move || {
            let Ok(s_in) = s_in else { return };
            let mut fr = FrameReader::default();
            loop {
                match fr.read_from(&s_in) {
                    Ok(Some(
                        m @ (ExecMsg::Stdin(_)
                        | ExecMsg::StdinEof
                        | ExecMsg::Winsize(_)
                        | ExecMsg::Signal(_)),
                    )) => {
                        let mut h = lock(hold_ref);
                        match h.as_mut() {
                            Some(held) => held.push(m),
                            // A failure shows on the receiving side.
                            None => drop(send(&mut lock(tx_ref), &m)),
                        }
                    }
                    Ok(Some(other)) => {
                        tracing::debug!("job {id_ref}: ignored {other:?} from the client")
                    }
                    Ok(None) | Err(_) => {
                        // The client is gone: dropping the connection hangs the job up.
                        tracing::info!("job {id_ref}: the client went away");
                        break;
                    }
                }
            }
            if let Some(t) = lock(tcp_ref).as_ref() {
                let _ = t.shutdown(std::net::Shutdown::Both);
            }
        });
        let flush_held = || {
            let mut h = lock(&hold);
            if let Some(held) = h.take() {
                let mut t = lock(&tx);
                for m in held {
                    let _ = send(&mut t, &m);
                }
            }
        };
        // Job → client.
        loop {
            let m = match recv(&mut rx) {
                Ok(m) => m,
                Err(e) => ExecMsg::Refused {
                    text: format!("lost the connection to {node}, where job {id} runs: {e}"),
                },
            };
            let m = match m {
                ExecMsg::Moving { to } => {
                    tracing::info!("job {id} is moving from {node} to {to}");
                    *lock(&hold) = Some(Vec::new());
                    continue;
                }
                ExecMsg::Stayed => {
                    tracing::info!("job {id} stays on {node}");
                    flush_held();
                    continue;
                }
                ExecMsg::Moved { to } => match re_rx.recv_timeout(REATTACH_WAIT) {
                    Ok((ch, new_node, pid)) => {
                        let (ntx, nrx) = ch.split();
                        *lock(&tcp) = nrx.stream().try_clone().ok();
                        *lock(&tx) = ntx;
                        rx = nrx;
                        if let Some(j) = lock(table).get_mut(&id) {
                            j.node = new_node.clone();
                            j.pid = pid;
                            j.history.push(new_node.clone());
                        }
                        tracing::info!("job {id} moved from {node} to {new_node} (pid {pid})");
                        node = new_node;
                        flush_held();
                        continue;
                    }
                    Err(_) => ExecMsg::Refused {
                        text: format!(
                            "job {id} moved from {node} to {to}, which did not reattach it within {REATTACH_WAIT:?}"
                        ),
                    },
                },
                ExecMsg::Stopped { .. } | ExecMsg::Continued => {
                    if let Some(j) = lock(table).get_mut(&id) {
                        j.state = if matches!(m, ExecMsg::Stopped { .. }) {
                            "stopped".into()
                        } else {
                            "running".into()
                        };
                    }
                    m
                }
                ExecMsg::Exited {
                    status, remote_us, ..
                } => {
                    tracing::info!("job {id} on {node} ended: {status:?}");
                    ExecMsg::Exited {
                        status,
                        remote_us,
                        home_us: t0.elapsed().as_micros() as u64,
                    }
                }
                m => m,
            };
            let last = matches!(m, ExecMsg::Exited { .. } | ExecMsg::Refused { .. });
            if write_frame(&s, &m).is_err() || last {
                break;
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Both);
        if let Some(t) = lock(&tcp).as_ref() {
            let _ = t.shutdown(std::net::Shutdown::Both);
        }
        let _ = from_client.join();
    });
    lock(&host.exec().reattach).remove(&id);
    lock(table).remove(&id);
    // The idle host goes back to the selector.
    drop(lease);
}

/// Asks every node (in parallel) for `m`; `(node, answer)` for each.
fn ask_all(host: &dyn ExecHost, m: &ExecMsg) -> Vec<(String, Result<ExecMsg>)> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = host
            .peers()
            .iter()
            .map(|p| {
                sc.spawn(move || {
                    let r = (|| {
                        let mut ch = connect(host, p, Some(ASK_TIMEOUT))?;
                        let _ = ch.stream().set_read_timeout(Some(ASK_TIMEOUT));
                        send_first(&mut ch, m)?;
                        let (_tx, mut rx) = ch.split();
                        recv(&mut rx)
                    })();
                    (p.name.clone(), r)
                })
            })
            .collect();
        hs.into_iter().filter_map(|h| h.join().ok()).collect()
    })
}

/// The cluster's jobs and the nodes that did not answer.
pub fn ps(host: &dyn ExecHost) -> (Vec<JobInfo>, Vec<String>) {
    let mut lists = Vec::new();
    let mut unreachable = Vec::new();
    if !host.peers().iter().any(|p| p.name == host.node()) {
        lists.push((host.node().to_string(), host.exec().list()));
    }
    for (node, r) in ask_all(host, &ExecMsg::List { version: VERSION }) {
        match r {
            Ok(ExecMsg::Jobs(j)) => lists.push((node, j)),
            Ok(other) => unreachable.push(format!("{node} (answered {other:?})")),
            Err(e) => unreachable.push(format!("{node} ({e})")),
        }
    }
    (super::merge(lists), unreachable)
}

/// Signals `job` wherever it runs, for `uid`; returns the node it runs on.
pub fn kill(host: &dyn ExecHost, job: &str, signal: i32, uid: u32) -> Result<String> {
    if kill_here(host, job, signal, uid)? {
        return Ok(host.node().into());
    }
    let m = ExecMsg::Kill {
        version: VERSION,
        job: job.into(),
        signal,
        uid,
    };
    let mut refusals = Vec::new();
    let mut unreachable = Vec::new();
    for (node, r) in ask_all(host, &m) {
        match r {
            Ok(ExecMsg::Killed { node }) => return Ok(node),
            Ok(ExecMsg::Refused { text }) if text.starts_with("permission denied") => {
                refusals.push(text)
            }
            Ok(_) => {}
            Err(_) => unreachable.push(node),
        }
    }
    if let Some(r) = refusals.pop() {
        return Err(ExecError::Refused(r));
    }
    Err(ExecError::Refused(if unreachable.is_empty() {
        format!("no job {job} in the cluster")
    } else {
        format!(
            "no job {job} on the nodes that answered ({} did not)",
            unreachable.join(", ")
        )
    }))
}
