//! Dynamic xsave features: the process's permission to use AMX tile data
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, Linux 5.16 and later), and the room
//! each thread has for that state.
//!
//! A process must ask the kernel before its first use of AMX tile data
//! (state component 18, 8 KiB per thread); without the permission the
//! first use kills it with SIGILL. The permission belongs to the whole
//! process and its children inherit it. A new process has none, so a moved
//! process that had it would die at its next tile instruction.
//!
//! A thread, too, has no room for tile data until it first uses it: the
//! kernel arms XFD (extended feature disable) for the component, traps the
//! first use, and only then enlarges the thread's FPU buffer. Until then
//! `PTRACE_SETREGSET` refuses a saved state that holds tile data (EINVAL),
//! which is what a restore of such a process failed on before this part.
//!
//! The capture asks the frozen process for its permissions
//! (`ARCH_GET_XCOMP_PERM`, with the other injected calls of the capture);
//! the part is written only when the process has one a new process lacks
//! (format 1.17). The restore checks first that this machine's CPU and
//! kernel offer each such feature (`ARCH_GET_XCOMP_SUPP`), and refuses the
//! image before anything is created if one is missing. The restorer then
//! asks for each permission in the new process, before its threads exist,
//! and every thread uses AMX once ([`PlanBuilder::amx_first_use`]) so that
//! its saved tile state can be set at the end, as every thread's FPU state
//! is.
//!
//! [`PlanBuilder::amx_first_use`]: pmig_restorer::PlanBuilder::amx_first_use

use super::{Capture, PlanCx, Preflight, Resource};
use crate::error::{EngineError, Result};
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};

pub struct Xcomp;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XcompState {
    /// The xsave features the process has permission for beyond what every
    /// process has (`ARCH_GET_XCOMP_PERM` less the default), as a bit mask
    /// of state components: bit 18 is AMX tile data.
    pub extra: u64,
}

const ARCH_GET_XCOMP_SUPP: u64 = 0x1021;
const ARCH_GET_XCOMP_PERM: u64 = 0x1022;
const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
/// The xsave state component of AMX tile data.
pub const XTILEDATA: u32 = 18;
/// Where the standard-format xsave area keeps its header's component bit
/// map (`XSTATE_BV`).
const XSTATE_BV_AT: usize = 512;

/// `arch_prctl(code, &mask)` in this process: the mask, or None where the
/// kernel does not have the call (before 5.16, or not x86).
fn own_mask(code: u64) -> Option<u64> {
    let mut m = 0u64;
    // SAFETY: arch_prctl writes one u64 at the address given, a local.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, code, &mut m as *mut u64) };
    (r == 0).then_some(m)
}

/// What every process has permission for: this process's own permissions,
/// since pmig never asks for more.
fn default_perm() -> u64 {
    static D: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *D.get_or_init(|| own_mask(ARCH_GET_XCOMP_PERM).unwrap_or(0))
}

/// The name of an xsave state component, for messages.
fn component_name(bit: u32) -> String {
    match bit {
        17 => "AMX tile configuration (xsave component 17)".to_string(),
        XTILEDATA => "AMX tile data (xsave component 18)".to_string(),
        b => format!("xsave component {b}"),
    }
}

fn bits(mask: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |b| mask & (1 << b) != 0)
}

/// The state components a thread's saved xsave area holds in a state other
/// than their initial one (its header's `XSTATE_BV`).
pub fn components_in_use(xstate: &[u8]) -> u64 {
    xstate
        .get(XSTATE_BV_AT..XSTATE_BV_AT + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
}

impl XcompState {
    pub const PART: &'static str = "xcomp";

    /// The part from the answer of `ARCH_GET_XCOMP_PERM` (`r`, the
    /// call's result, and `perm`, the mask it wrote), given what every
    /// process has: None when the process has nothing more.
    fn from_answer(r: i64, perm: u64, default: u64) -> Option<XcompState> {
        let extra = perm & !default;
        (r == 0 && extra != 0).then_some(XcompState { extra })
    }

    /// The features of `extra` that `supported` (this machine's
    /// `ARCH_GET_XCOMP_SUPP`) lacks, refused in one line.
    fn check_supported(&self, supported: Option<u64>) -> Result<()> {
        let missing = self.extra & !supported.unwrap_or(0);
        if missing == 0 {
            return Ok(());
        }
        let names: Vec<String> = bits(missing).map(component_name).collect();
        Err(EngineError::Incompatible(format!(
            "the process has permission to use {}, which this machine's CPU or kernel does not offer",
            names.join(", ")
        )))
    }

    /// Whether the threads need their first use of AMX made for them.
    fn tile_data(&self) -> bool {
        self.extra & (1 << XTILEDATA) != 0
    }
}

impl Xcomp {
    /// The call its capture makes in the process (see [`Capture::ask`]).
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        cx.ask(XcompState::PART, 8, |out| {
            vec![(libc::SYS_arch_prctl, vec![ARCH_GET_XCOMP_PERM, out])]
        })
    }
}

