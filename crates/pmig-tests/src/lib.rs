//! Harness for the scenario suite (`tests/scenarios.rs`), and the local
//! cluster the multi-node tests of other crates bring up ([`TestCluster`]).
//!
//! The scenario programs (`tests/scenarios/*.c` at the workspace root) are
//! compiled by `build.rs`. Each one sets up some state, prints `READY`, then
//! answers `check` with `PASS <name>` / `FAIL <name>: why` and exits on `quit`.
//! The tests drive them, and `pmig dump` / `pmig restore`, through pipes.
//!
//! Rules kept here: every wait is bounded (the bounds only guard against
//! hangs: synchronisation is the READY / check handshake, never a sleep), and
//! every process a test starts is killed when the test ends, also on failure.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where `build.rs` put the compiled scenario programs.
pub const SCENARIO_DIR: &str = env!("SCENARIO_DIR");

/// Bound on waiting for `READY` from a freshly started scenario.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one `pmig dump` / the first answer of a restored process.
pub const PMIG_TIMEOUT: Duration = Duration::from_secs(300);
/// Bound on one `check` answer of a running scenario.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on a process exiting after `quit` or a kill.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Path of a compiled scenario program.
pub fn scenario(name: &str) -> PathBuf {
    let p = Path::new(SCENARIO_DIR).join(name);
    assert!(p.exists(), "scenario program {} was not built", p.display());
    p
}

/// Whether this test runs as root; says once on stderr that it is skipped if
/// not (the multi-node tests need namespaces, ptrace and clone3 set_tid).
pub fn root() -> bool {
    if nix::unistd::geteuid().is_root() {
        true
    } else {
        eprintln!("skipped: needs root");
        false
    }
}

/// The pmig binary: `$PMIG_BIN`, else `target/release/pmig`, else `target/debug/pmig`.
/// Panics with a clear message when there is none (the tests never skip silently).
pub fn pmig_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PMIG_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "PMIG_BIN={} does not exist", p.display());
        return p;
    }
    let mut targets = Vec::new();
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        targets.push(PathBuf::from(t));
    }
    // This test binary lives in <target>/<profile>/deps/.
    if let Ok(exe) = std::env::current_exe() {
        if let Some(t) = exe.parent().and_then(Path::parent).and_then(Path::parent) {
            targets.push(t.to_path_buf());
        }
    }
    targets.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    for profile in ["release", "debug"] {
        for t in &targets {
            let p = t.join(profile).join("pmig");
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "no pmig binary found (looked for release/pmig and debug/pmig under {:?}); \
         build it with `cargo build --release -p pmig-cli` or set PMIG_BIN",
        targets
    );
}

