//! Parallel make on idle hosts (`pmig make`, `pmig sh`: Sprite's pmake) with a real
//! build: Lua's C sources, as the `lua-src` crate ships them (a dev-dependency of this
//! crate, so cargo fetches it), compiled by our own Makefile (`tests/pmake/`) inside
//! n1 of a 3-node cluster. Needs root, GNU make and cc. Every wait is bounded; the
//! cluster is torn down even when an assertion fails. No wall-clock figures are
//! asserted (the benchmark in BENCHMARKS.md has them).

use pmig_tests::{only_stdio, pmig_bin, quick_selection, root, Proc, TestCluster};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
/// Longest a whole build may take (two shared cores, other work on the machine).
const BUILD: Duration = Duration::from_secs(900);

/// The directory of Lua 5.4's sources inside the `lua-src` package (a
/// dev-dependency, so cargo has unpacked it): its version from the
/// workspace's Cargo.lock, its directory in cargo's registry sources
/// (`$CARGO_HOME/registry/src/*/lua-src-<version>`), its highest `lua-5.4.*`.
/// (Not `cargo metadata`: offline it fails on packages of other platforms
/// that were never downloaded.)
fn lua_sources() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("read Cargo.lock");
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"lua-src\""))
        .and_then(|p| {
            p.lines()
                .find_map(|l| l.strip_prefix("version = \""))
                .map(|v| v.trim_end_matches('"').to_string())
        })
        .expect("lua-src (a dev-dependency of pmig-daemon) is not in Cargo.lock");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    let dir = std::fs::read_dir(cargo_home.join("registry/src"))
        .expect("cargo's registry sources")
        .flatten()
        .map(|e| e.path().join(format!("lua-src-{version}")))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("lua-src-{version} is not in {}", cargo_home.display()));
    let mut best: Option<(u32, PathBuf)> = None;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(patch) = name
            .strip_prefix("lua-5.4.")
            .and_then(|p| p.parse::<u32>().ok())
        {
            if best.as_ref().is_none_or(|(b, _)| patch > *b) {
                best = Some((patch, e.path()));
            }
        }
    }
    let (_, src) = best.unwrap_or_else(|| panic!("no lua-5.4.* in {}", dir.display()));
    assert!(
        src.join("lapi.c").is_file(),
        "{} has no Lua sources",
        src.display()
    );
    src
}

fn makefile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pmake/Makefile")
}

pmig_tests::cluster_env!(
    /// The test's cluster ([`TestCluster`]: torn down on drop, also on panic).
    Env
);

impl Env {
    fn up(tag: &str) -> Env {
        Env(TestCluster::up(&format!("pk{tag}"), "pmake", |o| {
            // Short report and owner intervals (as the selector's tests); a node
            // running a compile (load about 1) stays available.
            o.daemon_args = quick_selection("3", "3")
                .iter()
                .map(|s| s.to_string())
                .collect();
        }))
    }

    /// `PROG ARGS` inside `node` with cwd `cwd`, only fds 0-2, stdin empty.
    fn command(&self, node: &str, prog: &Path, args: &[&str], cwd: &Path) -> Command {
        let mut cmd = self.c().command(node, prog).unwrap();
        cmd.args(args).current_dir(cwd).stdin(Stdio::null());
        only_stdio(&mut cmd);
        cmd
    }

    /// The selector's view from n1 (`pmig hosts status --json`).
    fn hosts(&self) -> Option<serde_json::Value> {
        let o = self
            .command("n1", &pmig_bin(), &["hosts", "status", "--json"], &self.dir)
            .output()
            .ok()?;
        if !o.status.success() {
            return None;
        }
        serde_json::from_slice(&o.stdout).ok()
    }

