//! The whole process image: one part per resource.

use crate::error::Result;
use crate::resources::{
    files::Files, identity::Identity, memory::Memory, process::Process, signals::Signals,
    threads::Threads, timers::Timers, Resource,
};
use pmig_image::{Image, ImageWriter};

/// Every resource's state. Adding a resource adds a field here.
#[derive(Debug)]
pub struct ProcessImage {
    pub process: <Process as Resource>::State,
    pub identity: <Identity as Resource>::State,
    pub files: <Files as Resource>::State,
    pub signals: <Signals as Resource>::State,
    pub timers: <Timers as Resource>::State,
    pub threads: <Threads as Resource>::State,
    pub memory: <Memory as Resource>::State,
}

impl ProcessImage {
    pub fn write_parts(&self, w: &mut ImageWriter) -> Result<()> {
        w.put(Process::PART, &self.process)?;
        w.put(Identity::PART, &self.identity)?;
        w.put(Files::PART, &self.files)?;
        w.put(Signals::PART, &self.signals)?;
        w.put(Timers::PART, &self.timers)?;
        w.put(Threads::PART, &self.threads)?;
        w.put(Memory::PART, &self.memory)?;
        Ok(())
    }

    pub fn read(img: &Image) -> Result<ProcessImage> {
        Ok(ProcessImage {
            process: img.get(Process::PART)?,
            identity: img.get(Identity::PART)?,
            files: img.get(Files::PART)?,
            signals: img.get(Signals::PART)?,
            timers: img.get(Timers::PART)?,
            threads: img.get(Threads::PART)?,
            memory: img.get(Memory::PART)?,
        })
    }
}

/// Run every resource's precheck (read-only refusals).
pub fn precheck_all(pid: libc::pid_t) -> Result<()> {
    Process::precheck(pid)?;
    Files::precheck(pid)?;
    Timers::precheck(pid)?;
    Memory::precheck(pid)?;
    Identity::precheck(pid)?;
    Signals::precheck(pid)?;
    Threads::precheck(pid)?;
    Ok(())
}

#[cfg(test)]
pub mod tests_support {
    use super::*;
    use crate::resources::{files, identity, memory, process, signals, threads, timers};

    /// A process image with nothing in it, for tests of image plumbing.
    pub fn empty_image() -> ProcessImage {
        ProcessImage {
            process: process::ProcessState {
                pid: 1,
                comm: "t".into(),
                cmdline: vec![],
            },
            identity: identity::IdentityState {
                creds: identity::Creds {
                    uid: [0; 4],
                    gid: [0; 4],
                    groups: vec![],
                    caps: [0; 5],
                    securebits: 0,
                    no_new_privs: false,
                },
                dumpable: 1,
                personality: 0,
                rlimits: vec![],
            },
            files: files::FilesState {
                cwd: "/".into(),
                umask: 0o22,
                fds: vec![],
            },
            signals: signals::SignalsState {
                actions: vec![],
                shared_pending: vec![],
            },
            timers: timers::TimersState {
                itimers: vec![],
                posix: vec![],
            },
            threads: threads::ThreadsState { threads: vec![] },
            memory: memory::MemoryState {
                vmas: vec![],
                mm: Default::default(),
                vdso: None,
                vdso_text: None,
            },
        }
    }
}