/// Serialises tests that need a lot of memory or that look at the whole
/// process table. Poisoning (a failed test) does not matter here.
pub fn serial(lock: &'static Mutex<()>) -> MutexGuard<'static, ()> {
    lock.lock().unwrap_or_else(|e| e.into_inner())
}
pub static HEAVY: Mutex<()> = Mutex::new(());
pub static PROCESS_TABLE: Mutex<()> = Mutex::new(());

/// Make the child inherit only fds 0, 1 and 2 (see [`pmig_cluster::only_stdio`]).
pub use pmig_cluster::only_stdio;

// ---------------------------------------------------------------------------
// a local cluster for one test

/// A 3-node local cluster (network namespaces, a daemon in each) for one
/// multi-node test, under its own prefix and state directory. On drop, also
/// when an assertion failed, it kills the processes the test listed in
/// `pids` and then tears the cluster down.
pub struct TestCluster {
    guard: Option<pmig_cluster::ClusterGuard>,
    /// Processes the test started (or their migrated copies): killed on drop.
    pub pids: Vec<i32>,
    /// The test's own directory (the cluster's state is in `cluster/` below it).
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl TestCluster {
    /// Brings the cluster up. `prefix` names it (the test process's id is
    /// appended, so that two test binaries never share a prefix), `what` its
    /// directory; `set` adjusts the options (link, daemon flags, pid
    /// namespaces). A cluster left by an earlier run under the same prefix is
    /// torn down first. Panics when the daemons did not start.
    pub fn up(prefix: &str, what: &str, set: impl FnOnce(&mut pmig_cluster::ClusterOpts)) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("pmig-{what}-"))
            .tempdir()
            .expect("a temporary directory");
        let dir = tmp.path().to_path_buf();
        let mut o = pmig_cluster::ClusterOpts::new(3);
        o.prefix = format!("{prefix}{}", std::process::id() % 10000);
        o.state_dir = Some(dir.join("cluster"));
        o.daemon_bin = Some(pmig_bin());
        set(&mut o);
        let _ = pmig_cluster::down(&o.prefix, o.state_dir.as_deref());
        let c = pmig_cluster::Cluster::up(&o).expect("cluster up").guard();
        assert!(
            c.state().daemons_started,
            "daemons not started: {:?}",
            c.state().notes
        );
        TestCluster {
            guard: Some(c),
            pids: Vec::new(),
            dir,
            _tmp: tmp,
        }
    }

    pub fn c(&self) -> &pmig_cluster::Cluster {
        self.guard.as_ref().expect("cluster up")
    }

    pub fn c_mut(&mut self) -> &mut pmig_cluster::Cluster {
        self.guard.as_mut().expect("cluster up")
    }

    /// The state directory of `node`'s daemon.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.c()
            .node(node)
            .expect("a node of the cluster")
            .dir
            .clone()
    }

    /// `node`'s daemon log so far (empty if there is none yet).
    pub fn log(&self, node: &str) -> String {
        std::fs::read_to_string(self.node_dir(node).join("daemon.log")).unwrap_or_default()
    }

    /// `pmig ARGS` inside `node`, cwd the test's directory, only fds 0-2.
    pub fn pmig(&self, node: &str, args: &[&str]) -> Command {
        let mut cmd = self
            .c()
            .command(node, pmig_bin())
            .expect("a node of the cluster");
        cmd.args(args).current_dir(&self.dir);
        only_stdio(&mut cmd);
        cmd
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for &p in &self.pids {
            // SAFETY: kill(2) of processes this test started; it touches no memory.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        remove_scenario_shm();
        if let Some(c) = self.guard.take() {
            if let Err(e) = c.down() {
                eprintln!("tearing the cluster down failed: {e}");
            }
        }
    }
}

/// Declares `struct $name(TestCluster)`, which dereferences to its
/// [`TestCluster`], for a test file to give it methods of its own.
#[macro_export]
macro_rules! cluster_env {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        struct $name($crate::TestCluster);

        impl std::ops::Deref for $name {
            type Target = $crate::TestCluster;
            fn deref(&self) -> &$crate::TestCluster {
                &self.0
            }
        }

        impl std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut $crate::TestCluster {
                &mut self.0
            }
        }
    };
}

/// Daemon flags under which host selection is quick to observe: a report
/// every 250 ms, the load averaged over 2 s, a node idle below `idle_load`,
/// its owner away after `owner_secs` seconds.
pub fn quick_selection(idle_load: &'static str, owner_secs: &'static str) -> Vec<&'static str> {
    vec![
        "--report-interval-ms",
        "250",
        "--load-tau-secs",
        "2",
        "--idle-load",
        idle_load,
        "--idle-owner-secs",
        owner_secs,
    ]
}

// ---------------------------------------------------------------------------
// waiting with bounds

