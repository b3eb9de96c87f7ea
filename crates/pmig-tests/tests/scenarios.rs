//! Scenario suite for issue 2: each C program in tests/scenarios/ holds one
//! kind of state and checks it itself; these tests dump and restore it.
//!
//! Needs the pmig binary: `$PMIG_BIN`, else target/release/pmig, else
//! target/debug/pmig (build it first: `cargo build --release -p pmig-cli`).
//! Needs root (ptrace, clone3 set_tid), like pmig itself.

use pmig_tests::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::MutexGuard;

fn heavy(yes: bool) -> Option<MutexGuard<'static, ()>> {
    yes.then(|| serial(&HEAVY))
}

/// The process must be running normally: not stopped, not a zombie, not traced.
fn assert_running_untraced(what: &str, pid: i32) {
    let st = proc_state(pid);
    assert!(
        matches!(st, Some('R' | 'S' | 'D')),
        "{what}: process {pid} is in state {st:?}, want running or sleeping"
    );
    let tracer = proc_status_field(pid, "TracerPid");
    assert_eq!(
        tracer.as_deref(),
        Some("0"),
        "{what}: process {pid} is still traced"
    );
}

/// Dump (the process is killed), restore, check; dump the restored process,
/// restore it again, check, quit: `pmig restore` must exit 0.
fn migrate_twice(name: &str, args: &[&str]) {
    if let Some(why) = skipped_here(name) {
        eprintln!("{name}: skipped: {why}");
        return;
    }
    let d = Dirs::new(name);
    let mut guard = Guard::new();
    let mut orig = spawn_scenario(name, args, &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    guard.track_scenario_shm(pid);

    dump_ok(pid, &d.path("img1"), false);
    let st = orig.wait(EXIT_TIMEOUT);
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "{name}: after pmig dump the original should be SIGKILLed, got {st:?}"
    );

    let mut r1 = spawn_restore(
        &format!("{name} (restore #1)"),
        &d.path("img1"),
        &d.path("pid1"),
        d.tmp.path(),
    );
    r1.check(name, PMIG_TIMEOUT);
    let pid1 = restored_pid(&r1);
    guard.track_pid(pid1);

    dump_ok(pid1, &d.path("img2"), false);
    let st1 = r1.wait(EXIT_TIMEOUT);
    let rest1 = r1.rest_of_stdout();
    let pidfile1 = read_pidfile(&d.path("pid1"), &r1);

    let mut r2 = spawn_restore(
        &format!("{name} (restore #2)"),
        &d.path("img2"),
        &d.path("pid2"),
        d.tmp.path(),
    );
    r2.check(name, PMIG_TIMEOUT);
    let pid2 = restored_pid(&r2);
    guard.track_pid(pid2);
    r2.check(name, CHECK_TIMEOUT);
    r2.quit_ok();
    let rest2 = r2.rest_of_stdout();
    let pidfile2 = read_pidfile(&d.path("pid2"), &r2);

    // Contract details, checked last so a failure here does not hide the above.
    assert_eq!(
        st1.code(),
        Some(128 + libc::SIGKILL),
        "{name}: pmig restore #1 should exit 137 when its process is killed by pmig dump"
    );
    assert!(
        rest1.is_empty(),
        "{name}: unexpected output from restored process #1: {rest1:?}"
    );
    assert!(
        rest2.is_empty(),
        "{name}: unexpected output from restored process #2: {rest2:?}"
    );
    assert_eq!(
        pidfile1, pid1,
        "{name}: pidfile of restore #1 disagrees with the process table"
    );
    assert_eq!(
        pidfile2, pid2,
        "{name}: pidfile of restore #2 disagrees with the process table"
    );
    assert_eq!(
        pid1, pid,
        "{name}: restore #1 did not get the original PID {pid}, which was free"
    );
    assert_eq!(
        pid2, pid,
        "{name}: restore #2 did not get the original PID {pid}, which was free"
    );
}

