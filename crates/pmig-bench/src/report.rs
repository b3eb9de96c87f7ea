//! The report of a `pmig bench` run: medians and spreads per combination,
//! tables laid out like Noack's (5.1–5.4, 5.6) and AMPoM's results, the
//! targets of the live-migration issue, and the raw data as CSV and JSON.
//! Every figure printed comes from the run's records; nothing is a constant.

use crate::matrix::{size_label, Record, Results, ALL_LINKS, ALL_STRATEGIES, KERNELS};
use crate::stats::{summarize, Summary};
use crate::{BenchError, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Median and spread of one combination (over its successful repetitions).
#[derive(Debug, Clone, Serialize)]
pub struct Combo {
    pub workload: String,
    pub kib: u64,
    pub link: String,
    pub strategy: String,
    /// What `auto` chose (or the strategy itself), per successful repetition.
    pub chosen: Vec<String>,
    pub n: usize,
    pub n_ok: usize,
    pub errors: Vec<String>,
    pub rss_kib: Summary,
    pub preparation_ms: Summary,
    pub down_ms: Summary,
    pub post_ms: Summary,
    pub total_ms: Summary,
    pub bytes_total: Summary,
    pub bytes_per_rss: Summary,
    pub rate_frac_tcp: Summary,
    pub post_rate_frac_tcp: Summary,
    pub post_rate_frac_limit: Summary,
    pub remote_faults: Summary,
    pub prefetched_pages: Summary,
    pub prefetch_hits: Summary,
    pub prefetch_share: Summary,
    pub baseline_ms: Summary,
    pub elapsed_ms: Summary,
    pub delay_ms: Summary,
    pub max_pause_ms: Summary,
    pub stall_ms: Summary,
    pub fault_wait_max_ms: Summary,
    /// How long a skeleton's capture paused the process (those that tried
    /// one), and how many of the successful repetitions ran their skeleton.
    pub skeleton_pause_ms: Summary,
    pub skeleton_used: usize,
}

/// One row of the AMPoM comparison (one kernel, size and link).
#[derive(Debug, Clone, Serialize)]
pub struct AmpomRow {
    pub workload: String,
    pub kib: u64,
    pub link: String,
    /// Median remote faults per strategy (demand-paging is AMPoM's NoPrefetch).
    pub faults: Vec<(String, f64)>,
    pub ampom_prefetched: f64,
    pub ampom_prefetch_hits: f64,
    /// 1 − faults(S) ÷ faults(demand-paging), per strategy (S ≠ demand-paging).
    pub prevented: Vec<(String, f64)>,
    pub baseline_ms: f64,
    /// Median execution delay ÷ unmigrated run time, per strategy.
    pub overhead: Vec<(String, f64)>,
    /// Median down (freeze) time per strategy.
    pub down_ms: Vec<(String, f64)>,
}

/// One line of the targets table.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summaries {
    pub tcp: Vec<(String, Summary)>,
    /// Longest pause of the unmigrated runs: the machine's noise floor.
    pub baseline_pause_ms: Summary,
    pub combos: Vec<Combo>,
    pub ampom: Vec<AmpomRow>,
    pub targets: Vec<Target>,
}

fn col(rs: &[&Record], f: impl Fn(&Record) -> f64) -> Summary {
    let v: Vec<f64> = rs.iter().filter(|r| r.ok).map(|r| f(r)).collect();
    summarize(&v)
}