fn poll_fd(fd: i32, events: i16, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

/// Wait for a child to exit, at most `timeout`. `None` on timeout.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    if let Ok(Some(st)) = child.try_wait() {
        return Some(st);
    }
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) } as i32;
    if pidfd >= 0 {
        let ready = poll_fd(pidfd, libc::POLLIN, timeout);
        unsafe { libc::close(pidfd) };
        if let Ok(true) = ready {
            return child.wait().ok();
        }
        return child.try_wait().ok().flatten();
    }
    // No pidfd: poll try_wait, still bounded.
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Reads lines from a pipe with a deadline.
pub struct LineReader {
    pipe: ChildStdout,
    buf: Vec<u8>,
    eof: bool,
}

impl LineReader {
    pub fn new(pipe: ChildStdout) -> Self {
        LineReader {
            pipe,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// `Ok(Some(line))` without the newline, `Ok(None)` at EOF, `Err` on timeout.
    pub fn read_line(&mut self, timeout: Duration) -> Result<Option<String>, String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Ok(Some(String::from_utf8_lossy(&line[..pos]).into_owned()));
            }
            if self.eof {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let line = std::mem::take(&mut self.buf);
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            let now = Instant::now();
            if now >= end {
                return Err(format!(
                    "no line within {timeout:?} (partial: {:?})",
                    String::from_utf8_lossy(&self.buf)
                ));
            }
            match poll_fd(self.pipe.as_raw_fd(), libc::POLLIN, end - now) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(e) => return Err(format!("poll: {e}")),
            }
            let mut tmp = [0u8; 4096];
            match self.pipe.read(&mut tmp) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// Everything until EOF (bounded).
    pub fn read_to_end(&mut self, timeout: Duration) -> Result<String, String> {
        let mut all = String::new();
        let end = Instant::now() + timeout;
        while let Some(l) = self.read_line(end.saturating_duration_since(Instant::now()))? {
            all.push_str(&l);
            all.push('\n');
        }
        Ok(all)
    }
}

/// Bytes read from a pipe by a background thread, and whether it hit EOF.
#[derive(Clone, Default)]
pub struct Collected(Arc<(Mutex<Received>, Condvar)>);

/// Bytes so far, and whether the pipe reached EOF.
type Received = (Vec<u8>, bool);

impl Collected {
    /// What has arrived so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0 .0.lock().unwrap().0).into_owned()
    }
    /// What has arrived once it contains `needle` (or the pipe closed, or
    /// `timeout` passed).
    pub fn text_containing(&self, needle: &str, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        let mut g = self.0 .0.lock().unwrap();
        while !g.1 && !String::from_utf8_lossy(&g.0).contains(needle) {
            let now = Instant::now();
            if now >= end {
                break;
            }
            g = self.0 .1.wait_timeout(g, end - now).unwrap().0;
        }
        String::from_utf8_lossy(&g.0).into_owned()
    }
    /// Everything, once the pipe is closed (or what arrived within `timeout`).
    pub fn text_at_eof(&self, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        let mut g = self.0 .0.lock().unwrap();
        while !g.1 {
            let now = Instant::now();
            if now >= end {
                break;
            }
            g = self.0 .1.wait_timeout(g, end - now).unwrap().0;
        }
        String::from_utf8_lossy(&g.0).into_owned()
    }
}

