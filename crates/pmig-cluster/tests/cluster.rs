//! Cluster tests: they create network namespaces, so they need root (CI runs as root).
//! Each test uses its own prefix so they can run in parallel; a guard tears every
//! cluster down even when an assertion fails.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use pmig_cluster::{sys, Cluster, ClusterGuard, ClusterOpts, Link};

fn root() -> bool {
    if nix::unistd::geteuid().is_root() {
        true
    } else {
        eprintln!("skipped: needs root");
        false
    }
}

fn opts(prefix: &str, nodes: usize, link: Link, dir: &Path) -> ClusterOpts {
    let mut o = ClusterOpts::new(nodes);
    o.prefix = prefix.into();
    o.link = link;
    o.state_dir = Some(dir.to_path_buf());
    o
}

fn up(o: &ClusterOpts) -> ClusterGuard {
    // A previous run killed hard may have left namespaces behind.
    let _ = pmig_cluster::down(&o.prefix, o.state_dir.as_deref());
    Cluster::up(o).expect("cluster up").guard()
}

fn no_namespaces_left(prefix: &str) {
    let left: Vec<String> = sys::list_netns()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

fn have_ping() -> bool {
    Command::new("ping")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Can `from` reach `to`? ICMP with `ping -c 1 -W 2` if ping is installed, and always a
/// TCP connection made from inside `from` to a listener inside `to`.
fn reachable(c: &Cluster, from: &str, to: &str) -> bool {
    let dst = c.node(to).unwrap().addr;
    if have_ping() {
        let st = c
            .command(from, "ping")
            .unwrap()
            .args(["-c", "1", "-W", "2", "-q", &dst.to_string()])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        if !st.success() {
            return false;
        }
    }
    let l = c
        .run_in(to, move || TcpListener::bind((dst, 0)))
        .unwrap()
        .unwrap();
    let port = l.local_addr().unwrap().port();
    let a = thread::spawn(move || l.accept().map(|_| ()));
    let addr = SocketAddr::from((dst, port));
    let ok = c
        .run_in(from, move || {
            TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
        })
        .unwrap();
    if ok {
        a.join().unwrap().unwrap();
    }
    ok
}

#[test]
fn three_nodes_reach_each_other_and_tear_down() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = up(&opts("pmt1", 3, Link::Unlimited, dir.path()));
    let st = c.state();
    assert_eq!(st.nodes.len(), 3);
    assert_eq!(st.hub_netns, "pmt1-hub");
    for (i, n) in st.nodes.iter().enumerate() {
        assert_eq!(n.name, format!("n{}", i + 1));
        assert!(sys::netns_exists(&n.netns));
        assert_eq!(n.addr.octets()[3] as usize, i + 1);
    }
    // State file round-trips.
    let loaded = Cluster::load("pmt1", Some(dir.path())).unwrap();
    assert_eq!(loaded.state(), st);
    // The key was generated with mode 0600 and loads.
    pmig_proto::load_key(&st.key_file).unwrap();

    for (a, b) in [("n1", "n2"), ("n2", "n3"), ("n3", "n1")] {
        assert!(reachable(&c, a, b), "{a} cannot reach {b}");
    }
    if !have_ping() {
        println!("note: ping is not installed; checked reachability over TCP only");
    }
    let n1 = c.node("n1").unwrap().addr;

    // exec passes the exit status and environment through.
    let argv: Vec<OsString> = ["sh", "-c", "test \"$PMIG_NODE\" = n2 && exit 7"]
        .iter()
        .map(OsString::from)
        .collect();
    assert_eq!(c.exec("n2", &argv).unwrap(), 7);
    assert_eq!(
        pmig_cluster::exec("pmt1", Some(dir.path()), "n3", &["true".into()]).unwrap(),
        0
    );
    let e = c.exec("n9", &argv).unwrap_err();
    assert!(e.to_string().contains("unknown node `n9`"), "{e}");
    let out = c
        .command("n1", "ip")
        .unwrap()
        .args(["-o", "-4", "addr", "show", "dev", "eth0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{n1}/24")));

    let status = c.status();
    assert!(status
        .iter()
        .all(|s| s.netns_present && s.daemon_pid.is_none()));

    // Bringing up the same prefix twice is refused with a clear error.
    let e = Cluster::up(&opts("pmt1", 1, Link::Unlimited, dir.path())).unwrap_err();
    assert!(e.to_string().contains("already up"), "{e}");

    let report = c.down().unwrap();
    assert_eq!(report.namespaces_removed.len(), 4, "{report:?}");
    no_namespaces_left("pmt1");
    assert!(!dir.path().join("cluster.json").exists());
}