pub fn summarize_all(res: &Results) -> Summaries {
    let mut keys: Vec<(String, u64, String, String)> = Vec::new();
    for c in &res.plan {
        let k = (
            c.workload.clone(),
            c.kib,
            c.link.clone(),
            c.strategy.clone(),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut combos = Vec::new();
    for (w, kib, link, s) in keys {
        let rs: Vec<&Record> = res
            .records
            .iter()
            .filter(|r| r.workload == w && r.kib == kib && r.link == link && r.strategy == s)
            .collect();
        combos.push(Combo {
            chosen: rs
                .iter()
                .filter(|r| r.ok)
                .filter_map(|r| r.chosen.clone())
                .collect(),
            n: rs.len(),
            n_ok: rs.iter().filter(|r| r.ok).count(),
            errors: rs.iter().filter_map(|r| r.error.clone()).collect(),
            rss_kib: col(&rs, |r| r.rss_kib),
            preparation_ms: col(&rs, |r| r.preparation_ms),
            down_ms: col(&rs, |r| r.down_ms),
            post_ms: col(&rs, |r| r.post_ms),
            total_ms: col(&rs, |r| r.total_ms),
            bytes_total: col(&rs, |r| r.bytes_total),
            bytes_per_rss: col(&rs, |r| r.bytes_per_rss),
            rate_frac_tcp: col(&rs, |r| r.rate_frac_tcp),
            post_rate_frac_tcp: col(&rs, |r| r.post_rate_frac_tcp),
            post_rate_frac_limit: col(&rs, |r| r.post_rate_frac_limit),
            remote_faults: col(&rs, |r| r.remote_faults),
            prefetched_pages: col(&rs, |r| r.prefetched_pages),
            prefetch_hits: col(&rs, |r| r.prefetch_hits),
            prefetch_share: col(&rs, |r| r.prefetch_share),
            baseline_ms: col(&rs, |r| r.baseline_ms),
            elapsed_ms: col(&rs, |r| r.elapsed_ms),
            delay_ms: col(&rs, |r| r.delay_ms),
            max_pause_ms: col(&rs, |r| r.max_pause_ms),
            stall_ms: col(&rs, |r| r.stall_ms),
            fault_wait_max_ms: col(&rs, |r| r.fault_wait_max_ms),
            skeleton_pause_ms: col(&rs, |r| r.skeleton_pause_ms),
            skeleton_used: rs
                .iter()
                .filter(|r| r.ok && r.skeleton_used == Some(true))
                .count(),
            workload: w,
            kib,
            link,
            strategy: s,
        });
    }
    let tcp = ALL_LINKS
        .iter()
        .filter(|l| res.tcp.iter().any(|t| t.link == **l))
        .map(|l| {
            let v: Vec<f64> = res
                .tcp
                .iter()
                .filter(|t| t.link == *l && t.ok)
                .map(|t| t.bytes_per_s)
                .collect();
            (l.to_string(), summarize(&v))
        })
        .collect();
    let ampom = ampom_rows(&combos);
    let bp: Vec<f64> = res
        .baselines
        .iter()
        .filter(|b| b.ok)
        .map(|b| b.max_pause_ms)
        .collect();
    let baseline_pause_ms = summarize(&bp);
    let targets = targets(&combos, &baseline_pause_ms);
    Summaries {
        tcp,
        baseline_pause_ms,
        combos,
        ampom,
        targets,
    }
}

fn find<'a>(cs: &'a [Combo], w: &str, kib: u64, link: &str, s: &str) -> Option<&'a Combo> {
    cs.iter().find(|c| {
        c.workload == w && c.kib == kib && c.link == link && c.strategy == s && c.n_ok > 0
    })
}

