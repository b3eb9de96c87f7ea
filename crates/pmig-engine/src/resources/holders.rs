//! Files a process must hold alone to move: its pipes, unix socket pairs,
//! eventfds, epoll instances, timerfds, inotify instances and deleted
//! files. Moving one
//! that another process also holds would cut the channel between the two
//! (or, for a deleted file, make two files that drift apart), so such a
//! file is refused. This module finds the other holders for all these kinds in
//! one pass over every process's fd table ([`crate::procfs::other_holder`]);
//! the kinds' own modules say what makes another process's fd the same
//! file.
//!
//! The check runs before the freeze and again at the freeze (the precheck is
//! made twice). The second pass reads far less: after a pass that found no
//! other holder, a new holder can only be a process created since, and
//! every process created since has a pid above the pid namespace's last pid
//! at that pass (`/proc/sys/kernel/ns_last_pid`). So the second pass reads
//! the fd tables of those pids' processes only (this holder's own threads
//! among them are skipped), as long as the process holds no file of these
//! kinds that the clean pass did not cover. Not seen this way: an existing
//! process that in those few milliseconds (longer for pre-copy's rounds)
//! opened `/proc/PID/fd/N` of one of the pipes, took an fd with
//! `pidfd_getfd`, or received one over a unix socket from the process. On
//! a busy host, with more than a few hundred pids created in between, or
//! after a wrap-around of the pid counter, every process is read again.
//! So is every process when this one holds a named pipe ([`fifos`]): any
//! process may open one by its path at any time, as a writer to a
//! daemon's command pipe does.

use super::{epoll, eventfd, fifos, ghosts, inotify, pipes, socketpairs, timerfd};
use crate::error::{unsupported, Result};
use libc::pid_t;
use std::sync::Mutex;

/// The pipes (by inode), eventfds (by eventfd id), epolls, timerfds and
/// inotify instances (by fd) of one process, which it must hold alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldAlone {
    pub pipes: Vec<u64>,
    pub eventfds: Vec<u64>,
    pub epolls: Vec<i32>,
    /// Timerfds and inotify instances: another process's fd is one of them
    /// if it is the same open file (`kcmp`).
    pub by_file: Vec<i32>,
    /// Deleted files, by device and inode (see [`ghosts`]).
    pub ghosts: Vec<(u64, u64)>,
    /// Files locked with a lock their open file owns (`flock`, OFD; see
    /// [`super::locks`]), by fd and link: another process's fd is one of
    /// them if it is the same open file (`kcmp`).
    pub locked: Vec<(i32, String)>,
    /// Named pipes, by path, device and inode (see [`fifos`]).
    pub fifos: Vec<(String, u64, u64)>,
    /// Unix sockets, by inode (see [`socketpairs`]).
    pub sockets: Vec<u64>,
}

/// The kinds of file `HeldAlone::by_file` holds, by their fd link.
const BY_FILE: &[&str] = &[timerfd::LINK, inotify::LINK];

/// The last pass that found no other holder: for which process (pid and
/// start time, so that a reused pid is another process), what it covered,
/// and the pid namespace's last pid read before it.
struct Clean {
    process: (pid_t, u64),
    last_pid: u64,
    covered: HeldAlone,
}

impl Clean {
    /// Whether this pass covered `held` of `pid`: then only the processes
    /// created since need a look.
    fn covers(&self, process: (pid_t, u64), held: &HeldAlone) -> bool {
        self.process == process && held.covered_by(&self.covered)
    }
}

static LAST_CLEAN: Mutex<Option<Clean>> = Mutex::new(None);

/// The last pid allocated in this process's pid namespace.
pub(crate) fn last_pid() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A process's pid and start time (field 22 of its stat).
pub(crate) fn identity(pid: pid_t) -> Option<(pid_t, u64)> {
    Some((pid, crate::procfs::start_time(pid)?))
}

fn subset<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    a.iter().all(|x| b.contains(x))
}

impl HeldAlone {
    pub fn is_empty(&self) -> bool {
        self.pipes.is_empty()
            && self.eventfds.is_empty()
            && self.epolls.is_empty()
            && self.by_file.is_empty()
            && self.ghosts.is_empty()
            && self.locked.is_empty()
            && self.fifos.is_empty()
            && self.sockets.is_empty()
    }

    fn covered_by(&self, other: &HeldAlone) -> bool {
        subset(&self.pipes, &other.pipes)
            && subset(&self.eventfds, &other.eventfds)
            && subset(&self.epolls, &other.epolls)
            && subset(&self.by_file, &other.by_file)
            && subset(&self.ghosts, &other.ghosts)
            && subset(&self.locked, &other.locked)
            && subset(&self.fifos, &other.fifos)
            && subset(&self.sockets, &other.sockets)
    }

