//! Remote execution (`pmig run`, `pmig ps`, `pmig kill`) on a real 3-node cluster
//! (network namespaces). Needs root and the `pmig` binary (`cargo build --release -p
//! pmig-cli`, or `PMIG_BIN`). Each test brings its own cluster up under a unique
//! prefix; a guard kills the test's processes and tears the cluster down even when an
//! assertion fails. Every wait is bounded; nothing asserts on wall-clock figures.

use pmig_tests::{pmig_bin, quick_selection, root, TestCluster};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const WAIT: Duration = Duration::from_secs(20);

pmig_tests::cluster_env!(
    /// The test's cluster ([`TestCluster`]: it kills the test's processes and
    /// tears the cluster down on drop, also on panic) and what these tests do with it.
    Env
);

impl Env {
    fn up(tag: &str) -> Env {
        Env::up_with(tag, &[])
    }

    /// With extra daemon flags.
    fn up_with(tag: &str, daemon_args: &[&str]) -> Env {
        Env(TestCluster::up(&format!("px{tag}"), "exec", |o| {
            o.daemon_args = daemon_args.iter().map(|s| s.to_string()).collect();
        }))
    }

    fn spawn(&mut self, mut cmd: Command) -> Child {
        let c = cmd.spawn().expect("spawn");
        self.pids.push(c.id() as i32);
        c
    }

