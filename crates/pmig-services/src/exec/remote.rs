//! The node a job runs on: spawns it, relays its stdio, stops and exit to the home
//! daemon, and ends it cleanly when the home goes away.

use super::spawn::{self, JobIo};
use super::{
    lock, now_ms, Arrival, ExecError, ExecHost, ExecMsg, ExitKind, JobInfo, PtyState, Result,
    Running, Start, TermModes, Winsize, CHUNK, VERSION,
};
use pmig_proto::blocking::{Channel, Receiver, Sender};
use pmig_proto::{service, Msg};
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// After the home is gone: SIGHUP, then SIGKILL once this has passed.
pub const HANGUP_GRACE: Duration = Duration::from_secs(2);
/// After the job's exit: longest wait for its output to drain (a background
/// descendant may hold the pty or pipes open).
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// Sends one exec message on a node connection.
pub fn send(tx: &mut Sender<TcpStream>, m: &ExecMsg) -> Result<()> {
    let b = m.encode()?;
    tx.send_with(
        &Msg::Service {
            service: service::EXEC,
        },
        &[&b],
    )?;
    Ok(())
}

/// Receives one exec message from a node connection.
pub fn recv(rx: &mut Receiver<TcpStream>) -> Result<ExecMsg> {
    let inc = rx.recv_with()?;
    let peer = rx.peer().node.clone();
    decode(inc, &peer)
}

/// The exec message in a received frame.
pub fn decode(inc: pmig_proto::Incoming, peer: &str) -> Result<ExecMsg> {
    match &inc.msg {
        Msg::Service { service } if *service == service::EXEC => ExecMsg::decode(inc.attachment()),
        Msg::Error { text, .. } => Err(ExecError::Refused(format!("{peer} refused: {text}"))),
        other => Err(ExecError::Malformed(format!(
            "unexpected {} on an exec connection",
            other.kind()
        ))),
    }
}

/// Serves one connection whose first message was `Service { EXEC }` with `body`.
pub fn serve(host: &dyn ExecHost, ch: Channel<TcpStream>, body: &[u8]) {
    let peer = ch.peer().node.clone();
    let _ = ch.stream().set_read_timeout(None);
    let (mut tx, rx) = ch.split();
    let first = match ExecMsg::decode(body) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("exec request from {peer}: {e}");
            let _ = send(
                &mut tx,
                &ExecMsg::Refused {
                    text: e.to_string(),
                },
            );
            return;
        }
    };
    let version = match &first {
        ExecMsg::Start(s) => s.version,
        ExecMsg::List { version }
        | ExecMsg::Kill { version, .. }
        | ExecMsg::Reattach { version, .. } => *version,
        ExecMsg::Arrival(a) => a.version,
        other => {
            let what: String = format!("{other:?}").chars().take(40).collect();
            let text = format!("an exec connection cannot start with {what}");
            let _ = send(&mut tx, &ExecMsg::Refused { text });
            return;
        }
    };
    if version != VERSION {
        let text = format!(
            "{} speaks exec service version {VERSION}, {peer} sent version {version}",
            host.node()
        );
        tracing::warn!("{text}");
        let _ = send(&mut tx, &ExecMsg::Refused { text });
        return;
    }
    match first {
        ExecMsg::Start(s) => {
            if s.home != peer {
                let text = format!("{peer} cannot start a job for home {}", s.home);
                let _ = send(&mut tx, &ExecMsg::Refused { text });
                return;
            }
            start_job(host, tx, rx, s)
        }
        ExecMsg::Arrival(a) => arrive(host, tx, rx, &peer, a),
        ExecMsg::Reattach { job, pid, .. } => super::home::reattach(host, tx, rx, &peer, &job, pid),
        ExecMsg::List { .. } => {
            let _ = send(&mut tx, &ExecMsg::Jobs(host.exec().list()));
        }
        ExecMsg::Kill {
            job, signal, uid, ..
        } => {
            let m = match kill_here(host, &job, signal, uid) {
                Ok(true) => ExecMsg::Killed {
                    node: host.node().into(),
                },
                Ok(false) => ExecMsg::Refused {
                    text: format!("no job {job} on {}", host.node()),
                },
                Err(e) => ExecMsg::Refused {
                    text: e.to_string(),
                },
            };
            let _ = send(&mut tx, &m);
        }
        _ => {}
    }
}

