//! Control groups: the cgroups the process is in, one per hierarchy (the
//! unified v2 hierarchy, and each v1 hierarchy with its controllers), as
//! `/proc/PID/cgroup` lists them.
//!
//! A restored process starts as a child of its restorer, in the restorer's
//! cgroups; under systemd those are the daemon's service, whose limits and
//! accounting then apply to it and whose stop may kill it. So the capture
//! notes each cgroup that differs from the capturing pmig's own, and the
//! restore moves the new process into the cgroup of the same path before
//! it runs (`cgroup.procs`), where that cgroup exists on this node and the
//! restorer's own differs. A cgroup this node lacks, or one the restorer
//! may not move the process into, is logged and the process stays in the
//! restorer's: cgroups are made by whoever manages them (systemd, a batch
//! system), not by pmig, and a process's program does not depend on the
//! group it runs in.

use super::{Capture, Preflight, Resource};
use crate::error::Result;
use crate::procfs;
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub struct Cgroups;

/// The process's cgroup in one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The hierarchy as `/proc/PID/cgroup` names it: its controllers
    /// (`cpu,cpuacct`, `name=systemd`), empty for the unified hierarchy.
    pub controllers: String,
    /// The cgroup's path from the hierarchy's root (`/user.slice/…`).
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupsState {
    /// The hierarchies in which the process's cgroup differs from the
    /// capturing pmig's.
    pub groups: Vec<Membership>,
}

/// `/proc/PID/cgroup`'s lines (`ID:CONTROLLERS:PATH`).
pub fn memberships(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_id, controllers, path) = (f.next()?, f.next()?, f.next()?);
            Some(Membership {
                controllers: controllers.to_string(),
                path: path.to_string(),
            })
        })
        .collect()
}

fn memberships_of(pid: pid_t) -> Result<Vec<Membership>> {
    Ok(memberships(&procfs::read(pid, "cgroup")?))
}

/// The memberships of `theirs` that differ from `ours` (in the same
/// hierarchy, or in one `ours` does not list).
fn differing(theirs: Vec<Membership>, ours: &[Membership]) -> Vec<Membership> {
    theirs.into_iter().filter(|m| !ours.contains(m)).collect()
}

/// Where hierarchy `controllers` is mounted, among `mountinfo`'s lines:
/// the directory that shows the cgroup at `path`, if the mount shows it.
pub fn dir_of(mountinfo: &str, controllers: &str, path: &str) -> Option<PathBuf> {
    let want: Vec<&str> = controllers.split(',').filter(|c| !c.is_empty()).collect();
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, _source, opts) = (r.next()?, r.next()?, r.next()?);
        let matches = if want.is_empty() {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && want.iter().all(|c| opts.split(',').any(|o| o == *c))
        };
        if !matches {
            return None;
        }
        let mut f = left.split_whitespace();
        let root = f.nth(3)?;
        let point = f.next()?;
        // A mount of part of the hierarchy (a container's) shows only the
        // cgroups below its root.
        let rel = if root == "/" {
            path.trim_start_matches('/')
        } else {
            let rest = path.strip_prefix(root)?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest.trim_start_matches('/')
        };
        Some(Path::new(point).join(rel))
    })
}

/// What name a hierarchy goes by in a message.
fn hierarchy(controllers: &str) -> &str {
    if controllers.is_empty() {
        "unified"
    } else {
        controllers
    }
}

/// Moves process `pid` into each cgroup whose `cgroup.procs` file is
/// listed. A move that fails is logged: the process stays where it is.
pub fn join(pid: pid_t, procs_files: &[PathBuf]) {
    for f in procs_files {
        if let Err(e) = std::fs::write(f, pid.to_string()) {
            tracing::warn!(
                "process {pid} stays in its restorer's cgroup: moving it to {} failed: {e}",
                f.display()
            );
        }
    }
}

