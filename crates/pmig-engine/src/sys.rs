//! Thin wrappers around system calls and ptrace requests that neither libc
//! nor nix wrap. Every `unsafe` block here is a single system call.

use crate::error::{errno_err, Result};
use libc::{c_long, c_void, pid_t};
use std::os::fd::OwnedFd;

pub const PTRACE_GETSIGMASK: u32 = 0x420a;
pub const PTRACE_SETSIGMASK: u32 = 0x420b;
pub const PTRACE_PEEKSIGINFO: u32 = 0x4209;
pub const PTRACE_GET_RSEQ_CONFIGURATION: u32 = 0x420f;
pub const PTRACE_PEEKSIGINFO_SHARED: u32 = 1;
pub const NT_X86_XSTATE: usize = 0x202;
pub const SIGINFO_SIZE: usize = 128;
/// Largest xsave area we accept (AMX makes it about 11 KiB).
pub const XSTATE_MAX: usize = 16384;

pub type UserRegs = libc::user_regs_struct;

fn check(r: c_long, what: impl FnOnce() -> String) -> Result<c_long> {
    if r < 0 {
        Err(errno_err(what()))
    } else {
        Ok(r)
    }
}

fn ptrace(req: u32, tid: pid_t, addr: usize, data: usize) -> c_long {
    // SAFETY: a raw ptrace request; callers pass addr/data that point to
    // buffers valid for the request (or plain integers).
    unsafe { libc::ptrace(req as _, tid, addr as *mut c_void, data as *mut c_void) }
}

pub fn get_regs(tid: pid_t) -> Result<UserRegs> {
    // SAFETY: user_regs_struct is plain data; all-zero is a valid value.
    let mut r: UserRegs = unsafe { std::mem::zeroed() };
    check(
        ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _ as usize),
        || format!("read registers of thread {tid}"),
    )?;
    Ok(r)
}

pub fn set_regs(tid: pid_t, r: &UserRegs) -> Result<()> {
    check(
        ptrace(libc::PTRACE_SETREGS, tid, 0, r as *const _ as usize),
        || format!("set registers of thread {tid}"),
    )?;
    Ok(())
}

pub fn get_xstate(tid: pid_t) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; XSTATE_MAX];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    check(
        ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            NT_X86_XSTATE,
            &mut iov as *mut _ as usize,
        ),
        || format!("read FPU/xsave state of thread {tid}"),
    )?;
    buf.truncate(iov.iov_len);
    Ok(buf)
}

pub fn set_xstate(tid: pid_t, x: &[u8]) -> Result<()> {
    let mut buf = x.to_vec();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    check(
        ptrace(
            libc::PTRACE_SETREGSET,
            tid,
            NT_X86_XSTATE,
            &mut iov as *mut _ as usize,
        ),
        || format!("set FPU/xsave state of thread {tid}"),
    )?;
    Ok(())
}

pub fn get_sigmask(tid: pid_t) -> Result<u64> {
    let mut m = 0u64;
    check(
        ptrace(PTRACE_GETSIGMASK, tid, 8, &mut m as *mut u64 as usize),
        || format!("read signal mask of thread {tid}"),
    )?;
    Ok(m)
}

pub fn set_sigmask(tid: pid_t, m: u64) -> Result<()> {
    check(
        ptrace(PTRACE_SETSIGMASK, tid, 8, &m as *const u64 as usize),
        || format!("set signal mask of thread {tid}"),
    )?;
    Ok(())
}

/// Pending signals of a thread (`shared` = the process-wide queue), raw siginfo.
pub fn peek_siginfo(tid: pid_t, shared: bool) -> Result<Vec<Vec<u8>>> {
    #[repr(C)]
    struct Args {
        off: u64,
        flags: u32,
        nr: i32,
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; SIGINFO_SIZE * 32];
    loop {
        let a = Args {
            off: out.len() as u64,
            flags: if shared { PTRACE_PEEKSIGINFO_SHARED } else { 0 },
            nr: 32,
        };
        let n = check(
            ptrace(
                PTRACE_PEEKSIGINFO,
                tid,
                &a as *const _ as usize,
                buf.as_mut_ptr() as usize,
            ),
            || format!("read pending signals of thread {tid}"),
        )? as usize;
        for i in 0..n {
            out.push(buf[i * SIGINFO_SIZE..(i + 1) * SIGINFO_SIZE].to_vec());
        }
        if n < 32 {
            return Ok(out);
        }
    }
}

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct RseqConfig {
    pub ptr: u64,
    pub size: u32,
    pub signature: u32,
    pub flags: u32,
    pub pad: u32,
}

