//! Identity and limits: uids, gids, supplementary groups, capabilities,
//! securebits, no_new_privs, dumpable, resource limits and personality.

use super::{Capture, PlanCx, Preflight, Resource};
use crate::error::{EngineError, Result};
use crate::procfs;
use libc::pid_t;
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};

pub struct Identity;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creds {
    /// real, effective, saved, filesystem
    pub uid: [u32; 4],
    pub gid: [u32; 4],
    pub groups: Vec<u32>,
    /// inheritable, permitted, effective, bounding, ambient
    pub caps: [u64; 5],
    pub securebits: u64,
    pub no_new_privs: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdentityState {
    pub creds: Creds,
    pub dumpable: u64,
    pub personality: u64,
    /// (soft, hard) for RLIMIT_* 0..16.
    pub rlimits: Vec<(u64, u64)>,
}

const PR_GET_SECUREBITS: u64 = 27;
const PR_SET_SECUREBITS: i32 = 28;
const PR_GET_DUMPABLE: u64 = 3;
const SECBIT_KEEP_CAPS: u64 = 1 << 4;
const NLIMITS: u32 = 16;

fn ids(v: Option<&String>) -> [u32; 4] {
    let mut out = [0; 4];
    for (i, x) in v
        .map(String::as_str)
        .unwrap_or("")
        .split_whitespace()
        .take(4)
        .enumerate()
    {
        out[i] = x.parse().unwrap_or(0);
    }
    out
}

fn creds_of(pid: pid_t) -> Result<Creds> {
    Ok(creds_in(&procfs::status(pid)?))
}

/// The credentials of a status read.
fn creds_in(st: &std::collections::HashMap<String, String>) -> Creds {
    let cap = |k: &str| procfs::hex_u64(st.get(k).map(String::as_str).unwrap_or("0"));
    Creds {
        uid: ids(st.get("Uid")),
        gid: ids(st.get("Gid")),
        groups: st
            .get("Groups")
            .map(String::as_str)
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect(),
        caps: [
            cap("CapInh"),
            cap("CapPrm"),
            cap("CapEff"),
            cap("CapBnd"),
            cap("CapAmb"),
        ],
        securebits: 0,
        no_new_privs: st.get("NoNewPrivs").map(String::as_str) == Some("1"),
    }
}

/// The lines of a status that hold the credentials a thread could have of
/// its own: its user and group ids, its capability sets.
fn cred_lines(status: &str) -> impl Iterator<Item = &str> {
    const FIELDS: [&str; 7] = [
        "Uid:", "Gid:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:",
    ];
    status
        .lines()
        .filter(|l| FIELDS.iter().any(|f| l.starts_with(f)))
}

fn last_cap() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Resource limits of `pid` from /proc/PID/limits (prlimit on another
/// process needs matching ids or CAP_SYS_RESOURCE; reading the file does not).
/// The file lists RLIMIT_* 0..15 in order.
pub fn rlimits(pid: pid_t) -> Result<Vec<(u64, u64)>> {
    let text = procfs::read(pid, "limits")?;
    let parse = |v: &str| {
        if v == "unlimited" {
            u64::MAX
        } else {
            v.parse().unwrap_or(u64::MAX)
        }
    };
    let out: Vec<(u64, u64)> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            // "Max cpu time              unlimited            unlimited            seconds"
            let cols: Vec<&str> = l.get(26..)?.split_whitespace().collect();
            Some((parse(cols.first()?), parse(cols.get(1)?)))
        })
        .collect();
    if out.len() != NLIMITS as usize {
        return Err(EngineError::Other(format!(
            "cannot parse /proc/{pid}/limits"
        )));
    }
    Ok(out)
}

impl Identity {
    /// The calls its capture makes in the process (see [`Capture::ask`]).
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        cx.ask(Self::PART, 0, |_| {
            vec![
                (libc::SYS_prctl, vec![PR_GET_SECUREBITS]),
                (libc::SYS_prctl, vec![PR_GET_DUMPABLE]),
            ]
        })
    }
}

impl Resource for Identity {
    const PART: &'static str = "identity";
    type State = IdentityState;

