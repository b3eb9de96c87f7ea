//! `pmig run`, `pmig ps`, `pmig kill`: remote execution with this node as the home
//! (the exec service, `docs/protocol.md` §7 and §8.1).

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};
use pmig_daemon::control::{self, Event, KillRequest, Request};
use pmig_services::exec::{
    write_frame, ExecMsg, ExitKind, FrameReader, JobInfo, RunRequest, Winsize, CHUNK,
};
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;

#[derive(clap::Args)]
pub struct Args {
    /// Node to run on (a node name the daemons know, e.g. n2).
    #[arg(
        long,
        value_name = "NODE",
        conflicts_with = "idle",
        required_unless_present = "idle"
    )]
    on: Option<String>,
    /// Let the host selector pick an idle node.
    #[arg(long)]
    idle: bool,
    /// Expected length of the job, for the host selector.
    #[arg(long, value_parser = ["short", "long"])]
    class: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<String>,
}

/// How a job ended, with the daemons' own times.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub status: ExitKind,
    pub job: String,
    pub node: String,
    /// Spawn to exit, at the node it ran on.
    pub remote_us: u64,
    /// Request to exit, at the home daemon.
    pub home_us: u64,
}

pub fn run(a: Args) -> Result<i32> {
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let mut req = request(a.cmd)?;
    req.on = a.on;
    req.idle = a.idle;
    req.class = a.class;
    req.tty = if tty { Some(winsize(1)) } else { None };
    let o = run_job(&req, true)?;
    Ok(o.status.shell_status())
}

/// A request to run `argv` with this process's working directory and environment
/// (no node chosen, no terminal): what `pmig run` and `pmig sh` fill in.
pub fn request(argv: Vec<String>) -> Result<RunRequest> {
    let cwd = std::env::current_dir().context("find the working directory")?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| anyhow!("the working directory {} is not UTF-8", cwd.display()))?
        .to_string();
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    Ok(RunRequest {
        argv,
        env,
        cwd,
        on: None,
        idle: false,
        class: None,
        tty: None,
    })
}

/// The terminal size of `fd` (80×24 if it has none).
fn winsize(fd: i32) -> Winsize {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `ws`.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    if r < 0 || ws.ws_row == 0 {
        return Winsize { rows: 24, cols: 80 };
    }
    Winsize {
        rows: ws.ws_row,
        cols: ws.ws_col,
    }
}

/// The home terminal in raw mode; restored on drop (also on errors).
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).context("read the terminal mode")?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &raw)
            .context("put the terminal in raw mode")?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// Sends to the daemon. A failure is not fatal by itself: the job may have ended and
/// the daemon closed its side; what the daemon sent (the exit status, or nothing) is
/// read from the socket and decides.
fn send(s: &UnixStream, m: &ExecMsg) -> Result<()> {
    if let Err(e) = write_frame(s, m) {
        tracing::debug!("send to the daemon: {e}");
    }
    Ok(())
}

/// What this process relays between its own stdio and signals and the job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay {
    /// stdin, stdout, stderr and signals (`pmig run`).
    All,
    /// stdout, stderr and signals; the job's stdin is empty (`pmig sh`: recipes run
    /// side by side and must not take the terminal's input).
    Output,
    /// Nothing: empty stdin, output discarded (the benchmark).
    Nothing,
}

/// A job the home daemon started: its connection, id and node.
pub struct Started {
    s: UnixStream,
    fr: FrameReader,
    pub job: String,
    pub node: String,
}

/// Runs `req` and relays until it ends. `interactive`: this process's stdio and
/// signals are the job's (else stdin is empty and the output is discarded: the
/// benchmark).
pub fn run_job(req: &RunRequest, interactive: bool) -> Result<RunOutcome> {
    let st = start_job(req)?;
    relay(
        st,
        req,
        if interactive {
            Relay::All
        } else {
            Relay::Nothing
        },
    )
}

/// Asks this node's daemon to start `req`. An error here means the job did not
/// start (nothing of it ran).
pub fn start_job(req: &RunRequest) -> Result<Started> {
    let s = UnixStream::connect_addr(&control::address(control::CONTROL_NAME)?).map_err(|e| {
        anyhow!(
            "cannot reach the pmig daemon of this node (@{}): {e}; is `pmig daemon` running here?",
            control::CONTROL_NAME
        )
    })?;
    let mut line = serde_json::to_vec(&Request::Run(req.clone()))?;
    line.push(b'\n');
    (&s).write_all(&line)
        .context("send the request to the daemon")?;
    let mut br = BufReader::new(&s);
    let mut l = String::new();
    br.read_line(&mut l).context("read the daemon's answer")?;
    if l.is_empty() {
        bail!("the daemon closed the connection without an answer (see its log)");
    }
    let ev: Event = serde_json::from_str(l.trim())
        .with_context(|| format!("bad answer from the daemon: {:?}", l.trim()))?;
    let (job, node) = match ev {
        Event::Started { job, node, .. } => (job, node),
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    };
    let mut fr = FrameReader::default();
    fr.push(br.buffer());
    drop(br);
    tracing::info!("job {job} runs on {node}");
    Ok(Started { s, fr, job, node })
}

