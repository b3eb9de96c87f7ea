//! `pmig sh` and `pmig make`: parallel make on idle hosts (Sprite's pmake).
//!
//! `pmig sh -c CMD` is a shell for make: it runs `/bin/sh -c CMD` on an idle node
//! through the remote-execution service (the path of `pmig run --idle --class
//! short`: cwd and environment carried, stdout and stderr streamed, exit status
//! returned) and runs it here when no idle node can be had. `pmig make` runs GNU make
//! with `SHELL=<this binary>` and `.SHELLFLAGS=sh -c`, and reports at the end where
//! the recipes ran.
//!
//! Every node must see the build's files at the same path (a shared file system:
//! Sprite had one; the local test cluster's nodes share the root file system).

use super::run::{self, Relay};
use anyhow::{bail, Context, Result};
use pmig_daemon::control::{self, Event, Request};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The per-build log `pmig make` hands its recipes: one line per recipe,
/// `<node>\t<job id or ->`, appended by each `pmig sh`.
pub const LOG_ENV: &str = "PMIG_MAKE_LOG";
/// Set (to anything but empty) to keep `pmig sh` quiet when it runs a recipe here.
pub const QUIET_ENV: &str = "PMIG_SH_QUIET";
/// What the log says for a recipe that ran on the calling node.
pub const LOCAL: &str = "local";

#[derive(clap::Args)]
pub struct ShArgs {
    /// Stop at the first failing command (passed on to /bin/sh, as `sh -e`).
    #[arg(short = 'e')]
    errexit: bool,
    /// The command line, as for `sh -c`.
    #[arg(short = 'c', value_name = "CMD", allow_hyphen_values = true)]
    command: String,
    /// Expected length of each recipe, for the host selector.
    #[arg(long, value_parser = ["short", "long"], default_value = "short")]
    class: String,
    /// Always run here (make's SHELL still works, nothing leaves this node).
    #[arg(long)]
    local: bool,
    /// Say nothing when a recipe runs here for want of an idle node (also
    /// PMIG_SH_QUIET=1).
    #[arg(short, long)]
    quiet: bool,
    /// `$0`, `$1`, … for the command, as with `sh -c CMD NAME ARGS…`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

fn sh_argv(a: &ShArgs) -> Vec<String> {
    let mut v = vec!["/bin/sh".to_string()];
    if a.errexit {
        v.push("-e".into());
    }
    v.push("-c".into());
    v.push(a.command.clone());
    v.extend(a.args.iter().cloned());
    v
}

/// Appends `<node>\t<job>` to the build's log, if there is one (one `write` of a
/// short line with O_APPEND: lines of parallel recipes do not interleave).
fn note(node: &str, job: &str) {
    let Some(p) = std::env::var_os(LOG_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let line = format!("{node}\t{job}\n");
    let r = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&p)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = r {
        tracing::warn!("pmig sh: cannot append to {}: {e}", Path::new(&p).display());
    }
}

/// True the first time in a build (once per process without `pmig make`).
fn first_fallback() -> bool {
    let Some(p) = std::env::var_os(LOG_ENV).filter(|p| !p.is_empty()) else {
        return true;
    };
    let mut marker = p;
    marker.push(".local");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(marker)
        .is_ok()
}

pub fn sh(a: ShArgs) -> Result<i32> {
    let argv = sh_argv(&a);
    if !a.local {
        let mut req = run::request(argv.clone())?;
        req.idle = true;
        req.class = Some(a.class.clone());
        match run::start_job(&req) {
            Ok(st) => {
                note(&st.node, &st.job);
                // From here on the recipe runs there: an error is the build's, never
                // a reason to run it a second time here.
                let o = run::relay(st, &req, Relay::Output)?;
                return Ok(o.status.shell_status());
            }
            Err(e) => {
                let quiet = a.quiet || std::env::var_os(QUIET_ENV).is_some_and(|v| !v.is_empty());
                if !quiet && first_fallback() {
                    eprintln!("pmig sh: running recipes on this node: {e:#}");
                }
            }
        }
    }
    note(LOCAL, "-");
    let err = Command::new(&argv[0]).args(&argv[1..]).exec();
    Err(err).with_context(|| format!("run {}", argv[0]))
}

#[derive(clap::Args)]
pub struct MakeArgs {
    /// Parallel recipes (default: the idle nodes the selector reports, plus one
    /// for this node).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<u32>,
    /// The make to run (default: $MAKE, else `make`); must be GNU make.
    #[arg(long, value_name = "PROG")]
    make: Option<String>,
    /// Keep the per-recipe log (`<node>\t<job>` per recipe) in FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Print the summary as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Arguments for make (targets, variables, -C DIR, …).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "MAKE ARGS"
    )]
    args: Vec<String>,
}

