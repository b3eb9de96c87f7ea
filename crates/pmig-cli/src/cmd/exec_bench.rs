//! `pmig bench exec`: the overhead of remote execution (Sprite's fork+exec+wait of a
//! null process: 81 ms remote against 46 ms local). Run inside a node of a cluster,
//! e.g. `pmig cluster exec n1 -- pmig bench exec --on n2`.

use super::run::{run_job, RunOutcome};
use anyhow::{bail, Context, Result};
use pmig_services::exec::{ExitKind, RunRequest};
use std::ffi::CString;
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Node to run on.
    #[arg(long, value_name = "NODE", default_value = "n2")]
    on: String,
    /// Runs per measurement (median and spread are reported).
    #[arg(long, default_value_t = 100)]
    reps: usize,
    /// The null program.
    #[arg(long, default_value = "/bin/true")]
    program: String,
    /// Also write the rows as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(serde::Serialize)]
struct Row {
    what: String,
    median_ms: f64,
    min_ms: f64,
    p90_ms: f64,
    max_ms: f64,
    ratio_to_local: f64,
    added_ms: f64,
}

fn stats(what: &str, mut v: Vec<f64>, local: f64) -> Row {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let median = at(0.5);
    Row {
        what: what.into(),
        median_ms: median,
        min_ms: v[0],
        p90_ms: at(0.9),
        max_ms: v[v.len() - 1],
        ratio_to_local: if local > 0.0 { median / local } else { 0.0 },
        added_ms: median - local,
    }
}

/// fork + exec + wait of `prog`, in ms.
fn local_once(prog: &CString) -> Result<f64> {
    let t = Instant::now();
    // SAFETY: this process is single-threaded here; the child only calls execv and
    // _exit.
    match unsafe { nix::unistd::fork() }.context("fork")? {
        nix::unistd::ForkResult::Child => {
            let _ = nix::unistd::execv(prog, &[prog]);
            // SAFETY: leaving the forked child without running destructors.
            unsafe { libc::_exit(127) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            let st = nix::sys::wait::waitpid(child, None).context("waitpid")?;
            if !matches!(st, nix::sys::wait::WaitStatus::Exited(_, 0)) {
                bail!("{} ended with {st:?}", prog.to_string_lossy());
            }
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

fn timed(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let st = cmd.status().context("run the pmig binary")?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if !st.success() {
        bail!("{cmd:?} failed: {st}");
    }
    Ok(ms)
}

pub fn run(a: Args) -> Result<i32> {
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let exe = std::env::current_exe()?;
    let prog = CString::new(a.program.clone())?;
    let req = RunRequest {
        argv: vec![a.program.clone()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        on: Some(a.on.clone()),
        idle: false,
        class: None,
        tty: None,
    };
    // Warm up every path once (page cache, connections' first costs).
    local_once(&prog)?;
    run_job(&req, false)?;
    let (mut local, mut inproc, mut home, mut remote, mut cli, mut startup) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..a.reps {
        local.push(local_once(&prog)?);
        let t = Instant::now();
        let o: RunOutcome = run_job(&req, false)?;
        inproc.push(t.elapsed().as_secs_f64() * 1e3);
        if o.status != ExitKind::Code(0) {
            bail!("job {} on {} ended with {:?}", o.job, o.node, o.status);
        }
        home.push(o.home_us as f64 / 1e3);
        remote.push(o.remote_us as f64 / 1e3);
        cli.push(timed(
            Command::new(&exe)
                .args(["run", "--on", &a.on, "--", &a.program])
                .stdin(Stdio::null())
                .stdout(Stdio::null()),
        )?);
        startup.push(timed(
            Command::new(&exe)
                .arg("--version")
                .stdin(Stdio::null())
                .stdout(Stdio::null()),
        )?);
    }
    let l = stats("", local.clone(), 0.0).median_ms;
    let rows = vec![
        stats("local fork+exec+wait", local, l),
        stats("remote, inside the remote daemon (spawn → exit)", remote, l),
        stats("remote, inside the home daemon (request → exit)", home, l),
        stats(
            "remote, client in-process (connect → exit status)",
            inproc,
            l,
        ),
        stats("remote, `pmig run` process (as a user sees it)", cli, l),
        stats("`pmig --version` process (CLI startup alone)", startup, l),
    ];
    println!(
        "remote execution of {} on {}, {} runs each\n",
        a.program, a.on, a.reps
    );
    println!("| what | median ms | min | p90 | max | ratio to local | added ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} |",
            r.what, r.median_ms, r.min_ms, r.p90_ms, r.max_ms, r.ratio_to_local, r.added_ms
        );
    }
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(0)
}