/// Relays between this process and the started job until it ends.
pub fn relay(st: Started, req: &RunRequest, mode: Relay) -> Result<RunOutcome> {
    let Started {
        s,
        mut fr,
        job,
        node,
    } = st;
    let interactive = mode != Relay::Nothing;
    let tty = mode == Relay::All && req.tty.is_some();
    let sigfd = if interactive {
        let mut mask = SigSet::empty();
        for s in [
            Signal::SIGINT,
            Signal::SIGQUIT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGWINCH,
            Signal::SIGTSTP,
            Signal::SIGCONT,
        ] {
            mask.add(s);
        }
        mask.thread_block().context("block signals")?;
        Some(SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC).context("create a signalfd")?)
    } else {
        None
    };
    let mut raw = if tty { Some(RawMode::enter()?) } else { None };
    let mut stdin_open = mode == Relay::All;
    if !stdin_open {
        send(&s, &ExecMsg::StdinEof)?;
    }
    let mut buf = vec![0u8; CHUNK];
    // SAFETY: fd 0 stays open for the life of this process.
    let stdin_fd = unsafe { BorrowedFd::borrow_raw(0) };
    for _ in 0..u64::MAX {
        while let Some(m) = fr.next_msg()? {
            match m {
                ExecMsg::Stdout(b) if interactive => {
                    let mut o = std::io::stdout().lock();
                    let _ = o.write_all(&b).and_then(|_| o.flush());
                }
                ExecMsg::Stderr(b) if interactive => {
                    let _ = std::io::stderr().write_all(&b);
                }
                ExecMsg::Stopped { .. } if interactive => {
                    // The job stopped (Ctrl-Z): give the terminal back and stop too;
                    // `fg` sends SIGCONT, handled below.
                    drop(raw.take());
                    // SAFETY: stopping ourselves.
                    unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
                }
                ExecMsg::Exited {
                    status,
                    remote_us,
                    home_us,
                } => {
                    drop(raw.take());
                    return Ok(RunOutcome {
                        status,
                        job,
                        node,
                        remote_us,
                        home_us,
                    });
                }
                ExecMsg::Refused { text } => {
                    drop(raw.take());
                    bail!("{text}")
                }
                _ => {}
            }
        }
        let mut fds = vec![PollFd::new(s.as_fd(), PollFlags::POLLIN)];
        if let Some(f) = &sigfd {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
        }
        if stdin_open {
            fds.push(PollFd::new(stdin_fd, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("poll"),
        }
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (sock_ready, sig_ready) = (ready(0), sigfd.is_some() && ready(1));
        let stdin_ready = stdin_open && ready(fds.len() - 1);
        drop(fds);
        if sock_ready {
            match (&s).read(&mut buf) {
                Ok(0) => {
                    drop(raw.take());
                    bail!("the daemon closed the connection before job {job} ended (see its log)")
                }
                Ok(n) => fr.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("read from the daemon"),
            }
        }
        if sig_ready {
            if let Some(Ok(Some(si))) = sigfd.as_ref().map(|f| f.read_signal()) {
                let sig = si.ssi_signo as i32;
                match sig {
                    libc::SIGWINCH => {
                        if tty {
                            send(&s, &ExecMsg::Winsize(winsize(1)))?;
                        }
                    }
                    // Stop the job; its stop stops us.
                    libc::SIGTSTP => send(&s, &ExecMsg::Signal(libc::SIGSTOP))?,
                    libc::SIGCONT => {
                        if tty && raw.is_none() {
                            raw = Some(RawMode::enter()?);
                        }
                        send(&s, &ExecMsg::Signal(libc::SIGCONT))?;
                        if tty {
                            send(&s, &ExecMsg::Winsize(winsize(1)))?;
                        }
                    }
                    sig => send(&s, &ExecMsg::Signal(sig))?,
                }
            }
        }
        if stdin_ready {
            // SAFETY: reading into our own buffer from fd 0.
            let n = unsafe { libc::read(stdin_fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                send(&s, &ExecMsg::Stdin(buf[..n as usize].to_vec()))?;
            } else if n == 0
                || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                stdin_open = false;
                send(&s, &ExecMsg::StdinEof)?;
            }
        }
    }
    bail!("endless job")
}

#[derive(clap::Args)]
pub struct PsArgs {
    /// One JSON object: {"jobs":[…],"unreachable":[…]}.
    #[arg(long)]
    json: bool,
}

pub fn ps(a: PsArgs) -> Result<i32> {
    let ev = control::request(control::CONTROL_NAME, &Request::Ps, |_| {})?;
    let (jobs, unreachable) = match ev {
        Event::Jobs { jobs, unreachable } => (jobs, unreachable),
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    };
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "jobs": jobs, "unreachable": unreachable })
        );
        return Ok(0);
    }
    print!("{}", table(&jobs));
    for u in &unreachable {
        eprintln!("pmig: node {u} did not answer; its jobs are not listed");
    }
    Ok(0)
}

fn table(jobs: &[JobInfo]) -> String {
    let mut rows = vec![[
        "JOB".to_string(),
        "HOME".into(),
        "NODE".into(),
        "PID".into(),
        "UID".into(),
        "STATE".into(),
        "HISTORY".into(),
        "COMMAND".into(),
    ]];
    for j in jobs {
        rows.push([
            j.id.clone(),
            j.home.clone(),
            j.node.clone(),
            j.pid.to_string(),
            j.uid.to_string(),
            j.state.clone(),
            j.history.join("→"),
            j.argv.join(" "),
        ]);
    }
    let mut w = [0usize; 8];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i == 7 {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[derive(clap::Args)]
pub struct KillArgs {
    /// Signal name or number.
    #[arg(short, long, default_value = "TERM", value_name = "SIG")]
    signal: String,
    /// Job id (`pmig ps`), e.g. n1:17.
    job: String,
}

pub fn kill(a: KillArgs) -> Result<i32> {
    let signal = pmig_services::exec::parse_signal(&a.signal)?;
    let ev = control::request(
        control::CONTROL_NAME,
        &Request::Kill(KillRequest {
            job: a.job.clone(),
            signal,
        }),
        |_| {},
    )?;
    match ev {
        Event::Killed { node, .. } => {
            tracing::info!("job {} on {node}: signal {signal} sent", a.job);
            Ok(0)
        }
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}