/// This node's name and the idle nodes other than it, as the selector sees them.
fn idle_nodes() -> Result<(String, Vec<String>)> {
    let me = match control::request(control::CONTROL_NAME, &Request::Ping, |_| {})? {
        Event::Pong { node, .. } => node,
        other => bail!("unexpected answer from the daemon: {other:?}"),
    };
    match control::request(control::CONTROL_NAME, &Request::HostsStatus, |_| {})? {
        Event::Hosts { rows, .. } => Ok((
            me.clone(),
            rows.into_iter()
                .filter(|r| r.node != me && r.state == "idle")
                .map(|r| r.node)
                .collect(),
        )),
        Event::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer from the daemon: {other:?}"),
    }
}

/// Recipes per node, from the log's lines.
fn count(log: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in log.lines() {
        if let Some(node) = l.split('\t').next().filter(|n| !n.is_empty()) {
            *m.entry(node.to_string()).or_insert(0) += 1;
        }
    }
    m
}

pub fn make(a: MakeArgs) -> Result<i32> {
    let jobs = match a.jobs {
        Some(0) => bail!("-j 0: give at least 1"),
        Some(n) => n,
        None => match idle_nodes() {
            Ok((me, idle)) => {
                tracing::info!("{me}: idle nodes {idle:?}");
                idle.len() as u32 + 1
            }
            Err(e) => {
                eprintln!("pmig make: no idle nodes known ({e:#}); -j 1");
                1
            }
        },
    };
    let exe = std::env::current_exe().context("find the pmig binary")?;
    let exe = exe
        .to_str()
        .context("the path of the pmig binary is not UTF-8")?
        .to_string();
    if exe.contains(char::is_whitespace) {
        bail!("make cannot use {exe} as its SHELL: the path contains white space");
    }
    // The log: the one asked for, else a private file, removed at the end.
    let (log, remove) = match &a.log {
        Some(p) => {
            std::fs::write(p, b"").with_context(|| format!("create {}", p.display()))?;
            (p.clone(), false)
        }
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let p =
                std::env::temp_dir().join(format!("pmig-make-{}-{nanos}.log", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .with_context(|| format!("create the build's log {}", p.display()))?;
            (p, true)
        }
    };
    let mut marker = log.clone().into_os_string();
    marker.push(".local");
    let _ = std::fs::remove_file(&marker);
    let prog = a
        .make
        .clone()
        .or_else(|| std::env::var("MAKE").ok())
        .unwrap_or_else(|| "make".into());
    let mut cmd = Command::new(&prog);
    cmd.arg(format!("-j{jobs}"))
        .arg(format!("SHELL={exe}"))
        .arg(".SHELLFLAGS=sh -c")
        .args(&a.args)
        .env(LOG_ENV, &log);
    let t0 = std::time::Instant::now();
    // Ctrl-C reaches make and its recipes (one process group); this process stays
    // to report what ran.
    // SAFETY: setting the disposition of two signals to "ignore" in this process;
    // the child's are reset to the default by exec (ignored ones are not: restore).
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    // SAFETY: between fork and exec only async-signal-safe calls (signal).
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    let status = cmd
        .status()
        .with_context(|| format!("run {prog} (GNU make)"))?;
    let secs = t0.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&marker);
    if remove {
        let _ = std::fs::remove_file(&log);
    }
    let per = count(&text);
    let total: u64 = per.values().sum();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "jobs": jobs,
                "recipes": total,
                "per_node": per,
                "seconds": secs,
                "status": status.code(),
            })
        );
    }
    let list: Vec<String> = per.iter().map(|(n, c)| format!("{n} {c}")).collect();
    eprintln!(
        "pmig make: -j{jobs}, {total} recipes in {secs:.1} s: {}",
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    );
    Ok(match status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_recipes_per_node() {
        let m = count("n2\tn1:5\nlocal\t-\nn2\tn1:7\n\nn3\tn1:8\n");
        assert_eq!(m.get("n2"), Some(&2));
        assert_eq!(m.get("n3"), Some(&1));
        assert_eq!(m.get(LOCAL), Some(&1));
        assert_eq!(m.values().sum::<u64>(), 4);
    }
}