    /// Whether fd `fd` of process `other`, whose link is `link`, is one of
    /// these files of `pid`.
    fn holds(&self, pid: pid_t, other: pid_t, fd: i32, link: &str) -> bool {
        pipes::is_one_of(link, &self.pipes)
            || (!self.ghosts.is_empty() && ghosts::is_one_of(other, fd, link, &self.ghosts))
            || eventfd::is_one_of(other, fd, link, &self.eventfds)
            || epoll::is_one_of(pid, other, fd, link, &self.epolls)
            || (BY_FILE.contains(&link)
                && self
                    .by_file
                    .iter()
                    .any(|&f| crate::sys::same_file_of(pid, f, other, fd) == Some(true)))
            || self.locked.iter().any(|(f, l)| {
                l == link && crate::sys::same_file_of(pid, *f, other, fd) == Some(true)
            })
            || fifos::is_one_of(other, fd, link, &self.fifos)
            || socketpairs::is_one_of(link, &self.sockets)
    }

    /// Refuses these files of `pid` if another process holds one of them.
    /// Reads every process's fd table, or, after a clean pass for `pid`
    /// that covered them, only those of the processes created since (see
    /// the module's documentation).
    pub fn refuse_shared(&self, pid: pid_t) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let now = last_pid();
        let process = identity(pid);
        let since = {
            let clean = LAST_CLEAN.lock().unwrap_or_else(|e| e.into_inner());
            match (clean.as_ref(), now, process) {
                (Some(c), Some(now), Some(p)) if c.covers(p, self) && self.fifos.is_empty() => {
                    created_since(c.last_pid, now)
                }
                _ => None,
            }
        };
        let holds = |other, fd, link: &str| self.holds(pid, other, fd, link);
        let found = match since {
            Some(pids) => holder_among(pid, pids, holds),
            None => crate::procfs::other_holder(pid, holds),
        };
        let Some((other, link)) = found else {
            if let (Some(last_pid), Some(process)) = (now, process) {
                *LAST_CLEAN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Clean {
                    process,
                    last_pid,
                    covered: self.clone(),
                });
            }
            return Ok(());
        };
        let what = if self.locked.iter().any(|(_, l)| *l == link) {
            format!(
                "a lock on an open file another process shares ({link}, also held by pid {other})"
            )
        } else if link == eventfd::LINK {
            format!("an eventfd shared with another process (also held by pid {other})")
        } else if link == timerfd::LINK {
            format!("a timerfd shared with another process (also held by pid {other})")
        } else if link == inotify::LINK {
            format!("an inotify instance shared with another process (also held by pid {other})")
        } else if ghosts::deleted_path(&link).is_some() {
            format!("a deleted file shared with another process ({link}, also held by pid {other})")
        } else if self.fifos.iter().any(|(p, ..)| *p == link) {
            format!("a named pipe shared with another process ({link}, also held by pid {other})")
        } else if link == epoll::LINK {
            format!("an epoll shared with another process (also held by pid {other})")
        } else {
            format!("a pipe shared with another process ({link}, also held by pid {other})")
        };
        Err(unsupported(pid, what))
    }
}

/// The most pids created since a clean pass that are checked one by one;
/// beyond, the whole fd table of every process is read again.
const MAX_NEW_PIDS: u64 = 256;

/// The pids this namespace allocated after `then` up to `now`, if they can
/// be checked one by one: not too many, no wrap-around, and `/proc` is this
/// pid namespace's (the holder may have joined another mount namespace).
pub(crate) fn created_since(then: u64, now: u64) -> Option<std::ops::RangeInclusive<u64>> {
    let me = std::process::id().to_string();
    let proc_is_ours = std::fs::read_link("/proc/self").is_ok_and(|l| l.as_os_str() == me.as_str());
    (now >= then && now - then <= MAX_NEW_PIDS && proc_is_ours).then_some(then + 1..=now)
}

