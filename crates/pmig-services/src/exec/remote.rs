//! The node a job runs on: spawns it, relays its stdio, stops and exit to the home
//! daemon, and ends it cleanly when the home goes away.

use super::spawn::{self, JobIo};
use super::{
    lock, now_ms, ExecError, ExecHost, ExecMsg, ExitKind, JobInfo, Result, Running, Start, CHUNK,
    VERSION,
};
use pmig_proto::blocking::{Channel, Receiver, Sender};
use pmig_proto::{service, Msg};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
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
        ExecMsg::List { version } | ExecMsg::Kill { version, .. } => *version,
        other => {
            let text = format!("an exec connection cannot start with {other:?}");
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
            run_job(host, tx, rx, s)
        }
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

fn killpg(pgid: i32, sig: i32) {
    // SAFETY: signalling a process group of a job this daemon started.
    unsafe { libc::kill(-pgid, sig) };
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
    killpg(r.pgid, sig);
    let ends = matches!(
        sig,
        libc::SIGTERM | libc::SIGHUP | libc::SIGINT | libc::SIGQUIT | libc::SIGKILL
    );
    if sig == libc::SIGCONT || (ends && r.info.state == "stopped") {
        killpg(r.pgid, libc::SIGCONT);
        kill(r.leader, libc::SIGCONT);
    }
}

enum Input {
    Data(Vec<u8>),
    Eof,
}

fn run_job(host: &dyn ExecHost, tx: Sender<TcpStream>, mut rx: Receiver<TcpStream>, s: Start) {
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
    let job = s.job.clone();
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
    lock(&host.exec().running).insert(job.clone(), Running { info, pgid, leader });
    tracing::info!(
        "job {job} from {}: {:?} runs as pid {pgid} (uid {}, {})",
        s.home,
        s.argv,
        s.uid,
        if s.tty.is_some() { "pty" } else { "pipes" }
    );
    if send(&mut tx, &ExecMsg::Started { pid: pgid }).is_err() {
        // The home is already gone: the hangup below ends the job.
    }
    let tx = Arc::new(Mutex::new(tx));
    let done = Arc::new(AtomicBool::new(false));
    let stream = lock(&tx).stream().try_clone().ok();

    // Output readers.
    let (out_done_tx, out_done_rx) = mpsc::channel::<()>();
    let mut readers = 0;
    let mut start_reader = |mut f: Box<dyn Read + Send>, err: bool| {
        let tx = tx.clone();
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
                        let _ = send(&mut lock(&tx), &m);
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
    let ok = match sp.io {
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
        killpg(pgid, libc::SIGKILL);
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
            let tx = tx.clone();
            let done = done.clone();
            let job = job.as_str();
            let stream = stream.as_ref().and_then(|s| s.try_clone().ok());
            sc.spawn(move || {
                let set_state = |st: &str| {
                    if let Some(r) = lock(table).get_mut(job) {
                        r.info.state = st.into();
                    }
                };
                let status = wait_job(leader, &tx, &set_state);
                // Let the output drain, within bounds.
                let deadline = Instant::now() + DRAIN_WAIT;
                for _ in 0..readers {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if out_done_rx.recv_timeout(left).is_err() {
                        break;
                    }
                }
                done.store(true, Ordering::SeqCst);
                let _ = send(
                    &mut lock(&tx),
                    &ExecMsg::Exited {
                        status,
                        remote_us: t0.elapsed().as_micros() as u64,
                        home_us: 0,
                    },
                );
                if let Some(s) = stream {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                status
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
            hang_up(&job, &s.home, pgid, leader, &done, &e);
        }
        waiter.join().ok()
    });
    drop(master);
    host.release(leader);
    lock(table).remove(&job);
    tracing::info!("job {job} ended: {status:?}");
}

/// Waits for the job's leader; reports stops and continues; returns how it ended.
fn wait_job(leader: i32, tx: &Mutex<Sender<TcpStream>>, set_state: &dyn Fn(&str)) -> ExitKind {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let pid = nix::unistd::Pid::from_raw(leader);
    loop {
        match waitpid(pid, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED)) {
            Ok(WaitStatus::Exited(_, c)) => return ExitKind::Code(c),
            Ok(WaitStatus::Signaled(_, s, _)) => return ExitKind::Signal(s as i32),
            Ok(WaitStatus::Stopped(_, s)) => {
                set_state("stopped");
                let _ = send(&mut lock(tx), &ExecMsg::Stopped { signal: s as i32 });
            }
            Ok(WaitStatus::Continued(_)) => {
                set_state("running");
                let _ = send(&mut lock(tx), &ExecMsg::Continued);
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!("waiting for job leader {leader}: {e}");
                return ExitKind::Code(255);
            }
        }
    }
}

/// The home is gone: SIGHUP (as a hung-up terminal), SIGKILL after a grace.
fn hang_up(job: &str, home: &str, pgid: i32, leader: i32, done: &AtomicBool, e: &ExecError) {
    tracing::warn!("job {job}: lost its home {home} ({e}); hanging up");
    killpg(pgid, libc::SIGHUP);
    killpg(pgid, libc::SIGCONT);
    kill(leader, libc::SIGCONT);
    let deadline = Instant::now() + HANGUP_GRACE;
    while Instant::now() < deadline && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !done.load(Ordering::SeqCst) {
        tracing::warn!("job {job}: still there {HANGUP_GRACE:?} after SIGHUP; SIGKILL");
        killpg(pgid, libc::SIGKILL);
        kill(leader, libc::SIGKILL);
    }
}
