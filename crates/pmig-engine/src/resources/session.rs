//! Session, process group and controlling terminal.
//!
//! What is kept, and how:
//!
//! * A **session leader** (sid = pid, the way `pmig run` and `setsid` start
//!   jobs) is restored as the leader of a new session: the restored process
//!   calls `setsid()` before it resumes, so its sid and pgid equal its (new)
//!   pid, whatever that pid is.
//! * If its **controlling terminal** was also its stdio (fd 0, 1 or 2) and
//!   the restore connects one of those fds to a terminal (`--stdin` /
//!   `--stdout` / `--stderr` naming a pty slave, or `pmig restore`'s own fds),
//!   that terminal becomes its controlling terminal (`TIOCSCTTY`), its
//!   process group the terminal's foreground group (`TIOCSPGRP`), and the
//!   terminal gets the modes the old one had (`TCSETS`: raw or cooked, echo,
//!   special characters). Ctrl-C on the new terminal then reaches it.
//! * Without a terminal to take (stdio restored to files or pipes, the
//!   terminal is `pmig restore`'s own controlling terminal, or the old one
//!   was not its stdio) it is restored as a session leader **without** a
//!   controlling terminal, and the restore report says why. Not an error.
//! * A process that is **not a session leader** keeps the behaviour of
//!   images without this part: it joins the session and process group of
//!   `pmig restore` (and so shares its controlling terminal, if any). Its
//!   old sid and pgid are recorded but not recreated: a process cannot join
//!   a session other than by creating one.
//!
//! Refused at dump (one line, the process untouched):
//!
//! * a session leader whose session holds other live processes: they would
//!   stay behind in a session whose leader is gone (when the leader dies
//!   with a controlling terminal, the kernel hangs it up and sends SIGHUP to
//!   its foreground group), and the restored leader would no longer reach
//!   them with `kill(0, ..)` or job control;
//! * a session leader whose controlling terminal is its stdio but whose
//!   process group is not that terminal's foreground group: the foreground
//!   group belongs to no process that migrates, and a new controlling
//!   terminal always starts with the leader's group in the foreground.
//!
//! Other processes sharing the process group or session of a process that
//! is *not* a session leader are not a reason to refuse: such a process
//! leaves its group on every restore anyway (see above).

use super::{Capture, Finish, PlanCx, Preflight, Resource};
use crate::error::{unsupported, EngineError, Result};
use crate::procfs;
use libc::pid_t;
use pmig_restorer::{Arg, Check};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

pub struct Session;

/// Size of the kernel's `struct termios` (TCGETS/TCSETS on x86_64).
pub const KERNEL_TERMIOS_LEN: usize = 36;

/// The controlling terminal at dump time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ctty {
    /// Device number as in /proc/PID/stat `tty_nr`.
    pub tty_nr: u64,
    /// Which of fds 0, 1, 2 were this terminal (empty: it was not stdio).
    pub stdio_fds: Vec<i32>,
    /// The process's group was the terminal's foreground group.
    pub foreground: bool,
    /// The terminal's modes (kernel `struct termios`), read through the
    /// first of `stdio_fds`; empty when it was not stdio.
    pub termios: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    pub pid: pid_t,
    pub sid: pid_t,
    pub pgid: pid_t,
    /// Foreground process group of the controlling terminal (stat `tpgid`),
    /// -1 without one.
    pub tpgid: pid_t,
    pub ctty: Option<Ctty>,
}

impl SessionState {
    pub fn session_leader(&self) -> bool {
        self.sid == self.pid
    }
    pub fn group_leader(&self) -> bool {
        self.pgid == self.pid
    }
}

/// What the restore will do about the controlling terminal (decided in
/// preflight, where the files the new process gets are open).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CttyPlan {
    /// The fd (0, 1 or 2) of the new process to make its controlling
    /// terminal; None: restore without one.
    pub fd: Option<i32>,
    /// Why there is none (when the process had one).
    pub why_not: Option<String>,
}