/// Signals the job's process group `pgid`, or only its process `pid` when `pid` is
/// not in that group (a restored process may have joined another one).
fn killpg(pid: i32, pgid: i32, sig: i32) {
    // SAFETY: getpgid and kill on a job process of this daemon.
    unsafe {
        if pgid > 0 && libc::getpgid(pid) == pgid {
            libc::kill(-pgid, sig);
        } else {
            libc::kill(pid, sig);
        }
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: signalling a process this daemon started.
    unsafe { libc::kill(pid, sig) };
}

/// Signals job `job` if it runs here, for `uid`: `Ok(false)` if it does not run here.
pub fn kill_here(host: &dyn ExecHost, job: &str, sig: i32, uid: u32) -> Result<bool> {
    let r = lock(&host.exec().running).get(job).cloned();
    let Some(r) = r else { return Ok(false) };
    if uid != 0 && r.info.uid != uid {
        return Err(ExecError::Refused(format!(
            "permission denied: job {job} does not belong to uid {uid}"
        )));
    }
    deliver(&r, sig);
    tracing::info!("job {job}: signal {sig} for uid {uid}");
    Ok(true)
}

/// Delivers `sig` to the job's process group; a stopped job is continued after a
/// signal that should end it, as a shell's `kill` does.
fn deliver(r: &Running, sig: i32) {
    killpg(r.info.pid, r.pgid, sig);
    let ends = matches!(
        sig,
        libc::SIGTERM | libc::SIGHUP | libc::SIGINT | libc::SIGQUIT | libc::SIGKILL
    );
    if sig == libc::SIGCONT || (ends && r.info.state == "stopped") {
        killpg(r.info.pid, r.pgid, libc::SIGCONT);
        kill(r.leader, libc::SIGCONT);
    }
}

enum Input {
    Data(Vec<u8>),
    Eof,
}

/// Where a job is with respect to migration (at the node it runs on).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Move {
    Staying,
    Moving,
    Moved(String),
}

/// The connection to the job's home and the job's migration state.
pub struct JobCtl {
    pub(crate) tx: Mutex<Sender<TcpStream>>,
    mv: Mutex<Move>,
    cv: Condvar,
}