pub fn rseq_config(tid: pid_t) -> Result<RseqConfig> {
    let mut c = RseqConfig::default();
    check(
        ptrace(
            PTRACE_GET_RSEQ_CONFIGURATION,
            tid,
            std::mem::size_of::<RseqConfig>(),
            &mut c as *mut _ as usize,
        ),
        || format!("read rseq registration of thread {tid}"),
    )?;
    Ok(c)
}

pub fn robust_list(tid: pid_t) -> Result<(u64, u64)> {
    let mut head = 0u64;
    let mut len = 0usize;
    // SAFETY: get_robust_list writes one pointer and one size_t into our locals.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_robust_list,
            tid,
            &mut head as *mut u64,
            &mut len as *mut usize,
        )
    };
    check(r, || format!("read robust futex list of thread {tid}"))?;
    Ok((head, len as u64))
}

pub fn process_vm_read(pid: pid_t, addr: u64, buf: &mut [u8]) -> Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: local iovec covers our own buffer; the remote one is only read by the kernel.
    let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    check(r as c_long, || {
        format!("read memory of process {pid} at {addr:#x}")
    })?;
    Ok(r as usize)
}

/// The most remote segments one [`process_vm_read_gather`] takes (IOV_MAX).
pub const GATHER_MAX: usize = 1024;

/// Reads the remote segments `segs` ((address, length), at most
/// [`GATHER_MAX`]) of process `pid` one after the other into the start of
/// `buf`, in one system call. Returns the bytes read: fewer than asked means
/// a segment could not be read.
pub fn process_vm_read_gather(pid: pid_t, segs: &[(u64, usize)], buf: &mut [u8]) -> Result<usize> {
    let total = segments_total(segs, buf.len());
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: total,
    };
    let remote = remote_iovecs(segs);
    // SAFETY: the local iovec covers the first `total` bytes of our own
    // buffer (checked by `segments_total`); the remote ones are only read
    // by the kernel.
    let r =
        unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), remote.len() as _, 0) };
    check(r as c_long, || {
        format!(
            "read memory of process {pid} at {:#x}",
            segs.first().map_or(0, |s| s.0)
        )
    })?;
    Ok(r as usize)
}

/// Writes `buf` to the remote segments `segs` ((address, length), at most
/// [`GATHER_MAX`]) of process `pid`, its bytes one segment after the
/// other, in one system call. Returns the bytes written: fewer than the
/// segments' total means a segment could not be written.
pub fn process_vm_write_scatter(pid: pid_t, segs: &[(u64, usize)], buf: &[u8]) -> Result<usize> {
    let total = segments_total(segs, buf.len());
    let local = libc::iovec {
        iov_base: buf.as_ptr() as *mut c_void,
        iov_len: total,
    };
    let remote = remote_iovecs(segs);
    // SAFETY: the kernel only reads the first `total` bytes of our buffer
    // (checked by `segments_total`) and writes the remote process.
    let r =
        unsafe { libc::process_vm_writev(pid, &local, 1, remote.as_ptr(), remote.len() as _, 0) };
    check(r as c_long, || {
        format!(
            "write memory of process {pid} at {:#x}",
            segs.first().map_or(0, |s| s.0)
        )
    })?;
    Ok(r as usize)
}

/// The bytes `segs` cover, which must fit a local buffer of `len` bytes;
/// at most [`GATHER_MAX`] segments.
fn segments_total(segs: &[(u64, usize)], len: usize) -> usize {
    let total: usize = segs.iter().map(|s| s.1).sum();
    assert!(total <= len && segs.len() <= GATHER_MAX);
    total
}

/// `segs` as iovecs of another process's memory.
fn remote_iovecs(segs: &[(u64, usize)]) -> Vec<libc::iovec> {
    segs.iter()
        .map(|&(a, n)| libc::iovec {
            iov_base: a as *mut c_void,
            iov_len: n,
        })
        .collect()
}

pub fn process_vm_write(pid: pid_t, addr: u64, buf: &[u8]) -> Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the kernel only reads our buffer and writes the remote process.
    let r = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    check(r as c_long, || {
        format!("write memory of process {pid} at {addr:#x}")
    })?;
    Ok(r as usize)
}

