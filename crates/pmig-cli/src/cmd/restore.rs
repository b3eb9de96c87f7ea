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
    /// instead of ours. A pipe that moved with its unread bytes (its writers
    /// were gone) is the process's own input and is kept.
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
    /// input without `go` exits with status 3, having done nothing. `go
    /// verified` says that the image was verified just now by the one who
    /// wrote it (the manifest is still checked, the parts' checksums are not).
    #[arg(long)]
    wait_go: bool,
    /// Lazy restore for a total copy: once the process is complete, print
    /// the JSON line and keep it stopped until a line `release` on stdin
    /// (its pages have been provided through the userfaultfd by then); the
    /// process's own userfaultfd is then closed and it runs. Anything else,
    /// or end of input, kills it: nothing runs.
    #[arg(long, requires_all = ["lazy", "json"])]
    hold: bool,
    /// How much of the CPU the image was captured on this one must have:
    /// `features`, every instruction-set feature a program may pick its
    /// code by (AVX2, AVX-512, AES-NI, ...) and every FPU state component
    /// its threads hold; or `xsave`, only the state components. Default:
    /// $PMIG_CPU_CHECK, else `features`
    #[arg(long, value_name = "CHECK")]
    cpu_check: Option<pmig_engine::resources::cpu::CpuCheck>,
    /// Restore a skeleton (a capture made while the process still ran):
    /// once it is complete, print the JSON line and keep it stopped until a
    /// line `final DIR` (or `final-verified DIR`, an image its writer has
    /// just verified) names the image captured at the stop; then bring it
    /// up to that image and let it run, printing the JSON line again. A
    /// skeleton that cannot follow the process's changes is killed and
    /// `{"stale": WHY}` printed (exit status 4): restore DIR then. Anything
    /// else on stdin, or its end, kills it.
    #[arg(long, requires_all = ["json", "detach"], conflicts_with_all = ["hold", "wait_go"])]
    skeleton: bool,
}

/// Status of `--skeleton` when the skeleton could not be brought up.
const STALE: i32 = 4;

/// Status of `--wait-go` when no `go` came.
const NOT_STARTED: i32 = 3;

/// `--wait-go`: what came instead of `go`, if not `go`: None without it;
/// `go verified` (the daemon that started this restore has just verified
/// the image in its own staging directory) spares the second verification.
fn wait_for_go(input: &mut impl std::io::BufRead) -> Result<Option<pmig_engine::Verify>> {
    let mut line = String::new();
    input.read_line(&mut line).context("read stdin for go")?;
    Ok(match line.trim() {
        "go" => Some(pmig_engine::Verify::Check),
        "go verified" => Some(pmig_engine::Verify::AlreadyChecked),
        _ => None,
    })
}

/// Our stdin, moved off fd 0, which becomes /dev/null: fd 0 may be handed to
/// the restored process, and the pipe that carries `go` and `release` must
/// reach nothing restored (the new process closes every other fd).
fn take_stdin() -> Result<std::io::BufReader<std::fs::File>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let kept =
        nix::fcntl::fcntl(0, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3)).context("keep stdin")?;
    // SAFETY: `kept` is a new descriptor that nothing else owns.
    let kept = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(kept) });
    let null = std::fs::File::open("/dev/null").context("open /dev/null")?;
    nix::unistd::dup2(null.as_raw_fd(), 0).context("make /dev/null stdin")?;
    Ok(std::io::BufReader::new(kept))
}

