//! Per-node pid namespaces of a local cluster ([`crate::ClusterOpts::pid_ns`]):
//! the init that is pid 1 of a node's namespace (`pmig cluster init`), and
//! running a command inside a node (`pmig cluster enter`).
//!
//! A node's init is started by `ip netns exec NS unshare --pid --ipc --fork
//! --mount-proc`, so it has the node's network namespace, a new pid namespace,
//! a new IPC namespace (System V IPC and POSIX message queues of its own, as
//! a separate machine has) and a mount namespace with that namespace's
//! `/proc`. Commands join all four from the init (`setns`) and fork, since a
//! new pid namespace applies to children only.

use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::sched::{setns, CloneFlags};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{execvp, fork, ForkResult};

/// Pid 1 of a node's pid namespace: makes the namespace's next pids start
/// after `last_pid` (each node its own range, so that a process moved in
/// keeps its ids: they are free there), says `ready` on stdout, then reaps
/// every orphan of the namespace until it is killed.
pub fn init(last_pid: u32) -> io::Result<std::convert::Infallible> {
    std::fs::write("/proc/sys/kernel/ns_last_pid", last_pid.to_string())?;
    let mut out = io::stdout();
    out.write_all(b"ready\n")?;
    out.flush()?;
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block().map_err(io::Error::from)?;
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = chld.wait();
    }
}

/// Runs `argv` in the namespaces of the node whose init is `init`, in
/// directory `wd`; returns its exit code (128 + signal if killed). The
/// command is killed if this process dies.
pub fn enter(init: i32, wd: &Path, argv: &[OsString]) -> io::Result<i32> {
    let Some(prog) = argv.first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command"))?;
    for (ns, flag) in [
        ("net", CloneFlags::CLONE_NEWNET),
        ("pid", CloneFlags::CLONE_NEWPID),
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let f = std::fs::File::open(format!("/proc/{init}/ns/{ns}"))?;
        setns(&f, flag).map_err(|e| {
            io::Error::other(format!("joining the {ns} namespace of process {init}: {e}"))
        })?;
    }
    // Joining a mount namespace moves to its root directory.
    std::env::set_current_dir(wd)?;
    // SAFETY: this process is single-threaded here (the CLI entry point has
    // started no threads), and the child only calls prctl and execvp, with
    // arguments prepared before the fork.
    match unsafe { fork() }.map_err(io::Error::from)? {
        ForkResult::Child => {
            // SAFETY: prctl(PR_SET_PDEATHSIG) with a valid signal number.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            let e = execvp(&cargs[0], &cargs).unwrap_err();
            let _ = writeln!(
                io::stderr(),
                "pmig cluster enter: cannot run {}: {e}",
                prog.to_string_lossy()
            );
            // SAFETY: _exit ends the child without running the parent's
            // exit handlers.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, c)) => return Ok(c),
                Ok(WaitStatus::Signaled(_, s, _)) => return Ok(128 + s as i32),
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        },
    }
}