impl JobCtl {
    fn new(tx: Sender<TcpStream>) -> Arc<JobCtl> {
        Arc::new(JobCtl {
            tx: Mutex::new(tx),
            mv: Mutex::new(Move::Staying),
            cv: Condvar::new(),
        })
    }
    fn set(&self, m: Move) {
        *lock(&self.mv) = m;
        self.cv.notify_all();
    }
    /// The job's process is gone: if a migration is under way, waits (bounded) for
    /// its verdict; `Some(node)` if the process now runs there.
    fn verdict(&self) -> Option<String> {
        let mut g = lock(&self.mv);
        let end = Instant::now() + MOVE_WAIT;
        while *g == Move::Moving {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        match &*g {
            Move::Moved(n) => Some(n.clone()),
            _ => None,
        }
    }
}

/// Longest wait, after the process of a moving job died here, for the verdict of
/// its migration.
const MOVE_WAIT: Duration = Duration::from_secs(2 * 3600);

fn start_job(host: &dyn ExecHost, tx: Sender<TcpStream>, rx: Receiver<TcpStream>, s: Start) {
    let t0 = Instant::now();
    let mut tx = tx;
    let sp = match spawn::spawn(host, &s) {
        Ok(sp) => sp,
        Err(e) => {
            tracing::warn!("job {} from {}: {e}", s.job, s.home);
            let _ = send(
                &mut tx,
                &ExecMsg::Refused {
                    text: e.to_string(),
                },
            );
            return;
        }
    };
    let leader = sp.child.id() as i32;
    let pgid = sp.pgid;
    let info = JobInfo {
        id: s.job.clone(),
        home: s.home.clone(),
        node: host.node().into(),
        pid: pgid,
        uid: s.uid,
        argv: s.argv.clone(),
        state: "running".into(),
        history: vec![host.node().into()],
        started_ms: now_ms(),
    };
    tracing::info!(
        "job {} from {}: {:?} runs as pid {pgid} (uid {}, {})",
        s.job,
        s.home,
        s.argv,
        s.uid,
        if s.tty.is_some() { "pty" } else { "pipes" }
    );
    // A home already gone is found out by the relay (its hangup ends the job).
    let _ = send(&mut tx, &ExecMsg::Started { pid: pgid });
    let master = match &sp.io {
        JobIo::Pty(m) => m.try_clone().ok().map(Arc::new),
        JobIo::Pipes { .. } => None,
    };
    let r = Running {
        info,
        pgid,
        leader,
        master,
        ctl: JobCtl::new(tx),
    };
    relay_job(host, r, rx, sp.io, t0);
}

/// Relays a job running here with its home until it ends, moves away, or the home
/// goes away (then hangs it up).
fn relay_job(host: &dyn ExecHost, r: Running, mut rx: Receiver<TcpStream>, io: JobIo, t0: Instant) {
    let (job, home, leader, pgid) = (r.info.id.clone(), r.info.home.clone(), r.leader, r.pgid);
    let pid = r.info.pid;
    let ctl = r.ctl.clone();
    lock(&host.exec().running).insert(job.clone(), r);
    let done = Arc::new(AtomicBool::new(false));
    let stream = lock(&ctl.tx).stream().try_clone().ok();

    // Output readers (detached: a descendant may hold the output open forever).
    let (out_done_tx, out_done_rx) = mpsc::channel::<()>();
    let mut readers = 0;
    let mut start_reader = |mut f: Box<dyn Read + Send>, err: bool| {
        let ctl = ctl.clone();
        let d = out_done_tx.clone();
        readers += 1;
        std::thread::spawn(move || {
            let mut b = vec![0u8; CHUNK];
            loop {
                match f.read(&mut b) {
                    Ok(0) => break,
                    Ok(n) => {
                        let m = if err {
                            ExecMsg::Stderr(b[..n].to_vec())
                        } else {
                            ExecMsg::Stdout(b[..n].to_vec())
                        };
                        // A home that is gone does not stop the draining.
                        let _ = send(&mut lock(&ctl.tx), &m);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break, // EIO: every slave descriptor closed
                }
            }
            let _ = d.send(());
        });
    };
    let (in_tx, in_rx) = mpsc::channel::<Input>();
    let mut master = None;
    let mut stdin_w: Option<Box<dyn Write + Send>> = None;
    let ok = match io {
        JobIo::Pty(m) => match (spawn::dup_file(&m), spawn::dup_file(&m)) {
            (Ok(r), Ok(w)) => {
                start_reader(Box::new(r), false);
                stdin_w = Some(Box::new(w));
                master = Some(m);
                true
            }
            _ => false,
        },
        JobIo::Pipes {
            stdin,
            stdout,
            stderr,
        } => {
            start_reader(Box::new(stdout), false);
            start_reader(Box::new(stderr), true);
            stdin_w = Some(Box::new(stdin));
            true
        }
    };
    drop(out_done_tx);
    if !ok {
        tracing::warn!("job {job}: cannot set up its stdio; killing it");
        killpg(pid, pgid, libc::SIGKILL);
        kill(leader, libc::SIGKILL);
    }
    // Stdin writer: a job that does not read must not block signals and resizes.
    if let Some(mut w) = stdin_w {
        std::thread::spawn(move || {
            for i in in_rx {
                match i {
                    Input::Data(b) => {
                        if w.write_all(&b).is_err() {
                            break;
                        }
                    }
                    Input::Eof => break,
                }
            }
        });
    }
    // The waiter (stops, continues, the exit) and the messages from the home.
    let table = &host.exec().running;
    let status = std::thread::scope(|sc| {
        let waiter = {
            let ctl = ctl.clone();
            let done = done.clone();
            let job = job.as_str();
            let stream = stream.as_ref().and_then(|s| s.try_clone().ok());
            sc.spawn(move || {
                let set_state = |st: &str| {
                    if let Some(r) = lock(table).get_mut(job) {
                        r.info.state = st.into();
                    }
                };
                let status = wait_job(leader, &ctl.tx, &set_state);
                // Killed here by a migration that succeeded: the job lives on there.
                let moved = ctl.verdict();
                // Let the output drain, within bounds.
                let deadline = Instant::now() + DRAIN_WAIT;
                for _ in 0..readers {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if out_done_rx.recv_timeout(left).is_err() {
                        break;
                    }
                }
                done.store(true, Ordering::SeqCst);
                let last = match &moved {
                    Some(to) => ExecMsg::Moved { to: to.clone() },
                    None => ExecMsg::Exited {
                        status,
                        remote_us: t0.elapsed().as_micros() as u64,
                        home_us: 0,
                    },
                };
                let _ = send(&mut lock(&ctl.tx), &last);
                if let Some(s) = stream {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                (status, moved)
            })
        };
        let mut home_gone = None;
        for _ in 0..u64::MAX {
            match recv(&mut rx) {
                Ok(ExecMsg::Stdin(b)) => {
                    let _ = in_tx.send(Input::Data(b));
                }
                Ok(ExecMsg::StdinEof) => {
                    if master.is_none() {
                        let _ = in_tx.send(Input::Eof);
                    }
                }
                Ok(ExecMsg::Winsize(w)) => {
                    if let Some(m) = &master {
                        let ws = libc::winsize {
                            ws_row: w.rows,
                            ws_col: w.cols,
                            ws_xpixel: 0,
                            ws_ypixel: 0,
                        };
                        // SAFETY: TIOCSWINSZ on our pty master with a valid winsize.
                        unsafe { libc::ioctl(m.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
                    }
                }
                Ok(ExecMsg::Signal(sig)) => {
                    if let Some(r) = lock(table).get(&job) {
                        deliver(r, sig);
                    }
                }
                Ok(other) => tracing::debug!("job {job}: ignored {other:?} from the home"),
                Err(e) => {
                    if !done.load(Ordering::SeqCst) {
                        home_gone = Some(e);
                    }
                    break;
                }
            }
        }
        drop(in_tx);
        if let Some(e) = home_gone {
            hang_up(&job, &home, pid, pgid, leader, &done, &e);
        }
        waiter.join().ok()
    });
    drop(master);
    host.release(leader);
    lock(table).remove(&job);
    match status {
        Some((_, Some(to))) => tracing::info!("job {job} moved to {to}"),
        Some((st, None)) => tracing::info!("job {job} ended: {st:?}"),
        None => tracing::warn!("job {job}: its waiter failed"),
    }
}

/// How often the waiter looks at the job's state (for stops and continues).
const STATE_POLL_MS: i32 = 50;

/// The scheduling state letter of `pid` (`/proc/PID/stat`), if it exists.
fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Waits for the job's leader; reports stops and continues; returns how it ended.
///
/// It never blocks in `waitpid`: the daemon may itself be tracing the process
/// (demand-paging's last fetch runs in a daemon thread), and a `waitpid` from any
/// thread of the tracer takes that thread's ptrace stops. The exit is seen on a
/// pidfd, then reaped; stops and continues are read from `/proc/PID/stat` (`T`, not
/// the tracing stop `t`).
fn wait_job(leader: i32, tx: &Mutex<Sender<TcpStream>>, set_state: &dyn Fn(&str)) -> ExitKind {
    use nix::sys::wait::{waitpid, WaitStatus};
    let pid = nix::unistd::Pid::from_raw(leader);
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, leader, 0) };
    // SAFETY: a new descriptor nobody else owns (checked for failure first).
    let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) });
    let mut stopped = false;
    loop {
        let exited = match &pidfd {
            Some(f) => {
                let mut p = libc::pollfd {
                    fd: f.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: polling one descriptor we own.
                unsafe { libc::poll(&mut p, 1, STATE_POLL_MS) > 0 && p.revents != 0 }
            }
            None => true,
        };
        if exited {
            loop {
                match waitpid(pid, None) {
                    Ok(WaitStatus::Exited(_, c)) => return ExitKind::Code(c),
                    Ok(WaitStatus::Signaled(_, s, _)) => return ExitKind::Signal(s as i32),
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        tracing::warn!("waiting for job process {leader}: {e}");
                        return ExitKind::Code(255);
                    }
                }
            }
        }
        let now = proc_state(leader) == Some('T');
        if now != stopped {
            stopped = now;
            let m = if now {
                set_state("stopped");
                ExecMsg::Stopped { signal: 0 }
            } else {
                set_state("running");
                ExecMsg::Continued
            };
            let _ = send(&mut lock(tx), &m);
        }
    }
}

