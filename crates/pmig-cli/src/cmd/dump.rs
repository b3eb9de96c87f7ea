use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Process to capture.
    #[arg(long)]
    pid: i32,
    /// Image directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Let the process go on running after the dump (default: kill it once
    /// the image is complete and verified).
    #[arg(long)]
    leave_running: bool,
    /// How long to wait for a state that usually passes in a moment (a
    /// file lock held, an inotify event not read yet) before refusing: the
    /// process is frozen at a moment without it.
    #[arg(long, value_name = "MS", default_value_t = pmig_engine::image::BUSY_WAIT.as_millis() as u64)]
    busy_wait_ms: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let r = pmig_engine::dump(
        a.pid,
        &a.dir,
        &pmig_engine::DumpOptions {
            leave_running: a.leave_running,
            busy_wait: std::time::Duration::from_millis(a.busy_wait_ms),
        },
    )?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "pid": r.pid, "threads": r.threads, "vmas": r.vmas, "page_bytes": r.page_bytes,
                "frozen_ms": r.frozen_for.as_secs_f64() * 1e3, "capture_ms": r.capture.as_secs_f64() * 1e3,
                "verify_ms": r.verify.as_secs_f64() * 1e3, "left_running": a.leave_running,
            })
        );
    } else {
        eprintln!(
            "pmig: dumped process {} ({} threads, {} mappings, {:.1} MiB of pages) into {}; stopped for {:.1} ms; process {}",
            r.pid,
            r.threads,
            r.vmas,
            r.page_bytes as f64 / (1 << 20) as f64,
            a.dir.display(),
            r.frozen_for.as_secs_f64() * 1e3,
            if a.leave_running { "left running" } else { "killed" }
        );
    }
    Ok(0)
}