/// What the restored process got, for `pmig restore --json` / `--report`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionReport {
    /// It was a session leader at dump time (and is restored as one).
    pub session_leader: bool,
    pub sid: pid_t,
    pub pgid: pid_t,
    /// Path of its controlling terminal, if it has one.
    pub ctty: Option<String>,
    /// Its process group is the foreground group of that terminal.
    pub foreground: bool,
    /// Something that was not restored as it was, in one sentence.
    pub note: Option<String>,
}

/// (sid, pgid, tty_nr, tpgid) of `pid` from /proc/PID/stat.
fn stat_ids(pid: pid_t) -> Result<(pid_t, pid_t, u64, pid_t)> {
    let f = procfs::stat_fields(pid)?;
    let get = |n: usize| -> Result<i64> {
        f.get(n - 3)
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| EngineError::Other(format!("bad /proc/{pid}/stat field {n}")))
    };
    Ok((
        get(6)? as pid_t,
        get(5)? as pid_t,
        get(7)? as u64,
        get(8)? as pid_t,
    ))
}

/// (major, minor) encoded in a stat `tty_nr` (the kernel's new_encode_dev).
pub fn decode_tty_nr(nr: u64) -> (u32, u32) {
    (
        ((nr >> 8) & 0xfff) as u32,
        ((nr & 0xff) | ((nr >> 12) & 0xfff00)) as u32,
    )
}

fn is_device(md: &std::fs::Metadata, dev: (u32, u32)) -> bool {
    md.file_type().is_char_device()
        && libc::major(md.rdev()) == dev.0
        && libc::minor(md.rdev()) == dev.1
}

/// Which of fds 0..2 of `pid` are the terminal `tty_nr`.
fn stdio_on(pid: pid_t, tty_nr: u64) -> Vec<i32> {
    let dev = decode_tty_nr(tty_nr);
    (0..3)
        .filter(|fd| {
            std::fs::metadata(format!("/proc/{pid}/fd/{fd}"))
                .map(|md| is_device(&md, dev))
                .unwrap_or(false)
        })
        .collect()
}

/// The last look that found no other process in the session of a leader,
/// by process (pid and start time, so that a reused pid is another
/// process): the pid namespace's last pid read before it. At most
/// [`ALONE_KEPT`] processes are remembered.
static LAST_ALONE: std::sync::Mutex<Vec<((pid_t, u64), u64)>> = std::sync::Mutex::new(Vec::new());
const ALONE_KEPT: usize = 16;

#[cfg(test)]
thread_local! {
    /// Whether this thread's last [`session_members`] read only the
    /// processes made since a look that found none.
    static READ_SINCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Live processes other than `pid` in session `sid` (zombies do not count).
///
/// Every process's stat is read (about 3 µs each: 0.4–0.7 ms on the test
/// machine, where the check made again at the freeze held up the stop),
/// except after a look for the same process that found none: a process
/// enters a session only by being made in it (`setsid` makes a new one, and
/// a process group cannot move to another session), so a member since is a
/// process created since, with a pid above the namespace's last pid at that
/// look, and only those are read (as for the files a process must hold
/// alone, `holders`: not too many of them, no wrap-around, else every one
/// again).
fn session_members(pid: pid_t, sid: pid_t) -> Vec<pid_t> {
    let now = super::holders::last_pid();
    let process = super::holders::identity(pid);
    let then = process.and_then(|me| {
        let alone = LAST_ALONE.lock().unwrap_or_else(|e| e.into_inner());
        alone.iter().find(|(p, _)| *p == me).map(|&(_, then)| then)
    });
    let since = match (then, now) {
        (Some(then), Some(now)) => super::holders::created_since(then, now),
        _ => None,
    };
    #[cfg(test)]
    READ_SINCE.with(|r| r.set(since.is_some()));
    let member = |p: pid_t| {
        p != pid
            && procfs::stat_fields(p).is_ok_and(|f| {
                procfs::stat_field(&f, 6) as pid_t == sid
                    && !matches!(f.first().map(String::as_str), Some("Z" | "X"))
            })
    };
    let mut out: Vec<pid_t> = match since {
        // Processes only: a thread made since belongs to a process made
        // since (checked by its own pid) or to one the last look read.
        Some(pids) => pids
            .map(|p| p as pid_t)
            .filter(|&p| {
                let leads = match crate::sys::task_kind(p) {
                    crate::sys::TaskKind::Leader => true,
                    crate::sys::TaskKind::Unknown => procfs::tgid_of(p) == Some(p),
                    _ => false,
                };
                leads && member(p)
            })
            .collect(),
        None => {
            let Ok(rd) = std::fs::read_dir("/proc") else {
                return vec![];
            };
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<pid_t>().ok())
                .filter(|&p| member(p))
                .collect()
        }
    };
    out.sort();
    if out.is_empty() {
        if let (Some(now), Some(me)) = (now, process) {
            let mut alone = LAST_ALONE.lock().unwrap_or_else(|e| e.into_inner());
            alone.retain(|(p, _)| *p != me);
            if alone.len() >= ALONE_KEPT {
                alone.remove(0);
            }
            alone.push((me, now));
        }
    }
    out
}