/// The first process among `pids` (threads count as their process) other
/// than `pid` and this one with an fd that `holds` accepts. A pid already
/// gone again is skipped: its fds are closed, and any process it created
/// has a pid in the range too.
///
/// The processes among them come first; then the threads, each of which
/// names its process, unless it is one of a process already checked
/// (listed with a read of each such process's task directory): a restored
/// program's threads, say, where learning each one's process would read
/// its status.
fn holder_among(
    pid: pid_t,
    pids: std::ops::RangeInclusive<u64>,
    mut holds: impl FnMut(pid_t, i32, &str) -> bool,
) -> Option<(pid_t, String)> {
    use crate::sys::TaskKind;
    let me = std::process::id() as pid_t;
    let mut leaders = Vec::new();
    let mut threads = Vec::new();
    for p in pids {
        let p = p as pid_t;
        match crate::sys::task_kind(p) {
            TaskKind::Leader => leaders.push(p),
            TaskKind::Thread | TaskKind::Unknown => threads.push(p),
            TaskKind::Gone => {}
        }
    }
    let mut seen = vec![me, pid];
    let mut check = |tgid: pid_t, seen: &mut Vec<pid_t>| {
        if seen.contains(&tgid) {
            return None;
        }
        seen.push(tgid);
        crate::procfs::held_by(tgid, &mut holds).map(|link| (tgid, link))
    };
    for l in leaders {
        if let Some(found) = check(l, &mut seen) {
            return Some(found);
        }
    }
    let covered: std::collections::HashSet<pid_t> = seen
        .iter()
        .flat_map(|&p| crate::procfs::tids_of(p))
        .collect();
    for t in threads.into_iter().filter(|t| !covered.contains(t)) {
        let Some(tgid) = crate::procfs::tgid_of(t) else {
            continue;
        };
        if let Some(found) = check(tgid, &mut seen) {
            return Some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// `refuse_shared` of `pid` until `expected` accepts its answer, at most
    /// 100 times, 10 ms apart; the last answer. The tests run in parallel
    /// threads of one process, and a child another test forks holds a copy
    /// of every fd of this process until it execs: such a copy is another
    /// holder for a moment.
    fn settled(held: &HeldAlone, pid: pid_t, expected: impl Fn(&Result<()>) -> bool) -> Result<()> {
        let mut answer = held.refuse_shared(pid);
        for _ in 0..100 {
            if expected(&answer) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            answer = held.refuse_shared(pid);
        }
        answer
    }

    /// Whether `answer` is a refusal naming `pid` as the other holder.
    fn names(answer: &Result<()>, pid: u32) -> bool {
        answer
            .as_ref()
            .is_err_and(|e| e.to_string().contains(&format!("pid {pid})")))
    }

    #[test]
    fn a_pipe_this_process_shares_with_a_child_is_refused() {
        let (r, w) = pipes::fresh_pipe().unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", r.as_raw_fd())).unwrap();
        let ino = pipes::inode_of(link.to_str().unwrap()).unwrap();
        let held = HeldAlone {
            pipes: vec![ino],
            ..HeldAlone::default()
        };
        // A child holding the read end: another holder of this pipe.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::from(r))
            .spawn()
            .unwrap();
        drop(w);
        // Once we closed our ends, the child alone holds the pipe.
        let alone = settled(&held, child.id() as pid_t, Result::is_ok);
        // A second process holding the same pipe (through its stdin): it is
        // a new process, so the clean pass above does not excuse it.
        let dup = std::fs::File::open(format!("/proc/{}/fd/0", child.id())).unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::from(dup))
            .spawn()
            .unwrap();
        let other_id = other.id();
        let shared = settled(&held, child.id() as pid_t, |a| names(a, other_id));
        let _ = child.kill();
        let _ = other.kill();
        let _ = child.wait();
        let _ = other.wait();
        assert!(alone.is_ok(), "{alone:?}");
        let e = shared.unwrap_err().to_string();
        assert!(
            e.contains("pipe shared with another process") && e.contains(&other.id().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_named_pipe_that_an_older_process_opens_after_a_clean_pass_is_refused() {
        use std::io::{BufRead, Write};
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("p.fifo");
        let path_s = path.to_str().unwrap().to_string();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Started before the clean pass: it opens the pipe when told.
        let mut other = std::process::Command::new("sh")
            .arg("-c")
            .arg("read x; exec 3<>\"$0\"; echo opened; exec sleep 30")
            .arg(&path_s)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let end = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let md = end.metadata().unwrap();
        let mut holder = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::from(end))
            .spawn()
            .unwrap();
        let held = HeldAlone {
            fifos: vec![(path_s.clone(), md.dev(), md.ino())],
            ..HeldAlone::default()
        };
        let clean = held.refuse_shared(holder.id() as pid_t);
        writeln!(other.stdin.as_mut().unwrap(), "go").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(other.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let after = held.refuse_shared(holder.id() as pid_t);
        for c in [&mut other, &mut holder] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(clean.is_ok(), "{clean:?}");
        assert_eq!(line, "opened\n");
        let e = after
            .expect_err("the other holder was not seen")
            .to_string();
        assert!(
            e.contains("named pipe shared with another process")
                && e.contains(&other.id().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_deleted_file_another_process_holds_is_refused() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("gone");
        std::fs::write(&p, b"bytes").unwrap();
        let one = std::fs::File::open(&p).unwrap();
        let two = std::fs::File::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let md = one.metadata().unwrap();
        let held = HeldAlone {
            ghosts: vec![(md.dev(), md.ino())],
            ..HeldAlone::default()
        };
        // Two children reading it on stdin (this process is never counted).
        let sleeper = |f: std::fs::File| {
            std::process::Command::new("sleep")
                .arg("30")
                .stdin(std::process::Stdio::from(f))
                .spawn()
                .unwrap()
        };
        let mut child = sleeper(one);
        let mut other = sleeper(two);
        let other_id = other.id();
        let shared = settled(&held, child.id() as pid_t, |a| names(a, other_id));
        let _ = other.kill();
        let _ = other.wait();
        // The other one gone, the child alone holds it.
        let alone = settled(&held, child.id() as pid_t, Result::is_ok);
        let _ = child.kill();
        let _ = child.wait();
        let e = shared.unwrap_err().to_string();
        assert!(
            e.contains("deleted file shared with another process")
                && e.contains(&other.id().to_string()),
            "{e}"
        );
        assert!(alone.is_ok(), "{alone:?}");
    }

    #[test]
    fn after_a_clean_pass_only_new_processes_are_read() {
        let held = HeldAlone {
            pipes: vec![1],
            eventfds: vec![7],
            epolls: vec![3],
            by_file: vec![4],
            ghosts: vec![(5, 6)],
            locked: vec![(8, "/a".into())],
            fifos: vec![("/f".into(), 9, 10)],
            sockets: vec![11],
        };
        let me = std::process::id() as pid_t;
        let us = identity(me).expect("our own start time");
        let clean = Clean {
            process: us,
            last_pid: last_pid().expect("ns_last_pid"),
            covered: held.clone(),
        };
        assert!(clean.covers(us, &held));
        let fewer = HeldAlone {
            epolls: vec![],
            ..held.clone()
        };
        assert!(clean.covers(us, &fewer));
        let more = HeldAlone {
            pipes: vec![1, 2],
            ..held.clone()
        };
        assert!(!clean.covers(us, &more));
        let another_lock = HeldAlone {
            locked: vec![(8, "/a".into()), (9, "/b".into())],
            ..held.clone()
        };
        assert!(!clean.covers(us, &another_lock));
        let another_fifo = HeldAlone {
            fifos: vec![("/f".into(), 9, 10), ("/g".into(), 9, 11)],
            ..held.clone()
        };
        assert!(!clean.covers(us, &another_fifo));
        // Another process, or the same pid reused by a later one.
        assert!(!clean.covers((me + 1, us.1), &held));
        assert!(!clean.covers((me, us.1 + 1), &held));
        // A process created since is in the range, and found.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let now = last_pid().unwrap();
        let range = created_since(clean.last_pid, now);
        let found = range.clone().and_then(|r| {
            holder_among(me, r, |other, fd, link| {
                other == child.id() as pid_t && fd == 0 && link == "/dev/null"
            })
        });
        let _ = child.kill();
        let _ = child.wait();
        let range = range.expect("a few pids created since");
        assert!(range.contains(&(child.id() as u64)), "{range:?}");
        assert_eq!(found, Some((child.id() as pid_t, "/dev/null".to_string())));
        // A thread started since in a process older than the range stands
        // for its process.
        let mut older = std::process::Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import sys, threading, time\n\
                 sys.stdin.readline()\n\
                 t = threading.Thread(target=time.sleep, args=(30,), daemon=True)\n\
                 t.start()\n\
                 print(t.native_id, flush=True)\n\
                 time.sleep(30)\n",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let older_pid = older.id() as pid_t;
        let before = last_pid().unwrap();
        use std::io::{BufRead, Write};
        older.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(older.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let tid: pid_t = line.trim().parse().unwrap();
        let range = created_since(before, last_pid().unwrap()).expect("a few pids");
        let found = holder_among(me, range.clone(), |other, fd, _| {
            other == older_pid && fd == 0
        });
        let _ = older.kill();
        let _ = older.wait();
        assert!(range.contains(&(tid as u64)), "{range:?} {tid}");
        assert_eq!(found.map(|f| f.0), Some(older_pid));
        // Wrapped around, or too many: every process is read again.
        assert_eq!(created_since(now, now - 1), None);
        assert_eq!(created_since(now, now + MAX_NEW_PIDS + 1), None);
        assert_eq!(created_since(now, now), Some(now + 1..=now));
    }
}
