//! Starting a job on this node: a new session, the caller's credentials, env and cwd,
//! and either a pty (the slave as controlling terminal and stdio) or three pipes.
//!
//! With a pty the command must not be a session leader: the kernel discards the
//! terminal's SIGTSTP for an orphaned process group, and a session leader's group is
//! always orphaned (its parent, the daemon, is in another session). So the process we
//! spawn is a small **session keeper**: it becomes session leader with the pty as its
//! controlling terminal, forks the command into a process group of its own, makes that
//! group the terminal's foreground group, and then only mirrors the command: when the
//! command stops, it stops itself (SIGSTOP, which an orphaned group still obeys) so the
//! daemon sees the stop; when the command ends, it ends the same way. Everything it
//! runs between fork and exec is async-signal-safe system calls (no allocation).

use super::{io_err, ExecError, ExecHost, Result, Start};
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

pub(crate) enum JobIo {
    Pty(OwnedFd),
    Pipes {
        stdin: File,
        stdout: File,
        stderr: File,
    },
}

pub(crate) struct Spawned {
    /// The process the daemon waits for: the session keeper (pty) or the command.
    pub child: Child,
    /// The command's process group (= its pid).
    pub pgid: i32,
    pub io: JobIo,
}

const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

fn set_cloexec(fd: &OwnedFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| ExecError::Refused(format!("{what} contains a NUL byte")))
}

/// Starts the job described by `s`. The caller waits for `child` and releases it.
pub(crate) fn spawn(host: &dyn ExecHost, s: &Start) -> Result<Spawned> {
    let Some(prog) = s.argv.first() else {
        return Err(ExecError::Refused("no command given".into()));
    };
    let node = host.node().to_string();
    if !std::path::Path::new(&s.cwd).is_dir() {
        return Err(ExecError::Refused(format!(
            "working directory {} does not exist on {node}",
            s.cwd
        )));
    }
    let cwd = cstring("the working directory", &s.cwd)?;
    for a in &s.argv {
        cstring("an argument", a)?;
    }
    let groups: Vec<libc::gid_t> = s.groups.clone();
    let (uid, gid) = (s.uid, s.gid);
    let mut cmd = Command::new(prog);
    cmd.args(&s.argv[1..]).env_clear();
    for (k, v) in &s.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            continue;
        }
        cmd.env(k, v);
    }
    // Where the job runs and which job it is (the carried environment may name the
    // home node: these win). pmake's recipes and the tests read them.
    cmd.env("PMIG_NODE", &node).env("PMIG_JOB", &s.job);
    let pty = match s.tty {
        Some(w) => {
            let ws = nix::pty::Winsize {
                ws_row: w.rows,
                ws_col: w.cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            let p =
                nix::pty::openpty(Some(&ws), None).map_err(|e| io_err("open a pty")(e.into()))?;
            set_cloexec(&p.master);
            set_cloexec(&p.slave);
            let dup = |f: &OwnedFd| -> Result<Stdio> {
                Ok(Stdio::from(
                    f.try_clone().map_err(io_err("duplicate the pty slave"))?,
                ))
            };
            cmd.stdin(dup(&p.slave)?)
                .stdout(dup(&p.slave)?)
                .stderr(dup(&p.slave)?);
            Some(p)
        }
        None => {
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            None
        }
    };
    // The session keeper reports the command's pid through this pipe.
    let (pid_rd, pid_wr) = if pty.is_some() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| io_err("create a pipe")(e.into()))?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let pid_wr_fd = pid_wr.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
    let with_pty = pty.is_some();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls on values prepared before the fork.
    unsafe {
        cmd.pre_exec(move || child_setup(with_pty, uid, gid, &groups, &cwd, pid_wr_fd));
    }
    let child = host
        .spawn_owned(&mut cmd)
        .map_err(|e| ExecError::Refused(format!("cannot run `{prog}` on {node}: {e}")))?;
    drop(pid_wr);
    let pgid = match pid_rd {
        Some(r) => {
            let mut b = [0u8; 4];
            let mut f = File::from(r);
            match f.read_exact(&mut b) {
                Ok(()) => i32::from_ne_bytes(b),
                Err(e) => {
                    let pid = child.id() as i32;
                    // SAFETY: killing the session keeper we just started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
                    host.release(pid);
                    return Err(io_err(format!("start `{prog}` on {node}"))(e));
                }
            }
        }
        None => child.id() as i32,
    };
    let mut child = child;
    let io = match pty {
        Some(p) => JobIo::Pty(p.master),
        None => {
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(ExecError::Refused("pipes missing".into()));
            };
            JobIo::Pipes {
                stdin: File::from(OwnedFd::from(stdin)),
                stdout: File::from(OwnedFd::from(stdout)),
                stderr: File::from(OwnedFd::from(stderr)),
            }
        }
    };
    Ok(Spawned { child, pgid, io })
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Runs in the forked child, before exec. Only async-signal-safe calls.
fn child_setup(
    pty: bool,
    uid: u32,
    gid: u32,
    groups: &[libc::gid_t],
    cwd: &CString,
    pid_wr: i32,
) -> std::io::Result<()> {
    // SAFETY: plain system calls on integers and on memory allocated before the fork.
    unsafe {
        if libc::setsid() < 0 {
            return Err(last_err());
        }
        if pty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(last_err());
        }
        if libc::setgroups(groups.len(), groups.as_ptr()) < 0
            || libc::setgid(gid) < 0
            || libc::setuid(uid) < 0
        {
            return Err(last_err());
        }
        if libc::chdir(cwd.as_ptr()) < 0 {
            return Err(last_err());
        }
        if !pty {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            return Ok(());
        }
        let pid = libc::fork();
        if pid < 0 {
            return Err(last_err());
        }
        if pid == 0 {
            // The command: its own process group, the terminal's foreground group.
            libc::setpgid(0, 0);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTTOU);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::tcsetpgrp(0, libc::getpid());
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            return Ok(());
        }
        keeper(pid, pid_wr)
    }
}

