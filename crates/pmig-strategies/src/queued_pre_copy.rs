//! `queued-pre-copy`: pre-copy that sends clean pages first and queues the
//! recently written ones for the stop (Noack §2.3.6 and §4.2.1, after the
//! Nomadic OS design).
//!
//! Noack's loop, with the dirty bit replaced by the write tracker of
//! [`crate::pre_copy`] (a scan reports, and protects again, the pages written
//! since the previous scan, which is what `pte_mkclean` plus the dirty bit
//! gave him):
//!
//! ```text
//! attach the tracker; wait one interval; hot = scan()      (the "delayed" pages)
//! round 0: send every tracked populated page except the hot ones
//! rerun (at most max_rounds times, each interval ≥ HOT_INTERVAL):
//!     written = scan()
//!     send the delayed pages that were not written in this interval
//!     delayed = written                                    (queued, not sent)
//!     stop rerunning once the delayed bytes ≤ max_dirty_fraction · address space
//! stop: the holder saves the state and untracked memory; the last round,
//!       read from the frozen process, sends the delayed pages whole and
//!       every page written since the last scan
//! ```
//!
//! A page written in every interval is therefore sent once, at the stop,
//! instead of once per round as in pre-copy; a page written once is sent
//! after it has stayed unwritten for an interval. Everything else (the
//! messages, the handover, the destination, "nothing lost") is pre-copy's.

use crate::pre_copy::{intersect, subtract};

/// One rerun of the queue, given the pages `written` in the last interval
/// and the pages `present` now: returns the queued pages that stayed
/// unwritten (to send now); the written pages become the queue.
pub(crate) fn rerun(
    delayed: &mut Vec<(u64, u64)>,
    written: Vec<(u64, u64)>,
    present: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    let cooled = intersect(&subtract(delayed, &written), present);
    *delayed = written;
    cooled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_pages_wait_and_cooled_pages_go() {
        const P: u64 = 4096;
        // Pages 1, 2, 3 were hot; in this interval 2 and 5 were written, and
        // page 3 was unmapped.
        let mut delayed = vec![(P, 3 * P)];
        let send = rerun(
            &mut delayed,
            vec![(2 * P, P), (5 * P, P)],
            &[(0, 3 * P), (5 * P, P)],
        );
        assert_eq!(send, [(P, P)], "page 1 cooled down: sent now");
        assert_eq!(
            delayed,
            [(2 * P, P), (5 * P, P)],
            "written pages are queued"
        );
        // Nothing written in the next interval: the whole queue goes.
        let send = rerun(&mut delayed, vec![], &[(0, 8 * P)]);
        assert_eq!(send, [(2 * P, P), (5 * P, P)]);
        assert!(delayed.is_empty());
    }
}