    /// Waits (bounded) until the selector reports n2 and n3 idle.
    fn wait_idle(&self) {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let h = self.hosts();
            let idle = h
                .as_ref()
                .and_then(|h| h["hosts"].as_array())
                .map(|rows| {
                    rows.iter()
                        .filter(|r| r["node"] != "n1" && r["state"] == "idle")
                        .count()
                })
                .unwrap_or(0);
            if idle == 2 {
                return;
            }
            assert!(Instant::now() < end, "n2 and n3 not idle: {h:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs `cmd` to its end (bounded), its output collected; panics naming `what`.
fn run(mut cmd: Command, what: &str) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(BUILD) {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => {
            // SAFETY: killing the process this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what} did not end within {BUILD:?}")
        }
    }
}

/// A small computation for the built interpreter, and what it must print (worked
/// out here, not by Lua).
fn computation() -> (&'static str, String) {
    let chunk = "local s = 0 for i = 1, 100000 do s = s + i * i end print(s) \
                 local t = {} for i = 1, 20 do t[i] = (i * 7919) % 101 end table.sort(t) \
                 print(table.concat(t, ',')) \
                 print(string.format('%s %d', ('pm'):rep(3):upper(), #_VERSION))";
    let s: i64 = (1..=100000i64).map(|i| i * i).sum();
    let mut t: Vec<i64> = (1..=20i64).map(|i| (i * 7919) % 101).collect();
    t.sort();
    let t: Vec<String> = t.iter().map(|v| v.to_string()).collect();
    let want = format!("{s}\n{}\nPMPMPM {}\n", t.join(","), "Lua 5.4".len());
    (chunk, want)
}

/// `<target> <node>` lines of the Makefile's evidence file: recipes per node.
fn evidence(dir: &Path) -> (usize, BTreeMap<String, usize>) {
    let text = std::fs::read_to_string(dir.join("nodes.txt")).unwrap_or_default();
    let mut per = BTreeMap::new();
    let mut n = 0;
    for l in text.lines() {
        let (_, node) = l
            .split_once(' ')
            .unwrap_or_else(|| panic!("bad line {l:?}"));
        *per.entry(node.to_string()).or_insert(0) += 1;
        n += 1;
    }
    (n, per)
}

#[test]
fn lua_builds_with_pmig_make_on_idle_hosts() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let src = lua_sources();
    let recipes = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".c") && !["lua.c", "luac.c", "onelua.c"].contains(&n.as_str())
        })
        .count()
        + 2; // luarun.o and the link
    assert!(recipes > 20, "only {recipes} recipes in {}", src.display());
    let env = Env::up("a");
    let plain = env.dir.join("plain");
    let dist = env.dir.join("pmake");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::create_dir_all(&dist).unwrap();
    let mk = makefile();
    let src_arg = format!("SRC={}", src.display());
    let mk_args = ["-s", "-f", mk.to_str().unwrap(), src_arg.as_str()];

    // The reference: plain make -j4 inside n1.
    let mut args = vec!["-j4"];
    args.extend(mk_args);
    let o = run(
        env.command("n1", Path::new("make"), &args, &plain),
        "plain make",
    );
    assert!(
        o.status.success(),
        "plain make failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // pmig make -j 4 inside n1, once n2 and n3 are idle.
    env.wait_idle();
    let log = env.dir.join("pmake.log");
    let log_s = log.to_str().unwrap().to_string();
    let mut args = vec!["make", "-j", "4", "--json", "--log", log_s.as_str(), "--"];
    args.extend(mk_args);
    let o = run(env.command("n1", &pmig_bin(), &args, &dist), "pmig make");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "pmig make failed: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("pmig make --json: {e}: {:?}", o.stdout));
    assert!(
        stderr.contains("pmig make: -j4"),
        "no summary line: {stderr}"
    );
    // It held both idle nodes for the build (Sprite's pmake), and gave them back.
    let mut held: Vec<&str> = summary["held"]
        .as_array()
        .expect("held")
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    held.sort();
    assert_eq!(held, ["n2", "n3"], "summary: {summary}");
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let h = env.hosts();
        let any_held = h.as_ref().and_then(|h| h["hosts"].as_array()).map(|rows| {
            rows.iter()
                .any(|r| r["held"].as_array().is_some_and(|a| !a.is_empty()))
        });
        if any_held == Some(false) {
            break;
        }
        assert!(
            Instant::now() < end,
            "hosts still held after the build: {h:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Both interpreters compute what they must.
    let (chunk, want) = computation();
    for (dir, what) in [(&plain, "plain"), (&dist, "pmig make")] {
        let lua = dir.join("lua");
        let o = run(env.command("n1", &lua, &["-e", chunk], dir), what);
        assert!(
            o.status.success(),
            "{what}'s lua failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), want, "{what}'s lua");
    }

    // Where the recipes ran: the nodes' own word (PMIG_NODE of the shell that ran
    // each recipe), every recipe once.
    let (n, per) = evidence(&dist);
    assert_eq!(n, recipes, "recipes recorded: {per:?}");
    let remote: usize = per
        .iter()
        .filter(|(k, _)| *k == "n2" || *k == "n3")
        .map(|(_, v)| *v)
        .sum();
    assert!(remote > 0, "no recipe ran on n2 or n3: {per:?}");
    assert_eq!(
        per.keys()
            .filter(|k| !["n1", "n2", "n3"].contains(&k.as_str()))
            .count(),
        0,
        "recipes on unknown nodes: {per:?}"
    );
    // The plain build ran everything on n1.
    let (pn, pper) = evidence(&plain);
    assert_eq!((pn, pper.get("n1").copied()), (recipes, Some(recipes)));

    // pmig make's own account agrees: every recipe, the remote ones as jobs of n1.
    let per_node = summary["per_node"].as_object().expect("per_node");
    let total: u64 = per_node.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(total as usize, recipes, "summary: {summary}");
    for node in ["n2", "n3"] {
        assert_eq!(
            per_node.get(node).and_then(|v| v.as_u64()).unwrap_or(0) as usize,
            per.get(node).copied().unwrap_or(0),
            "pmig make's count for {node} against the recipes' own: {summary} {per:?}"
        );
    }
    let log_text = std::fs::read_to_string(&log).unwrap();
    for l in log_text.lines() {
        let (node, job) = l.split_once('\t').unwrap();
        if node != "local" {
            assert!(job.starts_with("n1:"), "job {job} not homed on n1");
        }
    }
    // Every remote recipe was a job the daemons logged.
    let ran_on = |node: &str| {
        let d = env.c().node(node).unwrap().dir.clone();
        std::fs::read_to_string(d.join("daemon.log")).unwrap_or_default()
    };
    let n1_log = ran_on("n1");
    for node in ["n2", "n3"] {
        let started = n1_log
            .lines()
            .filter(|l| l.contains(&format!("runs on {node} as pid")))
            .count();
        assert_eq!(
            started,
            per.get(node).copied().unwrap_or(0),
            "n1's log against the recipes on {node}"
        );
    }
}

#[test]
fn pmig_sh_runs_here_when_no_node_is_idle() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let env = Env::up("b");
    env.wait_idle();
    // Two other clients hold n2 and n3 in class short (one each: fairness takes
    // nothing from a client holding a single host).
    let mut holders = Vec::new();
    for i in 0..2 {
        let cmd = env.command(
            "n1",
            &pmig_bin(),
            &["hosts", "request", "--class", "short", "-n", "1"],
            &env.dir,
        );
        let mut p = Proc::spawn(&format!("holder {i}"), cmd);
        let l = p.line(Duration::from_secs(20), "a granted host");
        assert!(
            l.starts_with("n2 ") || l.starts_with("n3 "),
            "granted {l:?}"
        );
        holders.push(p);
    }
    let script = "echo \"out $PMIG_NODE $0 $1\"; echo err >&2; exit 3";
    let o = run(
        env.command(
            "n1",
            &pmig_bin(),
            &["sh", "-ec", script, "zero", "one"],
            &env.dir,
        ),
        "pmig sh",
    );
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out n1 zero one\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.ends_with("err\n"), "stderr: {err:?}");
    assert!(
        err.contains("pmig sh: running recipes on this node"),
        "no note of the fallback: {err:?}"
    );
    // Quietly with --quiet.
    let o = run(
        env.command(
            "n1",
            &pmig_bin(),
            &["sh", "--quiet", "-c", "true"],
            &env.dir,
        ),
        "pmig sh --quiet",
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    // Once the hosts are returned, the same command runs on another node, same
    // status and output.
    for mut p in holders {
        p.close_stdin();
        let st = pmig_tests::wait_timeout(&mut p.child, Duration::from_secs(20));
        assert!(st.is_some(), "pmig hosts request did not end");
    }
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let h = env.hosts();
        let held = h.as_ref().and_then(|h| h["hosts"].as_array()).map(|rows| {
            rows.iter()
                .any(|r| r["held"].as_array().is_some_and(|a| !a.is_empty()))
        });
        if held == Some(false) {
            break;
        }
        assert!(Instant::now() < end, "hosts still held: {h:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    env.wait_idle();
    let o = run(
        env.command(
            "n1",
            &pmig_bin(),
            &["sh", "-ec", script, "zero", "one"],
            &env.dir,
        ),
        "pmig sh",
    );
    assert_eq!(o.status.code(), Some(3));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out == "out n2 zero one\n" || out == "out n3 zero one\n",
        "not run on n2 or n3: {out:?}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
}