/// The session keeper: never returns.
///
/// # Safety
/// Only in the forked child of [`child_setup`].
unsafe fn keeper(cmd: i32, pid_wr: i32) -> ! {
    libc::setpgid(cmd, cmd);
    let b = cmd.to_ne_bytes();
    libc::write(pid_wr, b.as_ptr().cast(), 4);
    // Nothing of the daemon's stays open here (std's exec-error pipe included).
    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    ignore_job_control_signals();
    loop {
        let mut st = 0;
        let r = libc::waitpid(cmd, &mut st, libc::WUNTRACED);
        if r < 0 {
            if *libc::__errno_location() == libc::EINTR {
                continue;
            }
            libc::_exit(255);
        }
        if libc::WIFSTOPPED(st) {
            // Mirror the stop; the daemon continues us (and the command) with SIGCONT.
            libc::kill(libc::getpid(), libc::SIGSTOP);
        } else if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            mirror_end(st);
        }
    }
}

/// Makes `cmd` (the destination's `pmig restore` of a job that had a pty) run inside
/// a new session on the new pty, under a session keeper that adopts the restored
/// process:
///
/// * the spawned process **P** (which the strategies wait for and whose stdout they
///   read) forks the keeper **K**, then waits for the restore's exit status from K
///   (on a pipe only K writes to: if K dies, P reads EOF) and ends with it;
/// * **K** makes a new session with `slave` as its controlling terminal, becomes a
///   child subreaper, reports its pid (`pid_wr`), and forks **R**, which puts itself in
///   a process group of its own, makes it the terminal's foreground group and execs
///   `pmig restore`. The restored process is created in R's session and group; when R
///   exits (`--detach`) it becomes K's child, and K mirrors its stops and its end as
///   the keeper of [`spawn`] does. R's group has its parent K in the same session, so
///   it is not orphaned and Ctrl-Z works.
pub(crate) fn restore_in_session(cmd: &mut Command, slave: i32, pid_wr: i32) {
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls on integers.
    unsafe {
        cmd.pre_exec(move || restore_setup(slave, pid_wr));
    }
}