/// The home is gone: SIGHUP (as a hung-up terminal), SIGKILL after a grace.
fn hang_up(
    job: &str,
    home: &str,
    pid: i32,
    pgid: i32,
    leader: i32,
    done: &AtomicBool,
    e: &ExecError,
) {
    tracing::warn!("job {job}: lost its home {home} ({e}); hanging up");
    killpg(pid, pgid, libc::SIGHUP);
    killpg(pid, pgid, libc::SIGCONT);
    kill(leader, libc::SIGCONT);
    let deadline = Instant::now() + HANGUP_GRACE;
    while Instant::now() < deadline && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !done.load(Ordering::SeqCst) {
        tracing::warn!("job {job}: still there {HANGUP_GRACE:?} after SIGHUP; SIGKILL");
        killpg(pid, pgid, libc::SIGKILL);
        kill(leader, libc::SIGKILL);
    }
}

// ---------------------------------------------------------------------------
// Migration of a job (phase 2): the old node announces the process to the new
// node, which prepares pipes for its stdio and, once the migration committed,
// reattaches it to its home.

/// Stdio prepared for an arriving process.
pub enum Prepared {
    /// The process's ends (stdin read end, stdout and stderr write ends) for its
    /// restore.
    Pipes { theirs: [OwnedFd; 3] },
    /// A new pty: its slave for the restore; the restore runs in a new session on it
    /// (`spawn::restore_in_session`), whose keeper reports its pid on `pid_wr`.
    Pty { slave: OwnedFd, pid_wr: OwnedFd },
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| super::io_err("create a pipe")(e.into()))
}