    fn ps(&self, node: &str) -> serde_json::Value {
        let out = self
            .pmig(node, &["ps", "--json"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pmig ps: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    }

    /// Waits (bounded) until `pmig ps` on `node` lists a job whose command is `argv`.
    fn job(&self, node: &str, argv: &[&str]) -> serde_json::Value {
        let end = Instant::now() + WAIT;
        loop {
            let ps = self.ps(node);
            if let Some(j) = ps["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["argv"] == serde_json::json!(argv))
            {
                return j.clone();
            }
            assert!(Instant::now() < end, "no job {argv:?} in {ps}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn wait_exit(c: &mut Child, what: &str) -> std::process::ExitStatus {
    pmig_tests::wait_timeout(c, WAIT)
        .unwrap_or_else(|| panic!("{what} did not end within {WAIT:?}"))
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !matches!(
            s.rsplit_once(')')
                .and_then(|x| x.1.split_whitespace().next()),
            Some("Z") | Some("X")
        ),
        Err(_) => false,
    }
}

fn proc_state(pid: i32) -> Option<char> {
    pmig_tests::proc_state(pid)
}

/// Bytes read from a descriptor by a background thread.
#[derive(Clone)]
struct Output(pmig_tests::Collected);

impl Output {
    fn collect(r: impl Read + Send + 'static) -> Output {
        Output(pmig_tests::collect(r))
    }
    fn text(&self) -> String {
        self.0.text()
    }
    /// Everything, once the writer has closed (bounded): when the process
    /// has exited, its reader may still be behind.
    fn final_text(&self) -> String {
        self.0.text_at_eof(Duration::from_secs(10))
    }
    /// Waits (bounded) until the output contains `s` at least `n` times.
    fn wait_for(&self, s: &str, n: usize) {
        let end = Instant::now() + WAIT;
        while self.text().matches(s).count() < n {
            assert!(
                Instant::now() < end,
                "{s:?} ×{n} not seen within {WAIT:?}; output so far: {:?}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn run_carries_cwd_env_stdio_and_exit_status() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("a");
    let script = "echo cwd=$PWD; echo foo=$PMIG_TEST_FOO; echo to-stderr >&2; \
                  read line; echo got=$line; ip -4 -o addr show dev eth0 | grep -o 'inet [0-9.]*'; exit 7";
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "sh", "-c", script]);
    cmd.env("PMIG_TEST_FOO", "bar baz")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut c = env.spawn(cmd);
    c.stdin.take().unwrap().write_all(b"typed input\n").unwrap(); // then EOF
    let out = Output::collect(c.stdout.take().unwrap());
    let err = Output::collect(c.stderr.take().unwrap());
    let st = wait_exit(&mut c, "pmig run");
    let n2 = env.c().node("n2").unwrap().addr.to_string();
    let text = out.final_text();
    let err_text = err.final_text();
    assert_eq!(
        st.code(),
        Some(7),
        "status {st:?}; stdout {text:?}; stderr {err_text:?}"
    );
    assert!(
        text.contains(&format!("cwd={}\n", env.dir.display())),
        "{text:?}"
    );
    assert!(text.contains("foo=bar baz\n"), "{text:?}");
    assert!(text.contains("got=typed input\n"), "{text:?}");
    assert!(
        text.contains(&format!("inet {n2}")),
        "not run on n2 ({n2}): {text:?}"
    );
    assert!(
        !text.contains("to-stderr"),
        "stderr mixed into stdout: {text:?}"
    );
    assert!(err_text.contains("to-stderr"), "{err_text:?}");

    // Killed by a signal: 128 + signal, like a shell.
    let st = env
        .pmig(
            "n1",
            &["run", "--on", "n2", "--", "sh", "-c", "kill -TERM $$"],
        )
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
    // Unknown node, missing program: one line each.
    for (args, want) in [
        (vec!["run", "--on", "n9", "--", "true"], "unknown node `n9`"),
        (
            vec!["run", "--on", "n2", "--", "/nonexistent-cmd"],
            "cannot run `/nonexistent-cmd` on n2",
        ),
    ] {
        let o = env.pmig("n1", &args).stdin(Stdio::null()).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && e.contains(want) && e.trim().lines().count() == 1,
            "{args:?}: {e:?}"
        );
    }
}

/// Opens a pty pair; returns (master, command with the slave as its controlling
/// terminal and stdio).
fn on_pty(mut cmd: Command, rows: u16, cols: u16) -> (OwnedFd, Command) {
    let ws = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let p = nix::pty::openpty(Some(&ws), None).unwrap();
    let slave = p.slave;
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and TIOCSCTTY in the child before exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    (p.master, cmd)
}

fn set_size(master: &OwnedFd, rows: u16, cols: u16) {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ on our pty master.
    assert_eq!(
        unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
        0
    );
}

#[test]
fn pty_typing_window_size_ctrl_z_fg_and_ctrl_c() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("b");
    // A shell on n2 through a pty: typed lines, echoes, window size.
    let (master, cmd) = on_pty(env.pmig("n1", &["run", "--on", "n2", "--", "sh"]), 30, 90);
    let mut c = env.spawn(cmd);
    let mut w = std::fs::File::from(master.try_clone().unwrap());
    let out = Output::collect(std::fs::File::from(master.try_clone().unwrap()));
    w.write_all(b"echo sum=$((40+2))\r").unwrap();
    out.wait_for("sum=42", 1);
    w.write_all(b"stty size\r").unwrap();
    out.wait_for("30 90", 1);
    set_size(&master, 33, 111); // SIGWINCH to pmig run, TIOCSWINSZ on the remote pty
    w.write_all(b"stty size\r").unwrap();
    out.wait_for("33 111", 1);
    w.write_all(b"tty; exit 5\r").unwrap();
    out.wait_for("/dev/pts/", 1);
    assert_eq!(
        wait_exit(&mut c, "pmig run sh").code(),
        Some(5),
        "{}",
        out.text()
    );

    // `cat` as the job itself: Ctrl-Z stops it and pmig run; SIGCONT (`fg`) resumes
    // both; Ctrl-C ends it with SIGINT (130).
    let (master, cmd) = on_pty(env.pmig("n1", &["run", "--on", "n2", "--", "cat"]), 24, 80);
    let mut c = env.spawn(cmd);
    let pid = c.id() as i32;
    let mut w = std::fs::File::from(master.try_clone().unwrap());
    let out = Output::collect(std::fs::File::from(master.try_clone().unwrap()));
    w.write_all(b"abc\r").unwrap();
    out.wait_for("abc", 2); // the remote tty's echo, then cat's copy
    let job = env.job("n1", &["cat"]);
    let rpid = job["pid"].as_i64().unwrap() as i32;
    w.write_all(b"\x1a").unwrap(); // ^Z
    let end = Instant::now() + WAIT;
    while proc_state(pid) != Some('T') || proc_state(rpid) != Some('T') {
        assert!(
            Instant::now() < end,
            "after ^Z: pmig run {:?}, remote cat {:?}; output {:?}",
            proc_state(pid),
            proc_state(rpid),
            out.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(env.job("n3", &["cat"])["state"], "stopped");
    // SAFETY: continuing the pmig run we started (what `fg` does).
    unsafe { libc::kill(pid, libc::SIGCONT) };
    w.write_all(b"def\r").unwrap();
    out.wait_for("def", 2);
    assert_eq!(proc_state(rpid), Some('S'), "remote cat not running again");
    w.write_all(b"\x03").unwrap(); // ^C
    let st = wait_exit(&mut c, "pmig run cat");
    assert_eq!(
        st.code(),
        Some(128 + libc::SIGINT),
        "{st:?}: {:?}",
        out.text()
    );
    assert!(!alive(rpid));
}

#[test]
fn sigterm_reaches_the_job_and_sigkill_of_the_home_ends_it() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("c");
    let script = "trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "sh", "-c", script]);
    // (stderr: the shell's note about its killed `sleep`)
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut c = env.spawn(cmd);
    let out = Output::collect(c.stdout.take().unwrap());
    out.wait_for("ready", 1);
    // SAFETY: signalling the pmig run we started.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let st = wait_exit(&mut c, "pmig run");
    let text = out.final_text();
    assert_eq!(st.code(), Some(3), "{st:?}: {text:?}");
    assert!(text.contains("got-term"));

    // The home's pmig run killed outright: the job is hung up, then gone.
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "sleep", "997"]);
    cmd.stdin(Stdio::null());
    let mut c = env.spawn(cmd);
    let job = env.job("n2", &["sleep", "997"]);
    let rpid = job["pid"].as_i64().unwrap() as i32;
    assert!(alive(rpid));
    c.kill().unwrap();
    assert_eq!(c.wait().unwrap().signal(), Some(libc::SIGKILL));
    let end = Instant::now() + WAIT;
    while alive(rpid) {
        assert!(
            Instant::now() < end,
            "remote job {rpid} still alive; n2 log:\n{}",
            env.log("n2")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(env.log("n2").contains("hanging up"), "{}", env.log("n2"));
    // Gone from every table too.
    let end = Instant::now() + WAIT;
    while !env.ps("n3")["jobs"].as_array().unwrap().is_empty() {
        assert!(Instant::now() < end, "{}", env.ps("n3"));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ps_and_kill_across_nodes_and_uids() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("d");
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "sleep", "996"]);
    cmd.stdin(Stdio::null());
    let mut c = env.spawn(cmd);
    // Listed from a third node with its home and where it runs.
    let job = env.job("n3", &["sleep", "996"]);
    assert_eq!(job["home"], "n1", "{job}");
    assert_eq!(job["node"], "n2", "{job}");
    assert_eq!(job["history"], serde_json::json!(["n2"]), "{job}");
    assert_eq!(job["uid"], 0, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("n1:"), "{id}");
    let text = env
        .pmig("n2", &["ps"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&id) && text.contains("sleep 996"), "{text}");

    // Another uid may not signal it.
    let o = env
        .c()
        .command("n3", "setpriv")
        .unwrap()
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(pmig_bin())
        .args(["kill", &id])
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("permission denied"),
        "{e}"
    );
    // Root may, from any node.
    let o = env
        .pmig("n3", &["kill", "-s", "INT", &id])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        wait_exit(&mut c, "pmig run").code(),
        Some(128 + libc::SIGINT)
    );
    let o = env
        .pmig("n3", &["kill", &id])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("no job"), "{e}");

    // A node whose daemon is gone is named, the others still listed.
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "sleep", "995"]);
    cmd.stdin(Stdio::null());
    let mut c = env.spawn(cmd);
    env.job("n1", &["sleep", "995"]);
    let d3 = env.c().node("n3").unwrap().daemon_pid.unwrap();
    // SAFETY: killing the daemon of this test's own cluster.
    unsafe { libc::kill(d3, libc::SIGKILL) };
    let ps = env.ps("n1");
    let unreachable = ps["unreachable"].as_array().unwrap();
    assert!(
        unreachable.len() == 1 && unreachable[0].as_str().unwrap().starts_with("n3"),
        "{ps}"
    );
    assert_eq!(ps["jobs"].as_array().unwrap().len(), 1, "{ps}");
    c.kill().unwrap();
    let _ = c.wait();

    // A non-root caller's job runs with the caller's credentials, not the daemon's.
    let o = env
        .c()
        .command("n1", "setpriv")
        .unwrap()
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(pmig_bin())
        .args(["run", "--on", "n2", "--", "sh", "-c", "id -u; id -g; id -G"])
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "65534\n65534\n65534\n");
}