fn ampom_rows(cs: &[Combo]) -> Vec<AmpomRow> {
    let mut keys: Vec<(String, u64, String)> = Vec::new();
    for c in cs {
        if KERNELS.contains(&c.workload.as_str()) {
            let k = (c.workload.clone(), c.kib, c.link.clone());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys.into_iter()
        .map(|(w, kib, link)| {
            let strategies: Vec<&Combo> = ALL_STRATEGIES
                .iter()
                .filter_map(|s| find(cs, &w, kib, &link, s))
                .collect();
            let dp = find(cs, &w, kib, &link, "demand-paging").map(|c| c.remote_faults.median);
            let am = find(cs, &w, kib, &link, "ampom");
            AmpomRow {
                faults: strategies
                    .iter()
                    .filter(|c| c.strategy != "stop-copy")
                    .map(|c| (c.strategy.clone(), c.remote_faults.median))
                    .collect(),
                ampom_prefetched: am.map(|c| c.prefetched_pages.median).unwrap_or(f64::NAN),
                ampom_prefetch_hits: am.map(|c| c.prefetch_hits.median).unwrap_or(f64::NAN),
                prevented: strategies
                    .iter()
                    .filter(|c| c.strategy != "demand-paging" && c.strategy != "stop-copy")
                    .map(|c| {
                        let p = match dp {
                            Some(d) if d > 0.0 => 1.0 - c.remote_faults.median / d,
                            _ => f64::NAN,
                        };
                        (c.strategy.clone(), p)
                    })
                    .collect(),
                baseline_ms: strategies
                    .first()
                    .map(|c| c.baseline_ms.median)
                    .unwrap_or(f64::NAN),
                overhead: strategies
                    .iter()
                    .map(|c| (c.strategy.clone(), c.delay_ms.median / c.baseline_ms.median))
                    .collect(),
                down_ms: strategies
                    .iter()
                    .map(|c| (c.strategy.clone(), c.down_ms.median))
                    .collect(),
                workload: w,
                kib,
                link,
            }
        })
        .collect()
}

fn targets(cs: &[Combo], noise: &Summary) -> Vec<Target> {
    let mut t = Vec::new();
    // 1. post-copy / ampom down time ≤ 2 ms, flat over sizes.
    for s in ["post-copy", "ampom"] {
        let mut pts: Vec<(u64, f64, String)> = cs
            .iter()
            .filter(|c| c.strategy == s && c.n_ok > 0 && c.workload == "dirtier")
            .map(|c| (c.kib, c.down_ms.median, c.link.clone()))
            .collect();
        pts.sort_by(|a, b| a.0.cmp(&b.0).then(a.2.cmp(&b.2)));
        if pts.is_empty() {
            continue;
        }
        let worst = pts.iter().map(|p| p.1).fold(f64::NAN, f64::max);
        // The restore ahead of the stop: how often it ran, and the pause
        // its capture cost the process during the preparation.
        let dirtier: Vec<&Combo> = cs
            .iter()
            .filter(|c| c.strategy == s && c.n_ok > 0 && c.workload == "dirtier")
            .collect();
        let (used, ok) = dirtier
            .iter()
            .fold((0, 0), |(u, n), c| (u + c.skeleton_used, n + c.n_ok));
        let pauses: Vec<f64> = dirtier
            .iter()
            .filter(|c| c.skeleton_pause_ms.n > 0)
            .map(|c| c.skeleton_pause_ms.max)
            .collect();
        let skeleton = if pauses.is_empty() {
            String::new()
        } else {
            format!(
                " (skeleton run in {used} of {ok} migrations; its capture paused the process at most {} ms before the stop)",
                fmt_sig(pauses.iter().copied().fold(f64::NAN, f64::max))
            )
        };
        t.push(Target {
            target: format!("{s}: down_ms ≤ 2 ms at every size (dirtier)"),
            measured: pts
                .iter()
                .map(|(k, d, l)| {
                    format!(
                        "{} MiB/{l}: {} ms",
                        fmt_sig(*k as f64 / 1024.0),
                        fmt_sig(*d)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
                + &skeleton,
            met: Some(worst <= 2.0),
        });
    }
    // 2. post-copy push drains at ≥ 0.8 of the stop-copy limit: the slower
    // of raw TCP and the first-touch bandwidth, both measured in the run.
    let pc: Vec<&Combo> = cs
        .iter()
        .filter(|c| c.strategy == "post-copy" && c.n_ok > 0 && c.post_rate_frac_limit.n > 0)
        .collect();
    if let Some(big) = pc.iter().max_by_key(|c| c.kib) {
        let v: Vec<f64> = pc.iter().map(|c| c.post_rate_frac_limit.median).collect();
        let s = summarize(&v);
        t.push(Target {
            target: "post-copy: background push ≥ 0.8 of min(raw TCP, first touch)".into(),
            measured: format!(
                "largest ({}, {}): {} (of raw TCP alone: {}); over all {} combinations: median {} ({}–{})",
                size_label(&big.workload, big.kib),
                big.link,
                fmt_sig(big.post_rate_frac_limit.median),
                fmt_sig(big.post_rate_frac_tcp.median),
                s.n,
                fmt_sig(s.median),
                fmt_sig(s.min),
                fmt_sig(s.max)
            ),
            met: Some(big.post_rate_frac_limit.median >= 0.8),
        });
    }
    // 3. The migrated program never stalls > 10 ms (pauses other than the freeze).
    for s in ALL_STRATEGIES {
        let v: Vec<&Combo> = cs
            .iter()
            .filter(|c| c.strategy == s && c.n_ok > 0)
            .collect();
        if v.is_empty() {
            continue;
        }
        let worst = v
            .iter()
            .max_by(|a, b| a.stall_ms.max.total_cmp(&b.stall_ms.max))
            .unwrap();
        let freeze = v
            .iter()
            .max_by(|a, b| a.max_pause_ms.max.total_cmp(&b.max_pause_ms.max))
            .unwrap();
        let fault = v
            .iter()
            .filter(|c| c.fault_wait_max_ms.max.is_finite())
            .max_by(|a, b| a.fault_wait_max_ms.max.total_cmp(&b.fault_wait_max_ms.max));
        t.push(Target {
            target: format!("{s}: no pause > 10 ms besides the freeze"),
            measured: format!(
                "longest stall {} ms ({}, {}: another pause since the migration began, or the freeze's pause beyond the down time); \
                 longest pause incl. the freeze {} ms ({}, {}); \
                 unmigrated runs' longest pause {} ms{}",
                fmt_sig(worst.stall_ms.max),
                size_label(&worst.workload, worst.kib),
                worst.link,
                fmt_sig(freeze.max_pause_ms.max),
                size_label(&freeze.workload, freeze.kib),
                freeze.link,
                fmt_summary(noise),
                fault
                    .map(|c| format!(
                        "; longest wait of one fault for its page {} ms ({}, {})",
                        fmt_sig(c.fault_wait_max_ms.max),
                        size_label(&c.workload, c.kib),
                        c.link
                    ))
                    .unwrap_or_default()
            ),
            met: Some(worst.stall_ms.max <= 10.0),
        });
    }
    t
}

/// A number with three significant digits, no exponent ("—" if unknown).
pub fn fmt_sig(x: f64) -> String {
    if !x.is_finite() {
        return "—".into();
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    let digits = a.log10().floor() as i32;
    let dec = (2 - digits).clamp(0, 6) as usize;
    format!("{x:.dec$}")
}

/// "median (min–max)", or the median alone for one repetition.
pub fn fmt_summary(s: &Summary) -> String {
    fmt_scaled(s, 1.0)
}

pub fn fmt_scaled(s: &Summary, k: f64) -> String {
    if s.n == 0 {
        return "—".into();
    }
    if s.n == 1 || s.min == s.max {
        return fmt_sig(s.median * k);
    }
    format!(
        "{} ({}–{})",
        fmt_sig(s.median * k),
        fmt_sig(s.min * k),
        fmt_sig(s.max * k)
    )
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{}%", fmt_sig(x * 100.0))
    } else {
        "—".into()
    }
}

fn ok_col(c: &Combo) -> String {
    format!("{}/{}", c.n_ok, c.n)
}

/// Which of Noack's tables a (workload, link) matches.
fn noack_table(w: &str, link: &str) -> Option<&'static str> {
    match (w, link) {
        ("getpid", "1gbit") => Some("Table 5.1"),
        ("rma", "1gbit") => Some("Table 5.3"),
        ("reference", "10mbit") => Some("Table 5.6"),
        _ => None,
    }
}

fn strategy_label(c: &Combo) -> String {
    if c.strategy == "auto" {
        let mut ch = c.chosen.clone();
        ch.sort();
        ch.dedup();
        if !ch.is_empty() {
            return format!("auto ({})", ch.join(", "));
        }
    }
    c.strategy.clone()
}

fn periods_table(out: &mut String, cs: &[&Combo]) {
    out.push_str("| strategy | preparation | down | post-processing | total | KB sent | × RSS | rate ÷ TCP | ok |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for c in cs {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            strategy_label(c),
            fmt_summary(&c.preparation_ms),
            fmt_summary(&c.down_ms),
            fmt_summary(&c.post_ms),
            fmt_summary(&c.total_ms),
            fmt_scaled(&c.bytes_total, 1e-3),
            fmt_summary(&c.bytes_per_rss),
            fmt_summary(&c.rate_frac_tcp),
            ok_col(c)
        );
    }
}

/// Groups of (workload, kib, link) in plan order.
fn groups(cs: &[Combo]) -> Vec<(String, u64, String)> {
    let mut g: Vec<(String, u64, String)> = Vec::new();
    for c in cs {
        let k = (c.workload.clone(), c.kib, c.link.clone());
        if !g.contains(&k) {
            g.push(k);
        }
    }
    g
}

/// The Markdown report.
pub fn markdown(res: &Results, s: &Summaries, plots: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# pmig bench{}\n",
        if res.quick { " (quick)" } else { "" }
    );
    let failed = res.records.iter().filter(|r| !r.ok).count();
    let _ = writeln!(
        o,
        "Command: `{}`  \nStarted: {}; wall time {} s  \nMachine: {} CPUs ({}), {} GiB, Linux {}  \n\
         Repetitions: {}; migrations: {} ({} failed); unmigrated runs: {}  \n\
         Figures are medians over the successful repetitions, the range (min–max) in parentheses; \
         times in ms. n1 → n2 of a 2-node `pmig cluster`.\n",
        res.command,
        res.started,
        fmt_sig(res.wall_s),
        res.machine.cpus,
        res.machine.cpu_model,
        fmt_sig(res.machine.mem_gib),
        res.machine.kernel,
        res.reps,
        res.records.len(),
        failed,
        res.baselines.len()
    );

    o.push_str("## Raw TCP throughput per link (n1 → n2, measured in this run)\n\n");
    o.push_str("| link | MB/s | Mbit/s |\n|---|---|---|\n");
    for (l, t) in &s.tcp {
        let _ = writeln!(
            o,
            "| {l} | {} | {} |",
            fmt_scaled(t, 1e-6),
            fmt_scaled(t, 8e-6)
        );
    }
    o.push('\n');

    o.push_str("## Time periods (Noack's Tables 5.1, 5.3, 5.6)\n\n");
    o.push_str(
        "Per workload and link: preparation, down, post-processing and total time (ms) as `pmig migrate --json` \
         reports them; data sent (KB), as a multiple of the workload's RSS, and the transfer rate \
         (bytes ÷ total time) as a fraction of the link's raw TCP throughput.\n\n",
    );
    let gs = groups(&s.combos);
    let mut ordered: Vec<&(String, u64, String)> = gs
        .iter()
        .filter(|(w, _, l)| noack_table(w, l).is_some())
        .collect();
    ordered.sort_by_key(|(w, _, l)| noack_table(w, l));
    ordered.extend(gs.iter().filter(|(w, _, l)| noack_table(w, l).is_none()));
    for (w, kib, l) in ordered {
        let cs: Vec<&Combo> = s
            .combos
            .iter()
            .filter(|c| &c.workload == w && c.kib == *kib && &c.link == l)
            .collect();
        let t = noack_table(w, l)
            .map(|t| format!(" — layout of Noack's {t}"))
            .unwrap_or_default();
        let _ = writeln!(o, "### {}, {l}{t}\n", size_label(w, *kib));
        periods_table(&mut o, &cs);
        o.push('\n');
    }

    o.push_str("## Execution delay (Noack's Tables 5.2, 5.4)\n\n");
    o.push_str(
        "Run time of the migrated workload minus the median run time of the same workload with the same \
         arguments, unmigrated, on this machine in this run (ms).\n\n",
    );
    let mut ws: Vec<String> = Vec::new();
    for c in &s.combos {
        if !ws.contains(&c.workload) {
            ws.push(c.workload.clone());
        }
    }
    for w in &ws {
        let mut cols: Vec<(String, u64)> = Vec::new();
        for l in ALL_LINKS {
            for c in s.combos.iter().filter(|c| &c.workload == w && c.link == l) {
                if !cols.contains(&(l.to_string(), c.kib)) {
                    cols.push((l.to_string(), c.kib));
                }
            }
        }
        let t = match w.as_str() {
            "getpid" => " — layout of Noack's Table 5.2",
            "rma" => " — layout of Noack's Table 5.4",
            _ => "",
        };
        let _ = writeln!(o, "### {w}{t}\n");
        o.push_str("| strategy |");
        for (l, k) in &cols {
            if *k == 0 {
                let _ = write!(o, " {l} |");
            } else {
                let _ = write!(o, " {l} ({}) |", size_label("", *k).trim());
            }
        }
        o.push_str("\n|---|");
        o.push_str(&"---|".repeat(cols.len()));
        o.push('\n');
        for st in ALL_STRATEGIES {
            if !s
                .combos
                .iter()
                .any(|c| &c.workload == w && c.strategy == st)
            {
                continue;
            }
            let _ = write!(o, "| {st} |");
            for (l, k) in &cols {
                let v = s
                    .combos
                    .iter()
                    .find(|c| &c.workload == w && &c.link == l && c.kib == *k && c.strategy == st)
                    .map(|c| fmt_summary(&c.delay_ms))
                    .unwrap_or_else(|| "·".into());
                let _ = write!(o, " {v} |");
            }
            o.push('\n');
        }
        o.push('\n');
    }

    if !s.ampom.is_empty() {
        o.push_str("## Faults prevented (AMPoM's Figures 7 and 8)\n\n");
        o.push_str(
            "Remote faults (medians) of the workload after the handover. `demand-paging` moves pages only on \
             fault, without push: it is AMPoM's NoPrefetch. Prevented = 1 − faults ÷ faults of demand-paging. \
             `post-copy` prevents faults with its background push alone; `ampom` adds AMPoM's prefetching.\n\n",
        );
        o.push_str("| kernel | link | faults demand-paging | faults post-copy | faults ampom | ampom prefetched | ampom prefetch hits | prevented post-copy | prevented ampom |\n");
        o.push_str("|---|---|---|---|---|---|---|---|---|\n");
        for r in &s.ampom {
            let g = |v: &[(String, f64)], k: &str| {
                v.iter().find(|x| x.0 == k).map(|x| x.1).unwrap_or(f64::NAN)
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                size_label(&r.workload, r.kib),
                r.link,
                fmt_sig(g(&r.faults, "demand-paging")),
                fmt_sig(g(&r.faults, "post-copy")),
                fmt_sig(g(&r.faults, "ampom")),
                fmt_sig(r.ampom_prefetched),
                fmt_sig(r.ampom_prefetch_hits),
                pct(g(&r.prevented, "post-copy")),
                pct(g(&r.prevented, "ampom"))
            );
        }
        o.push_str("\n## Run-time overhead and freeze time (AMPoM's Figures 5 and 6)\n\n");
        o.push_str(
            "Overhead = execution delay ÷ unmigrated run time. `stop-copy` plays openMosix (all pages at the \
             stop), `demand-paging` NoPrefetch. Freeze = down time (ms).\n\n",
        );
        o.push_str("| kernel | link | unmigrated ms | overhead stop-copy | overhead demand-paging | overhead post-copy | overhead ampom | freeze stop-copy | freeze demand-paging | freeze post-copy | freeze ampom |\n");
        o.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s.ampom {
            let g = |v: &[(String, f64)], k: &str| {
                v.iter().find(|x| x.0 == k).map(|x| x.1).unwrap_or(f64::NAN)
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                size_label(&r.workload, r.kib),
                r.link,
                fmt_sig(r.baseline_ms),
                pct(g(&r.overhead, "stop-copy")),
                pct(g(&r.overhead, "demand-paging")),
                pct(g(&r.overhead, "post-copy")),
                pct(g(&r.overhead, "ampom")),
                fmt_sig(g(&r.down_ms, "stop-copy")),
                fmt_sig(g(&r.down_ms, "demand-paging")),
                fmt_sig(g(&r.down_ms, "post-copy")),
                fmt_sig(g(&r.down_ms, "ampom")),
            );
        }
        o.push('\n');
    }

    o.push_str("## Against the targets of the live-migration issue\n\n");
    o.push_str("| target | measured | met |\n|---|---|---|\n");
    for t in &s.targets {
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            t.target,
            t.measured,
            match t.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            }
        );
    }
    o.push('\n');

    if !plots.is_empty() {
        o.push_str("## Plots\n\n");
        for p in plots {
            let _ = writeln!(o, "- {p}: [{p}.svg]({p}.svg), ![{p}]({p}.png)");
        }
        o.push('\n');
    }

    o.push_str("## Every combination\n\n");
    o.push_str(
        "`longest pause` is the program's own longest gap between two clock reads (the freeze, as the \
         program saw it); `other pause` the longest other gap above the workload's pause-log threshold \
         (0: none).\n\n",
    );
    o.push_str("| workload | link | strategy | ok | preparation | down | post | total | KB sent | × RSS | rate ÷ TCP | push ÷ TCP | delay | faults | prefetch share | longest pause | other pause |\n");
    o.push_str(&format!("|{}\n", "---|".repeat(17)));
    for c in &s.combos {
        let _ = writeln!(o, "{}", every_row(c));
    }
    o.push('\n');
    let fails: Vec<&Record> = res.records.iter().filter(|r| !r.ok).collect();
    let bfails = res.baselines.iter().filter(|b| !b.ok).count();
    if !fails.is_empty() || bfails > 0 {
        o.push_str("## Failures\n\n");
        for r in fails {
            let _ = writeln!(
                o,
                "- {} {} {} rep {}: {}",
                size_label(&r.workload, r.kib),
                r.link,
                r.strategy,
                r.rep,
                r.error.as_deref().unwrap_or("?")
            );
        }
        for b in res.baselines.iter().filter(|b| !b.ok) {
            let _ = writeln!(
                o,
                "- unmigrated {} {} rep {}: {}",
                size_label(&b.workload, b.kib),
                b.link,
                b.rep,
                b.error.as_deref().unwrap_or("?")
            );
        }
        o.push('\n');
    }
    o
}

