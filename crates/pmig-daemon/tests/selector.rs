//! Host selection on real 3-node clusters (network namespaces, one daemon
//! each): idle detection (load, owner activity), longest-idle first, one
//! application per class per host, fairness, hosts returned when a client's
//! connection closes, failover of the selector and hand-back to a restarted
//! earlier peer. Needs root and the `pmig` binary (`cargo build --release -p
//! pmig-cli`, or `PMIG_BIN`). Every wait is a bounded poll of `pmig hosts
//! status`; each test has its own cluster prefix and a guard that tears the
//! cluster down and kills the test's processes even when an assertion fails.

use pmig_tests::{only_stdio, quick_selection, root, Proc, TestCluster};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const WAIT: Duration = Duration::from_secs(30);
const LINE: Duration = Duration::from_secs(20);

/// Short thresholds so that nothing waits long ([`quick_selection`]): idle
/// below a load of 0.5, owner threshold 3 s (the window in which an
/// owner-active node must not be handed out).
fn daemon_args() -> Vec<&'static str> {
    quick_selection("0.5", "3")
}

struct Env {
    /// The cluster ([`TestCluster`]), torn down once `Env`'s own drop has
    /// ended the processes and daemons below.
    t: TestCluster,
    /// Processes started by the test (killed on drop).
    procs: Vec<Proc>,
    /// Daemons the test restarted itself (killed on drop).
    daemons: Vec<std::process::Child>,
}

impl Env {
    fn up(tag: &str) -> Env {
        Env {
            t: TestCluster::up(&format!("ps{tag}"), "selector", |o| {
                o.daemon_args = daemon_args().iter().map(|s| s.to_string()).collect();
            }),
            procs: Vec::new(),
            daemons: Vec::new(),
        }
    }

    fn c(&self) -> &pmig_cluster::Cluster {
        self.t.c()
    }

    fn cmd(&self, node: &str, args: &[&str]) -> Command {
        self.t.pmig(node, args)
    }

    /// `pmig ARGS` inside `node`.
    fn pmig(&self, node: &str, args: &[&str]) -> Output {
        self.cmd(node, args)
            .stdin(Stdio::null())
            .output()
            .expect("run pmig")
    }

    fn log(&self, node: &str) -> String {
        self.t.log(node)
    }

    /// The selector's table as seen from `node`: (selector, node → row).
    fn status(&self, node: &str) -> Option<(String, Vec<Value>)> {
        let o = self.pmig(node, &["hosts", "status", "--json"]);
        if !o.status.success() {
            return None;
        }
        let v: Value = serde_json::from_slice(&o.stdout).ok()?;
        Some((
            v["selector"].as_str()?.to_string(),
            v["hosts"].as_array()?.clone(),
        ))
    }

