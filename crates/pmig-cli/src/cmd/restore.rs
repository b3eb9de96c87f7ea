use anyhow::{Context, Result};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Image directory written by `pmig dump`.
    #[arg(long)]
    dir: PathBuf,
    /// Return once the process runs instead of waiting for it to exit.
    #[arg(long)]
    detach: bool,
    /// Write the restored process's pid to this file.
    #[arg(long)]
    pidfile: Option<PathBuf>,
    /// Connect the process's stdin (if it was a terminal or pipe) to this file
    /// instead of ours.
    #[arg(long)]
    stdin: Option<PathBuf>,
    /// Same for stdout.
    #[arg(long)]
    stdout: Option<PathBuf>,
    /// Same for stderr.
    #[arg(long)]
    stderr: Option<PathBuf>,
    /// Say what was restored on stderr.
    #[arg(long)]
    report: bool,
    /// Print what was restored as one JSON line on stdout (before waiting).
    #[arg(long)]
    json: bool,
    /// Post-copy: private anonymous pages missing from the image are left
    /// missing; the process keeps a userfaultfd (its number is printed with
    /// --json) through which a page server must provide them. Needs --detach.
    #[arg(long, requires = "detach")]
    lazy: bool,
    /// Start, then wait for a line `go` on stdin before reading the image (a
    /// daemon starts the restore while the image is still on its way). End of
    /// input without `go` exits with status 3, having done nothing.
    #[arg(long)]
    wait_go: bool,
}

/// Status of `--wait-go` when no `go` came.
const NOT_STARTED: i32 = 3;

/// `--wait-go`: true once `go` was read. Stdin is then /dev/null, so the pipe
/// that carried `go` reaches nothing restored.
fn wait_for_go() -> Result<bool> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("read stdin for go")?;
    if line.trim() != "go" {
        return Ok(false);
    }
    let null = std::fs::File::open("/dev/null").context("open /dev/null")?;
    nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0).context("make /dev/null stdin")?;
    Ok(true)
}

pub fn run(a: Args) -> Result<i32> {
    if a.wait_go && !wait_for_go()? {
        eprintln!("pmig: restore not started (no go on stdin)");
        return Ok(NOT_STARTED);
    }
    let opts = pmig_engine::RestoreOptions {
        stdio: [a.stdin.clone(), a.stdout.clone(), a.stderr.clone()],
        pidfile: a.pidfile.clone(),
        lazy: a.lazy,
    };
    let r = pmig_engine::restore(&a.dir, &opts)?;
    if r.pid != r.original_pid {
        eprintln!(
            "pmig: pid {} was taken; process restored as pid {}",
            r.original_pid, r.pid
        );
    }
    if let Some(s) = &r.session {
        // A job that had a controlling terminal and lost it is worth a line
        // even without --report (Ctrl-C no longer reaches it).
        if s.session_leader && s.ctty.is_none() {
            if let Some(n) = &s.note {
                eprintln!("pmig: process {}: {n}", r.pid);
            }
        }
    }
    if a.report {
        eprintln!(
            "pmig: restored pid {} ({} threads) in {:.1} ms (verify {:.1} ms)",
            r.pid,
            r.threads,
            r.total.as_secs_f64() * 1e3,
            r.verify.as_secs_f64() * 1e3
        );
        if let Some(s) = &r.session {
            eprintln!(
                "pmig: session {} (leader: {}), process group {}, controlling terminal {}{}{}",
                s.sid,
                if s.session_leader { "yes" } else { "no" },
                s.pgid,
                s.ctty.as_deref().unwrap_or("none"),
                if s.foreground {
                    ", in the foreground"
                } else {
                    ""
                },
                s.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "pid": r.pid, "original_pid": r.original_pid, "threads": r.threads,
                "verify_ms": r.verify.as_secs_f64() * 1e3, "total_ms": r.total.as_secs_f64() * 1e3,
                "uffd_fd": r.uffd_fd_in_process,
                "session": r.session,
            })
        );
    }
    pmig_engine::timing::mark("restore: reported");
    if a.detach {
        return Ok(0);
    }
    loop {
        match waitpid(Pid::from_raw(r.pid), None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("wait for the restored process"),
        }
    }
}