impl Resource for Session {
    const PART: &'static str = "session";
    type State = SessionState;

    fn precheck(pid: pid_t) -> Result<()> {
        let (sid, pgid, tty_nr, tpgid) = stat_ids(pid)?;
        if sid != pid {
            return Ok(());
        }
        let others = session_members(pid, sid);
        if let Some(first) = others.first() {
            return Err(unsupported(
                pid,
                format!(
                    "a session leader with other processes in its session ({} more, e.g. pid {first}), which would be left behind",
                    others.len()
                ),
            ));
        }
        if tty_nr != 0 && tpgid != pgid && !stdio_on(pid, tty_nr).is_empty() {
            return Err(unsupported(
                pid,
                format!(
                    "a session leader in the background of its controlling terminal (foreground group {tpgid})"
                ),
            ));
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<SessionState> {
        let pid = cx.pid;
        let (sid, pgid, tty_nr, tpgid) = stat_ids(pid)?;
        let ctty = if tty_nr == 0 {
            None
        } else {
            let stdio_fds = stdio_on(pid, tty_nr);
            let mut termios = Vec::new();
            if let Some(&fd) = stdio_fds.first() {
                // Read the modes through the process's own fd (no open of
                // the terminal from outside).
                let s = cx.scratch()?;
                cx.call(
                    0,
                    libc::SYS_ioctl,
                    &[fd as u64, libc::TCGETS, s],
                    &format!("read the terminal modes of fd {fd}"),
                )?;
                termios = cx.read_mem(s, KERNEL_TERMIOS_LEN)?;
            }
            Some(Ctty {
                tty_nr,
                stdio_fds,
                foreground: tpgid == pgid,
                termios,
            })
        };
        Ok(SessionState {
            pid,
            sid,
            pgid,
            tpgid,
            ctty,
        })
    }

    fn preflight(s: &SessionState, pf: &mut Preflight) -> Result<()> {
        pf.ctty = ctty_plan(s, pf);
        Ok(())
    }

    fn plan(s: &SessionState, cx: &mut PlanCx) -> Result<()> {
        if !s.session_leader() {
            return Ok(());
        }
        let b = &mut *cx.b;
        b.syscall(
            0,
            libc::SYS_setsid,
            &[],
            Check::NonNeg,
            "become a session leader (setsid)",
        );
        let (Some(fd), Some(c)) = (cx.pf.ctty.fd, &s.ctty) else {
            return Ok(());
        };
        // The terminal may turn out to be another session's controlling
        // terminal (which preflight cannot see): then these calls fail, the
        // process goes on without one, and the report says so (see
        // `report`), as for a restore without a terminal. The modes are
        // still set on it: the user named it as the process's terminal.
        b.syscall(
            0,
            libc::SYS_ioctl,
            &[fd.into(), libc::TIOCSCTTY.into(), 0u64.into()],
            Check::None,
            format!("make fd {fd} the controlling terminal"),
        );
        if c.foreground {
            let slot = b.slot(4);
            b.syscall(
                0,
                libc::SYS_ioctl,
                &[fd.into(), libc::TIOCSPGRP.into(), Arg::PidAt(slot)],
                Check::None,
                "put the process group in the terminal's foreground",
            );
        }
        if c.termios.len() == KERNEL_TERMIOS_LEN {
            let t = b.data(&c.termios);
            b.syscall(
                0,
                libc::SYS_ioctl,
                &[fd.into(), libc::TCSETS.into(), t.into()],
                Check::None,
                "set the terminal modes",
            );
        }
        Ok(())
    }

    fn finish(s: &SessionState, cx: &mut Finish) -> Result<()> {
        if s.session_leader() {
            let (sid, ..) = stat_ids(cx.pid)?;
            if sid != cx.pid {
                return Err(EngineError::Restore(format!(
                    "process {} should lead its own session but is in session {sid}",
                    cx.pid
                )));
            }
        }
        Ok(())
    }
}

/// Our own controlling terminal's device, if any.
fn own_ctty() -> Option<(u32, u32)> {
    let (_, _, nr, _) = stat_ids(std::process::id() as pid_t).ok()?;
    (nr != 0).then(|| decode_tty_nr(nr))
}

/// Decide which fd of the new process becomes its controlling terminal,
/// from the files `Files::preflight` prepared.
fn ctty_plan(s: &SessionState, pf: &Preflight) -> CttyPlan {
    let Some(c) = s.ctty.as_ref().filter(|_| s.session_leader()) else {
        return CttyPlan::default();
    };
    let no = |why: &str| CttyPlan {
        fd: None,
        why_not: Some(why.to_string()),
    };
    if c.stdio_fds.is_empty() {
        return no("its controlling terminal was not its stdio");
    }
    let mut ours = false;
    for &fd in &c.stdio_fds {
        let Some(&(src, ..)) = pf.child.installs.iter().find(|i| i.1 == fd) else {
            continue;
        };
        // SAFETY: fstat on a helper fd the preflight keeps open, into a
        // zeroed struct we own.
        let md = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            (libc::fstat(src, &mut st) == 0).then_some(st)
        };
        let Some(md) = md else { continue };
        // SAFETY: isatty on an fd we keep open.
        if md.st_mode & libc::S_IFMT != libc::S_IFCHR || unsafe { libc::isatty(src) } != 1 {
            continue;
        }
        let dev = (libc::major(md.st_rdev), libc::minor(md.st_rdev));
        if own_ctty() == Some(dev) {
            // Taking it would need stealing it from our own session.
            ours = true;
            continue;
        }
        return CttyPlan {
            fd: Some(fd),
            why_not: None,
        };
    }
    if ours {
        no("its terminal is pmig restore's own controlling terminal")
    } else {
        no("the restore gave it no terminal on fds 0-2")
    }
}

/// What the restored process (stopped, at the end of the plan) got.
pub fn report(s: &SessionState, pid: pid_t, pf: &Preflight) -> Result<SessionReport> {
    let (sid, pgid, tty_nr, tpgid) = stat_ids(pid)?;
    let ctty = (tty_nr != 0).then(|| {
        stdio_on(pid, tty_nr)
            .first()
            .and_then(|fd| procfs::readlink(pid, &format!("fd/{fd}")).ok())
            .unwrap_or_else(|| {
                let (ma, mi) = decode_tty_nr(tty_nr);
                format!("device {ma}:{mi}")
            })
    });
    let mut note = None;
    if s.session_leader() {
        if let Some(c) = &s.ctty {
            if tty_nr == 0 {
                let why = pf.ctty.why_not.clone().unwrap_or_else(|| {
                    "the terminal would not become its controlling terminal (another session's?)"
                        .into()
                });
                note = Some(format!("restored without a controlling terminal: {why}"));
            } else if c.foreground && tpgid != pgid {
                note = Some(format!(
                    "not in the foreground of its terminal (foreground group {tpgid})"
                ));
            }
        }
    } else {
        note = Some(format!(
            "not a session leader: joined pmig restore's session {sid} (was {})",
            s.sid
        ));
    }
    Ok(SessionReport {
        session_leader: s.session_leader(),
        sid,
        pgid,
        ctty,
        foreground: tty_nr != 0 && tpgid == pgid,
        note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaders_session_is_read_again_only_for_the_processes_made_since() {
        use std::io::{BufRead, Write};
        use std::process::{Command, Stdio};
        use std::time::{Duration, Instant};
        // A session leader (setsid runs in the process: it leads no group)
        // that, a line at a time, makes a thread, then a child.
        let script = "import os,sys,threading,time\n\
            sys.stdin.readline()\n\
            threading.Thread(target=time.sleep,args=(30,),daemon=True).start()\n\
            print('thread',flush=True)\n\
            sys.stdin.readline()\n\
            if os.fork()==0:\n    time.sleep(30)\n    os._exit(0)\n\
            print('child',flush=True)\n\
            time.sleep(30)\n";
        let mut leader = crate::image::tests_support::Reaped(
            Command::new("setsid")
                .args(["python3", "-c", script])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let pid = leader.pid();
        let mut to = leader.0.stdin.take().unwrap();
        let mut from = std::io::BufReader::new(leader.0.stdout.take().unwrap());
        let mut said = |what: &str| {
            to.write_all(b"go\n").unwrap();
            let mut l = String::new();
            from.read_line(&mut l).unwrap();
            assert_eq!(l.trim(), what);
        };
        let end = Instant::now() + Duration::from_secs(10);
        while stat_ids(pid).map(|ids| ids.0).ok() != Some(pid) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stat_ids(pid).unwrap().0, pid, "not a session leader");
        // The first look reads every process.
        assert_eq!(session_members(pid, pid), Vec::<pid_t>::new());
        assert!(!READ_SINCE.with(|r| r.get()));
        // A thread made since is no other process.
        said("thread");
        assert_eq!(session_members(pid, pid), Vec::<pid_t>::new());
        assert!(READ_SINCE.with(|r| r.get()));
        // A child made since is one, found among the processes made since.
        said("child");
        let kids = crate::resources::process::children(pid);
        assert_eq!(kids.len(), 1);
        assert_eq!(session_members(pid, pid), kids);
        assert!(READ_SINCE.with(|r| r.get()));
    }

    #[test]
    fn decodes_tty_nr() {
        // /dev/pts/3: major 136, minor 3; /dev/pts/300: minor 300.
        assert_eq!(decode_tty_nr(136 << 8 | 3), (136, 3));
        let nr = (300 & 0xff) | (136 << 8) | ((300 & !0xff) << 12);
        assert_eq!(decode_tty_nr(nr), (136, 300));
    }

    #[test]
    fn own_stat_ids_are_consistent() {
        let me = std::process::id() as pid_t;
        let (sid, pgid, _, _) = stat_ids(me).unwrap();
        // SAFETY: plain queries of our own ids.
        unsafe {
            assert_eq!(sid, libc::getsid(0));
            assert_eq!(pgid, libc::getpgrp());
        }
    }

    #[test]
    fn non_leader_gets_no_ctty_plan() {
        let s = SessionState {
            pid: 10,
            sid: 5,
            pgid: 10,
            tpgid: 10,
            ctty: Some(Ctty {
                tty_nr: 136 << 8,
                stdio_fds: vec![0, 1, 2],
                foreground: true,
                termios: vec![],
            }),
        };
        let pf = Preflight::new(Default::default(), 2);
        assert_eq!(ctty_plan(&s, &pf), CttyPlan::default());
        let leader = SessionState { sid: 10, ..s };
        // No fds installed: no terminal to take.
        let p = ctty_plan(&leader, &pf);
        assert_eq!(p.fd, None);
        assert!(p.why_not.unwrap().contains("no terminal"));
    }
}