/// Reads `r` to its end in a background thread.
pub fn collect<R: Read + Send + 'static>(mut r: R) -> Collected {
    let c = Collected::default();
    let c2 = c.clone();
    std::thread::spawn(move || {
        let mut tmp = [0u8; 4096];
        loop {
            match r.read(&mut tmp) {
                Ok(0) => break,
                Ok(n) => {
                    c2.0 .0.lock().unwrap().0.extend_from_slice(&tmp[..n]);
                    c2.0 .1.notify_all();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        c2.0 .0.lock().unwrap().1 = true;
        c2.0 .1.notify_all();
    });
    c
}

// ---------------------------------------------------------------------------
// a process we talk to

/// A child with piped stdin/stdout (the protocol) and stderr collected.
/// Dropping it kills and reaps the child.
pub struct Proc {
    pub label: String,
    pub child: Child,
    stdin: Option<ChildStdin>,
    out: LineReader,
    err: Collected,
    status: Option<ExitStatus>,
    /// Kill its children too when dropped (pmig restore, tracers).
    tree: bool,
}

impl Proc {
    pub fn spawn(label: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        only_stdio(&mut cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: cannot start {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let out = LineReader::new(child.stdout.take().unwrap());
        let err = collect(child.stderr.take().unwrap());
        Proc {
            label: label.to_string(),
            child,
            stdin,
            out,
            err,
            status: None,
            tree: false,
        }
    }

    /// Like `spawn`, for a process whose children (a restored process, a
    /// traced scenario) must be killed along with it when the test ends.
    pub fn spawn_tree(label: &str, cmd: Command) -> Proc {
        let mut p = Proc::spawn(label, cmd);
        p.tree = true;
        p
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Stderr so far.
    pub fn stderr(&self) -> String {
        self.err.text()
    }

    /// Stderr once it contains `needle` (bounded wait: 10 s), for lines the
    /// program writes after it has answered on stdout.
    pub fn stderr_containing(&self, needle: &str) -> String {
        self.err.text_containing(needle, Duration::from_secs(10))
    }

    /// All of stderr, for use after the process exited (bounded wait for EOF).
    pub fn stderr_final(&self) -> String {
        self.err.text_at_eof(Duration::from_secs(10))
    }

    pub fn send(&mut self, line: &str) {
        let label = &self.label;
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("{label}: stdin already closed"));
        if let Err(e) = stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|_| stdin.flush())
        {
            panic!(
                "{label}: cannot send {line:?}: {e}; stderr: {}",
                self.stderr()
            );
        }
    }

    /// Send a line if the process still reads; a closed pipe is not an error.
    pub fn try_send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin
                .write_all(format!("{line}\n").as_bytes())
                .and_then(|_| stdin.flush());
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Next stdout line; panics on EOF or timeout, with stderr in the message.
    pub fn line(&mut self, timeout: Duration, what: &str) -> String {
        match self.out.read_line(timeout) {
            Ok(Some(l)) => l,
            Ok(None) => {
                let st = wait_timeout(&mut self.child, Duration::from_secs(5));
                if st.is_some() {
                    self.status = st;
                }
                panic!(
                    "{}: stdout closed while waiting for {what}; exit: {st:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                )
            }
            Err(e) => panic!(
                "{}: waiting for {what}: {e}; stderr:\n{}",
                self.label,
                self.stderr()
            ),
        }
    }

    pub fn expect_ready(&mut self) {
        let l = self.line(READY_TIMEOUT, "READY");
        assert_eq!(
            l,
            "READY",
            "{}: first line {l:?} is not READY; stderr:\n{}",
            self.label,
            self.stderr()
        );
    }

    /// Send `check` and expect `PASS <name>`.
    pub fn check(&mut self, name: &str, timeout: Duration) {
        self.send("check");
        let l = self.line(timeout, "the answer to check");
        assert_eq!(
            l,
            format!("PASS {name}"),
            "{}: check failed; stderr:\n{}",
            self.label,
            self.stderr()
        );
    }

    /// Wait for exit (bounded); panics on timeout after killing it.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(st) = self.status {
            return st;
        }
        match wait_timeout(&mut self.child, timeout) {
            Some(st) => {
                self.status = Some(st);
                st
            }
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{}: did not exit within {timeout:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
        }
    }

    /// `quit`, then expect exit status 0.
    pub fn quit_ok(&mut self) {
        self.send("quit");
        self.close_stdin();
        let st = self.wait(EXIT_TIMEOUT);
        assert_eq!(
            st.code(),
            Some(0),
            "{}: exit after quit: {st:?}; stderr:\n{}",
            self.label,
            self.stderr()
        );
    }

    pub fn rest_of_stdout(&mut self) -> String {
        self.out.read_to_end(EXIT_TIMEOUT).unwrap_or_else(|e| e)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() && self.tree {
            // Children of a live, unreaped parent: their PIDs cannot have been reused.
            for kid in children_of(self.pid()) {
                unsafe { libc::kill(kid, libc::SIGKILL) };
            }
        }
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = wait_timeout(&mut self.child, Duration::from_secs(10));
        }
    }
}

/// Spawn a scenario program with `cwd` as its working directory.
/// Why scenario `name` cannot run on this machine, if it cannot: `amx`
/// needs a CPU with AMX and a kernel that enables it (the kernel lists
/// `amx_tile` in `/proc/cpuinfo` only then). The scenario itself says
/// `SKIP` instead of `READY` there too.
pub fn skipped_here(name: &str) -> Option<&'static str> {
    match name {
        "amx" => {
            let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let has = info
                .lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|f| f == "amx_tile"));
            (!has).then_some("no AMX on this CPU or kernel")
        }
        _ => None,
    }
}