impl Env {
    fn addr(&self, node: &str) -> String {
        self.c().node(node).unwrap().listen.to_string()
    }

    /// `pmig migrate` of `pid` from `from` to `to` (stop-copy); the error text if it
    /// failed.
    fn migrate(&self, from: &str, pid: i32, to: &str) -> Result<(), String> {
        self.migrate_with(from, pid, to, "stop-copy")
    }

    fn migrate_with(&self, from: &str, pid: i32, to: &str, strategy: &str) -> Result<(), String> {
        let o = self
            .pmig(
                from,
                &[
                    "migrate",
                    "--json",
                    "--strategy",
                    strategy,
                    "--pid",
                    &pid.to_string(),
                    "--to",
                    &self.addr(to),
                ],
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }

    /// Waits (bounded) until `pmig ps` shows job `id` on `node`; returns its row.
    fn job_on(&self, id: &str, node: &str) -> serde_json::Value {
        let end = Instant::now() + WAIT;
        loop {
            let ps = self.ps("n1");
            if let Some(j) = ps["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["id"] == id)
            {
                if j["node"] == node {
                    return j.clone();
                }
            }
            assert!(Instant::now() < end, "job {id} not on {node}: {ps}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_job_keeps_its_home_through_migrations() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("e");
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "cat"]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut c = env.spawn(cmd);
    let mut input = c.stdin.take().unwrap();
    let out = Output::collect(c.stdout.take().unwrap());
    input.write_all(b"one\n").unwrap();
    out.wait_for("one\n", 1);
    let job = env.job("n3", &["cat"]);
    let id = job["id"].as_str().unwrap().to_string();
    // n2 → n3 → n1 (back to the home node itself): input and output follow. The
    // second move takes a process that still owes pages to demand-paging (the
    // destination daemon then traces it itself to finish the fetch).
    let mut pid = job["pid"].as_i64().unwrap() as i32;
    for (from, to, line, strategy) in [
        ("n2", "n3", "two\n", "demand-paging"),
        ("n3", "n1", "three\n", "post-copy"),
    ] {
        env.pids.push(pid);
        env.migrate_with(from, pid, to, strategy)
            .unwrap_or_else(|e| panic!("{from} → {to}: {e}"));
        let j = env.job_on(&id, to);
        assert!(!alive(pid) || pid == j["pid"].as_i64().unwrap() as i32);
        pid = j["pid"].as_i64().unwrap() as i32;
        input.write_all(line.as_bytes()).unwrap();
        out.wait_for(line, 1);
    }
    let j = env.job_on(&id, "n1");
    assert_eq!(j["history"], serde_json::json!(["n2", "n3", "n1"]), "{j}");
    assert_eq!(j["home"], "n1");
    drop(input); // EOF reaches cat where it runs now
    let st = wait_exit(&mut c, "pmig run cat");
    assert_eq!(st.code(), Some(0), "{st:?}");
    assert_eq!(out.final_text(), "one\ntwo\nthree\n");

    // After a move, signals still reach it, and its exit status comes home.
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "cat"]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::null());
    let mut c = env.spawn(cmd);
    let _input = c.stdin.take().unwrap();
    let job = env.job("n1", &["cat"]);
    let id = job["id"].as_str().unwrap().to_string();
    env.migrate("n2", job["pid"].as_i64().unwrap() as i32, "n3")
        .unwrap();
    let j = env.job_on(&id, "n3");
    let npid = j["pid"].as_i64().unwrap() as i32;
    env.pids.push(npid);
    let o = env
        .pmig("n2", &["kill", "-s", "TERM", &id])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        wait_exit(&mut c, "pmig run cat").code(),
        Some(128 + libc::SIGTERM)
    );

    // The home goes away after a move: the job is hung up where it runs now.
    let mut cmd = env.pmig("n1", &["run", "--on", "n2", "--", "cat"]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::null());
    let mut c = env.spawn(cmd);
    let _input = c.stdin.take().unwrap();
    let job = env.job("n1", &["cat"]);
    let id = job["id"].as_str().unwrap().to_string();
    env.migrate("n2", job["pid"].as_i64().unwrap() as i32, "n3")
        .unwrap();
    let npid = env.job_on(&id, "n3")["pid"].as_i64().unwrap() as i32;
    env.pids.push(npid);
    c.kill().unwrap();
    let _ = c.wait();
    let end = Instant::now() + WAIT;
    while alive(npid) {
        assert!(
            Instant::now() < end,
            "job {id} still alive on n3:\n{}",
            env.log("n3")
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A job on a pty moves too: a new pty of the same size on the new node; typing,
    // Ctrl-Z then `fg`, and Ctrl-C work there as before.
    let (master, cmd) = on_pty(env.pmig("n1", &["run", "--on", "n2", "--", "cat"]), 27, 99);
    let mut c = env.spawn(cmd);
    let run_pid = c.id() as i32;
    let mut w = std::fs::File::from(master.try_clone().unwrap());
    let out = Output::collect(std::fs::File::from(master.try_clone().unwrap()));
    w.write_all(b"before\r").unwrap();
    out.wait_for("before", 2);
    let job = env.job("n1", &["cat"]);
    let id = job["id"].as_str().unwrap().to_string();
    env.migrate("n2", job["pid"].as_i64().unwrap() as i32, "n3")
        .unwrap();
    let j = env.job_on(&id, "n3");
    let npid = j["pid"].as_i64().unwrap() as i32;
    env.pids.push(npid);
    assert_eq!(j["history"], serde_json::json!(["n2", "n3"]), "{j}");
    // Its controlling terminal there has the old one's size.
    let size = env
        .c()
        .command("n3", "stty")
        .unwrap()
        .args(["-F", &format!("/proc/{npid}/fd/0"), "size"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&size.stdout).trim(), "27 99");
    w.write_all(b"after\r").unwrap();
    out.wait_for("after", 2);
    w.write_all(b"\x1a").unwrap(); // ^Z
    let end = Instant::now() + WAIT;
    while proc_state(run_pid) != Some('T') || proc_state(npid) != Some('T') {
        assert!(
            Instant::now() < end,
            "after ^Z: pmig run {:?}, moved cat {:?}",
            proc_state(run_pid),
            proc_state(npid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: continuing the pmig run we started (what `fg` does).
    unsafe { libc::kill(run_pid, libc::SIGCONT) };
    w.write_all(b"again\r").unwrap();
    out.wait_for("again", 2);
    w.write_all(b"\x03").unwrap(); // ^C
    let st = wait_exit(&mut c, "pmig run cat");
    assert_eq!(
        st.code(),
        Some(128 + libc::SIGINT),
        "{st:?}: {:?}",
        out.text()
    );
    assert!(!alive(npid));
}

/// The selector's table seen from `node` (`pmig hosts status --json`).
fn hosts(env: &Env, node: &str) -> Option<serde_json::Value> {
    let o = env
        .pmig(node, &["hosts", "status", "--json"])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    serde_json::from_slice(&o.stdout).ok()
}

#[test]
fn idle_runs_on_an_idle_host_it_holds_until_the_end() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    // Short load and owner thresholds, as in the selector's own tests.
    let mut env = Env::up_with("f", &quick_selection("0.5", "3"));
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let h = hosts(&env, "n1");
        let idle = h.as_ref().and_then(|h| h["hosts"].as_array()).map(|rows| {
            rows.iter()
                .filter(|r| r["node"] != "n1" && r["state"] == "idle")
                .count()
        });
        if idle.unwrap_or(0) >= 1 {
            break;
        }
        assert!(Instant::now() < end, "no idle host: {h:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let script = "ip -4 -o addr show dev eth0 | grep -o 'inet [0-9.]*'; cat";
    let mut cmd = env.pmig(
        "n1",
        &["run", "--idle", "--class", "long", "--", "sh", "-c", script],
    );
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut c = env.spawn(cmd);
    let input = c.stdin.take().unwrap();
    let out = Output::collect(c.stdout.take().unwrap());
    out.wait_for("inet ", 1);
    let text = out.text();
    let on = ["n2", "n3"]
        .into_iter()
        .find(|n| text.contains(&format!("inet {}", env.c().node(n).unwrap().addr)))
        .unwrap_or_else(|| panic!("not run on n2 or n3: {text:?}"));
    assert_eq!(env.job("n1", &["sh", "-c", script])["node"], on);
    // The selector shows the host held by this job's home while it runs.
    let held = |env: &Env| {
        hosts(env, "n1")
            .and_then(|h| h["hosts"].as_array().cloned())
            .and_then(|rows| rows.into_iter().find(|r| r["node"] == on))
            .map(|r| r["held"].as_array().map(|a| a.len()).unwrap_or(0))
            .unwrap_or(0)
    };
    assert_eq!(held(&env), 1);
    drop(input);
    assert_eq!(wait_exit(&mut c, "pmig run --idle").code(), Some(0));
    // Returned at the end.
    let end = Instant::now() + WAIT;
    while held(&env) != 0 {
        assert!(
            Instant::now() < end,
            "{on} still held: {:?}",
            hosts(&env, "n1")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