impl Resource for Cgroups {
    const PART: &'static str = "cgroups";
    type State = CgroupsState;

    /// Nothing the program does depends on its cgroups: where they cannot
    /// be read, the capture goes on without them (logged).
    fn capture(cx: &mut Capture) -> Result<CgroupsState> {
        let groups = memberships_of(std::process::id() as pid_t)
            .and_then(|ours| Ok(differing(memberships_of(cx.pid)?, &ours)))
            .unwrap_or_else(|e| {
                tracing::warn!("the cgroups of process {} are not captured: {e}", cx.pid);
                Vec::new()
            });
        Ok(CgroupsState { groups })
    }

    /// Likewise, cgroups that cannot be looked for leave the process in
    /// the restorer's (logged).
    fn preflight(s: &CgroupsState, pf: &mut Preflight) -> Result<()> {
        let me = std::process::id() as pid_t;
        let (ours, mountinfo) =
            match memberships_of(me).and_then(|o| Ok((o, procfs::read(me, "mountinfo")?))) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("the process stays in the restorer's cgroups: {e}");
                    return Ok(());
                }
            };
        for m in differing(s.groups.clone(), &ours) {
            let procs = dir_of(&mountinfo, &m.controllers, &m.path)
                .map(|d| d.join("cgroup.procs"))
                .filter(|f| f.exists());
            match procs {
                Some(f) => pf.cgroup_procs.push(f),
                None => tracing::warn!(
                    "the process's cgroup {} ({} hierarchy) is not on this node: it stays in the restorer's",
                    m.path,
                    hierarchy(&m.controllers)
                ),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(c: &str, p: &str) -> Membership {
        Membership {
            controllers: c.into(),
            path: p.into(),
        }
    }

    #[test]
    fn memberships_are_read_and_only_those_that_differ_kept() {
        let theirs = memberships(
            "4:memory:/jobs/7\n3:cpu,cpuacct:/\n1:name=systemd:/user.slice/session-3.scope\n0::/user.slice/session-3.scope\n",
        );
        assert_eq!(theirs.len(), 4);
        assert_eq!(theirs[1], m("cpu,cpuacct", "/"));
        assert_eq!(theirs[3], m("", "/user.slice/session-3.scope"));
        let ours = memberships("4:memory:/\n3:cpu,cpuacct:/\n1:name=systemd:/system.slice/pmig.service\n0::/system.slice/pmig.service\n");
        let d = differing(theirs, &ours);
        assert_eq!(
            d,
            vec![
                m("memory", "/jobs/7"),
                m("name=systemd", "/user.slice/session-3.scope"),
                m("", "/user.slice/session-3.scope"),
            ]
        );
        assert!(differing(ours.clone(), &ours).is_empty());
    }

    #[test]
    fn each_hierarchy_is_found_where_it_is_mounted() {
        let mi = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
32 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
33 25 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n\
34 25 0:31 /jobs /mnt/memory rw,relatime - cgroup cgroup rw,memory\n";
        assert_eq!(
            dir_of(mi, "", "/a/b"),
            Some(PathBuf::from("/sys/fs/cgroup/unified/a/b"))
        );
        assert_eq!(
            dir_of(mi, "cpu,cpuacct", "/x"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/x"))
        );
        assert_eq!(
            dir_of(mi, "name=systemd", "/"),
            Some(PathBuf::from("/sys/fs/cgroup/systemd/"))
        );
        // A mount of a subtree shows the cgroups below it only.
        assert_eq!(
            dir_of(mi, "memory", "/jobs/7"),
            Some(PathBuf::from("/mnt/memory/7"))
        );
        assert_eq!(dir_of(mi, "memory", "/jobsx/7"), None);
        assert_eq!(dir_of(mi, "memory", "/other"), None);
        // A hierarchy that is not mounted here.
        assert_eq!(dir_of(mi, "blkio", "/x"), None);
        assert_eq!(dir_of("", "", "/x"), None);
    }
}