pub fn spawn_scenario(name: &str, args: &[&str], cwd: &Path) -> Proc {
    let mut cmd = Command::new(scenario(name));
    cmd.args(args).current_dir(cwd);
    Proc::spawn(name, cmd)
}

// ---------------------------------------------------------------------------
// processes that are not our children (restored ones) and other leftovers

fn starttime(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok() // field 22
}

/// State letter of /proc/PID/stat (R, S, D, T, t, Z, ...), None if gone.
pub fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..].chars().next()
}

pub fn proc_status_field(pid: i32, field: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

/// Cgroups made for the `cgroup` scenario, one per hierarchy it can join
/// (the unified one, and a v1 hierarchy with the cpu controller), each
/// under the cgroup this test process is in; removed when dropped, which
/// must come after every copy of the scenario is gone (declare it before
/// the [`Guard`] that kills them).
pub struct ScenarioCgroups {
    dirs: Vec<PathBuf>,
}

impl ScenarioCgroups {
    /// None when there is no such hierarchy or the cgroups cannot be made
    /// (not root): the scenario is then skipped.
    pub fn new() -> Option<ScenarioCgroups> {
        use pmig_engine::resources::cgroups;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("pmig-scn-{}-{n}", std::process::id());
        let mut made = ScenarioCgroups { dirs: Vec::new() };
        for m in cgroups::memberships(&own) {
            if !(m.controllers.is_empty() || m.controllers.split(',').any(|c| c == "cpu")) {
                continue;
            }
            // Not there where the hierarchy is not mounted, or its mount
            // does not show this process's cgroup.
            if let Some(dir) = cgroups::dir_of(&mi, &m.controllers, &m.path) {
                let dir = dir.join(&name);
                if std::fs::create_dir(&dir).is_ok() {
                    made.dirs.push(dir);
                }
            }
        }
        (!made.dirs.is_empty()).then_some(made)
    }

    /// The scenario's arguments: the `cgroup.procs` file of each cgroup.
    pub fn args(&self) -> Vec<String> {
        self.dirs
            .iter()
            .map(|d| d.join("cgroup.procs").to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for ScenarioCgroups {
    fn drop(&mut self) {
        for d in &self.dirs {
            // Bounded: a process killed just before may take a moment to
            // leave its cgroup.
            for _ in 0..200 {
                match std::fs::remove_dir(d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => break,
                }
            }
        }
    }
}

/// Kills, when dropped, the processes registered with it (checked by start
/// time, so a reused PID is never hit) and removes SysV shm segments.
#[derive(Default)]
pub struct Guard {
    pids: Vec<(i32, u64)>,
    shm: Vec<i32>,
    shm_keys: Vec<i32>,
}

impl Guard {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn track_pid(&mut self, pid: i32) {
        if let Some(st) = starttime(pid) {
            self.pids.push((pid, st));
        }
    }
    pub fn track_shm(&mut self, id: i32) {
        self.shm.push(id);
    }
    /// The System V segment the scenario started as `pid` makes under its
    /// key (see `tests/scenarios/sysvshm.c`), if any, is removed at the end.
    pub fn track_scenario_shm(&mut self, pid: i32) {
        self.shm_keys.push(scenario_shm_key(pid));
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for &(pid, st) in &self.pids {
            if starttime(pid) == Some(st) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for &id in &self.shm {
            unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        }
        for &key in &self.shm_keys {
            // SAFETY: shmget with size 0 only looks the key up; IPC_RMID
            // reads no buffer.
            unsafe {
                let id = libc::shmget(key, 0, 0);
                if id >= 0 {
                    libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                }
            }
        }
    }
}

/// The `sysvshm` scenario's key is this ORed with the low 16 bits of its pid.
const SCENARIO_SHM_KEY: i32 = 0x504d_0000;

/// The key of the System V segment the `sysvshm` scenario of pid `pid`
/// (in its own pid namespace) makes.
pub fn scenario_shm_key(pid: i32) -> i32 {
    SCENARIO_SHM_KEY | (pid & 0xffff)
}
/// Keys of the System V segment the `sysvshm` scenario makes (0x504d0000 to
/// 0x504dffff).
const SCENARIO_SHM_KEYS: std::ops::RangeInclusive<i64> =
    SCENARIO_SHM_KEY as i64..=(SCENARIO_SHM_KEY | 0xffff) as i64;

/// Removes the `sysvshm` scenario's keyed segments that no process has
/// attached: left behind by a scenario killed before it could remove them
/// (its private segments are marked for removal from the start). Only for
/// tests that run one at a time: a move lets go of a segment before its
/// copy attaches it.
pub fn remove_scenario_shm() {
    let Ok(text) = std::fs::read_to_string("/proc/sysvipc/shm") else {
        return;
    };
    for l in text.lines().skip(1) {
        // key shmid perms size cpid lpid nattch ...
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(key), Some(id), Some(nattch)) = (
            f.first().and_then(|k| k.parse::<i64>().ok()),
            f.get(1).and_then(|i| i.parse::<i32>().ok()),
            f.get(6).and_then(|n| n.parse::<u64>().ok()),
        ) else {
            continue;
        };
        if nattch == 0 && SCENARIO_SHM_KEYS.contains(&key) {
            // SAFETY: IPC_RMID reads no buffer.
            unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
}

// ---------------------------------------------------------------------------
// running pmig

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `pmig ARGS` to completion (bounded), stdin from /dev/null.
pub fn pmig(args: &[&str], timeout: Duration) -> Output {
    let bin = pmig_bin();
    let mut child = only_stdio(&mut Command::new(&bin))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let status = match wait_timeout(&mut child, timeout) {
        Some(st) => st,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "pmig {args:?} did not finish within {timeout:?}; stderr:\n{}",
                err.text()
            );
        }
    };
    let stdout = out.text_at_eof(Duration::from_secs(10));
    let stderr = err.text_at_eof(Duration::from_secs(10));
    Output {
        status,
        stdout,
        stderr,
    }
}

/// `pmig dump` that must succeed.
pub fn dump_ok(pid: i32, dir: &Path, leave_running: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let pid_s = pid.to_string();
    let mut args = vec!["dump", "--pid", &pid_s, "--dir", dir.to_str().unwrap()];
    if leave_running {
        args.push("--leave-running");
    }
    let o = pmig(&args, PMIG_TIMEOUT);
    assert!(
        o.status.success(),
        "pmig {args:?} failed ({:?}); stderr:\n{}",
        o.status,
        o.stderr
    );
    for f in ["manifest.pmig", "parts.pmig", "pages.pmig"] {
        assert!(
            dir.join(f).is_file(),
            "pmig dump succeeded but {} has no {f}",
            dir.display()
        );
    }
}

/// Start `pmig restore --dir DIR --pidfile PIDFILE` (not detached): its stdio
/// becomes the restored process's stdio.
pub fn spawn_restore(label: &str, dir: &Path, pidfile: &Path, cwd: &Path) -> Proc {
    let mut cmd = Command::new(pmig_bin());
    cmd.args(["restore", "--dir"])
        .arg(dir)
        .arg("--pidfile")
        .arg(pidfile)
        .current_dir(cwd);
    Proc::spawn_tree(label, cmd)
}

/// PID of the process a running (not detached) `pmig restore` recreated: its
/// one child. Race-free once the restored process has answered a `check`
/// (the pidfile, by contrast, may be written just after the process resumes).
pub fn restored_pid(restore: &Proc) -> i32 {
    let kids = children_of(restore.pid());
    assert_eq!(
        kids.len(),
        1,
        "{}: pmig restore (pid {}) should have exactly one child, the restored process; has {kids:?}; stderr:\n{}",
        restore.label,
        restore.pid(),
        restore.stderr()
    );
    kids[0]
}

/// Contents of a `--pidfile`; use once `pmig restore` has exited (or surely
/// written it).
pub fn read_pidfile(path: &Path, restore: &Proc) -> i32 {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: pidfile {} is not there: {e}; stderr:\n{}",
            restore.label,
            path.display(),
            restore.stderr()
        )
    });
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: pidfile holds {s:?}", restore.label))
}

/// Assert that a failed pmig command printed exactly one line `pmig: ...` on
/// stderr, mentioning one of `keywords` (case-insensitive).
pub fn assert_one_line_error(what: &str, o: &Output, keywords: &[&str]) {
    let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: stderr should be one line, got:\n{}",
        o.stderr
    );
    assert!(
        lines[0].starts_with("pmig: "),
        "{what}: error line does not start with 'pmig: ': {:?}",
        lines[0]
    );
    let low = lines[0].to_lowercase();
    assert!(
        keywords.iter().any(|k| low.contains(&k.to_lowercase())),
        "{what}: error line {:?} mentions none of {keywords:?}",
        lines[0]
    );
}