    /// Threads with credentials of their own (a thread that changed its
    /// ids with the raw system call, which changes only the caller's) are
    /// rare: refused rather than restored with the process's.
    fn precheck(pid: pid_t) -> Result<()> {
        // The lines of the status compared as they are: a read per thread
        // (shared with the process's check of its tracers) and no parse.
        let main = procfs::status_text(pid)?;
        for tid in procfs::tids_of(pid) {
            if tid == pid {
                continue;
            }
            // A thread that ended since the list was read is no concern.
            let text = match procfs::status_text(tid) {
                Ok(t) => t,
                Err(_) if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {
                    continue
                }
                Err(e) => return Err(e),
            };
            if !cred_lines(&main).eq(cred_lines(&text)) {
                return Err(crate::error::unsupported(
                    pid,
                    format!("threads with different credentials (thread {tid})"),
                ));
            }
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<IdentityState> {
        // Thread 0 is the main thread, whose status is the process's; that
        // every other thread has the same credentials is checked by
        // `precheck`, which runs again once the process is frozen, beside
        // the capture rather than in it (a status read per thread).
        let mut creds = creds_in(cx.status()?);
        let (r, _) = cx.answers(Self::PART, Identity::ask)?;
        creds.securebits = r[0].max(0) as u64;
        let personality = procfs::hex_u64(&procfs::read(cx.pid, "personality")?);
        Ok(IdentityState {
            creds,
            dumpable: r[1].max(0) as u64,
            personality,
            rlimits: rlimits(cx.pid)?,
        })
    }

    fn preflight(s: &IdentityState, pf: &mut Preflight) -> Result<()> {
        let ours = rlimits(std::process::id() as pid_t)?;
        let me = creds_of(std::process::id() as pid_t)?;
        let can_raise = me.caps[2] & (1u64 << 24/* CAP_SYS_RESOURCE */) != 0;
        for (r, ((_, want), (_, have))) in s.rlimits.iter().zip(&ours).enumerate() {
            if want > have && !can_raise {
                return Err(EngineError::Incompatible(format!("resource limit {r} needs hard limit {want}, above this restorer's {have} (needs CAP_SYS_RESOURCE)")));
            }
        }
        if s.personality != 0 {
            pf.child.personality = Some(s.personality);
        }
        // The resources after this one open the process's paths with its
        // own filesystem ids.
        let c = &s.creds;
        pf.owner = crate::fsowner::Owner::for_process(c.uid[3], c.gid[3], &c.groups, c.caps[2])?;
        Ok(())
    }

    fn plan(s: &IdentityState, cx: &mut PlanCx) -> Result<()> {
        let me = creds_of(std::process::id() as pid_t)?;
        let c = &s.creds;
        let b = &mut *cx.b;
        // Limits are per process: set them from inside (setting another
        // process's limits would need CAP_SYS_RESOURCE when ids differ).
        for (r, &(cur, max)) in s.rlimits.iter().enumerate() {
            let d = b.data_of(&[cur, max]);
            b.syscall(
                0,
                libc::SYS_prlimit64,
                &[0u64.into(), (r as u64).into(), d.into(), 0u64.into()],
                Check::NonNeg,
                format!("set resource limit {r}"),
            );
        }
        for t in 0..b.n_threads() {
            if c.caps[3] != me.caps[3] {
                for cap in 0..=last_cap() {
                    if c.caps[3] & (1 << cap) == 0 && me.caps[3] & (1 << cap) != 0 {
                        b.syscall(
                            t,
                            libc::SYS_prctl,
                            &[libc::PR_CAPBSET_DROP.into(), cap.into()],
                            Check::NonNeg,
                            format!("drop capability {cap} from the bounding set"),
                        );
                    }
                }
            }
            let changes_ids = c.uid != me.uid || c.gid != me.gid || c.groups != me.groups;
            if changes_ids || c.securebits != me.securebits {
                b.syscall(
                    t,
                    libc::SYS_prctl,
                    &[
                        PR_SET_SECUREBITS.into(),
                        (c.securebits | SECBIT_KEEP_CAPS).into(),
                    ],
                    Check::NonNeg,
                    "set securebits",
                );
            }
            if c.groups != me.groups {
                let d = b.data(
                    &c.groups
                        .iter()
                        .flat_map(|g| g.to_le_bytes())
                        .collect::<Vec<u8>>(),
                );
                b.syscall(
                    t,
                    libc::SYS_setgroups,
                    &[(c.groups.len() as u64).into(), d.into()],
                    Check::NonNeg,
                    "set supplementary groups",
                );
            }
            if c.gid != me.gid {
                b.syscall(
                    t,
                    libc::SYS_setresgid,
                    &[
                        (c.gid[0] as u64).into(),
                        (c.gid[1] as u64).into(),
                        (c.gid[2] as u64).into(),
                    ],
                    Check::NonNeg,
                    "set group ids",
                );
                b.syscall(
                    t,
                    libc::SYS_setfsgid,
                    &[(c.gid[3] as u64).into()],
                    Check::None,
                    "set filesystem group id",
                );
            }
            if c.uid != me.uid {
                b.syscall(
                    t,
                    libc::SYS_setresuid,
                    &[
                        (c.uid[0] as u64).into(),
                        (c.uid[1] as u64).into(),
                        (c.uid[2] as u64).into(),
                    ],
                    Check::NonNeg,
                    "set user ids",
                );
                b.syscall(
                    t,
                    libc::SYS_setfsuid,
                    &[(c.uid[3] as u64).into()],
                    Check::None,
                    "set filesystem user id",
                );
            }
            if c.caps[..3] != me.caps[..3] || changes_ids {
                // struct __user_cap_header_struct (v3) + two data words.
                let hdr = b.data_of(&[0x2008_0522u32, 0u32]);
                let lo = |v: u64| v as u32;
                let hi = |v: u64| (v >> 32) as u32;
                let data = b.data_of(&[
                    lo(c.caps[2]),
                    lo(c.caps[1]),
                    lo(c.caps[0]),
                    hi(c.caps[2]),
                    hi(c.caps[1]),
                    hi(c.caps[0]),
                ]);
                b.syscall(
                    t,
                    libc::SYS_capset,
                    &[hdr.into(), data.into()],
                    Check::NonNeg,
                    "set capabilities",
                );
            }
            for cap in 0..=last_cap() {
                if c.caps[4] & (1 << cap) != 0 {
                    b.syscall(
                        t,
                        libc::SYS_prctl,
                        &[
                            libc::PR_CAP_AMBIENT.into(),
                            libc::PR_CAP_AMBIENT_RAISE.into(),
                            cap.into(),
                            0u64.into(),
                            0u64.into(),
                        ],
                        Check::NonNeg,
                        format!("raise ambient capability {cap}"),
                    );
                }
            }
            if changes_ids || c.securebits != me.securebits {
                b.syscall(
                    t,
                    libc::SYS_prctl,
                    &[
                        libc::PR_SET_KEEPCAPS.into(),
                        ((c.securebits & SECBIT_KEEP_CAPS != 0) as u64).into(),
                    ],
                    Check::None,
                    "set keep-caps",
                );
            }
            if c.no_new_privs {
                b.syscall(
                    t,
                    libc::SYS_prctl,
                    &[
                        libc::PR_SET_NO_NEW_PRIVS.into(),
                        1u64.into(),
                        0u64.into(),
                        0u64.into(),
                        0u64.into(),
                    ],
                    Check::NonNeg,
                    "set no_new_privs",
                );
            }
        }
        b.syscall(
            0,
            libc::SYS_prctl,
            &[libc::PR_SET_DUMPABLE.into(), s.dumpable.into()],
            Check::None,
            "set dumpable",
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_compare_their_ids_and_capabilities_only() {
        let status = |name: &str, gid: &str, eff: &str| {
            format!(
                "Name:\t{name}\nState:\tS (sleeping)\nUid:\t0\t0\t0\t0\nGid:\t{gid}\nGroups:\t0 \nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t{eff}\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nVmRSS:\t  1000 kB\n"
            )
        };
        let main = status("java", "0\t0\t0\t0", "000001ffffffffff");
        assert_eq!(cred_lines(&main).count(), 7);
        // Another name, another state, other memory: the same credentials.
        let other =
            status("GC Thread#0", "0\t0\t0\t0", "000001ffffffffff").replace("1000 kB", "9 kB");
        assert!(cred_lines(&main).eq(cred_lines(&other)));
        // An effective group id, or an effective set, of its own.
        let gid = status("java", "0\t65534\t0\t65534", "000001ffffffffff");
        assert!(!cred_lines(&main).eq(cred_lines(&gid)));
        let eff = status("java", "0\t0\t0\t0", "0000000000000000");
        assert!(!cred_lines(&main).eq(cred_lines(&eff)));
    }
}