/// The row of a combination in "Every combination" (tests compare it with
/// summary.json).
pub fn every_row(c: &Combo) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        size_label(&c.workload, c.kib),
        c.link,
        strategy_label(c),
        ok_col(c),
        fmt_summary(&c.preparation_ms),
        fmt_summary(&c.down_ms),
        fmt_summary(&c.post_ms),
        fmt_summary(&c.total_ms),
        fmt_scaled(&c.bytes_total, 1e-3),
        fmt_summary(&c.bytes_per_rss),
        fmt_summary(&c.rate_frac_tcp),
        fmt_summary(&c.post_rate_frac_tcp),
        fmt_summary(&c.delay_ms),
        fmt_summary(&c.remote_faults),
        fmt_summary(&c.prefetch_share),
        fmt_summary(&c.max_pause_ms),
        fmt_summary(&c.stall_ms),
    )
}

fn csv_f(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        String::new()
    }
}

fn csv_s(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// raw.csv: one line per migration.
pub fn raw_csv(res: &Results) -> String {
    let mut o = String::from(
        "workload,kib,link,strategy,rep,ok,error,chosen,iterations,rss_kib,preparation_ms,down_ms,post_ms,total_ms,\
         bytes_total,bytes_post,bytes_per_rss,tcp_bytes_per_s,rate_frac_tcp,post_rate_frac_tcp,post_rate_frac_limit,first_touch_bytes_per_s,stop_rate_frac_limit,pages_sent,rounds,\
         remote_faults,prefetched_pages,prefetch_hits,prefetch_share,elapsed_ms,baseline_ms,delay_ms,max_pause_ms,\
         stall_ms,self_check,wall_s\n",
    );
    for r in &res.records {
        let f = [
            r.rss_kib,
            r.preparation_ms,
            r.down_ms,
            r.post_ms,
            r.total_ms,
            r.bytes_total,
            r.bytes_post,
            r.bytes_per_rss,
            r.tcp_bytes_per_s,
            r.rate_frac_tcp,
            r.post_rate_frac_tcp,
            r.post_rate_frac_limit,
            r.first_touch_bytes_per_s,
            r.stop_rate_frac_limit,
            r.pages_sent,
            r.rounds,
            r.remote_faults,
            r.prefetched_pages,
            r.prefetch_hits,
            r.prefetch_share,
            r.elapsed_ms,
            r.baseline_ms,
            r.delay_ms,
            r.max_pause_ms,
            r.stall_ms,
        ];
        let _ = writeln!(
            o,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            r.workload,
            r.kib,
            r.link,
            r.strategy,
            r.rep,
            r.ok,
            csv_s(r.error.as_deref().unwrap_or("")),
            csv_s(r.chosen.as_deref().unwrap_or("")),
            r.iterations,
            f.iter().map(|x| csv_f(*x)).collect::<Vec<_>>().join(","),
            r.self_check,
            r.wall_s
        );
    }
    o
}

/// summary.csv: one line per combination (median, min, max of each figure).
pub fn summary_csv(s: &Summaries) -> String {
    let names = [
        "preparation_ms",
        "down_ms",
        "post_ms",
        "total_ms",
        "bytes_total",
        "bytes_per_rss",
        "rate_frac_tcp",
        "post_rate_frac_tcp",
        "post_rate_frac_limit",
        "delay_ms",
        "remote_faults",
        "prefetch_share",
        "max_pause_ms",
        "stall_ms",
    ];
    let mut o = String::from("workload,kib,link,strategy,n,n_ok");
    for n in names {
        let _ = write!(o, ",{n}_median,{n}_min,{n}_max");
    }
    o.push('\n');
    for c in &s.combos {
        let v = [
            &c.preparation_ms,
            &c.down_ms,
            &c.post_ms,
            &c.total_ms,
            &c.bytes_total,
            &c.bytes_per_rss,
            &c.rate_frac_tcp,
            &c.post_rate_frac_tcp,
            &c.post_rate_frac_limit,
            &c.delay_ms,
            &c.remote_faults,
            &c.prefetch_share,
            &c.max_pause_ms,
            &c.stall_ms,
        ];
        let _ = write!(
            o,
            "{},{},{},{},{},{}",
            c.workload, c.kib, c.link, c.strategy, c.n, c.n_ok
        );
        for x in v {
            let _ = write!(o, ",{},{},{}", csv_f(x.median), csv_f(x.min), csv_f(x.max));
        }
        o.push('\n');
    }
    o
}

/// Writes report.md, raw.csv, summary.csv, raw.json, summary.json and the
/// plots into `dir`. Returns the report's path.
pub fn write_all(dir: &Path, res: &Results) -> Result<std::path::PathBuf> {
    let s = summarize_all(res);
    let w = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| BenchError::Io(format!("write {}", p.display()), e))
    };
    w("raw.json", &to_json(res)?)?;
    w("summary.json", &to_json(&s)?)?;
    w("raw.csv", &raw_csv(res))?;
    w("summary.csv", &summary_csv(&s))?;
    let plots = crate::plot::all(dir, &s)?;
    let md = markdown(res, &s, &plots);
    w("report.md", &md)?;
    Ok(dir.join("report.md"))
}

