//! Running `ip`/`tc`, listing namespaces and their processes, entering a namespace.

use std::fs;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{ClusterError, Result};

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

fn render(prog: &str, args: &[&str]) -> String {
    let mut s = prog.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Runs `prog args...`, returns its stdout; a failure is one line naming the command.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    tracing::debug!("running {}", render(prog, args));
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ClusterError::Spawn {
            cmd: render(prog, args),
            hint: if source.kind() == io::ErrorKind::NotFound {
                " (install iproute2)"
            } else {
                ""
            },
            source,
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no error output")
            .to_string();
        return Err(ClusterError::Command {
            cmd: render(prog, args),
            status: match out.status.code() {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".into(),
            },
            stderr: line,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip args...`
pub fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// `tc args...`
pub fn tc(args: &[&str]) -> Result<String> {
    run("tc", args)
}

/// Names of all named network namespaces (`ip netns list`).
pub fn list_netns() -> Result<Vec<String>> {
    // Reading the directory avoids a dependency on the output format, and works when
    // /run/netns does not exist yet.
    match fs::read_dir(NETNS_DIR) {
        Ok(rd) => {
            let mut v: Vec<String> = rd
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            v.sort();
            Ok(v)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(ClusterError::io(format!("listing {NETNS_DIR}"), e)),
    }
}

pub fn netns_exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// Processes living in namespace `name` (`ip netns pids`).
pub fn netns_pids(name: &str) -> Result<Vec<i32>> {
    let out = ip(&["netns", "pids", name])?;
    Ok(out
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect())
}

/// True if `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(s) => match s.rfind(')') {
            Some(i) => !matches!(s[i + 1..].trim_start().chars().next(), Some('Z' | 'X')),
            None => false,
        },
        Err(_) => false,
    }
}

/// Sends SIGTERM to every pid, waits up to `grace`, then SIGKILLs the survivors.
/// Reaps our own children so that they do not linger as zombies. Returns how many
/// processes were signalled.
pub fn terminate(pids: &[i32], grace: Duration) -> usize {
    let pids: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|&p| p > 1 && alive(p))
        .collect();
    for &p in &pids {
        let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
    }
    let t0 = Instant::now();
    loop {
        reap(&pids);
        if pids.iter().all(|&p| !alive(p)) || t0.elapsed() >= grace {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    for &p in &pids {
        if alive(p) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
    let t0 = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t0.elapsed() < Duration::from_secs(2) {
        reap(&pids);
        thread::sleep(Duration::from_millis(10));
    }
    reap(&pids);
    pids.len()
}

/// Collects exit statuses of those pids that are our children (others: no effect).
fn reap(pids: &[i32]) {
    use nix::sys::wait::{waitpid, WaitPidFlag};
    for &p in pids {
        let _ = waitpid(Pid::from_raw(p), Some(WaitPidFlag::WNOHANG));
    }
}

/// Runs `f` on a thread that has entered network namespace `netns`. Sockets created
/// there stay in that namespace and may be used from any thread afterwards.
pub fn run_in_netns<T, F>(netns: &str, f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let file = fs::File::open(Path::new(NETNS_DIR).join(netns))?;
    thread::scope(|s| {
        s.spawn(move || {
            nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// True if some socket of process `pid`'s network namespace listens on TCP `port`.
pub fn listening(pid: i32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        fs::read_to_string(format!("/proc/{pid}/net/{f}"))
            .map(|t| {
                t.lines().skip(1).any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
                })
            })
            .unwrap_or(false)
    })
}

/// The only child of `pid` (read from `/proc/<pid>/task/<pid>/children`),
/// waiting up to `timeout` for it to appear.
pub fn only_child(pid: i32, timeout: Duration) -> io::Result<i32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let t0 = Instant::now();
    loop {
        let text = fs::read_to_string(&path)?;
        if let Some(c) = text.split_whitespace().next().and_then(|c| c.parse().ok()) {
            return Ok(c);
        }
        if t0.elapsed() > timeout {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("process {pid} has no child after {timeout:?}"),
            ));
        }
        thread::sleep(Duration::from_millis(5));
    }
}