/// Measures a TCP transfer from n1 to n2 over a link shaped to `link`; returns bits/s.
fn measure(c: &Cluster, bytes: usize) -> f64 {
    let dst = c.node("n2").unwrap().addr;
    let l = c
        .run_in("n2", move || TcpListener::bind((dst, 0)))
        .unwrap()
        .unwrap();
    let addr = SocketAddr::from((dst, l.local_addr().unwrap().port()));
    let rx = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0;
        loop {
            match s.read(&mut buf).unwrap() {
                0 => break,
                k => n += k,
            }
        }
        (n, Instant::now())
    });
    let mut s = c
        .run_in("n1", move || {
            TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        })
        .unwrap()
        .unwrap();
    let chunk = vec![0x5au8; 1 << 16];
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        s.write_all(&chunk).unwrap();
        sent += chunk.len();
    }
    drop(s);
    let (n, t1) = rx.join().unwrap();
    assert_eq!(n, sent);
    n as f64 * 8.0 / (t1 - t0).as_secs_f64()
}

#[test]
fn ten_mbit_link_is_rate_limited() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = up(&opts("pmt2", 2, Link::Mbit10, dir.path()));
    assert_eq!(c.state().rate_bps, Some(10_000_000));
    for note in &c.state().notes {
        println!("note: {note}");
    }
    // 2.5 MB at 10 Mbit/s: about 2 s.
    let bps = measure(&c, 2_500_000);
    println!("measured {:.2} Mbit/s over a 10mbit link", bps / 1e6);
    assert!(bps < 30e6, "10mbit link carried {:.1} Mbit/s", bps / 1e6);
    assert!(
        bps > 1e6,
        "10mbit link carried only {:.2} Mbit/s",
        bps / 1e6
    );
    let qd = Command::new("tc")
        .args(["-n", "pmt2-n1", "qdisc", "show", "dev", "eth0"])
        .output()
        .unwrap();
    let qd = String::from_utf8_lossy(&qd.stdout).to_string();
    println!("{}", qd.trim());
    // The rate limit, and under it the queue that serves interactive
    // packets first (pfifo_fast is built into every kernel).
    assert!(qd.contains("tbf"), "no rate limit on eth0: {qd}");
    assert!(
        qd.contains("pfifo_fast"),
        "no priority queue under the rate limit: {qd}"
    );
    c.down().unwrap();
    no_namespaces_left("pmt2");
}

#[test]
fn down_is_idempotent_and_works_without_state() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = up(&opts("pmt3", 2, Link::Mbit100, dir.path()));
    // A process lingering in a node, and a lost state file.
    let mut child = c
        .command("n1", "sleep")
        .unwrap()
        .arg("600")
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !sys::netns_pids("pmt3-n1")
        .unwrap()
        .contains(&(child.id() as i32))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "sleep did not enter the namespace"
        );
        thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(dir.path().join("cluster.json")).unwrap();
    let r = pmig_cluster::down("pmt3", Some(dir.path())).unwrap();
    assert_eq!(r.namespaces_removed.len(), 3, "{r:?}");
    assert!(r.processes_killed >= 1, "{r:?}");
    assert!(
        !sys::alive(child.id() as i32),
        "process in the namespace survived down"
    );
    let _ = child.try_wait();
    no_namespaces_left("pmt3");
    let r = pmig_cluster::down("pmt3", Some(dir.path())).unwrap();
    assert!(r.is_empty(), "second down did something: {r:?}");
    // The guard's own teardown finds nothing left and does not fail.
    c.down().unwrap();
}

