//! The TCP congestion control of node-to-node connections.
//!
//! Every connection a pmig process opens or accepts uses one congestion
//! control, `cubic` unless `pmig daemon --tcp-congestion` says otherwise
//! ([`set_default`]); `system` leaves each connection to the system's
//! default (`net.ipv4.tcp_congestion_control`).
//!
//! Why not the system's default: with BBR, the default of some
//! distributions and of the machines pmig was measured on, a post-copy's
//! faults waited in bursts about ten seconds apart (BBR drains its pipe to
//! four packets for 200 ms every ten seconds to measure the round trip,
//! and probes for bandwidth after). With a program faulting all the time,
//! the faults of those bursts waited 2–8 ms instead of a quarter of one,
//! and its pauses grew to 30–56 ms; with `cubic` on both of a migration's
//! connections the bursts were gone (in one run 12 pauses over 10 ms
//! instead of 254, the longest 13 ms), at the same push rate
//! (BENCHMARKS.md, "Post-copy stalls ten seconds apart: BBR").

use std::os::fd::AsFd;
use std::sync::OnceLock;

/// The congestion control used when none was set.
pub const DEFAULT: &str = "cubic";

/// `--tcp-congestion` value that keeps the system's default.
pub const SYSTEM: &str = "system";

static CHOSEN: OnceLock<Option<String>> = OnceLock::new();
static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets the congestion control of this process's connections, once, before
/// any connection is made: a name the kernel knows (`cubic`, `reno`, `bbr`,
/// …) or [`SYSTEM`]. Returns false if a choice was already in use.
pub fn set_default(name: &str) -> bool {
    let v = (name != SYSTEM).then(|| name.to_string());
    CHOSEN.set(v).is_ok()
}

/// The congestion control this process sets on its connections (`None`:
/// the system's default).
pub fn chosen() -> Option<&'static str> {
    CHOSEN.get_or_init(|| Some(DEFAULT.to_string())).as_deref()
}

/// Whether `name` is a congestion control the kernel offers here
/// (`/proc/sys/net/ipv4/tcp_available_congestion_control`); `None` when
/// that list cannot be read.
pub fn available(name: &str) -> Option<bool> {
    let list =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").ok()?;
    Some(list.split_whitespace().any(|a| a == name))
}

/// Sets the chosen congestion control on `s`. A kernel without it leaves
/// the connection to the system's default, said once per process.
pub fn apply(s: &impl AsFd) {
    let Some(name) = chosen() else {
        return;
    };
    let r = nix::sys::socket::setsockopt(
        s,
        nix::sys::socket::sockopt::TcpCongestion,
        &std::ffi::OsString::from(name),
    );
    if let Err(e) = r {
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                "TCP congestion control `{name}` cannot be set here ({e}): node-to-node connections use the system's default"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_set_on_a_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        apply(&c);
        let got =
            nix::sys::socket::getsockopt(&c, nix::sys::socket::sockopt::TcpCongestion).unwrap();
        let got = got.to_string_lossy();
        match available(DEFAULT) {
            // This kernel has cubic: the connection uses it.
            Some(true) | None => assert_eq!(got.trim_end_matches('\0'), DEFAULT),
            // It does not: the connection keeps the system's default.
            Some(false) => assert_ne!(got.trim_end_matches('\0'), DEFAULT),
        }
    }
}
