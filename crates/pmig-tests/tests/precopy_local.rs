//! Iterative (pre-copy) capture on one machine, without the network: pages
//! are copied in rounds while the workload keeps writing, then the process
//! is stopped and only what changed since is saved; the destination's page
//! store composes an image from all rounds. The workload keeps a running sum
//! of its memory and verifies it at the end, so one stale page fails it.

use pmig_engine::dirty::DirtyTracker;
use pmig_engine::pagestore::{read_ranges, PageStore};
use pmig_engine::ptrace::Frozen;
use pmig_engine::resources::memory::saveable_ranges;
use pmig_tests::{only_stdio, pmig_bin, serial, start_dirtier, wait_timeout, Guard, HEAVY};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn precopy_rounds_then_filtered_stop() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    // 60000 page writes at 20000/s: about 3 s.
    let mut child = start_dirtier(60000, &mut guard);
    let pid = child.id() as i32;

    let dir = tempfile::tempdir().unwrap();
    let mut store = PageStore::create(dir.path()).unwrap();
    let mut tracker = DirtyTracker::attach(pid).unwrap();
    // Round 0: everything populated.
    let all = saveable_ranges(pid).unwrap();
    let (sent0, skipped) = read_ranges(pid, &all, 4 << 20, &mut |a, d| store.put(a, d)).unwrap();
    assert!(sent0 >= 64 << 20, "round 0 sent {sent0} bytes");
    assert!(skipped.is_empty(), "round 0 could not read {skipped:x?}");
    // Two more rounds of what was written meanwhile.
    let mut rounds_sent = 0;
    for _ in 0..2 {
        let dirty = tracker.scan().unwrap();
        assert!(
            !dirty.is_empty(),
            "the workload writes all the time: some page must be dirty"
        );
        rounds_sent += read_ranges(pid, &dirty, 4 << 20, &mut |a, d| store.put(a, d))
            .unwrap()
            .0;
    }
    assert!(rounds_sent > 0);

    // Stop: only pages written since the last round, plus untracked memory.
    let mut frozen = Frozen::freeze(pid).unwrap();
    let last = tracker.scan().unwrap();
    let keep = |p: u64| !tracker.is_tracked(p) || last.iter().any(|(s, l)| *s <= p && p < s + l);
    let stage = tempfile::tempdir().unwrap();
    let mut w = pmig_image::ImageWriter::create(stage.path()).unwrap();
    let pi = pmig_engine::dump::capture_filtered(&mut frozen, &mut w, Some(&keep)).unwrap();
    let final_bytes: u64 = pi
        .memory
        .vmas
        .iter()
        .flat_map(|v| &v.runs)
        .map(|r| r.len)
        .sum();
    pi.write_parts(&mut w).unwrap();
    w.finish(pmig_engine::dump::manifest_for(pid)).unwrap();
    assert!(
        final_bytes < 32 << 20,
        "the stop saved {final_bytes} bytes: far more than what changed"
    );
    drop(tracker);
    let partial = pmig_image::Image::open_verified(stage.path()).unwrap();
    let pi = pmig_engine::image::ProcessImage::read(&partial).unwrap();
    store.absorb(&partial, &pi).unwrap();
    store
        .finish(pi, pmig_engine::dump::manifest_for(pid))
        .unwrap();
    frozen.kill().unwrap();
    let _ = child.wait();

    // The composed image restores, and the workload's own check passes.
    let mut r = only_stdio(
        Command::new(pmig_bin())
            .args(["restore", "--dir"])
            .arg(dir.path()),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let st = wait_timeout(&mut r, Duration::from_secs(60)).expect("restored workload finished");
    let mut text = String::new();
    std::io::Read::read_to_string(r.stdout.as_mut().unwrap(), &mut text).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(r.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        st.success(),
        "restored workload failed ({st:?}): {text} {err}"
    );
    assert!(text.contains("verify=ok"), "workload output: {text} {err}");
}