fn fd_path(f: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()))
}

/// Destination of a migration: the paths the restore should connect fds 0-2 to, if
/// the process from `peer` with pid `pid` is an announced job.
pub fn stdio_for(host: &dyn ExecHost, peer: &str, pid: i32) -> Option<[PathBuf; 3]> {
    let t = lock(&host.exec().arriving);
    match t.get(&(peer.to_string(), pid))? {
        Prepared::Pipes { theirs } => Some(theirs.each_ref().map(fd_path)),
        Prepared::Pty { slave, .. } => {
            let p = fd_path(slave);
            Some([p.clone(), p.clone(), p])
        }
    }
}

/// Destination of a migration: runs the restore of an announced job that had a pty
/// inside a new session on its new pty.
pub fn wrap_restore(host: &dyn ExecHost, peer: &str, pid: i32, cmd: &mut std::process::Command) {
    let t = lock(&host.exec().arriving);
    if let Some(Prepared::Pty { slave, pid_wr }) = t.get(&(peer.to_string(), pid)) {
        spawn::restore_in_session(cmd, slave.as_raw_fd(), pid_wr.as_raw_fd());
    }
}

/// Sets the size and modes of the pty whose slave is `slave`.
fn set_pty(slave: &OwnedFd, st: &PtyState) {
    let ws = libc::winsize {
        ws_row: st.size.rows,
        ws_col: st.size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ with a valid winsize on our pty slave.
    unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    let Some(m) = &st.modes else { return };
    let Ok(mut t) = nix::sys::termios::tcgetattr(slave) else {
        return;
    };
    use nix::sys::termios::{ControlFlags, InputFlags, LocalFlags, OutputFlags};
    t.input_flags = InputFlags::from_bits_truncate(m.iflag as _);
    t.output_flags = OutputFlags::from_bits_truncate(m.oflag as _);
    t.control_flags = ControlFlags::from_bits_truncate(m.cflag as _);
    t.local_flags = LocalFlags::from_bits_truncate(m.lflag as _);
    for (i, c) in m.cc.iter().enumerate().take(t.control_chars.len()) {
        t.control_chars[i] = *c;
    }
    let _ = nix::sys::termios::tcsetattr(slave, nix::sys::termios::SetArg::TCSANOW, &t);
}

/// Size and modes of the pty whose master is `master`.
fn pty_state(master: &OwnedFd) -> PtyState {
    let mut ws = libc::winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize.
    unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    // On Linux the master's TCGETS reports the slave's modes.
    let modes = nix::sys::termios::tcgetattr(master)
        .ok()
        .map(|t| TermModes {
            iflag: t.input_flags.bits(),
            oflag: t.output_flags.bits(),
            cflag: t.control_flags.bits(),
            lflag: t.local_flags.bits(),
            cc: t.control_chars.to_vec(),
        });
    PtyState {
        size: Winsize {
            rows: ws.ws_row,
            cols: ws.ws_col,
        },
        modes,
    }
}

/// What the new node keeps for itself of the prepared stdio.
enum Ours {
    Pipes([OwnedFd; 3]),
    /// The pty master and the pipe on which the restore's keeper reports its pid.
    Pty(OwnedFd, OwnedFd),
}

fn prepare(a: &Arrival) -> Result<(Prepared, Ours)> {
    match &a.tty {
        None => {
            let (in_r, in_w) = pipe()?;
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            Ok((
                Prepared::Pipes {
                    theirs: [in_r, out_w, err_w],
                },
                Ours::Pipes([in_w, out_r, err_r]),
            ))
        }
        Some(st) => {
            let p =
                nix::pty::openpty(None, None).map_err(|e| super::io_err("open a pty")(e.into()))?;
            for f in [&p.master, &p.slave] {
                // SAFETY: fcntl on a descriptor we own.
                unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
            }
            set_pty(&p.slave, st);
            let (pid_rd, pid_wr) = pipe()?;
            Ok((
                Prepared::Pty {
                    slave: p.slave,
                    pid_wr,
                },
                Ours::Pty(p.master, pid_rd),
            ))
        }
    }
}

/// Waits (bounded) for a keeper whose restore failed or whose process was killed.
fn reap_keeper(host: &dyn ExecHost, k: i32) {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let pid = nix::unistd::Pid::from_raw(k);
    for i in 0..200 {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                if i == 100 {
                    kill(k, libc::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => break,
        }
    }
    host.release(k);
}

/// The new node's side of `Arrival`.
fn arrive(
    host: &dyn ExecHost,
    mut tx: Sender<TcpStream>,
    mut rx: Receiver<TcpStream>,
    peer: &str,
    a: Arrival,
) {
    let key = (peer.to_string(), a.pid);
    let (prepared, ours) = match prepare(&a) {
        Ok(x) => x,
        Err(e) => {
            let _ = send(
                &mut tx,
                &ExecMsg::Refused {
                    text: e.to_string(),
                },
            );
            return;
        }
    };
    lock(&host.exec().arriving).insert(key.clone(), prepared);
    // The restore's keeper (pty) reports its pid as soon as it exists; it is taken
    // from the reaper at once (it becomes the daemon's child when the restore ends).
    let keeper = match &ours {
        Ours::Pty(_, pid_rd) => pid_rd.try_clone().ok().map(File::from),
        Ours::Pipes(_) => None,
    };
    tracing::info!(
        "job {} (process {} of {peer}) announced; {} prepared",
        a.job,
        a.pid,
        if a.tty.is_some() { "a pty" } else { "pipes" }
    );
    let _ = send(&mut tx, &ExecMsg::Ready);
    let (m, k) = std::thread::scope(|sc| {
        let kh = keeper.map(|mut f| {
            sc.spawn(move || {
                let mut b = [0u8; 4];
                f.read_exact(&mut b).ok().map(|_| {
                    let k = i32::from_ne_bytes(b);
                    host.own(k);
                    k
                })
            })
        });
        let m = recv(&mut rx);
        // The restore is over: its descriptors are no longer needed here (and the
        // keeper's pid pipe reaches EOF if no keeper was started).
        drop(lock(&host.exec().arriving).remove(&key));
        let k = kh.and_then(|h| h.join().ok().flatten());
        (m, k)
    });
    let new_pid = match m {
        Ok(ExecMsg::Commit { new_pid }) => new_pid,
        other => {
            match other {
                Ok(o) => tracing::warn!("job {}: {peer} sent {o:?} instead of Commit", a.job),
                Err(e) => tracing::info!(
                    "job {}: the migration from {peer} did not complete ({e})",
                    a.job
                ),
            }
            if let Some(k) = k {
                reap_keeper(host, k);
            }
            return;
        }
    };
    let t0 = Instant::now();
    let (leader, pgid, io, master) = match ours {
        Ours::Pipes([in_w, out_r, err_r]) => {
            host.own(new_pid);
            (
                new_pid,
                new_pid,
                JobIo::Pipes {
                    stdin: File::from(in_w),
                    stdout: File::from(out_r),
                    stderr: File::from(err_r),
                },
                None,
            )
        }
        Ours::Pty(master, _) => {
            // SAFETY: getpgid on the restored process.
            let pgid = unsafe { libc::getpgid(new_pid) };
            let dup = master.try_clone().ok().map(Arc::new);
            (k.unwrap_or(new_pid), pgid, JobIo::Pty(master), dup)
        }
    };
    let mut history = a.history.clone();
    history.push(host.node().into());
    let attach = super::home::reattach_to(host, &a.home, &a.job, new_pid);
    let _ = send(&mut tx, &ExecMsg::Ready);
    drop((tx, rx));
    match attach {
        Ok((htx, hrx)) => {
            tracing::info!(
                "job {} arrived from {peer}: pid {new_pid}, home {}",
                a.job,
                a.home
            );
            let r = Running {
                info: JobInfo {
                    id: a.job,
                    home: a.home,
                    node: host.node().into(),
                    pid: new_pid,
                    uid: a.uid,
                    argv: a.argv,
                    state: "running".into(),
                    history,
                    started_ms: a.started_ms,
                },
                pgid,
                leader,
                master,
                ctl: JobCtl::new(htx),
            };
            relay_job(host, r, hrx, io, t0);
        }
        Err(e) => {
            // Without its home the job must not run on: hang it up like a lost home.
            tracing::warn!(
                "job {} arrived from {peer} but cannot reach its home {}: {e}",
                a.job,
                a.home
            );
            let done = AtomicBool::new(false);
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(leader), None);
                    done.store(true, Ordering::SeqCst);
                });
                hang_up(&a.job, &a.home, new_pid, pgid, leader, &done, &e);
            });
            drop(io);
            host.release(leader);
        }
    }
}

