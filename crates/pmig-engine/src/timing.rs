//! Timestamps of the steps of a migration, for finding where the down time
//! goes: `PMIG_LOG=info,pmig_timing=debug` logs one line per step with its
//! CLOCK_MONOTONIC reading, comparable between the processes of one machine
//! (holder, daemons, `pmig restore`).

/// Nanoseconds of CLOCK_MONOTONIC.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Logs that step `what` ends now (target `pmig_timing`, level debug).
pub fn mark(what: &str) {
    tracing::debug!(target: "pmig_timing", "{} {what}", mono_ns());
}
