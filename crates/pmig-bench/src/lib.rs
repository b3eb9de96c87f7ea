//! Benchmarks. Every figure comes from a measurement made in the same run;
//! limits (disk write bandwidth, first-touch bandwidth) are measured next to
//! what they bound.
//!
//! `engine`: dump and restore throughput. `matrix`: every strategy × link ×
//! workload on a local cluster (`pmig bench`), reported by `report` and `plot`;
//! `tcp`: the raw TCP throughput each link is compared with.

pub mod engine;
pub mod matrix;
pub mod plot;
pub mod report;
pub mod stats;
pub mod tcp;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("{0}")]
    Failed(String),
}

pub type Result<T> = std::result::Result<T, BenchError>;

/// The repository's workload binaries (bench/workloads/bin).
pub fn workload(name: &str) -> Result<std::path::PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(d) = std::env::var("PMIG_WORKLOADS") {
        candidates.push(std::path::PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/release/pmig -> repo root
        if let Some(root) = exe.ancestors().nth(3) {
            candidates.push(root.join("bench/workloads/bin"));
        }
    }
    candidates.push(std::path::PathBuf::from("bench/workloads/bin"));
    for c in candidates {
        let p = c.join(name);
        if p.exists() {
            // Absolute: the workload runs inside a node, from another directory.
            return Ok(std::path::absolute(&p).unwrap_or(p));
        }
    }
    Err(BenchError::Failed(format!(
        "workload {name} not found: run `make -C bench/workloads` (or set PMIG_WORKLOADS)"
    )))
}

/// A command whose child inherits only fds 0-2 (a workload must not carry
/// whatever the caller had open).
pub fn clean_command(prog: &std::path::Path) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new(prog);
    // SAFETY: close_range is async-signal-safe; it runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    c
}