/// Waits (bounded by `timeout`) until process `pid` is in state `want`.
fn wait_for_state(what: &str, pid: i32, want: char, timeout: std::time::Duration) {
    let t0 = std::time::Instant::now();
    while proc_state(pid) != Some(want) {
        assert!(
            t0.elapsed() < timeout,
            "{what}: process {pid} is in state {:?}, want {want}",
            proc_state(pid)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A process stopped by job control stays stopped through a dump with
/// --leave-running, and is restored stopped: it answers its check only once
/// it is sent SIGCONT.
#[test]
fn a_stopped_process_is_restored_stopped() {
    let name = "basic";
    let d = Dirs::new("stopped");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario(name, &[], &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    // SAFETY: signalling the scenario process this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_for_state("the original after SIGSTOP", pid, 'T', CHECK_TIMEOUT);

    dump_ok(pid, &d.path("img"), true);
    // Let go of by the tracer, a process in a group stop wakes for a moment
    // and stops again: it must be back in the stop, not running on.
    wait_for_state(
        "the original after dump --leave-running (it should stay stopped)",
        pid,
        'T',
        CHECK_TIMEOUT,
    );
    assert_eq!(
        proc_status_field(pid, "TracerPid").as_deref(),
        Some("0"),
        "the original is still traced after dump --leave-running"
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    orig.wait(EXIT_TIMEOUT);

    let mut r = spawn_restore(
        "stopped (restore)",
        &d.path("img"),
        &d.path("pid"),
        d.tmp.path(),
    );
    let t0 = std::time::Instant::now();
    let rpid = loop {
        let kids = children_of(r.pid());
        if let [k] = kids[..] {
            break k;
        }
        assert!(
            t0.elapsed() < PMIG_TIMEOUT,
            "pmig restore made no process; stderr:\n{}",
            r.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    guard.track_pid(rpid);
    wait_for_state("the restored process", rpid, 'T', CHECK_TIMEOUT);
    // SAFETY: signalling the process this test restored.
    unsafe { libc::kill(rpid, libc::SIGCONT) };
    r.check(name, CHECK_TIMEOUT);
    r.quit_ok();
}

/// Dump with --leave-running: the original must go on unharmed; afterwards
/// (the original gone) the image must restore and pass too.
fn leave_running(name: &str, args: &[&str]) {
    if let Some(why) = skipped_here(name) {
        eprintln!("{name}: skipped: {why}");
        return;
    }
    let d = Dirs::new(name);
    let mut guard = Guard::new();
    let mut orig = spawn_scenario(name, args, &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    guard.track_scenario_shm(pid);

    dump_ok(pid, &d.path("img"), true);
    assert_running_untraced(&format!("{name} after dump --leave-running"), pid);
    orig.check(name, CHECK_TIMEOUT);
    orig.quit_ok();

    let mut r = spawn_restore(
        &format!("{name} (restore)"),
        &d.path("img"),
        &d.path("pid"),
        d.tmp.path(),
    );
    r.check(name, PMIG_TIMEOUT);
    let rpid = restored_pid(&r);
    guard.track_pid(rpid);
    r.quit_ok();
    let from_file = read_pidfile(&d.path("pid"), &r);
    assert_eq!(
        from_file, rpid,
        "{name}: pidfile disagrees with the process table"
    );
    assert_eq!(
        rpid, pid,
        "{name}: restore did not get the original PID {pid}, which was free"
    );
}

/// Two processes run one executable that is then deleted (a binary
/// replaced by an upgrade while both run): each maps the deleted file
/// privately, which does not stop either from moving. One is dumped
/// (left running, and still passing), then quits; its image restores from
/// the file made again and passes.
#[test]
fn a_deleted_executable_two_processes_run_moves() {
    let d = Dirs::new("delexe2");
    let mut guard = Guard::new();
    let copy = d.work().join("basic-copy");
    // Copied by another process: a descriptor of ours open for writing
    // would be inherited by whatever another test thread forks meanwhile,
    // and the exec below would fail with ETXTBSY.
    let st = Command::new("cp")
        .arg(scenario("basic"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success(), "cp: {st:?}");
    let spawn = |label: &str| {
        let mut cmd = Command::new(&copy);
        cmd.current_dir(d.work());
        Proc::spawn(label, cmd)
    };
    let mut a = spawn("basic-copy a");
    let mut b = spawn("basic-copy b");
    a.expect_ready();
    b.expect_ready();
    std::fs::remove_file(&copy).unwrap();
    let link = std::fs::read_link(format!("/proc/{}/exe", a.pid())).unwrap();
    assert!(link.to_string_lossy().ends_with(" (deleted)"), "{link:?}");

    dump_ok(a.pid(), &d.path("img"), true);
    a.check("basic", CHECK_TIMEOUT);
    a.quit_ok();
    let mut r = spawn_restore(
        "basic-copy (restore)",
        &d.path("img"),
        &d.path("pid"),
        d.tmp.path(),
    );
    r.check("basic", PMIG_TIMEOUT);
    let rpid = restored_pid(&r);
    guard.track_pid(rpid);
    let link = std::fs::read_link(format!("/proc/{rpid}/exe")).unwrap();
    assert!(
        link.to_string_lossy().ends_with(" (deleted)"),
        "the restored process's executable: {link:?}"
    );
    r.quit_ok();
    b.check("basic", CHECK_TIMEOUT);
    b.quit_ok();
}

macro_rules! scenario {
    ($m:ident, $name:expr, $heavy:expr) => {
        mod $m {
            #[test]
            fn migrate_twice() {
                let _h = super::heavy($heavy);
                super::migrate_twice($name, &[]);
            }
            #[test]
            fn leave_running() {
                let _h = super::heavy($heavy);
                super::leave_running($name, &[]);
            }
        }
    };
}

scenario!(basic, "basic", false);
scenario!(mem, "mem", false);
scenario!(bigheap, "bigheap", true);
scenario!(threads, "threads", false);
scenario!(robust, "robust", false);
scenario!(robust_ids, "robust_ids", false);
scenario!(owner_ids, "owner_ids", false);
scenario!(signals, "signals", false);
scenario!(fpu, "fpu", false);
scenario!(files, "files", false);
scenario!(rseq, "rseq", false);
scenario!(timers, "timers", false);
scenario!(alarm, "alarm", false);
scenario!(posix_timers, "posix_timers", false);
scenario!(identity, "identity", false);
scenario!(protect, "protect", false);
scenario!(sched, "sched", false);
/// The `cgroup` scenario joins cgroups made for it (as root, where a
/// hierarchy it can join is mounted), which outlive every copy of it.
mod cgroup {
    fn with_cgroups(run: fn(&str, &[&str])) {
        let Some(cg) = pmig_tests::ScenarioCgroups::new() else {
            eprintln!("cgroup: skipped: no cgroup could be made here (needs root and a unified or cpu hierarchy)");
            return;
        };
        let args = cg.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run("cgroup", &args);
    }
    #[test]
    fn migrate_twice() {
        with_cgroups(super::migrate_twice);
    }
    #[test]
    fn leave_running() {
        with_cgroups(super::leave_running);
    }
}
scenario!(prctl, "prctl", false);
scenario!(noreserve, "noreserve", false);
scenario!(mdwe, "mdwe", false);
scenario!(timens, "timens", false);
scenario!(pipes, "pipes", false);
scenario!(socketpair, "socketpair", false);
scenario!(lonesock, "lonesock", false);
scenario!(fifo, "fifo", false);
scenario!(amx, "amx", false);
scenario!(eventfd, "eventfd", false);
scenario!(ghost, "ghost", false);
scenario!(memfd, "memfd", false);
scenario!(sysvshm, "sysvshm", false);
scenario!(sharedanon, "sharedanon", false);
scenario!(delexe, "delexe", false);
scenario!(epoll, "epoll", false);
scenario!(signalfd, "signalfd", false);
scenario!(timerfd, "timerfd", false);
scenario!(inotify, "inotify", false);
scenario!(topfds, "topfds", false);
scenario!(novdso, "novdso", false);
scenario!(pthreads, "pthreads", false);
scenario!(loader, "loader", false);
scenario!(jit, "jit", false);
scenario!(dropuid, "dropuid", false);
scenario!(mlocked, "mlocked", false);
scenario!(seccomp, "seccomp", false);
scenario!(sleeps, "sleeps", false);
scenario!(heldlocks, "heldlocks", false);
scenario!(deaddirs, "deaddirs", false);

/// The first field of `/proc/PID/task/TID/syscall`: the call a blocked
/// thread is in.
fn syscall_of(pid: i32, tid: i32) -> Option<String> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    t.split_whitespace().next().map(String::from)
}

/// A stop resumed on the source (here a dump with --leave-running, in a
/// migration pmig's own earlier freezes, or job control) leaves a thread
/// that was sleeping in `restart_syscall`; a later capture there must
/// restore the original call (it finishes its sleep), not let it fail
/// with EINTR. Calls that a stop ends with EINTR (epoll_wait,
/// sigtimedwait) must be restarted, on the source and after the restore.
#[test]
fn calls_restarting_after_an_earlier_stop_are_restored_not_failed() {
    let d = Dirs::new("sleeps-restarting");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario("sleeps", &[], &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    dump_ok(pid, &d.path("img1"), true);
    // Its five sleepers with a restart block (one-hour timeouts, and a poll
    // with none) now restart their calls; the epoll_wait and the sigtimedwait, which the
    // stop would have ended with EINTR, are back in their own calls.
    // Bounded: until every one is blocked again.
    let calls = || {
        let mut c: Vec<String> = tids_of(pid)
            .into_iter()
            .filter_map(|t| syscall_of(pid, t))
            .collect();
        c.sort();
        c
    };
    let want = |c: &[String]| {
        let n = |nr: &str| c.iter().filter(|s| s.as_str() == nr).count();
        n("219") == 5 && n("232") == 1 && n("128") == 1
    };
    let settled = (0..5000).any(|_| {
        want(&calls()) || {
            std::thread::sleep(std::time::Duration::from_millis(1));
            false
        }
    });
    assert!(
        settled,
        "the threads' calls after the first dump: {:?}",
        calls()
    );
    dump_ok(pid, &d.path("img2"), false);
    orig.wait(EXIT_TIMEOUT);
    let mut r = spawn_restore(
        "sleeps (restore of the second dump)",
        &d.path("img2"),
        &d.path("pid"),
        d.tmp.path(),
    );
    r.check("sleeps", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.quit_ok();
}

/// The tids of `pid`'s threads, sorted.
fn tids_of(pid: i32) -> Vec<i32> {
    let mut t: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    t.sort();
    t
}

/// Restores `name`'s image next to its still running original, so that
/// the copy gets a new pid and new tids (`threads` of them), and has both
/// pass their checks.
fn restore_next_to_the_original(name: &str, threads: usize) {
    let d = Dirs::new(&format!("{name}_new_ids"));
    let mut guard = Guard::new();
    let mut orig = spawn_scenario(name, &[], &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    dump_ok(pid, &d.path("img"), true);
    let mut r = spawn_restore(
        &format!("{name} (restore next to the original)"),
        &d.path("img"),
        &d.path("pid"),
        d.tmp.path(),
    );
    r.check(name, PMIG_TIMEOUT);
    let rpid = restored_pid(&r);
    guard.track_pid(rpid);
    let (old, new) = (tids_of(pid), tids_of(rpid));
    assert_eq!(old.len(), threads, "original threads: {old:?}");
    assert_eq!(new.len(), threads, "restored threads: {new:?}");
    assert!(
        new.iter().all(|t| !old.contains(t)),
        "the copy shares ids with the running original: {old:?} {new:?}"
    );
    r.check(name, CHECK_TIMEOUT);
    orig.check(name, CHECK_TIMEOUT);
    r.quit_ok();
    orig.quit_ok();
}

/// The copy's thread-directed POSIX timer must aim at the worker thread
/// under its new tid (the scenario checks that every such signal reaches
/// the worker).
#[test]
fn posix_timers_restore_under_new_ids() {
    restore_next_to_the_original("posix_timers", 2);
}

/// The mutexes the copy's threads hold must name their new ids: those
/// found in the image's pages as they are verified (owner_ids), and those
/// on each thread's robust list (robust_ids).
#[test]
fn held_mutexes_restore_under_new_ids() {
    restore_next_to_the_original("owner_ids", 3);
    restore_next_to_the_original("robust_ids", 3);
}

/// Every scenario passes its own checks (three times) without pmig.
#[test]
fn scenarios_pass_without_migration() {
    let _h = serial(&HEAVY);
    let list: &[(&str, &[&str])] = &[
        ("basic", &[]),
        ("basic", &["pmig-badimg"]),
        ("mem", &[]),
        ("protect", &[]),
        ("bigheap", &[]),
        ("threads", &[]),
        ("robust", &[]),
        ("robust_ids", &[]),
        ("owner_ids", &[]),
        ("signals", &[]),
        ("fpu", &[]),
        ("files", &[]),
        ("rseq", &[]),
        ("timers", &[]),
        ("alarm", &[]),
        ("posix_timers", &[]),
        ("identity", &[]),
        ("sched", &[]),
        ("prctl", &[]),
        ("noreserve", &[]),
        ("mdwe", &[]),
        ("timens", &[]),
        ("pipes", &[]),
        ("socketpair", &[]),
        ("lonesock", &[]),
        ("fifo", &[]),
        ("amx", &[]),
        ("eventfd", &[]),
        ("ghost", &[]),
        ("memfd", &[]),
        ("sysvshm", &[]),
        ("sharedanon", &[]),
        ("delexe", &[]),
        ("epoll", &[]),
        ("signalfd", &[]),
        ("timerfd", &[]),
        ("inotify", &[]),
        ("topfds", &[]),
        ("novdso", &[]),
        ("pthreads", &[]),
        ("loader", &[]),
        ("jit", &[]),
        ("seccomp", &[]),
        ("dropuid", &[]),
        ("mlocked", &[]),
        ("locks", &[]),
        ("heldlocks", &[]),
        ("deaddirs", &[]),
        ("refuse", &["plain"]),
        ("refuse", &["socket"]),
        ("refuse", &["child"]),
        ("refuse", &["iouring"]),
    ];
    let mut failures = Vec::new();
    for &(name, args) in list {
        let r = std::panic::catch_unwind(|| {
            let d = Dirs::new(name);
            let mut p = spawn_scenario(name, args, &d.work());
            let first = p.line(READY_TIMEOUT, "READY");
            if first.starts_with("SKIP") {
                eprintln!("{name} {args:?}: {first}");
                return;
            }
            assert_eq!(
                first,
                "READY",
                "{name}: first line; stderr:\n{}",
                p.stderr()
            );
            for _ in 0..3 {
                p.check(name, CHECK_TIMEOUT);
            }
            p.quit_ok();
        });
        if r.is_err() {
            failures.push(format!("{name} {args:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "scenarios failing without migration: {failures:?}"
    );
}

// ---------------------------------------------------------------------------
// refusals: pmig dump exits 1 with one line naming the resource, and the
// process goes on unharmed.

fn dump_refused(what: &str, pid: i32, dir: &Path, keywords: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let o = pmig(
        &[
            "dump",
            "--pid",
            &pid.to_string(),
            "--dir",
            dir.to_str().unwrap(),
        ],
        PMIG_TIMEOUT,
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: pmig dump should refuse with exit status 1, got {:?}; stderr:\n{}",
        o.status,
        o.stderr
    );
    assert_one_line_error(what, &o, keywords);
}

fn refusal(mode: &str, keywords: &[&str]) {
    let what = format!("refuse {mode}");
    let d = Dirs::new(&format!("refuse-{mode}"));
    let mut p = spawn_scenario("refuse", &[mode], &d.work());
    let first = p.line(READY_TIMEOUT, "READY");
    if first.starts_with("SKIP") {
        eprintln!("{what}: skipped: {first}");
        return;
    }
    assert_eq!(first, "READY", "{what}: stderr:\n{}", p.stderr());
    p.check("refuse", CHECK_TIMEOUT);
    dump_refused(&what, p.pid(), &d.path("img"), keywords);
    assert_running_untraced(&what, p.pid());
    p.check("refuse", CHECK_TIMEOUT);
    p.quit_ok();
}

#[test]
fn refuse_seccomp_filter_with_user_notification() {
    refusal("seccomp-notify", &["SECCOMP_RET_USER_NOTIF", "supervisor"]);
}

#[test]
fn refuse_mqueue() {
    refusal("mqueue", &["POSIX message queue"]);
}

#[test]
fn refuse_aio() {
    refusal("aio", &["asynchronous I/O context"]);
}

#[test]
fn refuse_shared_anonymous_memory_seen_twice() {
    refusal("aliasedshm", &["shared anonymous memory mapped twice"]);
}

#[test]
fn refuse_zombie_child() {
    refusal("zombie", &["exited child", "exit status"]);
}

#[test]
fn refuse_proc_file() {
    refusal("procfd", &["/proc directory"]);
}

#[test]
fn refuse_signal_driven_io() {
    refusal("sigio", &["signal-driven I/O", "O_ASYNC"]);
}

/// A thread with a working directory, root and umask of its own: the
/// restored threads would all share the process's.
#[test]
fn refuse_thread_with_its_own_working_directory() {
    refusal("threadfs", &["working directory", "unshare(CLONE_FS)"]);
}

/// A thread whose credentials are not the process's (checked before the
/// freeze and again once frozen, beside the capture).
#[test]
fn refuse_thread_with_credentials_of_its_own() {
    refusal("threadcreds", &["threads with different credentials"]);
}

#[test]
fn refuse_socket() {
    refusal("socket", &["unix socket bound to a name"]);
}

/// A unix socket on stdout whose other end the process does not hold (here
/// ours, as a supervisor's or journald's would be) is stdio: the restore
/// replaces it as it replaces a pipe there (with its own stdout), and the
/// program answers there; nothing more comes on the old socket.
#[test]
fn a_stdout_socket_that_leads_out_is_replaced_like_a_pipe() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::process::Stdio;
    let _h = serial(&HEAVY);
    let d = Dirs::new("stdout-socket");
    let mut guard = Guard::new();
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(CHECK_TIMEOUT)).unwrap();
    let mut cmd = Command::new(scenario("basic"));
    cmd.current_dir(d.work())
        .stdin(Stdio::piped())
        .stdout(Stdio::from(OwnedFd::from(theirs)))
        .stderr(Stdio::null());
    only_stdio(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    // The command holds our copy of the child's end until dropped.
    drop(cmd);
    let pid = child.id() as i32;
    guard.track_pid(pid);
    let mut from = BufReader::new(ours.try_clone().unwrap());
    let mut line = String::new();
    from.read_line(&mut line).unwrap();
    assert_eq!(line, "READY\n");
    let mut to = child.stdin.take().unwrap();
    to.write_all(b"check\n").unwrap();
    line.clear();
    from.read_line(&mut line).unwrap();
    assert_eq!(line, "PASS basic\n", "before the dump");

    dump_ok(pid, &d.path("img"), false);
    let st = child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    let mut r = spawn_restore(
        "basic (stdout socket)",
        &d.path("img"),
        &d.path("pid"),
        d.tmp.path(),
    );
    r.check("basic", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.check("basic", CHECK_TIMEOUT);
    r.quit_ok();
    // The old socket's peer died with the original: end of file, and not a
    // byte of the restored process's answers.
    let mut rest = Vec::new();
    from.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "more came on the old socket: {rest:?}");
}

#[test]
fn refuse_child_process() {
    refusal("child", &["child"]);
}

/// A lock its open file owns, on an open file another process shares:
/// letting it go in the original would take it from that process too.
#[test]
fn refuse_flock_on_an_open_file_another_process_shares() {
    refusal(
        "sharedflock",
        &["lock on an open file another process shares", "locked"],
    );
}

/// A lock another process waits for would go to the waiter the moment the
/// original let go of it.
#[test]
fn refuse_a_lock_another_process_waits_for() {
    refusal("waitedlock", &["file lock", "waits for"]);
}

/// A lock on a file another process has open too: that process could
/// take it while this one moves (between the release and the take), so the
/// freeze waits for a moment without it, as for every lock before they
/// moved; held throughout, it is refused.
#[test]
fn refuse_a_lock_held_throughout_on_a_file_another_process_has_open() {
    refusal("openedlock", &["has open too", "locked"]);
}

#[test]
fn refuse_file_lease() {
    refusal("lease", &["file lease", "leased"]);
}

/// A lock taken and let go over and over (held nearly all the time): the
/// dump catches it with or without the lock, and the restored thread,
/// which checks in every round that its lock is really held, goes on.
/// Moved twice, as the other scenarios.
#[test]
fn a_lock_taken_and_let_go_over_and_over_is_dumped_between() {
    let name = "locks";
    let d = Dirs::new(name);
    let mut guard = Guard::new();
    let mut p = spawn_scenario(name, &[], &d.work());
    p.expect_ready();
    p.check(name, CHECK_TIMEOUT);
    let mut pid = p.pid();
    let mut running = p;
    for hop in 1..=2 {
        let img = d.path(&format!("img{hop}"));
        std::fs::create_dir_all(&img).unwrap();
        // A wait far longer than a moment without the lock takes to come.
        let o = pmig(
            &[
                "dump",
                "--pid",
                &pid.to_string(),
                "--dir",
                img.to_str().unwrap(),
                "--busy-wait-ms",
                "120000",
            ],
            PMIG_TIMEOUT,
        );
        assert!(
            o.status.success(),
            "{name}: dump #{hop} failed ({:?}); stderr:\n{}",
            o.status,
            o.stderr
        );
        let _ = running.wait(EXIT_TIMEOUT);
        let mut r = spawn_restore(
            &format!("{name} (restore #{hop})"),
            &img,
            &d.path(&format!("pid{hop}")),
            d.tmp.path(),
        );
        r.check(name, PMIG_TIMEOUT);
        pid = restored_pid(&r);
        guard.track_pid(pid);
        r.check(name, CHECK_TIMEOUT);
        running = r;
    }
    running.quit_ok();
}

/// A restore whose locks another process holds here (the original, left
/// running by its dump) fails with one line naming a lock and its holder,
/// and leaves no process behind; the original keeps its locks.
#[test]
fn a_restore_whose_lock_another_process_holds_fails_naming_it() {
    let name = "heldlocks";
    let what = "restore next to the lock holder";
    let d = Dirs::new("heldlocks-taken");
    let _guard = Guard::new();
    let mut orig = spawn_scenario(name, &[], &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    dump_ok(pid, &d.path("img"), true);
    orig.check(name, CHECK_TIMEOUT);
    let pidfile = d.path("pid");
    let mut r = spawn_restore(what, &d.path("img"), &pidfile, d.tmp.path());
    // Were a process left running after all, it would answer this.
    r.try_send("check");
    r.close_stdin();
    let st = r.wait(PMIG_TIMEOUT);
    let stdout = r.rest_of_stdout();
    let stderr = r.stderr_final();
    assert_eq!(
        st.code(),
        Some(1),
        "{what}: pmig restore should fail, got {st:?}; stderr:\n{stderr}"
    );
    assert_one_line_error(
        what,
        &Output {
            status: st,
            stdout: stdout.clone(),
            stderr,
        },
        &["lock", &format!("held by process {pid}")],
    );
    assert!(
        stdout.is_empty(),
        "{what}: a restored process answered: {stdout:?}"
    );
    assert!(!pidfile.exists(), "{what}: a pidfile was written");
    // The original still holds every lock (its check asks the kernel).
    orig.check(name, CHECK_TIMEOUT);
    orig.quit_ok();
}

#[test]
fn refuse_seccomp_strict_mode() {
    refusal("seccomp-strict", &["seccomp"]);
}

#[test]
fn refuse_pipe_shared_with_another_process() {
    refusal("sharedpipe", &["pipe shared with another process"]);
}

#[test]
fn refuse_named_pipe_shared_with_another_process() {
    refusal("sharedfifo", &["named pipe shared with another process"]);
}

#[test]
fn refuse_deleted_named_pipe() {
    refusal("deletedfifo", &["deleted special file"]);
}

#[test]
fn refuse_eventfd_shared_with_another_process() {
    refusal("sharedeventfd", &["eventfd shared with another process"]);
}

#[test]
fn refuse_epoll_shared_with_another_process() {
    refusal("sharedepoll", &["epoll shared with another process"]);
}

#[test]
fn refuse_timerfd_shared_with_another_process() {
    refusal("sharedtimerfd", &["timerfd shared with another process"]);
}

#[test]
fn refuse_inotify_shared_with_another_process() {
    refusal(
        "sharedinotify",
        &["inotify instance shared with another process"],
    );
}

#[test]
fn refuse_inotify_with_events_not_yet_read() {
    refusal(
        "inotifyqueued",
        &["inotify instance with", "events not yet read"],
    );
}

#[test]
fn refuse_pipe_open_for_reading_and_writing() {
    refusal("rdwrpipe", &["both reading and writing"]);
}

#[test]
fn refuse_io_uring() {
    refusal("iouring", &["io_uring", "io-uring", "uring"]);
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// Already traced: under `strace -o /dev/null` when strace is installed (and
/// PMIG_TEST_TRACER is not `ptracer`), else under our own ptracer helper.
#[test]
fn refuse_already_traced() {
    let d = Dirs::new("refuse-traced");
    let mut guard = Guard::new();
    let use_strace =
        on_path("strace") && std::env::var("PMIG_TEST_TRACER").as_deref() != Ok("ptracer");
    let mut cmd = if use_strace {
        let mut c = Command::new("strace");
        c.args(["-o", "/dev/null"])
            .arg(scenario("refuse"))
            .arg("plain");
        c
    } else {
        let mut c = Command::new(scenario("ptracer"));
        c.arg(scenario("refuse")).arg("plain");
        c
    };
    cmd.current_dir(d.work());
    let what = if use_strace {
        "refuse plain under strace"
    } else {
        "refuse plain under ptracer"
    };
    let mut p = Proc::spawn_tree(what, cmd);
    p.expect_ready();
    let kids = children_of(p.pid());
    assert_eq!(
        kids.len(),
        1,
        "{what}: tracer {} has children {kids:?}",
        p.pid()
    );
    let pid = kids[0];
    guard.track_pid(pid);
    let tracer = p.pid().to_string();
    assert_eq!(
        proc_status_field(pid, "TracerPid").as_deref(),
        Some(tracer.as_str()),
        "{what}: not traced?"
    );
    p.check("refuse", CHECK_TIMEOUT);
    dump_refused(what, pid, &d.path("img"), &["trace"]);
    assert_eq!(
        proc_status_field(pid, "TracerPid").as_deref(),
        Some(tracer.as_str()),
        "{what}: tracer changed"
    );
    p.check("refuse", CHECK_TIMEOUT);
    p.quit_ok();
}

/// Memory shared with another live process (not a child): a SysV shm segment
/// attached by two unrelated processes. (Shared *file* mappings, including
/// /dev/shm files, are supported and covered by the mem scenario.)
#[test]
fn refuse_sysv_shm_shared_with_other_process() {
    let d = Dirs::new("refuse-shm");
    let mut guard = Guard::new();
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 1 << 20, libc::IPC_CREAT | 0o600) };
    assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
    guard.track_shm(id);
    let ids = id.to_string();
    let mut a = spawn_scenario("refuse", &["sysvshm", &ids, "0"], &d.work());
    let mut b = spawn_scenario("refuse", &["sysvshm", &ids, "1"], &d.work());
    a.expect_ready();
    b.expect_ready();
    a.check("refuse", CHECK_TIMEOUT);
    b.check("refuse", CHECK_TIMEOUT);
    let what = "refuse sysvshm";
    dump_refused(
        what,
        a.pid(),
        &d.path("img"),
        &["shm", "shared", "sysv", "ipc"],
    );
    assert_running_untraced(what, a.pid());
    a.check("refuse", CHECK_TIMEOUT);
    b.check("refuse", CHECK_TIMEOUT);
    a.quit_ok();
    b.quit_ok();
}

// ---------------------------------------------------------------------------
// bad images: pmig restore exits 1 with one line, and creates no process.

const BADIMG_COMM: &str = "pmig-badimg";

/// A `basic` scenario named BADIMG_COMM, dumped into `d`'s `img` (it exits
/// with the dump): the image of the tests that restore, refuse or hold it.
/// None of that name may be running before.
fn dumped_basic(d: &Dirs, what: &str) -> std::path::PathBuf {
    assert!(
        pids_with_comm(BADIMG_COMM).is_empty(),
        "{what}: a {BADIMG_COMM} process is already running"
    );
    let mut orig = spawn_scenario("basic", &[BADIMG_COMM], &d.work());
    orig.expect_ready();
    let img = d.path("img");
    dump_ok(orig.pid(), &img, false);
    orig.wait(EXIT_TIMEOUT);
    img
}

/// A restore from an image refuses, before anything is created, a file
/// the process mapped shared whose modification time changed since the
/// dump (the `mem` scenario's `shared.dat`): that may be another file at
/// the same path. Only a skeleton, built from a capture taken while the
/// process ran and wrote it, takes such a file by its size, and checks
/// its times against the capture of the stop at its bring-up.
#[test]
fn a_restore_refuses_a_shared_mappings_file_changed_since_the_dump() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("sharedchanged");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario("mem", &[], &d.work());
    orig.expect_ready();
    let img = d.path("img");
    dump_ok(orig.pid(), &img, false);
    orig.wait(EXIT_TIMEOUT);
    let file = d.work().join("shared.dat");
    let earlier = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(earlier)
        .unwrap();
    let pidfile = d.path("pid");
    let mut r = spawn_restore("shared file changed", &img, &pidfile, d.tmp.path());
    r.close_stdin();
    let st = r.wait(PMIG_TIMEOUT);
    let err = r.stderr_final();
    // Were a process restored after all, it goes with the test.
    if let Some(p) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        guard.track_pid(p);
    }
    assert!(!st.success(), "restored; stderr:\n{err}");
    assert!(
        err.contains("shared.dat") && err.contains("changed since the dump"),
        "stderr: {err}"
    );
    assert!(!pidfile.exists(), "a pidfile was written");
}

fn bad_image(what: &str, corrupt: impl FnOnce(&Path), keywords: &[&str]) {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("badimg");
    let mut guard = Guard::new();
    let img = dumped_basic(&d, what);
    corrupt(&img);

    let pidfile = d.path("pid");
    let mut r = spawn_restore(what, &img, &pidfile, d.tmp.path());
    // Were a process created after all, it would answer this and exit at EOF.
    r.try_send("check");
    r.close_stdin();
    let st = r.wait(PMIG_TIMEOUT);
    let stdout = r.rest_of_stdout();
    let stderr = r.stderr_final();
    let leftovers = pids_with_comm(BADIMG_COMM);
    for &p in &leftovers {
        guard.track_pid(p);
    }
    assert_eq!(
        st.code(),
        Some(1),
        "{what}: pmig restore should fail with exit status 1, got {st:?}; stderr:\n{stderr}"
    );
    assert_one_line_error(
        what,
        &Output {
            status: st,
            stdout: stdout.clone(),
            stderr,
        },
        keywords,
    );
    assert!(
        stdout.is_empty(),
        "{what}: a restored process answered: {stdout:?}"
    );
    assert!(
        leftovers.is_empty(),
        "{what}: processes named {BADIMG_COMM} exist after the failed restore: {leftovers:?}"
    );
    assert!(
        !pidfile.exists(),
        "{what}: pmig restore wrote a pidfile although it failed"
    );
}

/// `pmig restore --wait-go` (what a destination daemon starts before the
/// image arrives) does nothing until `go`: at end of input it exits with
/// status 3, creates no process and writes no pidfile; the same image then
/// restores normally.
#[test]
fn restore_waiting_for_go_does_nothing_without_it() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("waitgo");
    let mut guard = Guard::new();
    let img = dumped_basic(&d, "--wait-go");

    let pidfile = d.path("pid");
    let (img_s, pid_s) = (img.to_str().unwrap(), pidfile.to_str().unwrap());
    // pmig() gives it /dev/null as stdin: end of input at once.
    let o = pmig(
        &[
            "restore",
            "--wait-go",
            "--detach",
            "--json",
            "--dir",
            img_s,
            "--pidfile",
            pid_s,
        ],
        PMIG_TIMEOUT,
    );
    let leftovers = pids_with_comm(BADIMG_COMM);
    for &p in &leftovers {
        guard.track_pid(p);
    }
    assert_eq!(o.status.code(), Some(3), "stderr:\n{}", o.stderr);
    assert!(o.stderr.contains("not started"), "stderr: {}", o.stderr);
    assert!(o.stdout.is_empty(), "stdout: {}", o.stdout);
    assert!(leftovers.is_empty(), "processes exist: {leftovers:?}");
    assert!(!pidfile.exists(), "a pidfile was written");

    // The image is untouched: it restores and passes its own check.
    let mut r = spawn_restore("after --wait-go", &img, &pidfile, d.tmp.path());
    r.check("basic", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.quit_ok();
}

/// `go verified`, which a daemon writes once it has verified the image in its
/// own staging directory: the restore does not compute the parts' checksums
/// again, but still checks the manifest, so a corrupt one is refused before
/// anything is created; a good image restores and passes its check.
#[test]
fn restore_told_go_verified_checks_the_manifest_and_restores() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("goverified");
    let mut guard = Guard::new();
    let img = dumped_basic(&d, "go verified");

    let (pidfile, cmds, out) = (d.path("pid"), d.path("cmds"), d.path("out"));
    std::fs::write(&cmds, "check\n").unwrap();
    let restore = |dir: &Path| {
        let mut cmd = Command::new(pmig_bin());
        cmd.args(["restore", "--wait-go", "--detach", "--dir"])
            .arg(dir)
            .arg("--pidfile")
            .arg(&pidfile)
            .arg("--stdin")
            .arg(&cmds)
            .arg("--stdout")
            .arg(&out)
            .args(["--stderr", "/dev/null"]);
        let mut r = Proc::spawn("restore told go verified", cmd);
        r.send("go verified");
        r.close_stdin();
        r
    };

    let bad = d.path("bad");
    std::fs::create_dir_all(&bad).unwrap();
    for e in std::fs::read_dir(&img).unwrap().flatten() {
        std::fs::copy(e.path(), bad.join(e.file_name())).unwrap();
    }
    edit(&bad.join("manifest.pmig"), |m| {
        let i = m.len() - 3;
        m[i] ^= 0xff;
    });
    let mut r = restore(&bad);
    let st = r.wait(PMIG_TIMEOUT);
    let leftovers = pids_with_comm(BADIMG_COMM);
    for &p in &leftovers {
        guard.track_pid(p);
    }
    assert!(!st.success(), "a corrupt manifest was restored");
    let err = r.stderr_final().to_lowercase();
    assert!(
        ["manifest", "corrupt", "checksum"]
            .iter()
            .any(|k| err.contains(k)),
        "stderr: {err}"
    );
    assert!(leftovers.is_empty(), "processes exist: {leftovers:?}");
    assert!(!pidfile.exists(), "a pidfile was written");

    let mut r = restore(&img);
    let st = r.wait(PMIG_TIMEOUT);
    assert!(st.success(), "stderr: {}", r.stderr_final());
    guard.track_pid(read_pidfile(&pidfile, &r));
    // Bounded: about 10 s.
    let mut text = String::new();
    for _ in 0..200 {
        text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.contains("PASS") || text.contains("FAIL") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        text.contains("PASS basic"),
        "the restored process said: {text:?}"
    );
    // It quits (it follows its command file); bounded: about 10 s.
    std::fs::write(&cmds, "check\nquit\n").unwrap();
    for _ in 0..200 {
        if pids_with_comm(BADIMG_COMM).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        pids_with_comm(BADIMG_COMM).is_empty(),
        "the restored process did not quit"
    );
}

/// `pmig restore --lazy --hold` prints the finished process while it is still
/// stopped, and kills it when no `release` comes: nothing of it is left, not
/// even its pid file, and the image still restores.
#[test]
fn held_restore_is_killed_without_release() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("hold");
    let mut guard = Guard::new();
    let img = dumped_basic(&d, "--hold");

    let pidfile = d.path("pid");
    let mut cmd = Command::new(pmig_bin());
    cmd.args(["restore", "--lazy", "--hold", "--detach", "--json", "--dir"])
        .arg(&img)
        .arg("--pidfile")
        .arg(&pidfile)
        .args(["--stdout", "/dev/null", "--stderr", "/dev/null"]);
    let mut r = Proc::spawn("held restore", cmd);
    let line = r.line(PMIG_TIMEOUT, "the held process's JSON line");
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert_eq!(v["held"], true, "{line}");
    let pid = v["pid"].as_i64().expect("pid") as i32;
    guard.track_pid(pid);
    // Held: stopped under ptrace by the restore.
    assert_eq!(proc_state(pid), Some('t'), "pid {pid} is not held");
    assert_eq!(pids_with_comm(BADIMG_COMM), vec![pid]);
    r.close_stdin();
    let st = r.wait(EXIT_TIMEOUT);
    assert!(!st.success(), "the restore succeeded without release");
    let err = r.stderr_final();
    assert!(err.contains("not released"), "stderr: {err}");
    assert!(
        pids_with_comm(BADIMG_COMM).is_empty(),
        "the held process is still there"
    );
    assert!(
        !pidfile.exists(),
        "the pid file of a killed process is left"
    );

    // The image is untouched: it restores and passes its own check.
    let mut r = spawn_restore("after --hold", &img, &pidfile, d.tmp.path());
    r.check("basic", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.quit_ok();
}

/// A primed holder (`pmig daemon --hold PID --hold-wait`, as pre-copy starts
/// one during its rounds) prepares and then leaves the process running until
/// `go`: without it (end of input) the holder exits and the process never
/// stopped; with it, the process is frozen and captured, and `resume` lets it
/// run on, intact.
#[test]
fn primed_holder_touches_the_process_only_after_go() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("primed");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario("basic", &[], &d.work());
    orig.expect_ready();
    guard.track_pid(orig.pid());
    let opid = orig.pid();
    let pid = opid.to_string();
    let holder = |dir: &Path| {
        let mut cmd = Command::new(pmig_bin());
        cmd.args(["daemon", "--hold", &pid, "--hold-wait", "--image-dir"])
            .arg(dir);
        Proc::spawn("primed holder", cmd)
    };
    let ready = |h: &mut Proc| {
        let l = h.line(PMIG_TIMEOUT, "ready");
        assert_eq!(l, r#""ready""#, "stderr: {}", h.stderr());
    };
    let running = |what: &str| {
        let st = proc_state(opid);
        assert!(
            matches!(st, Some('S') | Some('R')),
            "{what}: the process is in state {st:?}"
        );
    };

    // Ready, refreshed, then let go without `go`.
    let img = d.path("img1");
    std::fs::create_dir_all(&img).unwrap();
    let mut h = holder(&img);
    ready(&mut h);
    running("primed");
    h.send("refresh");
    ready(&mut h);
    running("after a refresh");
    h.close_stdin();
    let st = h.wait(EXIT_TIMEOUT);
    assert_eq!(st.code(), Some(0), "stderr: {}", h.stderr());
    assert!(
        std::fs::read_dir(&img).unwrap().next().is_none(),
        "a holder not told to go wrote an image"
    );
    running("after the holder exited");
    orig.check("basic", PMIG_TIMEOUT);

    // `go`: frozen and captured; `resume`: it runs on.
    let img = d.path("img2");
    std::fs::create_dir_all(&img).unwrap();
    let mut h = holder(&img);
    ready(&mut h);
    h.send("go");
    let l = h.line(PMIG_TIMEOUT, "captured");
    assert!(
        l.starts_with(r#"{"captured":"#),
        "{l}; stderr: {}",
        h.stderr()
    );
    assert_eq!(proc_state(opid), Some('t'), "not frozen after go");
    assert!(img.join("manifest.pmig").exists(), "no image after go");
    h.send("resume");
    let l = h.line(PMIG_TIMEOUT, "done");
    assert_eq!(l, r#"{"done":"resumed"}"#, "stderr: {}", h.stderr());
    h.close_stdin();
    h.wait(EXIT_TIMEOUT);
    running("after resume");
    orig.check("basic", PMIG_TIMEOUT);
    orig.quit_ok();
}

/// A holder told the start time the migration recorded for its pid touches
/// only that process: when the pid names another process (as after an exit
/// and a reuse of the pid), it captures nothing, says why, and the process
/// under the pid runs on, never stopped. Checked both for a holder that
/// captures at once and for a primed one (which refuses before `ready`).
#[test]
fn holder_leaves_a_process_that_reused_the_pid_alone() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("reused");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario("basic", &[], &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    guard.track_pid(pid);
    let started = pmig_engine::procfs::start_time(pid).expect("start time");
    // The start time of a process that had the pid before this one.
    let earlier = started.checked_sub(1).expect("started after boot");
    for primed in [false, true] {
        let img = d.path(&format!("img-{primed}"));
        std::fs::create_dir_all(&img).unwrap();
        let mut cmd = Command::new(pmig_bin());
        cmd.args(["daemon", "--hold", &pid.to_string()])
            .args(["--hold-started", &earlier.to_string(), "--image-dir"])
            .arg(&img);
        if primed {
            cmd.arg("--hold-wait");
        }
        let mut h = Proc::spawn("holder", cmd);
        // Its first word, before any check or `ready`.
        let l = h.line(PMIG_TIMEOUT, "the holder's refusal");
        assert!(
            l.contains("has exited") && l.contains(&pid.to_string()),
            "primed {primed}: {l}; stderr: {}",
            h.stderr()
        );
        h.close_stdin();
        let st = h.wait(EXIT_TIMEOUT);
        assert!(!st.success(), "primed {primed}: the holder succeeded");
        assert!(
            !img.join("manifest.pmig").exists(),
            "primed {primed}: an image of the wrong process was written"
        );
        let state = proc_state(pid);
        assert!(
            matches!(state, Some('S') | Some('R')),
            "primed {primed}: the process is in state {state:?}"
        );
        orig.check("basic", PMIG_TIMEOUT);
    }
    orig.quit_ok();
}

/// After `handover` the destination runs the process: a holder then told to
/// `resume` kills the original instead, so that it never runs next to its
/// copy.
#[test]
fn holder_never_resumes_the_original_after_the_handover() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("handedover");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario("basic", &[], &d.work());
    orig.expect_ready();
    let pid = orig.pid();
    guard.track_pid(pid);
    let img = d.path("img");
    std::fs::create_dir_all(&img).unwrap();
    let mut cmd = Command::new(pmig_bin());
    cmd.args(["daemon", "--hold", &pid.to_string(), "--image-dir"])
        .arg(&img);
    let mut h = Proc::spawn("holder", cmd);
    let l = h.line(PMIG_TIMEOUT, "captured");
    assert!(
        l.starts_with(r#"{"captured":"#),
        "{l}; stderr: {}",
        h.stderr()
    );
    h.send("handover");
    h.send("resume");
    let l = h.line(PMIG_TIMEOUT, "done");
    assert_eq!(l, r#"{"done":"killed"}"#, "stderr: {}", h.stderr());
    h.close_stdin();
    h.wait(EXIT_TIMEOUT);
    let st = orig.wait(EXIT_TIMEOUT);
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "the original ended with {st:?}, not killed"
    );
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    f(&mut data);
    std::fs::write(path, data).unwrap();
}

#[test]
fn bad_image_truncated_pages() {
    bad_image(
        "truncated pages.pmig",
        |img| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(img.join("pages.pmig"))
                .unwrap();
            let len = f.metadata().unwrap().len();
            assert!(len > 4096, "pages.pmig is only {len} bytes");
            f.set_len(len / 2).unwrap();
        },
        &["truncat", "corrupt", "short"],
    );
}

#[test]
fn bad_image_flipped_byte_in_pages() {
    bad_image(
        "flipped byte in pages.pmig",
        |img| {
            edit(&img.join("pages.pmig"), |d| {
                let i = d.len() / 2 + 123;
                d[i] ^= 0xff;
            })
        },
        &["corrupt", "checksum"],
    );
}

#[test]
fn bad_image_flipped_byte_in_manifest() {
    bad_image(
        "flipped byte in manifest.pmig",
        |img| {
            edit(&img.join("manifest.pmig"), |d| {
                assert!(d.len() > 40, "manifest.pmig is only {} bytes", d.len());
                let i = 32 + (d.len() - 32) / 2; // in the body, after the fixed header
                d[i] ^= 0xff;
            })
        },
        &["corrupt", "checksum"],
    );
}

/// Decodes the image in `img`, lets `f` change it, and writes it back with
/// checksums that hold (the pages as they were).
fn rewrite_image(img: &Path, f: impl FnOnce(&mut pmig_engine::image::ProcessImage)) {
    let i = pmig_image::Image::open_verified(img).unwrap();
    let mut pi = pmig_engine::image::ProcessImage::read(&i).unwrap();
    let pages = std::fs::read(i.pages_path()).unwrap();
    f(&mut pi);
    let out = tempfile::tempdir().unwrap();
    let mut w = pmig_image::ImageWriter::create(out.path()).unwrap();
    w.pages().write_all(&pages).unwrap();
    pmig_engine::dump::finish_image(&pi, w, pi.process.pid).unwrap();
    for e in std::fs::read_dir(out.path()).unwrap().flatten() {
        std::fs::copy(e.path(), img.join(e.file_name())).unwrap();
    }
}

/// An image whose checksums hold but whose state the kernel refuses at
/// one of the restore's last steps, with the threads' registers already
/// set: thread 0's saved FPU state says it is in the compacted format
/// (bit 63 of its header's `XCOMP_BV`), which `PTRACE_SETREGSET` refuses
/// (EINVAL): ptrace takes the standard format only.
/// The half-built process must die there, never running an instruction of
/// its own: it used to be let go before it was killed, and answered the
/// `check` waiting on its stdin.
#[test]
fn bad_image_thread_state_refused_by_the_kernel() {
    bad_image(
        "xsave state in the compacted format",
        |img| {
            rewrite_image(img, |pi| {
                let x = &mut pi.threads.threads[0].xstate;
                assert!(x.len() > 520, "xsave area of {} bytes", x.len());
                x[527] |= 0x80;
            })
        },
        &["set FPU/xsave state", "Invalid argument"],
    );
}

/// The image's CPU as this one, with every feature pmig checks: the
/// features this CPU lacks (never none: some are one vendor's alone).
fn cpu_with_every_feature() -> (pmig_engine::resources::cpu::CpuState, Vec<&'static str>) {
    use pmig_engine::resources::cpu::{CpuState, FEATURES};
    let here = CpuState::here();
    let mut from = here.clone();
    for &(_, leaf, sub, reg, bit) in FEATURES {
        if let Some(w) = from
            .words
            .iter_mut()
            .find(|w| (w.0, w.1, w.2) == (leaf, sub, reg))
        {
            w.3 |= 1 << bit;
        }
    }
    let missing = from.missing_on(here);
    assert!(!missing.is_empty(), "this CPU has every feature: {here:?}");
    (from, missing)
}

/// An image captured on a CPU with instruction-set features this one
/// lacks is refused before anything is created, naming them: the program
/// may have picked code that uses them.
#[test]
fn bad_image_from_a_cpu_with_features_this_one_lacks() {
    let (from, missing) = cpu_with_every_feature();
    bad_image(
        "captured on a CPU with more features",
        |img| rewrite_image(img, |pi| pi.cpu = Some(from)),
        &["lacks", missing[0], "--cpu-check xsave"],
    );
}

/// The same image restores where the restore is told to check only the
/// FPU state (`PMIG_CPU_CHECK=xsave`, as a daemon's environment gives it
/// to its restores), and the process passes its check.
#[test]
fn restore_told_to_check_only_the_fpu_state_takes_an_image_of_a_richer_cpu() {
    let _l = serial(&PROCESS_TABLE);
    let d = Dirs::new("cpucheck");
    let mut guard = Guard::new();
    let img = dumped_basic(&d, "cpu check xsave");
    let (from, _) = cpu_with_every_feature();
    rewrite_image(&img, |pi| pi.cpu = Some(from));
    let mut cmd = Command::new(pmig_bin());
    cmd.args(["restore", "--dir"])
        .arg(&img)
        .arg("--pidfile")
        .arg(d.path("pid"))
        .env("PMIG_CPU_CHECK", "xsave")
        .current_dir(d.tmp.path());
    let mut r = Proc::spawn_tree("restore with PMIG_CPU_CHECK=xsave", cmd);
    r.check("basic", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.quit_ok();
}

/// An image from a CPU whose xsave area is smaller than this one's (one
/// without AMX, say: 2696 bytes against 11008 here) restores: each
/// thread's saved area is made this CPU's size, and the fpu scenario finds
/// its vector and x87 registers as they were. The image is made so by
/// cutting its areas to the components its threads hold and its CPU's
/// layout to match; where nothing can be cut, the test says so and checks
/// nothing more.
#[test]
fn an_image_from_a_cpu_with_a_smaller_xsave_area_restores_here() {
    use pmig_engine::resources::cpu::CpuState;
    let d = Dirs::new("xsavesize");
    let mut guard = Guard::new();
    let mut orig = spawn_scenario("fpu", &[], &d.work());
    orig.expect_ready();
    let img = d.path("img");
    dump_ok(orig.pid(), &img, false);
    orig.wait(EXIT_TIMEOUT);
    let here = CpuState::here();
    let mut cut = None;
    rewrite_image(&img, |pi| {
        let held = pi.threads.threads.iter().fold(0u64, |m, t| {
            m | u64::from_le_bytes(t.xstate[512..520].try_into().unwrap())
        });
        let need = here
            .layout
            .iter()
            .filter(|l| held & (1 << l.0) != 0)
            .map(|l| (l.1 + l.2) as usize)
            .max()
            .unwrap_or(0)
            .max(576);
        if need >= here.xsave_size() {
            return;
        }
        let mut small = here.clone();
        small.layout.retain(|l| (l.1 + l.2) as usize <= need);
        small.xfeatures = small.layout.iter().fold(3, |m, l| m | 1 << l.0);
        assert!(small.xsave_size() <= need);
        for t in &mut pi.threads.threads {
            t.xstate.truncate(need);
        }
        pi.cpu = Some(small);
        cut = Some(need);
    });
    let Some(need) = cut else {
        eprintln!(
            "skipped: the fpu scenario's threads hold every component of this CPU's {}-byte xsave area",
            here.xsave_size()
        );
        return;
    };
    eprintln!(
        "xsave areas cut to {need} bytes; this CPU's take {}",
        here.xsave_size()
    );
    let mut r = spawn_restore("fpu (restore)", &img, &d.path("pid"), d.tmp.path());
    r.check("fpu", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.check("fpu", CHECK_TIMEOUT);
    r.quit_ok();
}

#[test]
fn bad_image_other_version() {
    bad_image(
        "manifest.pmig from another major version",
        |img| {
            edit(&img.join("manifest.pmig"), |d| {
                let v = u16::from_le_bytes([d[8], d[9]]).wrapping_add(1);
                d[8..10].copy_from_slice(&v.to_le_bytes());
            })
        },
        &["version"],
    );
}

#[test]
fn bad_image_other_arch() {
    bad_image(
        "manifest.pmig for another architecture",
        |img| {
            edit(&img.join("manifest.pmig"), |d| {
                d[12..16].copy_from_slice(&183u32.to_le_bytes()); // EM_AARCH64
            })
        },
        &["arch"],
    );
}

// ---------------------------------------------------------------------------
// session: a session leader with a pty as stdio and controlling terminal, as
// `pmig run` starts jobs; restored onto a new pty, or onto no terminal.

mod session {
    use super::*;
    use std::io::Write;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::path::PathBuf;
    use std::process::{Child, Stdio};
    use std::time::{Duration, Instant};

    /// A pty pair; the test talks to the process through the master.
    struct Pty {
        master: std::fs::File,
        slave: Option<OwnedFd>,
        path: PathBuf,
        buf: Vec<u8>,
    }

    impl Pty {
        fn open() -> Pty {
            let p = nix::pty::openpty(None, None).expect("openpty");
            let path = std::fs::read_link(format!("/proc/self/fd/{}", p.slave.as_raw_fd()))
                .expect("path of the pty slave");
            Pty {
                master: std::fs::File::from(p.master),
                slave: Some(p.slave),
                path,
                buf: Vec::new(),
            }
        }

        fn path(&self) -> &str {
            self.path.to_str().unwrap()
        }

        fn stdio(&self) -> Stdio {
            Stdio::from(
                self.slave
                    .as_ref()
                    .expect("slave still open")
                    .try_clone()
                    .unwrap(),
            )
        }

        /// No echo, no output processing (as the scenario sets its own).
        fn quiet(&self) {
            use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, OutputFlags, SetArg};
            let mut t = tcgetattr(&self.master).expect("tcgetattr on the master");
            t.local_flags.remove(LocalFlags::ECHO | LocalFlags::ECHOCTL);
            t.output_flags.remove(OutputFlags::OPOST);
            tcsetattr(&self.master, SetArg::TCSANOW, &t).expect("tcsetattr on the master");
        }

        fn send(&mut self, bytes: &[u8]) {
            self.master
                .write_all(bytes)
                .expect("write to the pty master");
        }

        /// Next line from the process (bounded); panics with `what` on timeout.
        fn line(&mut self, timeout: Duration, what: &str) -> String {
            let end = Instant::now() + timeout;
            loop {
                if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                    let l: Vec<u8> = self.buf.drain(..=pos).collect();
                    return String::from_utf8_lossy(&l[..pos])
                        .trim_end_matches('\r')
                        .to_string();
                }
                let left = end.saturating_duration_since(Instant::now());
                let mut pfd = libc::pollfd {
                    fd: self.master.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: poll on one valid pollfd we own.
                let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis() as i32) };
                assert!(
                    r > 0 || Instant::now() < end,
                    "{what}: no line from {} within {timeout:?} (partial: {:?})",
                    self.path.display(),
                    String::from_utf8_lossy(&self.buf)
                );
                if r <= 0 {
                    continue;
                }
                let mut tmp = [0u8; 1024];
                match std::io::Read::read(&mut self.master, &mut tmp) {
                    Ok(n) if n > 0 => self.buf.extend_from_slice(&tmp[..n]),
                    Ok(_) => panic!("{what}: EOF on {}", self.path.display()),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => panic!(
                        "{what}: reading {}: {e} (partial: {:?})",
                        self.path.display(),
                        String::from_utf8_lossy(&self.buf)
                    ),
                }
            }
        }

        fn expect(&mut self, want: &str, what: &str) {
            let l = self.line(PMIG_TIMEOUT, what);
            assert_eq!(l, want, "{what}: from {}", self.path.display());
        }

        /// `check` answered with PASS, a Ctrl-C caught, the count of SIGINTs.
        fn check_and_interrupt(&mut self, sigints: u32, what: &str) {
            self.send(b"check\n");
            self.expect("PASS session", &format!("{what}: check"));
            self.send(b"\x03");
            self.expect("SIGINT received", &format!("{what}: Ctrl-C"));
            self.send(b"sigints\n");
            self.expect(&format!("SIGINTS {sigints}"), &format!("{what}: count"));
        }
    }

    /// The original job: session leader, `pty` as stdio and controlling terminal.
    struct Job(Child);

    impl Drop for Job {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = wait_timeout(&mut self.0, EXIT_TIMEOUT);
        }
    }

    fn start_job(pty: &Pty, cwd: &Path, guard: &mut Guard) -> Job {
        let mut cmd = Command::new(scenario("session"));
        cmd.current_dir(cwd)
            .stdin(pty.stdio())
            .stdout(pty.stdio())
            .stderr(pty.stdio());
        only_stdio(&mut cmd);
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start the session scenario");
        guard.track_pid(child.id() as i32);
        Job(child)
    }

    /// `pmig restore --json` of `img` with `stdio` (a pty slave path) or,
    /// when None, pmig restore's own pipes.
    fn restore(label: &str, img: &Path, pidfile: &Path, stdio: Option<&str>, cwd: &Path) -> Proc {
        let mut cmd = Command::new(pmig_bin());
        cmd.args(["restore", "--json", "--dir"])
            .arg(img)
            .arg("--pidfile")
            .arg(pidfile)
            .current_dir(cwd);
        if let Some(p) = stdio {
            cmd.args(["--stdin", p, "--stdout", p, "--stderr", p]);
        }
        Proc::spawn_tree(label, cmd)
    }

    /// The JSON line of `pmig restore --json`, its `session` object checked.
    fn session_json(r: &mut Proc, ctty: Option<&str>) -> i32 {
        let line = r.line(PMIG_TIMEOUT, "the JSON line of pmig restore");
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{}: bad JSON {line:?}: {e}", r.label));
        let pid = v["pid"].as_i64().unwrap() as i32;
        let s = &v["session"];
        assert_eq!(s["session_leader"], true, "{}: {line}", r.label);
        assert_eq!(s["sid"].as_i64(), Some(pid as i64), "{}: {line}", r.label);
        assert_eq!(s["pgid"].as_i64(), Some(pid as i64), "{}: {line}", r.label);
        match ctty {
            Some(p) => {
                assert_eq!(s["ctty"].as_str(), Some(p), "{}: {line}", r.label);
                assert_eq!(s["foreground"], true, "{}: {line}", r.label);
                assert!(s["note"].is_null(), "{}: {line}", r.label);
            }
            None => {
                assert!(s["ctty"].is_null(), "{}: {line}", r.label);
                assert_eq!(s["foreground"], false, "{}: {line}", r.label);
            }
        }
        pid
    }

    /// The job moves to a new pty twice; Ctrl-C typed on the new one reaches it.
    #[test]
    fn new_pty_twice() {
        let d = Dirs::new("session");
        let mut guard = Guard::new();
        let mut a = Pty::open();
        let mut job = start_job(&a, &d.work(), &mut guard);
        a.slave = None;
        a.expect("READY", "original");
        a.check_and_interrupt(1, "original");
        let pid = job.0.id() as i32;

        dump_ok(pid, &d.path("img1"), false);
        let st = wait_timeout(&mut job.0, EXIT_TIMEOUT).expect("original exits after dump");
        assert_eq!(
            st.signal(),
            Some(libc::SIGKILL),
            "original after dump: {st:?}"
        );

        let mut b = Pty::open();
        let mut r1 = restore(
            "session (restore #1)",
            &d.path("img1"),
            &d.path("pid1"),
            Some(b.path()),
            d.tmp.path(),
        );
        let pid1 = session_json(&mut r1, Some(b.path()));
        guard.track_pid(pid1);
        b.slave = None;
        b.check_and_interrupt(2, "restore #1");
        assert_eq!(restored_pid(&r1), pid1);

        dump_ok(pid1, &d.path("img2"), false);
        let st1 = r1.wait(EXIT_TIMEOUT);
        assert_eq!(
            st1.code(),
            Some(128 + libc::SIGKILL),
            "pmig restore #1: {st1:?}"
        );

        let mut c = Pty::open();
        let mut r2 = restore(
            "session (restore #2)",
            &d.path("img2"),
            &d.path("pid2"),
            Some(c.path()),
            d.tmp.path(),
        );
        let pid2 = session_json(&mut r2, Some(c.path()));
        guard.track_pid(pid2);
        c.slave = None;
        c.check_and_interrupt(3, "restore #2");
        c.send(b"quit\n");
        let st2 = r2.wait(EXIT_TIMEOUT);
        assert_eq!(
            st2.code(),
            Some(0),
            "pmig restore #2: {st2:?}; stderr:\n{}",
            r2.stderr()
        );
        assert!(
            !r1.stderr_final().contains("controlling terminal")
                && !r2.stderr_final().contains("controlling terminal"),
            "no note expected: {}{}",
            r1.stderr(),
            r2.stderr()
        );
        assert_eq!(
            pid1, pid,
            "restore #1 did not get the original pid {pid}, which was free"
        );
        assert_eq!(
            pid2, pid,
            "restore #2 did not get the original pid {pid}, which was free"
        );
    }

    /// Dumped with --leave-running: the original keeps its terminal; the
    /// image restores onto a new pty afterwards.
    #[test]
    fn leave_running() {
        let d = Dirs::new("session-lr");
        let mut guard = Guard::new();
        let mut a = Pty::open();
        let mut job = start_job(&a, &d.work(), &mut guard);
        a.slave = None;
        a.expect("READY", "original");
        let pid = job.0.id() as i32;
        dump_ok(pid, &d.path("img"), true);
        a.check_and_interrupt(1, "original after dump --leave-running");
        a.send(b"quit\n");
        let st = wait_timeout(&mut job.0, EXIT_TIMEOUT).expect("original exits after quit");
        assert_eq!(st.code(), Some(0), "original: {st:?}");

        let mut b = Pty::open();
        let mut r = restore(
            "session (restore)",
            &d.path("img"),
            &d.path("pid"),
            Some(b.path()),
            d.tmp.path(),
        );
        let rpid = session_json(&mut r, Some(b.path()));
        guard.track_pid(rpid);
        b.slave = None;
        // The image was taken before the original's first Ctrl-C.
        b.check_and_interrupt(1, "restored");
        b.send(b"quit\n");
        let st = r.wait(EXIT_TIMEOUT);
        assert_eq!(
            st.code(),
            Some(0),
            "pmig restore: {st:?}; stderr:\n{}",
            r.stderr()
        );
    }

    /// The original pid is taken (the original still runs on its own pty):
    /// the copy leads a session under its new pid, on a new pty, and Ctrl-C
    /// there reaches the copy only.
    #[test]
    fn pid_taken() {
        let d = Dirs::new("session-pid");
        let mut guard = Guard::new();
        let mut a = Pty::open();
        let mut job = start_job(&a, &d.work(), &mut guard);
        a.slave = None;
        a.expect("READY", "original");
        let pid = job.0.id() as i32;
        dump_ok(pid, &d.path("img"), true);

        let mut b = Pty::open();
        let mut r = restore(
            "session (restore, pid taken)",
            &d.path("img"),
            &d.path("pid"),
            Some(b.path()),
            d.tmp.path(),
        );
        let rpid = session_json(&mut r, Some(b.path()));
        guard.track_pid(rpid);
        b.slave = None;
        assert_ne!(rpid, pid, "the original still holds pid {pid}");
        b.check_and_interrupt(1, "copy");
        a.send(b"sigints\n");
        a.expect("SIGINTS 0", "original, after Ctrl-C on the copy's terminal");
        a.check_and_interrupt(1, "original");
        b.send(b"quit\n");
        a.send(b"quit\n");
        let st = r.wait(EXIT_TIMEOUT);
        assert_eq!(
            st.code(),
            Some(0),
            "pmig restore: {st:?}; stderr:\n{}",
            r.stderr()
        );
        let st = wait_timeout(&mut job.0, EXIT_TIMEOUT).expect("original exits after quit");
        assert_eq!(st.code(), Some(0), "original: {st:?}");
    }

    /// pmig restore's own controlling terminal is never taken from it: the
    /// process is restored without one, and the note says why.
    #[test]
    fn restorer_own_terminal_is_not_taken() {
        let d = Dirs::new("session-own");
        let mut guard = Guard::new();
        let mut a = Pty::open();
        let mut job = start_job(&a, &d.work(), &mut guard);
        a.slave = None;
        a.expect("READY", "original");
        let pid = job.0.id() as i32;
        dump_ok(pid, &d.path("img"), false);
        wait_timeout(&mut job.0, EXIT_TIMEOUT).expect("original exits after dump");

        // pmig restore leads a session with pty `b` as its controlling
        // terminal and stdio; the restored process inherits those fds.
        let mut b = Pty::open();
        b.quiet();
        let mut cmd = Command::new(pmig_bin());
        cmd.args(["restore", "--json", "--dir"])
            .arg(d.path("img"))
            .current_dir(d.tmp.path())
            .stdin(b.stdio())
            .stdout(b.stdio())
            .stderr(b.stdio());
        only_stdio(&mut cmd);
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut r = Job(cmd.spawn().expect("start pmig restore"));
        b.slave = None;
        let mut json = String::new();
        let mut note = String::new();
        for _ in 0..2 {
            let l = b.line(PMIG_TIMEOUT, "pmig restore's output");
            if l.starts_with('{') {
                json = l;
            } else {
                note = l;
            }
        }
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json:?}: {e}"));
        let rpid = v["pid"].as_i64().unwrap() as i32;
        guard.track_pid(rpid);
        assert_eq!(v["session"]["session_leader"], true, "{json}");
        assert!(v["session"]["ctty"].is_null(), "{json}");
        assert!(
            note.contains("without a controlling terminal")
                && note.contains("own controlling terminal"),
            "pmig restore should say why: {note:?}"
        );
        // Its fds are still the terminal, which stays pmig restore's.
        b.send(b"sigints\n");
        b.expect("SIGINTS 0", "restored");
        b.send(b"check\n");
        let l = b.line(PMIG_TIMEOUT, "check");
        assert!(
            l.starts_with("FAIL session: fd 0 is not the controlling terminal"),
            "restored on pmig restore's terminal: {l:?}"
        );
        b.send(b"quit\n");
        let st = wait_timeout(&mut r.0, EXIT_TIMEOUT).expect("pmig restore exits");
        assert_eq!(
            st.code(),
            Some(1),
            "the scenario exits 1 after a failed check: {st:?}"
        );
    }

    /// Restored onto pipes: a session leader without a controlling terminal,
    /// and pmig restore says so; the same again from that state.
    #[test]
    fn no_terminal_twice() {
        let d = Dirs::new("session-notty");
        let mut guard = Guard::new();
        let mut a = Pty::open();
        let mut job = start_job(&a, &d.work(), &mut guard);
        a.slave = None;
        a.expect("READY", "original");
        a.check_and_interrupt(1, "original");
        let pid = job.0.id() as i32;
        dump_ok(pid, &d.path("img1"), false);
        wait_timeout(&mut job.0, EXIT_TIMEOUT).expect("original exits after dump");

        let mut r1 = restore(
            "session notty (restore #1)",
            &d.path("img1"),
            &d.path("pid1"),
            None,
            d.tmp.path(),
        );
        let pid1 = session_json(&mut r1, None);
        guard.track_pid(pid1);
        r1.send("notty");
        let l = r1.line(PMIG_TIMEOUT, "the answer to notty");
        assert_eq!(l, "PASS session", "restore #1; stderr:\n{}", r1.stderr());
        r1.send("sigints");
        assert_eq!(r1.line(CHECK_TIMEOUT, "sigints"), "SIGINTS 1");
        // Not an error, but said on stderr (after the restored process
        // resumed, so possibly after its answers above).
        let note = r1.stderr_containing("no terminal");
        assert!(
            note.contains("without a controlling terminal") && note.contains("no terminal"),
            "restore #1 should say the process lost its controlling terminal; stderr:\n{note}"
        );

        dump_ok(pid1, &d.path("img2"), false);
        let st1 = r1.wait(EXIT_TIMEOUT);
        assert_eq!(
            st1.code(),
            Some(128 + libc::SIGKILL),
            "pmig restore #1: {st1:?}"
        );

        let mut r2 = restore(
            "session notty (restore #2)",
            &d.path("img2"),
            &d.path("pid2"),
            None,
            d.tmp.path(),
        );
        let pid2 = session_json(&mut r2, None);
        guard.track_pid(pid2);
        r2.send("notty");
        let l = r2.line(PMIG_TIMEOUT, "the answer to notty");
        assert_eq!(l, "PASS session", "restore #2; stderr:\n{}", r2.stderr());
        r2.quit_ok();
        assert!(
            !r2.stderr_final().contains("controlling terminal"),
            "restore #2: the process had no controlling terminal to lose; stderr:\n{}",
            r2.stderr()
        );
    }

    /// A session leader with another process in its session (not its
    /// child) is refused, and goes on as it was.
    #[test]
    fn refuse_leader_with_session_members() {
        let d = Dirs::new("session-member");
        let mut guard = Guard::new();
        let mut cmd = Command::new(scenario("session"));
        cmd.arg("member").current_dir(d.work());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut p = Proc::spawn("session member", cmd);
        p.expect_ready();
        let sid = p.pid();
        let members: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&q| q != sid && unsafe { libc::getsid(q) } == sid)
            .collect();
        for &m in &members {
            guard.track_pid(m);
        }
        assert_eq!(members.len(), 1, "session {sid}: members {members:?}");
        p.check("session", CHECK_TIMEOUT);
        let what = "refuse session leader with session members";
        super::dump_refused(what, sid, &d.path("img"), &["session"]);
        assert_running_untraced(what, sid);
        p.check("session", CHECK_TIMEOUT);
        p.quit_ok();
    }
}

/// A python3 that holds `mine` open, and fd 3 (a file its shell opened
/// for it as root), and answers the scenario protocol: `check` passes when
/// both still read what they held through their fds, the process runs as
/// uid and gid 65534, and its working directory is where it started.
const OWNER_SCRIPT: &str = r#"import os, sys
f = open(sys.argv[1])
g = os.fdopen(3)
cwd = os.getcwd()
print("READY", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    f.seek(0)
    g.seek(0)
    got = (f.read(), g.read(), os.getresuid(), os.getresgid(), os.getcwd())
    want = ("mine\n", "given\n", (65534,) * 3, (65534,) * 3, cwd)
    print("PASS owner" if got == want else "FAIL owner: %r, want %r" % (got, want), flush=True)
"#;

/// An unprivileged process's files are reopened with its own ids, not the
/// restorer's (root). Once the path of the file it holds names another
/// file, root's alone, the restore is refused with one line naming the file
/// and the uid, before anything is created; the original runs on. With its
/// own file back at the path, the copy passes its check, still uid 65534,
/// and keeps what its root shell gave it: fd 3, a file it may not open, and
/// its working directory, under a directory it may not search. The paths
/// name the very inodes it held (same machine).
#[test]
fn an_unprivileged_process_reopens_its_files_with_its_own_ids() {
    if !root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = Dirs::new("owner");
    let mut guard = Guard::new();
    let home = d.path("home");
    std::fs::create_dir(&home).unwrap();
    for p in [d.tmp.path(), home.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    // Root's alone: the process works in a directory below it.
    let work = home.join("locked").join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(home.join("locked"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let private = |p: &Path, text: &str, uid: u32| {
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    };
    let mine = home.join("mine");
    private(&mine, "mine\n", 65534);
    let given = home.join("given");
    private(&given, "given\n", 0);
    let script = home.join("owner.py");
    std::fs::write(&script, OWNER_SCRIPT).unwrap();
    // The system's python3, which any user may run (not a shim under /root).
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(
            "exec setpriv --reuid 65534 --regid 65534 --clear-groups \
             /usr/bin/python3 \"$0\" \"$1\" 3<\"$2\"",
        )
        .arg(&script)
        .arg(&mine)
        .arg(&given)
        .current_dir(&work);
    let mut orig = Proc::spawn("owner (python3 as uid 65534)", cmd);
    orig.expect_ready();
    orig.check("owner", CHECK_TIMEOUT);
    let pid = orig.pid();
    guard.track_pid(pid);
    let img = d.path("img");
    dump_ok(pid, &img, true);

    // Another file, root's alone, where the process's own was.
    let moved = home.join("mine.moved");
    std::fs::rename(&mine, &moved).unwrap();
    private(&mine, "root's\n", 0);
    let pidfile = d.path("pid");
    let o = pmig(
        &[
            "restore",
            "--dir",
            img.to_str().unwrap(),
            "--pidfile",
            pidfile.to_str().unwrap(),
        ],
        PMIG_TIMEOUT,
    );
    assert!(!o.status.success(), "restored a file root alone may open");
    assert_one_line_error("restore of a file the owner may not open", &o, &["mine"]);
    assert!(
        o.stderr.contains("uid 65534") && o.stderr.contains("denied"),
        "the error does not say whose access was denied: {}",
        o.stderr
    );
    assert!(!pidfile.exists(), "a refused restore wrote a pid file");
    orig.check("owner", CHECK_TIMEOUT);

    std::fs::rename(&moved, &mine).unwrap();
    let mut r = spawn_restore("owner (restored)", &img, &pidfile, &home);
    r.check("owner", PMIG_TIMEOUT);
    guard.track_pid(restored_pid(&r));
    r.quit_ok();
    orig.quit_ok();
}
