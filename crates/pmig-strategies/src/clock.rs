//! CLOCK_MONOTONIC in nanoseconds: comparable between processes of one machine
//! (the freeze happens in a helper process, the rest in the daemon).

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

/// Milliseconds between two `mono_ns` readings (0 if out of order).
pub fn ms_between(a: u64, b: u64) -> f64 {
    b.saturating_sub(a) as f64 / 1e6
}
