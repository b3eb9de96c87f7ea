//! Process attributes that only `prctl` reads and sets: child subreaper,
//! transparent huge pages disabled (and its "except where advised" flag),
//! the machine-check kill policy, the time-stamp counter mode
//! (`PR_SET_TSC`) and KSM merging of the whole process.
//!
//! The capture asks the frozen process itself with injected `prctl` calls
//! (one batch, in the main thread). The kernel keeps the machine-check
//! policy and the TSC mode per thread, and a new thread inherits its
//! creator's; the main thread's values are restored in every thread. The
//! restorer sets them from inside the new process, before its privileges
//! are dropped (KSM merging needs CAP_SYS_RESOURCE). A value the
//! destination's kernel refuses (an older kernel without the THP flag)
//! fails the restore with the call named, and the process runs on at the
//! source; KSM merging alone is best effort (a kernel without KSM), since
//! it changes no behaviour the process can see.
//!
//! Written only when some attribute differs from what a new process gets,
//! so most images do not carry this part (format 1.4).
//!
//! Memory-deny-write-execute (`PR_SET_MDWE`) is read in the same batch but
//! kept in a part of its own, `mdwe` (format 1.5: the `prctl` part of 1.4
//! has no field for it), written only when the process has it. It cannot be
//! cleared once set, and it would refuse the restorer's own work on the
//! process's memory, so the restorer sets it after every mapping is in
//! place. Without it a moved process would silently lose that protection.

use super::{Capture, PlanCx, Resource};
use crate::error::Result;
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};

pub struct Prctl;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrctlState {
    pub child_subreaper: bool,
    /// `PR_GET_THP_DISABLE`: 0, or 1 with `PR_THP_DISABLE_EXCEPT_ADVISED`
    /// (2) possibly set.
    pub thp_disable: u64,
    /// `PR_MCE_KILL_GET`: early (1), late (0), or the system default (2).
    pub mce_kill: u64,
    /// `PR_GET_TSC`: enabled (1) or SIGSEGV on `rdtsc` (2).
    pub tsc: u64,
    /// `PR_GET_MEMORY_MERGE`: 1 if KSM merges every mapping it can.
    pub memory_merge: bool,
}

const PR_GET_TSC: u64 = 25;
const PR_SET_TSC: u64 = 26;
const PR_TSC_ENABLE: u64 = 1;
const PR_MCE_KILL: u64 = 33;
const PR_MCE_KILL_GET: u64 = 34;
const PR_MCE_KILL_SET: u64 = 1;
const PR_MCE_KILL_DEFAULT: u64 = 2;
const PR_SET_CHILD_SUBREAPER: u64 = 36;
const PR_GET_CHILD_SUBREAPER: u64 = 37;
const PR_SET_THP_DISABLE: u64 = 41;
const PR_GET_THP_DISABLE: u64 = 42;
const PR_SET_MEMORY_MERGE: u64 = 67;
const PR_GET_MEMORY_MERGE: u64 = 68;
const PR_SET_MDWE: u64 = libc::PR_SET_MDWE as u64;
const PR_GET_MDWE: u64 = libc::PR_GET_MDWE as u64;

/// The process's memory-deny-write-execute flags (`PR_GET_MDWE`:
/// `PR_MDWE_REFUSE_EXEC_GAIN`, possibly with `PR_MDWE_NO_INHERIT`), part
/// `mdwe` (format 1.5). Only images of a process that has it carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdweState {
    pub flags: u64,
}

impl MdweState {
    pub const PART: &'static str = "mdwe";

    /// Sets the flags from inside the new process: after Memory's ops (no
    /// mapping may gain execute permission once it is set) and before
    /// Identity drops privileges, like the other prctl attributes.
    pub fn plan(&self, cx: &mut PlanCx) -> Result<()> {
        cx.b.syscall(
            0,
            libc::SYS_prctl,
            &[
                PR_SET_MDWE.into(),
                self.flags.into(),
                0u64.into(),
                0u64.into(),
                0u64.into(),
            ],
            Check::NonNeg,
            format!("deny write+execute memory (PR_SET_MDWE {:#x})", self.flags),
        );
        Ok(())
    }
}

impl PrctlState {
    /// What a new process has: nothing to restore.
    pub fn is_default(&self) -> bool {
        *self
            == PrctlState {
                mce_kill: PR_MCE_KILL_DEFAULT,
                tsc: PR_TSC_ENABLE,
                ..Default::default()
            }
    }

