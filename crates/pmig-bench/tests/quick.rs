//! `pmig bench --quick` end to end on a real local cluster: every table and plot
//! is produced, the plots are real SVG and PNG files with data in them, the
//! report's figures are those of summary.json, which are those of raw.csv, and
//! every migrated workload verified itself. Needs root and the `pmig` binary
//! (`cargo build --release -p pmig-cli`, or `PMIG_BIN`).

use pmig_bench::report::{fmt_scaled, fmt_summary};
use pmig_bench::stats::{summarize, Summary};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn pmig_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PMIG_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("pmig");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --release -p pmig-cli` first (or set PMIG_BIN)",
        p.display()
    );
    p
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Tears the bench's cluster down and kills the bench if the test ends early.
struct Guard {
    prefix: String,
    state_dir: PathBuf,
    child: Option<std::process::Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = pmig_cluster::down(&self.prefix, Some(&self.state_dir));
    }
}

/// Starts `PMIG ARGS… --prefix PREFIX --out OUT` with the workloads of
/// this checkout, its stdout and stderr to `stdout` and `stderr`, and no
/// descriptor but those three inherited.
fn start_bench(
    pmig: &Path,
    args: &[&str],
    prefix: &str,
    out: &Path,
    stdout: Stdio,
    stderr: Stdio,
) -> std::process::Child {
    let mut cmd = Command::new(pmig);
    cmd.args(args)
        .args(["--prefix", prefix, "--out"])
        .arg(out)
        .env("PMIG_WORKLOADS", repo().join("bench/workloads/bin"))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    // SAFETY: close_range is async-signal-safe; close-on-exec keeps std's exec-error pipe.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 1u32 << 2);
            Ok(())
        });
    }
    cmd.spawn().expect("start pmig bench")
}

/// The exit status of the guard's child, waited for at most `limit`
/// (`what` ends the failure's message); the guard no longer holds it.
fn wait_within(g: &mut Guard, limit: Duration, what: &str) -> std::process::ExitStatus {
    let t = Instant::now();
    let status = loop {
        if let Some(s) = g.child.as_mut().unwrap().try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < limit, "pmig bench {what}");
        std::thread::sleep(Duration::from_millis(100));
    };
    g.child = None;
    status
}

/// A JSON summary object as a Summary (null = not a number).
fn summary(v: &Value) -> Summary {
    let f = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    Summary {
        median: f("median"),
        min: f("min"),
        max: f("max"),
        n: v.get("n").and_then(Value::as_u64).unwrap_or(0) as usize,
    }
}

fn size_label(c: &Value) -> String {
    pmig_bench::matrix::size_label(c["workload"].as_str().unwrap(), c["kib"].as_u64().unwrap())
}

#[test]
fn quick_run_produces_every_table_and_plot() {
    if !nix_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let pmig = pmig_bin();
    let st = Command::new("make")
        .args(["-s", "-C"])
        .arg(repo().join("bench/workloads"))
        .stdout(Stdio::null())
        .status()
        .expect("make");
    assert!(st.success(), "building the workloads failed");

    let tmp = tempfile::Builder::new()
        .prefix("pmig-bench-quick-")
        .tempdir()
        .unwrap();
    let out = tmp.path().join("out");
    let prefix = format!("pbq{}", std::process::id() % 10000);
    let mut g = Guard {
        prefix: prefix.clone(),
        state_dir: out.join("work/cluster"),
        child: None,
    };
    g.child = Some(start_bench(
        &pmig,
        &["bench", "--quick"],
        &prefix,
        &out,
        Stdio::from(std::fs::File::create(tmp.path().join("stdout")).unwrap()),
        Stdio::from(std::fs::File::create(tmp.path().join("stderr")).unwrap()),
    ));
    // Bounded wait (the quick run takes about a minute).
    let status = wait_within(&mut g, Duration::from_secs(600), "--quick did not finish");
    let log = std::fs::read_to_string(tmp.path().join("stdout")).unwrap_or_default()
        + &std::fs::read_to_string(tmp.path().join("stderr")).unwrap_or_default();
    assert!(status.success(), "pmig bench --quick failed:\n{log}");

    // Every table.
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for h in [
        "## Raw TCP throughput per link",
        "layout of Noack's Table 5.1",
        "layout of Noack's Table 5.3",
        "layout of Noack's Table 5.6",
        "layout of Noack's Table 5.2",
        "layout of Noack's Table 5.4",
        "## Faults prevented (AMPoM",
        "## Run-time overhead and freeze time (AMPoM",
        "## Against the targets",
        "## Every combination",
    ] {
        assert!(md.contains(h), "report.md lacks `{h}`:\n{md}");
    }

    // Every plot, as SVG with data elements and as PNG.
    for p in [
        "down_vs_size",
        "total_vs_size",
        "bytes_vs_size",
        "delay_per_link",
        "faults_prevented",
    ] {
        let svg = std::fs::read_to_string(out.join(format!("{p}.svg"))).expect(p);
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{p}.svg: {e}"));
        let data = doc
            .descendants()
            .filter(|n| matches!(n.tag_name().name(), "circle" | "polyline" | "rect"))
            .count();
        let text = doc
            .descendants()
            .filter(|n| n.tag_name().name() == "text")
            .count();
        assert!(
            data >= 4 && text >= 4,
            "{p}.svg: {data} data elements, {text} texts"
        );
        let png = std::fs::read(out.join(format!("{p}.png"))).expect(p);
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{p}.png is not a PNG"
        );
        assert!(png.len() > 10_000, "{p}.png has only {} bytes", png.len());
        assert!(
            md.contains(&format!("({p}.png)")),
            "report.md does not show {p}"
        );
    }

    // Every workload verified itself; the unmigrated runs too.
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw.json")).unwrap()).unwrap();
    let recs = raw["records"].as_array().unwrap();
    assert!(!recs.is_empty());
    for b in raw["baselines"].as_array().unwrap() {
        assert_eq!(b["ok"], true, "unmigrated run failed: {b}");
    }
    let mut ok_per_workload: BTreeMap<String, usize> = BTreeMap::new();
    for r in recs {
        if r["ok"] == true {
            assert_eq!(r["self_check"], true, "{r}");
            *ok_per_workload
                .entry(r["workload"].as_str().unwrap().into())
                .or_default() += 1;
        } else {
            assert!(
                r["error"].as_str().is_some_and(|e| !e.is_empty()),
                "failed without an error: {r}"
            );
        }
    }
    for w in [
        "getpid",
        "rma",
        "reference",
        "stream",
        "randomaccess",
        "dirtier",
    ] {
        assert!(
            ok_per_workload.get(w).copied().unwrap_or(0) > 0,
            "no successful migration of {w}: {ok_per_workload:?}"
        );
    }
    for t in raw["tcp"].as_array().unwrap() {
        assert_eq!(t["ok"], true, "TCP measurement failed: {t}");
    }

    // raw.csv → summary.json → report.md, figure by figure.
    let csv = std::fs::read_to_string(out.join("raw.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(
        rows.len(),
        recs.len(),
        "raw.csv and raw.json differ in length"
    );
    let sum: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let combos = sum["combos"].as_array().unwrap();
    assert!(!combos.is_empty());
    let mut checked = 0;
    for c in combos {
        let key = |r: &Vec<String>| {
            r[col("workload")] == c["workload"].as_str().unwrap()
                && r[col("kib")].parse::<u64>().ok() == c["kib"].as_u64()
                && r[col("link")] == c["link"].as_str().unwrap()
                && r[col("strategy")] == c["strategy"].as_str().unwrap()
                && r[col("ok")] == "true"
        };
        for fig in [
            "down_ms",
            "total_ms",
            "bytes_total",
            "delay_ms",
            "remote_faults",
        ] {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| key(r))
                .filter_map(|r| r[col(fig)].parse::<f64>().ok())
                .collect();
            let from_csv = summarize(&v);
            let js = summary(&c[fig]);
            assert_eq!(from_csv.n, js.n, "{fig} of {c}");
            if js.n > 0 {
                assert!(
                    (from_csv.median - js.median).abs() <= 1e-9 * js.median.abs().max(1.0),
                    "{fig} of {c}"
                );
            }
        }
        // The combination's row in "Every combination".
        let (label, link, strategy) = (
            size_label(c),
            c["link"].as_str().unwrap(),
            c["strategy"].as_str().unwrap(),
        );
        let row = md
            .lines()
            .find(|l| {
                let x: Vec<&str> = l.split('|').map(str::trim).collect();
                x.len() == 19
                    && x[1] == label
                    && x[2] == link
                    && (x[3] == strategy || x[3].starts_with(&format!("{strategy} (")))
            })
            .unwrap_or_else(|| panic!("no row for {label} {link} {strategy} in report.md"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // cells[0] is empty; then workload, link, strategy, ok, preparation, down, post, total, KB …
        assert_eq!(
            cells[5],
            fmt_summary(&summary(&c["preparation_ms"])),
            "{row}"
        );
        assert_eq!(cells[6], fmt_summary(&summary(&c["down_ms"])), "{row}");
        assert_eq!(cells[7], fmt_summary(&summary(&c["post_ms"])), "{row}");
        assert_eq!(cells[8], fmt_summary(&summary(&c["total_ms"])), "{row}");
        assert_eq!(
            cells[9],
            fmt_scaled(&summary(&c["bytes_total"]), 1e-3),
            "{row}"
        );
        assert_eq!(
            cells[10],
            fmt_summary(&summary(&c["bytes_per_rss"])),
            "{row}"
        );
        assert_eq!(cells[13], fmt_summary(&summary(&c["delay_ms"])), "{row}");
        assert_eq!(
            cells[14],
            fmt_summary(&summary(&c["remote_faults"])),
            "{row}"
        );
        if c["n_ok"].as_u64().unwrap() > 0 {
            assert_ne!(
                cells[6], "—",
                "a successful migration without a down time: {row}"
            );
            checked += 1;
        }
    }
    assert!(checked > 0);
    drop(g);
}

fn nix_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether any network namespace named `PREFIX-…` exists.
fn namespaces_of(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&format!("{prefix}-")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_interrupted_run_tears_its_cluster_down() {
    if !nix_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let pmig = pmig_bin();
    let tmp = tempfile::Builder::new()
        .prefix("pmig-bench-interrupted-")
        .tempdir()
        .unwrap();
    let out = tmp.path().join("out");
    let prefix = format!("pbi{}", std::process::id() % 10000);
    let mut g = Guard {
        prefix: prefix.clone(),
        state_dir: out.join("work/cluster"),
        child: None,
    };
    let stderr = tmp.path().join("stderr");
    g.child = Some(start_bench(
        &pmig,
        &["bench", "run", "--quick"],
        &prefix,
        &out,
        Stdio::null(),
        Stdio::from(std::fs::File::create(&stderr).unwrap()),
    ));
    // Until its cluster is up, every daemon started (bounded); the bench
    // has set up its handling of signals before.
    let t = Instant::now();
    let daemons: Vec<i32> = loop {
        if let Some(s) = g.child.as_mut().unwrap().try_wait().unwrap() {
            panic!(
                "pmig bench ended ({s}) before its cluster was up:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        if let Ok(c) = pmig_cluster::Cluster::load(&prefix, Some(&g.state_dir)) {
            let pids: Vec<i32> = c.nodes().iter().filter_map(|n| n.daemon_pid).collect();
            if pids.len() >= 2 && pids.len() == c.nodes().len() {
                break pids;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the bench's cluster `{prefix}` never came up"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!namespaces_of(&prefix).is_empty());
    let pid = g.child.as_ref().unwrap().id() as i32;
    // SAFETY: a signal to the bench, our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = wait_within(&mut g, Duration::from_secs(60), "did not end after SIGTERM");
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGTERM),
        "the bench should end as SIGTERM would have: {status}\n{log}"
    );
    assert!(
        log.contains(&format!("tearing down the cluster `{prefix}`")),
        "{log}"
    );
    assert_eq!(
        namespaces_of(&prefix),
        Vec::<String>::new(),
        "the interrupted bench left namespaces behind"
    );
    // Each daemon is gone (or dead, not yet reaped by init).
    let gone = |pid: i32| match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    };
    let t = Instant::now();
    while !daemons.iter().all(|&p| gone(p)) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "daemons of the interrupted bench still run: {daemons:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(g);
}