impl Resource for Xcomp {
    const PART: &'static str = XcompState::PART;
    /// None when the process has no permission a new process lacks.
    type State = Option<XcompState>;

    fn capture(cx: &mut Capture) -> Result<Option<XcompState>> {
        let (r, out) = cx.answers(Self::PART, Xcomp::ask)?;
        let perm = out
            .get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
        Ok(XcompState::from_answer(r[0], perm, default_perm()))
    }

    fn preflight(s: &Option<XcompState>, _pf: &mut Preflight) -> Result<()> {
        match s {
            Some(s) => s.check_supported(own_mask(ARCH_GET_XCOMP_SUPP)),
            None => Ok(()),
        }
    }

    /// In the main thread before the others exist (the permission is the
    /// process's, asked once), then the first use of AMX in every thread.
    /// Goes before the threads' own ops.
    fn plan(s: &Option<XcompState>, cx: &mut PlanCx) -> Result<()> {
        let Some(s) = s else {
            return Ok(());
        };
        for b in bits(s.extra) {
            cx.b.syscall(
                0,
                libc::SYS_arch_prctl,
                &[ARCH_REQ_XCOMP_PERM.into(), (b as u64).into()],
                Check::NonNeg,
                format!("ask for permission to use {}", component_name(b)),
            );
        }
        if s.tile_data() {
            for t in 0..cx.b.n_threads() {
                cx.b.amx_first_use(t, "make room for AMX tile data (its first use)");
            }
        }
        Ok(())
    }
}

/// A skeleton's thread that started since its capture has no room for
/// tile data (it never used AMX): such a thread holding tile state at the
/// stop cannot be set, and the skeleton is stale.
pub fn refuse_new_threads_with_tiles(
    started: &[usize],
    fin: &super::threads::ThreadsState,
) -> Result<()> {
    for &k in started {
        if let Some(t) = fin.threads.get(k) {
            if components_in_use(&t.xstate) & (1 << XTILEDATA) != 0 {
                return Err(crate::error::stale(format!(
                    "thread {}, started since its capture, holds AMX tile data",
                    t.tid
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_permission_beyond_the_default_is_kept() {
        let default = 0x2e7;
        assert_eq!(XcompState::from_answer(0, default, default), None);
        assert_eq!(
            XcompState::from_answer(0, default | 0x60000, default),
            Some(XcompState { extra: 0x60000 })
        );
        // A kernel without the call: nothing to keep.
        assert_eq!(
            XcompState::from_answer(-(libc::EINVAL as i64), 0x60000, default),
            None
        );
    }

    #[test]
    fn a_feature_this_machine_lacks_is_refused_by_name() {
        let s = XcompState { extra: 1 << 18 };
        assert!(s.check_supported(Some(0x602e7)).is_ok());
        let e = s.check_supported(Some(0x2e7)).unwrap_err().to_string();
        assert!(e.contains("AMX tile data (xsave component 18)"), "{e}");
        assert!(e.starts_with("image cannot be restored here"), "{e}");
        // A kernel that cannot tell (no ARCH_GET_XCOMP_SUPP) offers none.
        assert!(s.check_supported(None).is_err());
    }

    #[test]
    fn the_components_in_use_are_read_from_the_xsave_header() {
        let mut x = vec![0u8; 1024];
        x[512..520].copy_from_slice(&0x600a2u64.to_le_bytes());
        assert_eq!(components_in_use(&x), 0x600a2);
        assert_eq!(components_in_use(&x[..100]), 0);
    }

    #[test]
    fn this_process_has_its_default_permissions_and_they_are_offered() {
        // Every x86 kernel since 5.16 answers both; the default is a
        // subset of what is offered.
        let (Some(perm), Some(supp)) =
            (own_mask(ARCH_GET_XCOMP_PERM), own_mask(ARCH_GET_XCOMP_SUPP))
        else {
            panic!("arch_prctl(ARCH_GET_XCOMP_PERM/SUPP) refused");
        };
        assert_eq!(perm & !supp, 0, "perm {perm:#x} supp {supp:#x}");
        assert_eq!(perm & (1 << XTILEDATA), 0, "pmig asked for AMX itself");
        assert_eq!(default_perm(), perm);
    }
}