/// Pretty JSON (non-finite numbers become null).
pub fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| BenchError::Failed(format!("json: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(fmt_sig(82.93), "82.9");
        assert_eq!(fmt_sig(0.0123456), "0.0123");
        assert_eq!(fmt_sig(1234.6), "1235");
        assert_eq!(fmt_sig(2.6), "2.60");
        assert_eq!(fmt_sig(f64::NAN), "—");
        assert_eq!(fmt_sig(0.0), "0");
        let s = summarize(&[3.0, 1.0, 2.0]);
        assert_eq!(fmt_summary(&s), "2.00 (1.00–3.00)");
        assert_eq!(fmt_summary(&summarize(&[5.0])), "5.00");
        assert_eq!(fmt_summary(&summarize(&[])), "—");
        assert_eq!(fmt_scaled(&summarize(&[62208.0]), 1e-3), "62.2");
    }

    fn rec(w: &str, link: &str, s: &str, rep: usize, down: f64, faults: f64) -> Record {
        Record {
            workload: w.into(),
            kib: 4096,
            link: link.into(),
            strategy: s.into(),
            rep,
            ok: true,
            rss_kib: 4200.0,
            preparation_ms: 1.0,
            down_ms: down,
            post_ms: 2.0,
            total_ms: 3.0 + down,
            bytes_total: 4.3e6,
            bytes_per_rss: 1.0,
            rate_frac_tcp: 0.5,
            post_rate_frac_tcp: f64::NAN,
            post_rate_frac_limit: f64::NAN,
            remote_faults: faults,
            prefetch_share: f64::NAN,
            baseline_ms: 1000.0,
            elapsed_ms: 1100.0,
            delay_ms: 100.0,
            max_pause_ms: down,
            stall_ms: 0.0,
            self_check: true,
            ..Record::default()
        }
    }

    fn results(records: Vec<Record>) -> Results {
        let mut plan: Vec<crate::matrix::Cell> = Vec::new();
        for r in &records {
            let c = crate::matrix::Cell {
                workload: r.workload.clone(),
                kib: r.kib,
                link: r.link.clone(),
                strategy: r.strategy.clone(),
            };
            if !plan.contains(&c) {
                plan.push(c);
            }
        }
        Results {
            command: "pmig bench".into(),
            started: "now".into(),
            machine: crate::matrix::Machine::read(),
            quick: true,
            reps: 3,
            plan,
            tcp: Vec::new(),
            baselines: Vec::new(),
            records,
            wall_s: 1.0,
        }
    }

    #[test]
    fn tables_show_the_medians_of_the_records() {
        let mut v = Vec::new();
        for (i, d) in [7.0, 3.0, 5.0].into_iter().enumerate() {
            v.push(rec("rma", "1gbit", "post-copy", i, d, 10.0));
            v.push(rec("stream", "1gbit", "demand-paging", i, d, 200.0));
            v.push(rec("stream", "1gbit", "ampom", i, d, 4.0 + i as f64));
        }
        let mut failed = rec("rma", "1gbit", "stop-copy", 0, 1.0, 0.0);
        failed.ok = false;
        failed.error = Some("boom".into());
        v.push(failed);
        let res = results(v);
        let s = summarize_all(&res);
        let pc = s.combos.iter().find(|c| c.strategy == "post-copy").unwrap();
        assert_eq!(
            (pc.down_ms.median, pc.down_ms.min, pc.down_ms.max),
            (5.0, 3.0, 7.0)
        );
        let sc = s.combos.iter().find(|c| c.strategy == "stop-copy").unwrap();
        assert_eq!((sc.n, sc.n_ok, sc.down_ms.n), (1, 0, 0));
        let md = markdown(&res, &s, &[]);
        assert!(md.contains("layout of Noack's Table 5.3"));
        assert!(md.contains("| post-copy | 1.00 | 5.00 (3.00–7.00) | 2.00 | 8.00 (6.00–10.0) |"));
        assert!(md.contains(&every_row(pc)));
        assert!(md.contains("boom"));
        // AMPoM: 1 − 5 / 200 of the faults prevented.
        let a = &s.ampom[0];
        let p = a.prevented.iter().find(|p| p.0 == "ampom").unwrap().1;
        assert!((p - 0.975).abs() < 1e-12);
        assert!(md.contains("97.5%"));
        // The target rows name what was measured.
        assert!(s
            .targets
            .iter()
            .any(|t| t.target.starts_with("post-copy: no pause")));
    }

    #[test]
    fn csv_quotes() {
        assert_eq!(csv_s("a,b"), "\"a,b\"");
        assert_eq!(csv_s("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_s("q\",x"), "\"q\"\",x\"");
        assert_eq!(csv_f(f64::NAN), "");
    }
}