    /// Polls (bounded) until `f` holds for the table seen from `from`.
    fn wait_table(&self, from: &str, what: &str, f: impl Fn(&str, &[Value]) -> bool) {
        let t0 = Instant::now();
        let mut last = None;
        while t0.elapsed() < WAIT {
            if let Some((sel, rows)) = self.status(from) {
                if f(&sel, &rows) {
                    return;
                }
                last = Some((sel, rows));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let logs: String = ["n1", "n2", "n3"]
            .iter()
            .map(|n| {
                let l = self.log(n);
                let tail: Vec<&str> = l.lines().rev().take(60).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("\n--- {n}'s daemon log (end) ---\n{}", tail.join("\n"))
            })
            .collect();
        panic!("not within {WAIT:?}: {what}; last table seen from {from}: {last:?}{logs}");
    }

    fn wait_state(&self, host: &str, state: &str) {
        self.wait_table("n1", &format!("{host} is {state}"), |_, rows| {
            rows.iter()
                .any(|r| r["node"] == host && r["state"] == state)
        });
    }

    /// `pmig hosts request ARGS` inside `node`, holding until its stdin closes;
    /// returns the process and the hosts it printed.
    fn hold(&mut self, node: &str, args: &[&str], expect: usize) -> (usize, Vec<String>) {
        let mut a = vec!["hosts", "request"];
        a.extend_from_slice(args);
        let mut p = Proc::spawn(&format!("hosts request on {node}"), self.cmd(node, &a));
        let mut hosts = Vec::new();
        for _ in 0..expect {
            let l = p.line(LINE, "a host");
            hosts.push(l.split_whitespace().next().unwrap().to_string());
        }
        self.procs.push(p);
        (self.procs.len() - 1, hosts)
    }

    /// A request that prints its hosts and returns them at once.
    fn request_once(&self, node: &str, args: &[&str]) -> Result<Vec<String>, String> {
        let mut a = vec!["hosts", "request"];
        a.extend_from_slice(args);
        let o = self.pmig(node, &a);
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
        }
    }

    fn busy_loop(&mut self, node: &str) -> usize {
        let mut c = self.c().command(node, "sh").unwrap();
        c.args(["-c", "while :; do :; done"]);
        self.procs
            .push(Proc::spawn(&format!("busy loop on {node}"), c));
        self.procs.len() - 1
    }

    fn all_idle(&self) {
        self.wait_table("n1", "every node idle", |_, rows| {
            rows.len() == 3 && rows.iter().all(|r| r["state"] == "idle")
        });
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.procs.clear();
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

#[test]
fn idle_detection_owner_activity_and_longest_idle_first() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("i");
    env.all_idle();

    // A CPU-bound process in n3's namespace: n3 is busy and never handed out.
    let busy = env.busy_loop("n3");
    env.wait_state("n3", "busy");
    let got = env.request_once("n1", &["-n", "2"]).unwrap();
    assert_eq!(got, ["n2"], "n1 is the requester, n3 is busy");
    env.procs.remove(busy);
    env.wait_state("n3", "idle");

    // A client holds n2 (idle since the start, longer than n3).
    let (holder, held) = env.hold("n1", &["-n", "1"], 1);
    assert_eq!(held, ["n2"]);
    // Owner activity on n2 (asked from n1): not idle for the owner threshold,
    // the eviction hook fires on n2, and the holder is told.
    let o = env.pmig("n1", &["owner", "active", "--node", "n2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        env.procs[holder].line(LINE, "the revocation"),
        "revoked n2 short: its owner is active"
    );
    env.wait_state("n2", "owner");
    assert!(
        env.log("n2").contains("owner active on n2"),
        "{}",
        env.log("n2")
    );
    assert!(env.log("n2").contains("eviction: owner active on n2"));
    let got = env.request_once("n1", &["-n", "2"]).unwrap();
    assert_eq!(got, ["n3"], "n2's owner is active");
    env.wait_state("n2", "idle");

    // Longest idle first: n3 has been idle since its load fell, n2 only since
    // its owner threshold passed, later.
    assert_eq!(env.request_once("n1", &["-n", "1"]).unwrap(), ["n3"]);
    assert!(env
        .pmig("n1", &["owner", "active", "--node", "n3"])
        .status
        .success());
    env.wait_state("n3", "owner");
    env.wait_state("n3", "idle");
    assert_eq!(env.request_once("n1", &["-n", "1"]).unwrap(), ["n2"]);
    assert_eq!(env.request_once("n1", &["-n", "2"]).unwrap(), ["n2", "n3"]);

    // pmig evict NODE reaches that node's hook.
    let o = env.pmig("n1", &["evict", "n3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("n3: eviction"));
    assert!(
        env.log("n3").contains("evict requested on n3"),
        "{}",
        env.log("n3")
    );
}

#[test]
fn classes_fairness_and_release_when_the_connection_closes() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("f");
    env.all_idle();

    // Client A takes both other nodes for short work.
    let (a, mut a_hosts) = env.hold("n1", &["-n", "2"], 2);
    a_hosts.sort();
    assert_eq!(a_hosts, ["n2", "n3"]);
    // Long work may still go to both: one application per class per host.
    let (long, mut l_hosts) = env.hold("n1", &["-n", "2", "--class", "long"], 2);
    l_hosts.sort();
    assert_eq!(l_hosts, ["n2", "n3"]);
    // A second short client holds none and none is free: fairness takes one
    // back from A (2 > a fair share of 1), and A is told.
    let (_c, c_hosts) = env.hold("n1", &["-n", "1"], 1);
    let revoked = env.procs[a].line(LINE, "the revocation");
    assert_eq!(
        revoked,
        format!(
            "revoked {} short: reclaimed for pid {} uid 0@n1 (fairness)",
            c_hosts[0],
            env.procs[2].pid()
        ),
    );
    // A third short client: one host each, nobody above the fair share.
    let e = env.request_once("n1", &["-n", "1"]).unwrap_err();
    assert!(e.contains("no idle host free for class short"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    env.wait_table("n1", "A and C hold one short host each", |_, rows| {
        rows.iter()
            .filter(|r| {
                r["held"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|x| x[0] == "short"))
            })
            .count()
            == 2
    });

    // A's stdin closes: it exits, its connection closes, its host comes back.
    env.procs[a].close_stdin();
    assert!(env.procs[a].wait(LINE).success());
    env.wait_table("n1", "A's host is free again", |_, rows| {
        rows.iter()
            .filter(|r| {
                r["held"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|x| x[0] == "short"))
            })
            .count()
            == 1
    });
    let got = env.request_once("n1", &["-n", "1"]).unwrap();
    assert_eq!(got.len(), 1);
    assert_ne!(got[0], c_hosts[0]);
    // The long client is killed (no release sent): its hosts come back too.
    let _ = env.procs[long].child.kill();
    let _ = env.procs[long].wait(LINE);
    env.wait_table("n1", "no long allocation left", |_, rows| {
        !rows.iter().any(|r| {
            r["held"]
                .as_array()
                .is_some_and(|h| h.iter().any(|x| x[0] == "long"))
        })
    });
    let mut got = env
        .request_once("n1", &["-n", "2", "--class", "long"])
        .unwrap();
    got.sort();
    assert_eq!(got, ["n2", "n3"]);
}

#[test]
fn selector_failover_and_hand_back_to_a_restarted_earlier_peer() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("o");
    env.all_idle();
    env.wait_table("n3", "n1 is the selector", |sel, _| sel == "n1");
    // Straight over the authenticated channel: n3 is not the selector and
    // redirects to n1; a selector message version nobody speaks is refused.
    let key = pmig_proto::load_key(&env.c().state().key_file).unwrap();
    let addr3 = env.c().node("n3").unwrap().listen.to_string();
    let (sel, rows, refusal) = env
        .c()
        .run_in("n2", move || {
            let mut c = pmig_services::selector::Client::direct(&addr3, &key, "n2", "direct")
                .expect("direct client");
            let rows = c.status().expect("status").len();
            let mut ch =
                pmig_proto::blocking::connect(&addr3, &key, &pmig_proto::Config::new("n2"))
                    .unwrap();
            let hello = pmig_services::selector::wire::SelMsg::Hello {
                version: 99,
                role: pmig_services::selector::wire::Role::Probe,
            };
            ch.send_with(
                &pmig_proto::Msg::Service {
                    service: pmig_proto::service::SELECTOR,
                },
                &[&hello.encode()],
            )
            .unwrap();
            (c.selector().to_string(), rows, ch.recv())
        })
        .unwrap();
    assert_eq!((sel.as_str(), rows), ("n1", 3));
    match refusal {
        Ok(pmig_proto::Msg::Error { code, text }) => {
            assert_eq!(code, pmig_proto::code::REFUSED);
            assert!(text.contains("version 99"), "{text}");
        }
        other => panic!("version 99 not refused: {other:?}"),
    }

    // A client on n3 holds n1 and n2 for long work.
    let (h, mut held) = env.hold("n3", &["-n", "2", "--class", "long"], 2);
    held.sort();
    assert_eq!(held, ["n1", "n2"]);

    // Kill n1's daemon: n2 takes the role over, n3 reports to it.
    let pid = env.c().node("n1").unwrap().daemon_pid.unwrap();
    let cmdline: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    env.wait_table(
        "n3",
        "n2 took over with n2 and n3 reporting",
        |sel, rows| {
            sel == "n2"
                && ["n2", "n3"]
                    .iter()
                    .all(|n| rows.iter().any(|r| r["node"] == *n && r["state"] == "idle"))
        },
    );
    assert!(
        env.log("n2").contains("n2 is now the selector"),
        "{}",
        env.log("n2")
    );
    // The session on n3 followed: it claimed n2 again at the new selector and
    // was told that n1 is gone.
    env.wait_table("n3", "n2 is held (long) at the new selector", |_, rows| {
        rows.iter().any(|r| {
            r["node"] == "n2"
                && r["held"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|x| x[0] == "long"))
        })
    });
    assert_eq!(
        env.procs[h].line(LINE, "the revocation of n1"),
        "revoked n1 long: the selector changed"
    );
    // Requests are served again.
    let got = env.request_once("n2", &["-n", "2"]).unwrap();
    assert_eq!(got, ["n3"], "n1 is gone, n2 is the requester");

    // n1 comes back: the earlier peer wins, n2 hands the role over.
    let log = std::fs::File::create(env.t.dir.join("n1-restarted.log")).unwrap();
    let mut c = env.c().command("n1", &cmdline[0]).unwrap();
    c.args(&cmdline[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    only_stdio(&mut c);
    env.daemons.push(c.spawn().expect("restart n1's daemon"));
    env.wait_table(
        "n3",
        "n1 is the selector again with all three reporting",
        |sel, rows| sel == "n1" && rows.len() == 3 && rows.iter().all(|r| r["state"] == "idle"),
    );
    assert!(
        env.log("n2").contains("hands the selector role over to n1"),
        "{}",
        env.log("n2")
    );
    env.wait_table("n2", "n2 sees n1 as the selector", |sel, _| sel == "n1");
    assert_eq!(
        env.request_once("n2", &["-n", "1", "--class", "long"])
            .unwrap()
            .len(),
        1
    );
}
