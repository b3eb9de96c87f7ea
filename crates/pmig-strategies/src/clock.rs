//! CLOCK_MONOTONIC in nanoseconds: comparable between processes of one machine
//! (the freeze happens in a helper process, the rest in the daemon).

pub use pmig_engine::timing::{mark, mono_ns};

/// Milliseconds between two `mono_ns` readings (0 if out of order).
pub fn ms_between(a: u64, b: u64) -> f64 {
    b.saturating_sub(a) as f64 / 1e6
}
