//! Process-level facts and refusals: tracer, children, seccomp, namespaces.
//! Its state is what identifies the process in reports.

use super::{Capture, Resource};
use crate::error::{unsupported, Result};
use crate::procfs;
use libc::pid_t;
use serde::{Deserialize, Serialize};

pub struct Process;

/// How long the precheck waits for another program to let go of the
/// process's threads.
const TRACER_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A thread of `pid` that another program traces, and its tracer; None if
/// there is none. A tracer still there after `wait` is one that
/// stays. A process just restored (by `pmig restore`, or by a daemon for a
/// migration) is let go one thread after another, and may already answer
/// from a thread let go while another is still traced for a moment: that
/// moment is waited out, so that moving a process right after it arrived
/// does not fail on it.
fn settled_tracer(pid: pid_t, wait: std::time::Duration) -> Option<(pid_t, pid_t)> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let found = procfs::foreign_tracer(pid)?;
        if std::time::Instant::now() >= deadline {
            return Some(found);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        procfs::forget_memo();
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProcessState {
    pub pid: pid_t,
    pub comm: String,
    pub cmdline: Vec<String>,
}

/// Pids of the live children of `pid`: from `/proc/PID/task/TID/children`
/// (each thread's children), else, on a kernel without those files, by
/// scanning every process in /proc (about 1 ms with a few hundred
/// processes, and this runs once more while the process is frozen).
pub fn children(pid: pid_t) -> Vec<pid_t> {
    children_and_zombies(pid).0
}

/// The children of `pid` that run, and those that exited and were not
/// waited for (zombies: their exit status is the parent's to collect).
fn children_and_zombies(pid: pid_t) -> (Vec<pid_t>, Vec<pid_t>) {
    let zombie = |f: &[String]| {
        f.first().map(String::as_str) == Some("Z") || f.first().map(String::as_str) == Some("X")
    };
    let split = |kids: Vec<(pid_t, bool)>| {
        let (z, a): (Vec<_>, Vec<_>) = kids.into_iter().partition(|k| k.1);
        (
            a.into_iter().map(|k| k.0).collect(),
            z.into_iter().map(|k| k.0).collect(),
        )
    };
    if let Some(listed) = listed_children(pid) {
        return split(
            listed
                .into_iter()
                .filter_map(|p| procfs::stat_fields(p).ok().map(|f| (p, zombie(&f))))
                .collect(),
        );
    }
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return (vec![], vec![]);
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<pid_t>().ok()) else {
            continue;
        };
        if let Ok(f) = procfs::stat_fields(p) {
            if procfs::stat_field(&f, 4) as pid_t == pid {
                out.push((p, zombie(&f)));
            }
        }
    }
    split(out)
}

/// The children every thread of `pid` lists, or None if the kernel has no
/// such lists (CONFIG_PROC_CHILDREN) or they cannot be read.
fn listed_children(pid: pid_t) -> Option<Vec<pid_t>> {
    let tids = procfs::tids_of(pid);
    if tids.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for tid in tids {
        out.extend(procfs::thread_children(tid).ok()?);
    }
    Some(out)
}

impl Resource for Process {
    const PART: &'static str = "process";
    type State = ProcessState;

    /// The same process with the same command line. Its name is its main
    /// thread's, which the threads part follows.
    fn update(
        pre: &ProcessState,
        fin: &ProcessState,
        same: bool,
        _cx: &mut super::Update,
    ) -> Result<()> {
        if same || (pre.pid == fin.pid && pre.cmdline == fin.cmdline) {
            Ok(())
        } else {
            Err(crate::error::stale("its process changed"))
        }
    }