pub fn run(a: Args) -> Result<i32> {
    let mut input = if a.wait_go || a.hold || a.skeleton {
        Some(take_stdin()?)
    } else {
        None
    };
    let verify = if a.wait_go {
        // While the image is still on its way: what the restore would
        // otherwise read while the process is stopped.
        pmig_engine::resources::tcb::learn_own_glibc();
        // And this CPU, which the preflight compares with the image's.
        pmig_engine::resources::cpu::CpuState::here();
        match wait_for_go(input.as_mut().expect("taken above"))? {
            Some(v) => v,
            None => {
                eprintln!("pmig: restore not started (no go on stdin)");
                return Ok(NOT_STARTED);
            }
        }
    } else {
        pmig_engine::Verify::Check
    };
    let opts = pmig_engine::RestoreOptions {
        stdio: [a.stdin.clone(), a.stdout.clone(), a.stderr.clone()],
        pidfile: a.pidfile.clone(),
        lazy: a.lazy,
        skeleton: a.skeleton,
        cpu_check: match (a.cpu_check, std::env::var("PMIG_CPU_CHECK")) {
            (Some(c), _) => c,
            (None, Ok(v)) => v
                .parse()
                .map_err(|e| anyhow::anyhow!("PMIG_CPU_CHECK: {e}"))?,
            (None, Err(_)) => Default::default(),
        },
    };
    if a.skeleton {
        return skeleton(&a, &opts, input.as_mut().expect("taken above"));
    }
    let mut release = |r: &pmig_engine::Restored| -> pmig_engine::Result<()> {
        print_json(r, true);
        let mut line = String::new();
        let input = input.as_mut().expect("taken above");
        let got = std::io::BufRead::read_line(input, &mut line);
        match got {
            Ok(_) if line.trim() == "release" => Ok(()),
            Ok(_) => Err(pmig_engine::EngineError::Other(
                "the held process was not released (no release on stdin): killed".into(),
            )),
            Err(e) => Err(pmig_engine::EngineError::Other(format!(
                "read stdin for release: {e}"
            ))),
        }
    };
    let r = pmig_engine::restore_held_with(
        &a.dir,
        &opts,
        if a.hold { Some(&mut release) } else { None },
        verify,
    )?;
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
        print_json(&r, false);
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

/// `--skeleton`: restores the skeleton, waits for `final DIR`, brings it up.
fn skeleton(
    a: &Args,
    opts: &pmig_engine::RestoreOptions,
    input: &mut std::io::BufReader<std::fs::File>,
) -> Result<i32> {
    let mut bring = |r: &pmig_engine::Restored| -> pmig_engine::Result<_> {
        print_json(r, true);
        let mut line = String::new();
        std::io::BufRead::read_line(input, &mut line)
            .map_err(|e| pmig_engine::EngineError::Other(format!("read stdin: {e}")))?;
        let line = line.trim_end_matches('\n');
        Ok(if let Some(d) = line.strip_prefix("final-verified ") {
            Some((PathBuf::from(d), pmig_engine::Verify::AlreadyChecked))
        } else {
            line.strip_prefix("final ")
                .map(|d| (PathBuf::from(d), pmig_engine::Verify::Check))
        })
    };
    match pmig_engine::restore_skeleton(&a.dir, opts, pmig_engine::Verify::Check, &mut bring) {
        Ok(r) => {
            print_json(&r, false);
            pmig_engine::timing::mark("restore: reported");
            Ok(0)
        }
        Err(pmig_engine::EngineError::Stale(why)) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", serde_json::json!({ "stale": why }));
            let _ = out.flush();
            Ok(STALE)
        }
        Err(e) => Err(e.into()),
    }
}

/// The JSON line of `--json`; `held`: printed while the process is still
/// held (`--hold`), before it runs.
fn print_json(r: &pmig_engine::Restored, held: bool) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::json!({
            "pid": r.pid, "original_pid": r.original_pid, "threads": r.threads,
            "verify_ms": r.verify.as_secs_f64() * 1e3, "total_ms": r.total.as_secs_f64() * 1e3,
            "uffd_fd": r.uffd_fd_in_process,
            "session": r.session,
            "resumed_ns": r.resumed_ns,
            "ids": r.ids,
            "tids": r.tids,
            "sysv_made": r.sysv_made,
            "held": held,
        })
    );
    let _ = out.flush();
}
