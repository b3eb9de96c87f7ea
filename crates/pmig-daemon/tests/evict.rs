//! Eviction and load balancing on a real 3-node cluster (network namespaces).
//! Needs root and the `pmig` binary (`cargo build --release -p pmig-cli`, or
//! `PMIG_BIN`). Each test brings its own cluster up under a unique prefix; a
//! guard kills the test's processes and tears the cluster down even when an
//! assertion fails. Every wait is bounded; the assertions are about decisions
//! and placement, never about speed (the figures are printed for
//! BENCHMARKS.md).

use pmig_tests::{only_stdio, quick_selection, root, Collected, TestCluster};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const WAIT: Duration = Duration::from_secs(30);
/// CPU-bound jobs on 2 shared cores can be slow: the end of a job may take long.
const FINISH: Duration = Duration::from_secs(240);

pmig_tests::cluster_env!(
    /// The test's cluster ([`TestCluster`]: it kills the test's processes and
    /// tears the cluster down on drop, also on panic) and what these tests do with it.
    Env
);

impl Env {
    fn up(tag: &str, daemon_args: &[&str]) -> Env {
        Env(TestCluster::up(&format!("pv{tag}"), "evict", |o| {
            o.daemon_args = daemon_args.iter().map(|s| s.to_string()).collect();
        }))
    }

    fn logs(&self) -> String {
        ["n1", "n2", "n3"]
            .iter()
            .map(|n| format!("---- {n}\n{}", self.log(n)))
            .collect()
    }