    /// The calls that set these attributes: (thread-wide, prctl arguments,
    /// what). Thread-wide ones are made in every thread.
    fn calls(&self) -> Vec<(bool, [u64; 3], Check, String)> {
        let mut v = Vec::new();
        if self.child_subreaper {
            v.push((
                false,
                [PR_SET_CHILD_SUBREAPER, 1, 0],
                Check::NonNeg,
                "become a child subreaper".to_string(),
            ));
        }
        if self.thp_disable & 1 != 0 {
            v.push((
                false,
                [PR_SET_THP_DISABLE, 1, self.thp_disable & !1],
                Check::NonNeg,
                format!("disable transparent huge pages ({:#x})", self.thp_disable),
            ));
        }
        if self.memory_merge {
            v.push((
                false,
                [PR_SET_MEMORY_MERGE, 1, 0],
                Check::None,
                "let KSM merge the process's memory".to_string(),
            ));
        }
        if self.mce_kill != PR_MCE_KILL_DEFAULT {
            v.push((
                true,
                [PR_MCE_KILL, PR_MCE_KILL_SET, self.mce_kill],
                Check::NonNeg,
                format!("set the machine-check kill policy {}", self.mce_kill),
            ));
        }
        if self.tsc != PR_TSC_ENABLE {
            v.push((
                true,
                [PR_SET_TSC, self.tsc, 0],
                Check::NonNeg,
                format!("set the time-stamp counter mode {}", self.tsc),
            ));
        }
        v
    }
}

impl Prctl {
    /// The calls its capture makes in the process (see [`Capture::ask`]).
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        cx.ask(Self::PART, 16, |s| {
            vec![
                (libc::SYS_prctl, vec![PR_GET_CHILD_SUBREAPER, s]),
                (libc::SYS_prctl, vec![PR_GET_TSC, s + 8]),
                (libc::SYS_prctl, vec![PR_GET_THP_DISABLE, 0, 0, 0, 0]),
                (libc::SYS_prctl, vec![PR_MCE_KILL_GET, 0, 0, 0, 0]),
                (libc::SYS_prctl, vec![PR_GET_MEMORY_MERGE, 0, 0, 0, 0]),
                (libc::SYS_prctl, vec![PR_GET_MDWE, 0, 0, 0, 0]),
            ]
        })
    }
}

impl Resource for Prctl {
    const PART: &'static str = "prctl";
    type State = PrctlState;

    fn capture(cx: &mut Capture) -> Result<PrctlState> {
        let (r, out) = cx.answers(Self::PART, Prctl::ask)?;
        // A kernel without MDWE (before 6.3) answers EINVAL: none is set.
        if r[5] > 0 {
            cx.mdwe = Some(MdweState { flags: r[5] as u64 });
        }
        let int_at = |i: usize| {
            out.get(i..i + 4)
                .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as u64)
        };
        // A call this kernel does not have leaves its attribute at the
        // default.
        Ok(PrctlState {
            child_subreaper: r[0] == 0 && int_at(0).unwrap_or(0) != 0,
            tsc: if r[1] == 0 {
                int_at(8).unwrap_or(PR_TSC_ENABLE)
            } else {
                PR_TSC_ENABLE
            },
            thp_disable: r[2].max(0) as u64,
            mce_kill: if r[3] >= 0 {
                r[3] as u64
            } else {
                PR_MCE_KILL_DEFAULT
            },
            memory_merge: r[4] == 1,
        })
    }

    fn plan(s: &PrctlState, cx: &mut PlanCx) -> Result<()> {
        let threads = cx.pf.thread_tids.len().max(1);
        for (per_thread, [op, a2, a3], check, what) in s.calls() {
            for t in 0..if per_thread { threads } else { 1 } {
                cx.b.syscall(
                    t,
                    libc::SYS_prctl,
                    &[op.into(), a2.into(), a3.into(), 0u64.into(), 0u64.into()],
                    check,
                    what.clone(),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_process_has_nothing_to_restore() {
        let d = PrctlState {
            mce_kill: PR_MCE_KILL_DEFAULT,
            tsc: PR_TSC_ENABLE,
            ..Default::default()
        };
        assert!(d.is_default());
        assert!(d.calls().is_empty());
    }

    #[test]
    fn each_attribute_is_set_where_the_kernel_keeps_it() {
        let s = PrctlState {
            child_subreaper: true,
            thp_disable: 3,
            mce_kill: 1,
            tsc: 2,
            memory_merge: true,
        };
        assert!(!s.is_default());
        let c = s.calls();
        let find = |op: u64| c.iter().find(|x| x.1[0] == op).unwrap();
        assert!(!find(PR_SET_CHILD_SUBREAPER).0);
        assert_eq!(find(PR_SET_THP_DISABLE).1, [PR_SET_THP_DISABLE, 1, 2]);
        assert!(!find(PR_SET_MEMORY_MERGE).0);
        assert_eq!(find(PR_MCE_KILL).1, [PR_MCE_KILL, PR_MCE_KILL_SET, 1]);
        assert!(find(PR_MCE_KILL).0);
        assert_eq!(find(PR_SET_TSC).1, [PR_SET_TSC, 2, 0]);
        assert!(find(PR_SET_TSC).0);
        assert_eq!(c.len(), 5);
    }
}