#[test]
fn daemons_are_started_when_supported() {
    if !root() {
        return;
    }
    let Ok(python) = which("python3") else {
        eprintln!("skipped: needs python3 for the stand-in daemon");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A stand-in `pmig` whose `daemon` subcommand listens on --listen.
    let fake = dir.path().join("fake-pmig");
    std::fs::write(
        &fake,
        format!(
            r#"#!/bin/sh
if [ "$1" = daemon ] && [ "$2" = --help ]; then exit 0; fi
[ "$1" = daemon ] || exit 2
shift
exec {} -c '
import socket, sys
a = sys.argv[1:]
node = a[a.index("--node") + 1]
host, port = a[a.index("--listen") + 1].rsplit(":", 1)
s = socket.socket(); s.bind((host, int(port))); s.listen()
print("daemon", node, "listening", flush=True)
while True: s.accept()[0].close()
' "$@"
"#,
            python
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut o = opts("pmt4", 2, Link::Gbit1, &dir.path().join("state"));
    o.daemon_bin = Some(fake.clone());
    let c = up(&o);
    assert!(c.state().daemons_started);
    let st = c.status();
    for s in &st {
        assert!(s.daemon_alive && s.daemon_listening, "{s:?}");
    }
    let pids: Vec<i32> = st.iter().filter_map(|s| s.daemon_pid).collect();
    let log = c.nodes()[1].daemon_log.clone().unwrap();
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("daemon n2 listening"));
    // A daemon connection works across the bridge.
    let to = c.node("n2").unwrap().listen;
    assert!(c
        .run_in("n1", move || TcpStream::connect(to).is_ok())
        .unwrap());
    c.down().unwrap();
    assert!(
        pids.iter().all(|&p| !sys::alive(p)),
        "daemons survived down"
    );
    no_namespaces_left("pmt4");

    // Without daemon support, the network comes up and says so.
    let mut o = opts("pmt4", 1, Link::Unlimited, &dir.path().join("state"));
    o.daemon_bin = Some("/bin/false".into());
    let c = up(&o);
    assert!(!c.state().daemons_started);
    assert!(c.state().notes.iter().any(|n| n.contains("not started")));
}

fn which(prog: &str) -> Result<String, ()> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .map_err(|_| ())?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !p.is_empty() {
        Ok(p)
    } else {
        Err(())
    }
}

/// Every link preset is shaped to its rate (tc enforces it, so the bounds are
/// wide only to allow for a loaded machine and the token bucket's burst).
#[test]
fn every_link_preset_is_shaped_to_its_rate() {
    if !root() {
        return;
    }
    for (link, bytes) in [
        (Link::Mbit10, 2_500_000),
        (Link::Mbit100, 25_000_000),
        (Link::Gbit1, 250_000_000),
        (Link::Unlimited, 1_000_000_000),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let c = up(&opts("pmt5", 2, link, dir.path()));
        let bps = measure(&c, bytes);
        println!("{link:>9}: measured {:8.1} Mbit/s", bps / 1e6);
        c.down().unwrap();
        match link.rate_bps() {
            Some(rate) => assert!(
                bps > 0.3 * rate as f64 && bps < 1.5 * rate as f64,
                "{link}: measured {:.1} Mbit/s for a {:.0} Mbit/s link",
                bps / 1e6,
                rate as f64 / 1e6
            ),
            None => assert!(
                bps > 1e9,
                "unlimited link measured only {:.1} Mbit/s",
                bps / 1e6
            ),
        }
    }
}