/// The old node's side of a job's migration, from the announcement to the verdict.
pub struct Departure {
    job: String,
    to: String,
    ctl: Arc<JobCtl>,
    ch: Channel<TcpStream>,
}

/// Before migrating process `pid` to the daemon at `to`: if it is a job running
/// here, announce it there and tell its home. `None`: not a job.
pub fn depart(host: &dyn ExecHost, pid: i32, to: &str) -> Option<Result<Departure>> {
    let r = lock(&host.exec().running)
        .values()
        .find(|r| r.info.pid == pid)
        .cloned()?;
    let job = r.info.id.clone();
    let a = Arrival {
        version: VERSION,
        job: job.clone(),
        home: r.info.home.clone(),
        uid: r.info.uid,
        argv: r.info.argv.clone(),
        history: r.info.history.clone(),
        started_ms: r.info.started_ms,
        pid,
        tty: r.master.as_deref().map(pty_state),
    };
    let res = (|| -> Result<Channel<TcpStream>> {
        let mut ch = pmig_proto::blocking::connect(to, host.cluster_key(), &host.proto_config())?;
        let b = ExecMsg::Arrival(a).encode()?;
        ch.send_with(
            &Msg::Service {
                service: service::EXEC,
            },
            &[&b],
        )?;
        let inc = ch.recv_with()?;
        let peer = ch.peer().node.clone();
        match decode(inc, &peer)? {
            ExecMsg::Ready => Ok(ch),
            ExecMsg::Refused { text } => Err(ExecError::Refused(text)),
            other => Err(ExecError::Malformed(format!(
                "{peer} answered Arrival with {other:?}"
            ))),
        }
    })();
    Some(match res {
        Ok(ch) => {
            let to = ch.peer().node.clone();
            r.ctl.set(Move::Moving);
            let _ = send(&mut lock(&r.ctl.tx), &ExecMsg::Moving { to: to.clone() });
            tracing::info!("job {job} (pid {pid}) is moving to {to}");
            Ok(Departure {
                job,
                to,
                ctl: r.ctl,
                ch,
            })
        }
        Err(e) => Err(ExecError::Refused(format!(
            "process {pid} is job {job}: cannot prepare its stdio on {to}: {e}"
        ))),
    })
}

impl Departure {
    /// The migration's verdict: `Some(new pid)` if the process runs on the new node.
    pub fn finish(mut self, new_pid: Option<i32>) {
        match new_pid {
            Some(p) => {
                let _ = self
                    .ch
                    .stream()
                    .set_read_timeout(Some(Duration::from_secs(30)));
                let b = ExecMsg::Commit { new_pid: p }.encode();
                let ok = b
                    .ok()
                    .map(|b| {
                        self.ch
                            .send_with(
                                &Msg::Service {
                                    service: service::EXEC,
                                },
                                &[&b],
                            )
                            .is_ok()
                            && self.ch.recv_with().is_ok()
                    })
                    .unwrap_or(false);
                if !ok {
                    tracing::warn!("job {}: {} did not confirm its arrival", self.job, self.to);
                }
                self.ctl.set(Move::Moved(self.to.clone()));
            }
            None => {
                self.ctl.set(Move::Staying);
                let _ = send(&mut lock(&self.ctl.tx), &ExecMsg::Stayed);
                tracing::info!("job {}: stays here (its migration failed)", self.job);
            }
        }
    }
}
