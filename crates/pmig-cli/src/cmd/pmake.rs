//! `pmig sh` and `pmig make`: parallel make on idle hosts (Sprite's pmake).
//!
//! `pmig sh -c CMD` is a shell for make: it runs `/bin/sh -c CMD` on an idle node
//! through the remote-execution service (the path of `pmig run --idle --class
//! short`: cwd and environment carried, stdout and stderr streamed, exit status
//! returned) and runs it here when no idle node can be had. `pmig make` runs GNU make
//! with `SHELL=<dir>/pmig-sh` (a link to this binary: `main` treats that name as
//! `pmig sh`, so the Makefile's own `.SHELLFLAGS` still apply), holds idle hosts for
//! the whole build as Sprite's pmake did (a pool of lock files, one per host: a
//! recipe runs on a host it locked, with `--on`, or here when every host is busy),
//! and reports at the end where the recipes ran.
//!
//! Every node must see the build's files at the same path (a shared file system:
//! Sprite had one; the local test cluster's nodes share the root file system).

use super::run::{self, Relay};
use anyhow::{bail, Context, Result};
use pmig_daemon::control::{self, Event, Request};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The per-build log `pmig make` hands its recipes: one line per recipe,
/// `<node>\t<job id or ->`, appended by each `pmig sh`.
pub const LOG_ENV: &str = "PMIG_MAKE_LOG";
/// The build's host pool (a directory with one file per host `pmig make` holds):
/// a recipe takes a host by locking its file for as long as it runs there.
pub const HOSTS_ENV: &str = "PMIG_MAKE_HOSTS";
/// Set (to anything but empty) to keep `pmig sh` quiet when it runs a recipe here.
pub const QUIET_ENV: &str = "PMIG_SH_QUIET";
/// What the log says for a recipe that ran on the calling node.
pub const LOCAL: &str = "local";