/// PIDs of all processes whose comm is `comm`.
pub fn pids_with_comm(comm: &str) -> Vec<i32> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                    if c.trim_end() == comm {
                        v.push(pid);
                    }
                }
            }
        }
    }
    v
}

/// Children of `pid` (from /proc/PID/task/*/children).
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                v.extend(s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    v
}

/// A fresh temporary directory with `work/` (the scenario's cwd).
pub struct Dirs {
    pub tmp: tempfile::TempDir,
}

impl Dirs {
    pub fn new(name: &str) -> Dirs {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("pmig-scn-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::create_dir(tmp.path().join("work")).unwrap();
        Dirs { tmp }
    }
    pub fn path(&self, sub: &str) -> PathBuf {
        self.tmp.path().join(sub)
    }
    pub fn work(&self) -> PathBuf {
        self.path("work")
    }
}

/// A benchmark workload of bench/workloads, built first if needed.
pub fn workload(name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let st = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(root.join("bench/workloads"))
        .status()
        .expect("run make");
    assert!(st.success(), "building the workloads failed");
    root.join("bench/workloads/bin").join(name)
}

/// Start `dirtier` (64 MiB, writing 20000 pages/s, `iterations` writes in
/// all; it verifies its memory at the end) and wait for its READY line.
/// The pid is tracked by `guard`.
pub fn start_dirtier(iterations: u32, guard: &mut Guard) -> Child {
    let mut child = only_stdio(&mut Command::new(workload("dirtier")))
        .args([
            "--mib",
            "64",
            "--dirty-rate",
            "20000",
            "--report-ms",
            "0",
            "--iterations",
        ])
        .arg(iterations.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dirtier");
    guard.track_pid(child.id() as i32);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("READY"), "workload: {line}");
    child
}