/// kcmp(KCMP_FILE): do two fds of a process share one open file description?
pub fn same_file(pid: pid_t, fd1: i32, fd2: i32) -> Option<bool> {
    same_file_of(pid, fd1, pid, fd2)
}

/// kcmp(KCMP_FILE): is fd `fd1` of `pid1` the open file description of fd
/// `fd2` of `pid2`? None if the kernel cannot tell (a process gone, no
/// permission).
pub fn same_file_of(pid1: pid_t, fd1: i32, pid2: pid_t, fd2: i32) -> Option<bool> {
    // SAFETY: kcmp only compares kernel objects; no memory is passed.
    let r = unsafe {
        libc::syscall(libc::SYS_kcmp, pid1, pid2, 0 /* KCMP_FILE */, fd1, fd2)
    };
    (r >= 0).then_some(r == 0)
}

/// kcmp(KCMP_FS): do tasks `tid1` and `tid2` share one set of filesystem
/// attributes (working directory, root, umask)? None if the kernel cannot
/// tell (a task gone, no permission).
pub fn same_fs(tid1: pid_t, tid2: pid_t) -> Option<bool> {
    // SAFETY: kcmp only compares kernel objects; no memory is passed.
    let r = unsafe {
        libc::syscall(libc::SYS_kcmp, tid1, tid2, 3 /* KCMP_FS */, 0, 0)
    };
    (r >= 0).then_some(r == 0)
}

#[repr(C)]
#[derive(Default)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

/// fork() through clone3, optionally asking for a specific pid.
/// Returns 0 in the child.
pub fn fork_with_pid(pid: Option<pid_t>) -> std::io::Result<pid_t> {
    let tid = [pid.unwrap_or(0)];
    let mut a = CloneArgs {
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if pid.is_some() {
        a.set_tid = tid.as_ptr() as u64;
        a.set_tid_size = 1;
    }
    // SAFETY: clone3 without CLONE_VM behaves like fork(); `a` and `tid`
    // outlive the call. The caller handles the child side.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &a as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as pid_t)
    }
}

/// The kernel's release (one `uname` call: the capture of a stop names it
/// in the image's manifest while the process is frozen).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// This host's name in the caller's UTS namespace (one `uname` call).
pub fn hostname() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.nodename().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A pidfd for process `pid`.
pub fn pidfd_open(pid: pid_t) -> Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; on success it returns a new
    // fd that we own.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        return Err(crate::error::EngineError::NoProcess(pid));
    }
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r as i32) })
}

/// What an id names now (see [`task_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// A process: its thread group's leader.
    Leader,
    /// A thread that does not lead its group.
    Thread,
    /// Nothing any more.
    Gone,
    /// The kernel did not say (out of descriptors, say).
    Unknown,
}

/// Whether `id` names a process or another thread, in two system calls:
/// `pidfd_open` without `PIDFD_THREAD` refuses a thread that does not lead
/// its group (with `ENOENT` on this kernel, 6.18; `EINVAL` on older ones), where
/// reading its status to learn its group takes some 10–25 µs.
pub fn task_kind(id: pid_t) -> TaskKind {
    if id <= 0 {
        return TaskKind::Gone;
    }
    // SAFETY: pidfd_open takes a pid and flags; on success it returns a new
    // fd that we own and close at once.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, id, 0) };
    if r >= 0 {
        // SAFETY: the fd just returned, owned by nobody else.
        unsafe { libc::close(r as i32) };
        return TaskKind::Leader;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOENT | libc::EINVAL) => TaskKind::Thread,
        Some(libc::ESRCH) => TaskKind::Gone,
        _ => TaskKind::Unknown,
    }
}

/// A copy of fd `fd` of the process behind `pidfd` (the same open file).
pub fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_getfd takes a pidfd, an fd number and flags; on success
    // it returns a new fd that we own.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return Err(errno_err(format!("take a copy of fd {fd}")));
    }
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_told_leader_thread_or_gone() {
        assert_eq!(task_kind(std::process::id() as pid_t), TaskKind::Leader);
        let (tid, done_tx, t) = crate::image::tests_support::parked_thread();
        assert_eq!(task_kind(tid), TaskKind::Thread);
        drop(done_tx);
        t.join().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id() as pid_t;
        child.wait().unwrap();
        assert_eq!(task_kind(gone), TaskKind::Gone);
        assert_eq!(task_kind(0), TaskKind::Gone);
    }
}