/// Closes every descriptor but `keep`.
///
/// # Safety
/// Only in a forked child that owns nothing else.
unsafe fn close_all_but(keep: i32) {
    if keep > 0 {
        libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
    }
    libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
}

fn restore_setup(slave: i32, pid_wr: i32) -> std::io::Result<()> {
    // SAFETY: plain system calls in the forked child (see `restore_in_session`).
    unsafe {
        let mut st = [0i32; 2];
        if libc::pipe2(st.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            return Err(last_err());
        }
        let (status_rd, status_wr) = (st[0], st[1]);
        let k = libc::fork();
        if k < 0 {
            return Err(last_err());
        }
        if k > 0 {
            // P: end with the restore's status.
            close_all_but(status_rd);
            let mut b = [0u8; 4];
            let mut got = 0usize;
            while got < 4 {
                let n = libc::read(status_rd, b.as_mut_ptr().add(got).cast(), 4 - got);
                if n > 0 {
                    got += n as usize;
                } else if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                } else {
                    libc::_exit(1);
                }
            }
            libc::_exit(i32::from_ne_bytes(b));
        }
        // K: the session keeper.
        if libc::setsid() < 0 || libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0 {
            libc::_exit(1);
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let me = libc::getpid().to_ne_bytes();
        libc::write(pid_wr, me.as_ptr().cast(), 4);
        let r = libc::fork();
        if r < 0 {
            libc::_exit(1);
        }
        if r == 0 {
            // R: `pmig restore`, in the terminal's foreground group.
            libc::setpgid(0, 0);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTTOU);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::tcsetpgrp(slave, libc::getpid());
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            return Ok(());
        }
        libc::setpgid(r, r);
        close_all_but(status_wr);
        ignore_job_control_signals();
        restore_keeper(r, status_wr)
    }
}

/// # Safety
/// Only in a forked child.
unsafe fn ignore_job_control_signals() {
    for s in [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        libc::signal(s, libc::SIG_IGN);
    }
}

/// Ends the calling process the way a child ended (exit code, or the same signal
/// without a core file).
///
/// # Safety
/// Only in a forked child.
unsafe fn mirror_end(st: i32) -> ! {
    if libc::WIFEXITED(st) {
        libc::_exit(libc::WEXITSTATUS(st));
    }
    let sig = libc::WTERMSIG(st);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    libc::setrlimit(libc::RLIMIT_CORE, &no_core);
    libc::signal(sig, libc::SIG_DFL);
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, sig);
    libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    libc::kill(libc::getpid(), sig);
    libc::_exit(128 + sig)
}

/// The keeper of a restored job: reports R's status to P, then mirrors the adopted
/// job process.
///
/// # Safety
/// Only in the forked child of [`restore_setup`].
unsafe fn restore_keeper(r: i32, status_wr: i32) -> ! {
    let mut status_wr = status_wr;
    loop {
        let mut st = 0;
        let pid = libc::waitpid(-1, &mut st, libc::WUNTRACED);
        if pid < 0 {
            if *libc::__errno_location() == libc::EINTR {
                continue;
            }
            // No child left: the restore made no process, or it is gone.
            libc::_exit(255);
        }
        if pid == r {
            if libc::WIFSTOPPED(st) {
                continue;
            }
            let code = if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                128 + libc::WTERMSIG(st)
            };
            if status_wr >= 0 {
                let b = code.to_ne_bytes();
                libc::write(status_wr, b.as_ptr().cast(), 4);
                libc::close(status_wr);
                status_wr = -1;
            }
            if code != 0 {
                libc::_exit(code);
            }
            continue;
        }
        if libc::WIFSTOPPED(st) {
            libc::kill(libc::getpid(), libc::SIGSTOP);
        } else if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            mirror_end(st);
        }
    }
}

/// A second handle on the pty master, as a file.
pub(crate) fn dup_file(fd: &OwnedFd) -> Result<File> {
    Ok(File::from(
        fd.try_clone().map_err(io_err("duplicate the pty master"))?,
    ))
}