    /// `pmig ARGS` in `node`; stdout, or a panic with stderr.
    fn pmig_ok(&self, node: &str, args: &[&str]) -> String {
        let o = self.pmig(node, args).stdin(Stdio::null()).output().unwrap();
        assert!(
            o.status.success(),
            "pmig {args:?} on {node}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn json(&self, node: &str, args: &[&str]) -> serde_json::Value {
        let out = self.pmig_ok(node, args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    fn jobs(&self) -> Vec<serde_json::Value> {
        self.json("n1", &["ps", "--json"])["jobs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn job(&self, id: &str) -> Option<serde_json::Value> {
        self.jobs().into_iter().find(|j| j["id"] == id)
    }

    /// `pmig run --on NODE -- ARGV` from n1, stdout collected.
    fn run_on(&mut self, node: &str, argv: &[String]) -> (Child, Collected) {
        let mut args = vec!["run", "--on", node, "--"];
        args.extend(argv.iter().map(|s| s.as_str()));
        let mut cmd = self.pmig("n1", &args);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut c = cmd.spawn().expect("spawn pmig run");
        self.pids.push(c.id() as i32);
        let out = pmig_tests::collect(c.stdout.take().unwrap());
        (c, out)
    }

    /// Waits (bounded) for a job whose command line is `argv`, not in `known`.
    fn new_job(&self, argv: &[String], known: &[String]) -> serde_json::Value {
        let end = Instant::now() + WAIT;
        loop {
            if let Some(j) = self.jobs().into_iter().find(|j| {
                j["argv"] == serde_json::json!(argv) && !known.iter().any(|k| j["id"] == *k)
            }) {
                return j;
            }
            assert!(Instant::now() < end, "no job {argv:?}:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn balance(&self) -> serde_json::Value {
        self.json("n1", &["balance", "status", "--json"])
    }
}

/// Waits (bounded) until `out` shows `s`.
fn wait_for(out: &Collected, s: &str) {
    let text = out.text_containing(s, WAIT);
    assert!(text.contains(s), "no {s:?} in the output: {text:?}");
}

/// A job's whole output once it has exited: the reader may still be behind.
fn final_text(out: &Collected) -> String {
    out.text_at_eof(Duration::from_secs(10))
}

fn alive(pid: i32) -> bool {
    !matches!(pmig_tests::proc_state(pid), None | Some('Z') | Some('X'))
}

fn wait_exit(c: &mut Child, what: &str, env: &Env) -> std::process::ExitStatus {
    pmig_tests::wait_timeout(c, FINISH)
        .unwrap_or_else(|| panic!("{what} did not end within {FINISH:?}:\n{}", env.logs()))
}

/// The dirtier, CPU-bound (no rate limit), small memory.
fn dirtier(extra: &[&str]) -> Vec<String> {
    let mut v = vec![pmig_tests::workload("dirtier")
        .to_string_lossy()
        .into_owned()];
    for a in ["--mib", "8", "--dirty-rate", "0", "--report-ms", "0"]
        .iter()
        .chain(extra)
    {
        v.push(a.to_string());
    }
    v
}

/// The DONE line without its timing fields.
fn done_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.starts_with("DONE"))
        .unwrap_or_else(|| panic!("no DONE line in {text:?}"));
    line.split_whitespace()
        .filter(|w| !w.starts_with("elapsed_ms=") && !w.starts_with("max_pause"))
        .collect::<Vec<_>>()
        .join(" ")
}

const ITERATIONS: &str = "150000000";

/// The eviction reports of `node` from `pmig balance status`.
fn evictions(env: &Env, node: &str) -> Vec<serde_json::Value> {
    env.balance()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node)
        .and_then(|n| n["evictions"].as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn owner_activity_sends_foreign_jobs_home_and_they_finish_correctly() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up("a", &[]);
    // The unmigrated reference run, meanwhile, outside the cluster.
    let argv = dirtier(&["--iterations", ITERATIONS]);
    let mut reference = only_stdio(&mut Command::new(&argv[0]))
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    env.pids.push(reference.id() as i32);
    let ref_out = pmig_tests::collect(reference.stdout.take().unwrap());

    let (mut c, out) = env.run_on("n2", &argv);
    wait_for(&out, "READY");
    let job = env.new_job(&argv, &[]);
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["node"], "n2");
    // A job that cannot move (a shell with a child): it must keep running.
    let stuck = vec!["sh".to_string(), "-c".into(), "sleep 600; true".into()];
    let (mut sc, _) = env.run_on("n2", &stuck);
    let sjob = env.new_job(&stuck, std::slice::from_ref(&id));
    let sid = sjob["id"].as_str().unwrap().to_string();
    let spid = sjob["pid"].as_i64().unwrap() as i32;
    env.pids.push(spid);

    // The owner of n2 comes back (asked from n1): the eviction runs by itself.
    let o = env.pmig_ok("n1", &["owner", "active", "--node", "n2"]);
    assert!(o.contains("eviction"), "{o}");
    let end = Instant::now() + Duration::from_secs(120);
    let report = loop {
        if let Some(r) = evictions(&env, "n2").into_iter().next() {
            break r;
        }
        assert!(Instant::now() < end, "no eviction on n2:\n{}", env.logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    let moved = report["moved"].as_array().unwrap();
    assert_eq!(moved.len(), 2, "{report}");
    let m = moved.iter().find(|m| m["job"] == id.as_str()).unwrap();
    assert_eq!(m["to"], "n1", "{report}");
    assert!(m["error"].is_null(), "{report}");
    assert!(m["ms"].as_f64().unwrap() > 0.0);
    let s = moved.iter().find(|m| m["job"] == sid.as_str()).unwrap();
    let err = s["error"].as_str().expect("the shell could not move");
    assert!(!err.contains('\n'), "one line: {err}");
    eprintln!(
        "eviction n2 → n1: {} in {:.0} ms (down {:.0} ms), eviction total {:.0} ms; refused: {err}",
        m["strategy"],
        m["ms"].as_f64().unwrap(),
        m["down_ms"].as_f64().unwrap(),
        report["total_ms"].as_f64().unwrap()
    );
    // ps shows it at home, with its history; the shell runs on on n2.
    let j = env.job(&id).expect("job listed");
    assert_eq!(j["node"], "n1", "{j}");
    assert_eq!(j["history"], serde_json::json!(["n2", "n1"]), "{j}");
    assert!(alive(spid), "the unmovable job was hurt");
    assert_eq!(env.job(&sid).unwrap()["node"], "n2");

    // It finishes with the reference's result and status 0, at its home.
    let st = wait_exit(&mut c, "the evicted job", &env);
    let text = final_text(&out);
    assert_eq!(st.code(), Some(0), "{st:?}: {text}");
    assert!(reference.wait().unwrap().success());
    assert_eq!(done_line(&text), done_line(&final_text(&ref_out)));
    assert!(text.contains("verify=ok"));
    env.pmig_ok("n1", &["kill", "-s", "KILL", &sid]);
    let _ = wait_exit(&mut sc, "the shell job", &env);
}

#[test]
fn evict_to_idle_moves_to_an_idle_host_and_reports_it() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    let mut env = Env::up(
        "b",
        &[&["--evict-to", "idle"][..], &quick_selection("0.5", "120")].concat(),
    );
    // n1 (the home) is in use by its owner: only n3 is idle.
    env.pmig_ok("n1", &["owner", "active"]);
    let argv = dirtier(&["--seconds", "0"]);
    let (mut c, out) = env.run_on("n2", &argv);
    wait_for(&out, "READY");
    let id = env.new_job(&argv, &[])["id"].as_str().unwrap().to_string();
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let h = env.json("n1", &["hosts", "status", "--json"]);
        let idle = h["hosts"]
            .as_array()
            .map(|r| r.iter().any(|r| r["node"] == "n3" && r["state"] == "idle"));
        if idle == Some(true) {
            break;
        }
        assert!(Instant::now() < end, "n3 not idle: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // `pmig evict n2 --json` (asked from n1) waits for the report.
    let r = env.json("n1", &["evict", "n2", "--json"]);
    assert_eq!(r["node"], "n2");
    let m = &r["moved"][0];
    assert_eq!(m["job"], id.as_str(), "{r}");
    assert_eq!(m["to"], "n3", "{r}");
    assert_eq!(m["why"], "idle host", "{r}");
    assert!(m["error"].is_null(), "{r}");
    eprintln!(
        "eviction n2 → n3 (idle): {} in {:.0} ms (down {:.0} ms)",
        m["strategy"],
        m["ms"].as_f64().unwrap(),
        m["down_ms"].as_f64().unwrap()
    );
    let j = env.job(&id).unwrap();
    assert_eq!(j["node"], "n3", "{j}");
    assert_eq!(j["home"], "n1");
    // Nothing foreign is left: a second eviction moves nothing.
    let again = env.json("n1", &["evict", "n2", "--json"]);
    assert_eq!(again["moved"].as_array().unwrap().len(), 0, "{again}");
    // It still answers its home: stopped by SIGTERM, it verifies itself.
    env.pmig_ok("n1", &["kill", "-s", "TERM", &id]);
    let st = wait_exit(&mut c, "the evicted job", &env);
    let text = final_text(&out);
    assert_eq!(st.code(), Some(0), "{st:?}: {text}");
    assert!(text.contains("verify=ok"), "{text}");
}

#[test]
fn balancing_spreads_old_cpu_bound_jobs_and_settles() {
    if !root() {
        return;
    }
    let _g = pmig_tests::serial(&SERIAL);
    const MIN_AGE_MS: u64 = 8000;
    let mut env = Env::up(
        "c",
        &[
            "--balance",
            "--balance-interval-ms",
            "500",
            "--balance-min-age-secs",
            "8",
            "--balance-min-cpu",
            "0.15",
            "--balance-cooldown-secs",
            "4",
            "--report-interval-ms",
            "250",
            "--load-tau-secs",
            "1",
        ],
    );
    // Three CPU-bound jobs on n2; distinct seeds keep their command lines apart.
    let mut runs = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for seed in ["1", "2", "3"] {
        let argv = dirtier(&["--seconds", "0", "--seed", seed]);
        let (c, out) = env.run_on("n2", &argv);
        wait_for(&out, "READY");
        let j = env.new_job(&argv, &ids);
        ids.push(j["id"].as_str().unwrap().to_string());
        runs.push((c, out));
    }
    // They spread: one per node, within a bounded time.
    let placement = |env: &Env| -> Vec<String> {
        let jobs = env.jobs();
        ids.iter()
            .map(|id| {
                jobs.iter()
                    .find(|j| j["id"] == id.as_str())
                    .map(|j| j["node"].as_str().unwrap_or("?").to_string())
                    .unwrap_or_default()
            })
            .collect()
    };
    let end = Instant::now() + Duration::from_secs(120);
    let spread = loop {
        let mut p = placement(&env);
        p.sort();
        if p == ["n1", "n2", "n3"] {
            break placement(&env);
        }
        assert!(
            Instant::now() < end,
            "not spread: {p:?}\n{}\n{}",
            env.balance(),
            env.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let moves = |env: &Env| -> Vec<serde_json::Value> {
        env.balance()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["decisions"].as_array().cloned().unwrap_or_default())
            .filter(|d| d["action"] != "hold")
            .collect()
    };
    let before = moves(&env);
    // It settles: over several cool-downs nothing moves any more.
    let end = Instant::now() + Duration::from_secs(12);
    while Instant::now() < end {
        assert_eq!(placement(&env), spread, "a job moved again");
        std::thread::sleep(Duration::from_millis(500));
    }
    let after = moves(&env);
    assert_eq!(before.len(), after.len(), "more moves: {after:#?}");
    assert_eq!(after.len(), 2, "two moves spread three jobs: {after:#?}");
    for d in &after {
        assert_eq!(d["action"], "move", "{d}");
        assert!(
            d["age_ms"].as_u64().unwrap() >= MIN_AGE_MS,
            "too young: {d}"
        );
        eprintln!("balance move: {}", d["text"]);
    }
    // The young jobs were seen, and held back, before they reached the minimum age.
    let st = env.balance();
    let n2 = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "n2")
        .unwrap();
    assert!(
        n2["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["reason"] == "too_young"),
        "no too_young hold on n2: {n2}"
    );
    // No job went back and forth: every history has distinct nodes.
    for j in env.jobs() {
        let h: Vec<&str> = j["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        let mut u = h.clone();
        u.sort();
        u.dedup();
        assert_eq!(u.len(), h.len(), "moved back: {j}");
    }
    // Every job still answers its home and verifies itself.
    for id in &ids {
        env.pmig_ok("n1", &["kill", "-s", "TERM", id]);
    }
    for (mut c, out) in runs {
        let st = wait_exit(&mut c, "a balanced job", &env);
        let text = final_text(&out);
        assert_eq!(st.code(), Some(0), "{st:?}: {text}");
        assert!(text.contains("verify=ok"), "{text}");
    }
}