/// `pmig sh`'s arguments: as sh's own (what make passes: `.SHELLFLAGS` then the
/// recipe), plus three of pmig's. Parsed by hand: make starts one `pmig sh` per
/// recipe line, and sh options such as `-eu` or `-o pipefail` pass through to
/// `/bin/sh` unchanged.
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct ShCli {
    /// `[--local] [--quiet] [--class short|long] [SH OPTIONS] -c CMD [NAME [ARGS…]]`:
    /// sh options (`-e`, `-u`, `-x`, `-o pipefail`, …) go to /bin/sh; `--local` always
    /// runs here; `--quiet` (or PMIG_SH_QUIET=1) says nothing when a recipe runs here
    /// for want of an idle node; `--class` is the expected length, for the host
    /// selector (short).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Debug, PartialEq)]
pub struct ShArgs {
    /// `/bin/sh`'s options other than `-c`.
    sh_opts: Vec<String>,
    command: String,
    /// `$0`, `$1`, …
    args: Vec<String>,
    class: String,
    local: bool,
    quiet: bool,
}

const SH_USAGE: &str =
    "usage: pmig sh [--local] [--quiet] [--class short|long] [SH OPTIONS] -c CMD [NAME [ARGS...]]";

/// Parses `pmig sh`'s arguments (those after `sh`).
pub fn parse_sh(argv: &[String]) -> Result<ShArgs> {
    let mut a = ShArgs {
        sh_opts: Vec::new(),
        command: String::new(),
        args: Vec::new(),
        class: "short".into(),
        local: false,
        quiet: false,
    };
    let mut cmd_mode = false;
    let mut i = 0;
    while let Some(x) = argv.get(i) {
        i += 1;
        match x.as_str() {
            "--" => break,
            "--local" => a.local = true,
            "--quiet" => a.quiet = true,
            "--help" => bail!("{SH_USAGE}"),
            "--class" => {
                a.class = argv
                    .get(i)
                    .cloned()
                    .context("--class needs short or long")?;
                i += 1;
            }
            _ if x.starts_with("--class=") => a.class = x["--class=".len()..].to_string(),
            "-o" | "+o" => {
                let name = argv
                    .get(i)
                    .with_context(|| format!("{x} needs an option name"))?;
                a.sh_opts.push(x.clone());
                a.sh_opts.push(name.clone());
                i += 1;
            }
            _ if x.starts_with("--") => bail!("unknown option {x}; {SH_USAGE}"),
            _ if x.len() > 1 && x.starts_with('-') => {
                let rest: String = x[1..].chars().filter(|&c| c != 'c').collect();
                cmd_mode |= rest.len() + 1 < x.len();
                if !rest.is_empty() {
                    a.sh_opts.push(format!("-{rest}"));
                }
            }
            _ if x.len() > 1 && x.starts_with('+') => a.sh_opts.push(x.clone()),
            _ => {
                i -= 1;
                break;
            }
        }
    }
    if a.class != "short" && a.class != "long" {
        bail!("--class {}: short or long", a.class);
    }
    if !cmd_mode {
        bail!("only `-c CMD` is supported (not a script file or stdin); {SH_USAGE}");
    }
    a.command = argv
        .get(i)
        .cloned()
        .with_context(|| format!("-c needs a command; {SH_USAGE}"))?;
    a.args = argv[i + 1..].to_vec();
    Ok(a)
}

fn sh_argv(a: &ShArgs) -> Vec<String> {
    let mut v = vec!["/bin/sh".to_string()];
    v.extend(a.sh_opts.iter().cloned());
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

/// A host of the build's pool, taken: its file stays locked (`flock`) while this
/// lives, so no other recipe of the build gets it; the lock goes with the process.
struct PoolHost {
    name: String,
    _lock: std::fs::File,
}

/// Takes a free host of the build's pool (`Some(None)`: there is a pool and every
/// host in it is busy; `None`: no pool).
fn take_pool_host() -> Option<Option<PoolHost>> {
    let dir = std::env::var_os(HOSTS_ENV).filter(|d| !d.is_empty())?;
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    // Start at a different host in each recipe: fewer collisions between recipes
    // that look at the same moment.
    let start = std::process::id() as usize % names.len().max(1);
    names.rotate_left(start);
    for name in names {
        let Ok(f) = std::fs::File::open(Path::new(&dir).join(&name)) else {
            continue; // taken back from the build meanwhile
        };
        // SAFETY: flock on a descriptor this function owns.
        if unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        } == 0
        {
            return Some(Some(PoolHost { name, _lock: f }));
        }
    }
    Some(None)
}

/// `pmig sh ARGS` (also `pmig-sh ARGS`, a link to pmig by that name).
pub fn sh(argv: &[String]) -> Result<i32> {
    let a = parse_sh(argv)?;
    let argv = sh_argv(&a);
    // Under `pmig make`: a host of the build's pool, or here when all are busy
    // (that is the build's own slot). Otherwise: ask the selector for an idle node.
    let pool = if a.local { None } else { take_pool_host() };
    let busy = matches!(pool, Some(None));
    if !a.local && !busy {
        let mut req = run::request(argv.clone())?;
        let _held = match pool.flatten() {
            Some(h) => {
                req.on = Some(h.name.clone());
                Some(h)
            }
            None => {
                req.idle = true;
                req.class = Some(a.class.clone());
                None
            }
        };
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

/// Keeps the build's selector session (and so its hosts) and takes revoked hosts
/// out of the pool.
struct Watcher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watcher {
    /// Ends the session: the selector takes the hosts back.
    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

/// Asks this node's daemon for `want` idle hosts of class short and puts one file
/// per host granted in `pool`; the returned watcher holds them.
fn hold_hosts(want: u32, pool: &Path) -> (Vec<String>, Option<Watcher>) {
    use pmig_services::selector::{Class, Client};
    if want == 0 {
        return (Vec::new(), None);
    }
    let got = Client::local().and_then(|mut c| {
        let hosts = c.request(Class::Short, want)?;
        Ok((c, hosts))
    });
    let (mut c, hosts) = match got {
        Ok(x) => x,
        Err(e) => {
            eprintln!("pmig make: no host held ({e}); each recipe asks for an idle node");
            return (Vec::new(), None);
        }
    };
    let mut held = Vec::new();
    for h in hosts {
        match std::fs::write(pool.join(&h.name), b"") {
            Ok(()) => held.push(h.name),
            Err(e) => eprintln!("pmig make: {}: {e}", pool.join(&h.name).display()),
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let pool = pool.to_path_buf();
    let thread = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
            match c.wait_revoked(std::time::Duration::from_millis(200)) {
                Ok(Some(r)) => {
                    // Recipes running there go on; no new one starts there.
                    let _ = std::fs::remove_file(pool.join(&r.host));
                    eprintln!("pmig make: {} taken back ({})", r.host, r.reason);
                }
                Ok(None) => {}
                Err(e) => {
                    // The session is gone, and the hosts with it.
                    eprintln!("pmig make: selector session lost ({e}); recipes run here");
                    for e in std::fs::read_dir(&pool).into_iter().flatten().flatten() {
                        let _ = std::fs::remove_file(e.path());
                    }
                    return;
                }
            }
        }
    });
    (held, Some(Watcher { stop, thread }))
}

/// Removes a directory and its contents when dropped.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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

/// Takes make's own `-j N`, `-jN`, `--jobs N`, `--jobs=N` out of the make
/// arguments (the last one wins): `pmig make` sets make's -j itself.
fn take_jobs(args: &mut Vec<String>) -> Result<Option<u32>> {
    let num = |v: &str| -> Result<u32> {
        v.parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("-j {v}: give a number of jobs, at least 1"))
    };
    let mut jobs = None;
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let x = args[i].as_str();
        if x == "--" {
            out.extend(args[i..].iter().cloned());
            break;
        }
        if x == "-j" || x == "--jobs" {
            let v = args.get(i + 1).context("-j needs a number of jobs")?;
            jobs = Some(num(v)?);
            i += 2;
            continue;
        }
        if let Some(v) = x.strip_prefix("--jobs=") {
            jobs = Some(num(v)?);
        } else if let Some(v) = x.strip_prefix("-j").filter(|v| !v.is_empty()) {
            jobs = Some(num(v)?);
        } else {
            out.push(args[i].clone());
        }
        i += 1;
    }
    *args = out;
    Ok(jobs)
}

pub fn make(mut a: MakeArgs) -> Result<i32> {
    if let Some(j) = take_jobs(&mut a.args)? {
        a.jobs = Some(j);
    }
    let exe = std::env::current_exe().context("find the pmig binary")?;
    // A private directory: the build's log (unless --log) and `pmig-sh`, a link to
    // this binary that make uses as its SHELL with the Makefile's own .SHELLFLAGS.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("pmig-make-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("create {}", dir.display()))?;
    let _cleanup = RemoveDir(dir.clone());
    let shell = dir.join("pmig-sh");
    std::os::unix::fs::symlink(&exe, &shell)
        .with_context(|| format!("link {} to {}", shell.display(), exe.display()))?;
    let shell = shell
        .to_str()
        .context("the temporary directory's path is not UTF-8")?
        .to_string();
    if shell.contains(char::is_whitespace) {
        bail!("make cannot use {shell} as its SHELL: the path contains white space (TMPDIR)");
    }
    let log = match &a.log {
        Some(p) => {
            std::fs::write(p, b"").with_context(|| format!("create {}", p.display()))?;
            p.clone()
        }
        None => dir.join("log"),
    };
    let mut marker = log.clone().into_os_string();
    marker.push(".local");
    let _ = std::fs::remove_file(&marker);
    // Hold idle hosts for the whole build (Sprite's pmake): one recipe at a time on
    // each, the build's own slot here.
    let want = match a.jobs {
        Some(n) => n.saturating_sub(1).max(1),
        None => match idle_nodes() {
            Ok((me, idle)) => {
                tracing::info!("{me}: idle nodes {idle:?}");
                idle.len() as u32
            }
            Err(e) => {
                eprintln!("pmig make: no idle nodes known: {e:#}");
                0
            }
        },
    };
    let pool = dir.join("hosts");
    std::fs::create_dir(&pool).with_context(|| format!("create {}", pool.display()))?;
    let (held, watcher) = hold_hosts(want, &pool);
    let jobs = a.jobs.unwrap_or(held.len() as u32 + 1);
    let prog = a
        .make
        .clone()
        .or_else(|| std::env::var("MAKE").ok())
        .unwrap_or_else(|| "make".into());
    let mut cmd = Command::new(&prog);
    cmd.arg(format!("-j{jobs}"))
        .arg(format!("SHELL={shell}"))
        .args(&a.args)
        .env(LOG_ENV, &log);
    if held.is_empty() {
        // Every recipe asks the selector itself.
        cmd.env_remove(HOSTS_ENV);
    } else {
        cmd.env(HOSTS_ENV, &pool);
    }
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
    if let Some(w) = watcher {
        w.stop();
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&marker);
    let per = count(&text);
    let total: u64 = per.values().sum();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "jobs": jobs,
                "held": held,
                "recipes": total,
                "per_node": per,
                "seconds": secs,
                "status": status.code(),
            })
        );
    }
    let list: Vec<String> = per.iter().map(|(n, c)| format!("{n} {c}")).collect();
    let held_s = if held.is_empty() {
        "no host held".to_string()
    } else {
        format!("held {}", held.join(" "))
    };
    eprintln!(
        "pmig make: -j{jobs} ({held_s}), {total} recipes in {secs:.1} s: {}",
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

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn takes_make_job_counts() {
        let mut a = v(&["-j3", "-f", "M", "all"]);
        assert_eq!(take_jobs(&mut a).unwrap(), Some(3));
        assert_eq!(a, v(&["-f", "M", "all"]));
        let mut a = v(&["-C", "d", "--jobs", "5", "x"]);
        assert_eq!(take_jobs(&mut a).unwrap(), Some(5));
        assert_eq!(a, v(&["-C", "d", "x"]));
        let mut a = v(&["--jobs=2", "--", "-j4"]);
        assert_eq!(take_jobs(&mut a).unwrap(), Some(2));
        assert_eq!(a, v(&["--", "-j4"]));
        assert!(take_jobs(&mut v(&["-j", "all"])).is_err());
        assert!(take_jobs(&mut v(&["-j0"])).is_err());
    }

    #[test]
    fn parses_what_make_passes() {
        let a = parse_sh(&v(&["-c", "cc -c x.c"])).unwrap();
        assert_eq!(sh_argv(&a), v(&["/bin/sh", "-c", "cc -c x.c"]));
        let a = parse_sh(&v(&["-ec", "false; true", "zero", "one"])).unwrap();
        assert_eq!(
            sh_argv(&a),
            v(&["/bin/sh", "-e", "-c", "false; true", "zero", "one"])
        );
        // As sh: options may follow -c; `--` ends them.
        let a = parse_sh(&v(&["-o", "pipefail", "-c", "-eu", "--", "-x"])).unwrap();
        assert_eq!(
            sh_argv(&a),
            v(&["/bin/sh", "-o", "pipefail", "-eu", "-c", "-x"])
        );
        let a = parse_sh(&v(&["--local", "--class", "long", "--quiet", "-c", "t"])).unwrap();
        assert!(a.local && a.quiet);
        assert_eq!(a.class, "long");
        assert!(parse_sh(&v(&["script.sh"])).is_err());
        assert!(parse_sh(&v(&["-c"])).is_err());
        assert!(parse_sh(&v(&["--class", "medium", "-c", "t"])).is_err());
    }

    #[test]
    fn counts_recipes_per_node() {
        let m = count("n2\tn1:5\nlocal\t-\nn2\tn1:7\n\nn3\tn1:8\n");
        assert_eq!(m.get("n2"), Some(&2));
        assert_eq!(m.get("n3"), Some(&1));
        assert_eq!(m.get(LOCAL), Some(&1));
        assert_eq!(m.values().sum::<u64>(), 4);
    }
}