    fn precheck(pid: pid_t) -> Result<()> {
        if procfs::is_kernel_thread(pid) {
            return Err(crate::error::EngineError::Other(format!(
                "cannot migrate process {pid}: it is a kernel thread; only user processes move"
            )));
        }
        let st = procfs::status(pid)?;
        let get = |k: &str| st.get(k).map(String::as_str).unwrap_or("");
        if get("State").starts_with('Z') || get("State").starts_with('X') {
            return Err(unsupported(
                pid,
                "a process that has already exited (zombie)",
            ));
        }
        if let Some((tid, tracer)) = settled_tracer(pid, TRACER_WAIT) {
            return Err(unsupported(
                pid,
                if tid == pid {
                    format!("a process already being traced (by pid {tracer})")
                } else {
                    format!("a process already being traced (its thread {tid} by pid {tracer})")
                },
            ));
        }
        // Filters move (`seccomp`, whose precheck asks for what it needs).
        // Strict mode allows only read, write, exit and sigreturn, and it
        // cannot be suspended: the first system call pmig injected would
        // have the kernel kill the process.
        if get("Seccomp") == "1" {
            return Err(unsupported(pid, "seccomp strict mode"));
        }
        // The injected calls, the restorer and the saved registers are all
        // x86-64; a 32-bit program (ia32 or x32) would only get a wrong
        // error from the first injected call.
        if let Ok(mut exe) = std::fs::File::open(format!("/proc/{pid}/exe")) {
            let mut ident = [0u8; 5];
            use std::io::Read;
            if exe.read_exact(&mut ident).is_ok() && ident[..4] == *b"\x7fELF" && ident[4] == 1 {
                return Err(unsupported(pid, "a 32-bit program (ia32 or x32)"));
            }
        }
        let (kids, zombies) = children_and_zombies(pid);
        if let Some(z) = zombies.first() {
            return Err(unsupported(
                pid,
                format!(
                    "a process with an exited child it has not waited for (pid {z}): its exit status would be lost"
                ),
            ));
        }
        if !kids.is_empty() {
            return Err(unsupported(
                pid,
                match kids.len() {
                    1 => format!("a process with a child process (pid {})", kids[0]),
                    n => format!(
                        "a process with child processes ({n} children, e.g. pid {})",
                        kids[0]
                    ),
                },
            ));
        }
        for ns in ["pid", "mnt", "user"] {
            let theirs = procfs::readlink(pid, &format!("ns/{ns}"))?;
            let ours = std::fs::read_link(format!("/proc/self/ns/{ns}"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if theirs != ours {
                return Err(unsupported(
                    pid,
                    format!("a process in another {ns} namespace"),
                ));
            }
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<ProcessState> {
        let comm = procfs::read(cx.pid, "comm")?.trim_end().to_string();
        let cmdline = procfs::read(cx.pid, "cmdline")?
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        Ok(ProcessState {
            pid: cx.pid,
            comm,
            cmdline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread of this test process, traced by a child of it that lets go
    /// when told: a tracer that stays is reported with the thread, one that
    /// lets go while the precheck waits is not.
    #[test]
    fn a_tracer_letting_go_is_waited_for_and_one_that_stays_is_named() {
        use std::os::fd::AsRawFd;
        use std::time::Duration;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let target = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            let _ = end_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        let (said_r, said_w) = nix::unistd::pipe().unwrap();
        let (go_r, go_w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child makes only raw system calls (ptrace, write,
        // read, _exit) before it exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above; the buffers are locals.
            unsafe {
                let ok = libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) == 0;
                let b: u8 = if ok { b's' } else { b'e' };
                libc::write(said_w.as_raw_fd(), &b as *const u8 as *const _, 1);
                let mut x = 0u8;
                libc::read(go_r.as_raw_fd(), &mut x as *mut u8 as *mut _, 1);
                libc::_exit(0);
            }
        }
        assert!(child > 0, "fork: {}", std::io::Error::last_os_error());
        struct Reap(pid_t);
        impl Drop for Reap {
            fn drop(&mut self) {
                // SAFETY: killing and reaping our own child.
                unsafe { libc::kill(self.0, libc::SIGKILL) };
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.0), None);
            }
        }
        let reap = Reap(child);
        drop(said_w);
        drop(go_r);
        let mut b = [0u8];
        nix::unistd::read(said_r.as_raw_fd(), &mut b).unwrap();
        assert_eq!(b[0], b's', "the child could not trace thread {tid}");
        let me = std::process::id() as pid_t;
        assert_eq!(procfs::foreign_tracer(me), Some((tid, child)));
        assert_eq!(
            settled_tracer(me, Duration::from_millis(20)),
            Some((tid, child)),
            "a tracer that stays"
        );
        // Told to let go once the wait has begun.
        let teller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            nix::unistd::write(&go_w, b"g").unwrap();
            go_w
        });
        let after = settled_tracer(me, Duration::from_secs(30));
        let _go_w = teller.join().unwrap();
        drop(reap);
        end_tx.send(()).unwrap();
        target.join().unwrap();
        assert_eq!(after, None, "the tracer let go of thread {tid}");
    }

    /// A 32-bit program without libc: sleeps forever through `int 0x80`.
    const SLEEPER_32: &str = r#"
struct ts { int s, ns; };
void _start(void) {
    struct ts t = {1, 0};
    for (;;) {
        int r;
        __asm__ volatile("int $0x80" : "=a"(r) : "a"(162), "b"(&t), "c"(0) : "memory");
    }
}
"#;

    #[test]
    fn a_32_bit_program_is_refused_before_it_is_touched() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s32.c");
        let bin = d.path().join("s32");
        std::fs::write(&src, SLEEPER_32).unwrap();
        let built = std::process::Command::new("cc")
            .args([
                "-m32",
                "-static",
                "-nostdlib",
                "-O2",
                "-fno-pic",
                "-no-pie",
                "-o",
            ])
            .arg(&bin)
            .arg(&src)
            .output();
        if !built.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("skipped: this compiler cannot build a 32-bit program: {built:?}");
            return;
        }
        let mut child = match std::process::Command::new(&bin).spawn() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: this kernel does not run 32-bit programs: {e}");
                return;
            }
        };
        let pid = child.id() as pid_t;
        // Its executable is known once exec is through (before, the child
        // is a copy of this test).
        let is_32 = |r: &Result<()>| r.as_ref().is_err_and(|e| e.to_string().contains("32-bit"));
        let mut r = Process::precheck(pid);
        for _ in 0..1000 {
            if is_32(&r) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            r = Process::precheck(pid);
        }
        let alive = procfs::status(pid).is_ok_and(|s| {
            s.get("State")
                .is_some_and(|v| v.starts_with(['R', 'S', 'D']))
        });
        let _ = child.kill();
        let _ = child.wait();
        let e = r.expect_err("a 32-bit program must be refused").to_string();
        assert!(e.contains("32-bit"), "{e}");
        assert!(alive, "the 32-bit program did not keep running");
    }
}
