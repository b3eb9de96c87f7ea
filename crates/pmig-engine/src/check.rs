//! `pmig check`: does this kernel offer what the engine needs?
//! Every check tries the facility for real, in a throw-away child.

use crate::sys;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

#[derive(Debug, Clone)]
pub struct CheckResult {
    pub name: &'static str,
    pub ok: bool,
    /// Needed by the engine (a failure makes `pmig check` fail), or only by
    /// some features.
    pub required: bool,
    pub detail: String,
}

/// A child that just waits to be killed (when this is dropped).
pub(crate) struct Sleeper(pub(crate) libc::pid_t);

impl Sleeper {
    pub(crate) fn new() -> Option<Sleeper> {
        // SAFETY: the child only calls pause() and _exit(): async-signal-safe.
        match unsafe { libc::fork() } {
            0 => unsafe {
                loop {
                    libc::pause();
                }
            },
            p if p > 0 => Some(Sleeper(p)),
            _ => None,
        }
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        // SAFETY: killing and reaping our own child.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
        let _ = waitpid(Pid::from_raw(self.0), None);
    }
}

fn errno() -> String {
    std::io::Error::last_os_error().to_string()
}

fn check_ptrace() -> Result<String, String> {
    let s = Sleeper::new().ok_or("fork failed")?;
    let f = crate::ptrace::Frozen::freeze(s.0).map_err(|e| e.to_string())?;
    let regs = sys::get_regs(s.0).map_err(|e| e.to_string())?;
    let x = sys::get_xstate(s.0).map_err(|e| e.to_string())?;
    let mut b = [0u8; 8];
    sys::process_vm_read(s.0, regs.rsp, &mut b).map_err(|e| e.to_string())?;
    let _ = sys::rseq_config(s.0).map_err(|e| e.to_string())?;
    f.detach().map_err(|e| e.to_string())?;
    Ok(format!(
        "seize/interrupt, registers, {}-byte xsave area, process_vm_readv, rseq configuration",
        x.len()
    ))
}

fn check_seccomp_suspend() -> Result<String, String> {
    if crate::ptrace::can_suspend_seccomp() {
        Ok("PTRACE_O_SUSPEND_SECCOMP: processes with seccomp filters move".into())
    } else {
        Err("PTRACE_O_SUSPEND_SECCOMP refused (needs CAP_SYS_ADMIN, no seccomp mode of pmig's own, and a kernel with checkpoint/restore): processes with seccomp filters are refused".into())
    }
}

fn check_inject() -> Result<String, String> {
    let s = Sleeper::new().ok_or("fork failed")?;
    let mut f = crate::ptrace::Frozen::freeze(s.0).map_err(|e| e.to_string())?;
    let r = f
        .inject(0, libc::SYS_getpid, &[])
        .map_err(|e| e.to_string())?;
    f.detach().map_err(|e| e.to_string())?;
    if r as i32 == s.0 {
        Ok("a system call runs inside a stopped process".into())
    } else {
        Err(format!("injected getpid returned {r}"))
    }
}

fn check_pagemap() -> Result<String, String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/pagemap").map_err(|e| e.to_string())?;
    let v = [1u8; 1];
    let mut e = [0u8; 8];
    f.read_exact_at(&mut e, (v.as_ptr() as u64 / 4096) * 8)
        .map_err(|e| e.to_string())?;
    let e = u64::from_le_bytes(e);
    if e >> 63 == 0 {
        return Err("pagemap does not report present pages".into());
    }
    Ok("present/swap/file bits readable".into())
}

const PAGEMAP_SCAN: u64 = 0xc060_6610;

fn check_pagemap_scan() -> Result<String, String> {
    let f = std::fs::File::open("/proc/self/pagemap").map_err(|e| e.to_string())?;
    let buf = vec![0u8; 1 << 16];
    let mut regions = [0u64; 3 * 8];
    let start = buf.as_ptr() as u64 & !4095;
    let arg: [u64; 12] = [
        96,
        0,
        start,
        start + 4096,
        0,
        regions.as_mut_ptr() as u64,
        8,
        0,
        0,
        1 << 3,
        0,
        1 << 3,
    ];
    // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most 8 regions into `regions`.
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            PAGEMAP_SCAN as _,
            arg.as_ptr(),
        )
    };
    if r < 0 {
        return Err(format!("PAGEMAP_SCAN: {}", errno()));
    }
    Ok("PAGEMAP_SCAN ioctl available".into())
}

fn check_uffd() -> Result<String, String> {
    // SAFETY: creating a userfaultfd and closing it.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return Err(format!("userfaultfd: {}", errno()));
    }
    #[repr(C)]
    struct Api {
        api: u64,
        features: u64,
        ioctls: u64,
    }
    let mut a = Api {
        api: 0xaa,
        features: 0,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes `a`.
    let r = unsafe { libc::ioctl(fd as i32, 0xc018_aa3f_u64 as _, &mut a) };
    // SAFETY: closing the fd we created.
    unsafe { libc::close(fd as i32) };
    if r < 0 {
        return Err(format!("UFFDIO_API: {}", errno()));
    }
    let wp_async = a.features & (1 << 15) != 0;
    let wp = a.features & (1 << 0) != 0;
    if !wp_async || !wp {
        return Err(format!(
            "features {:#x} lack write-protect (async)",
            a.features
        ));
    }
    Ok(format!(
        "features {:#x} (missing-page faults, write-protect, WP_ASYNC)",
        a.features
    ))
}

fn check_pidfd() -> Result<String, String> {
    let s = Sleeper::new().ok_or("fork failed")?;
    // SAFETY: pidfd_open/pidfd_getfd on our own child; fds closed below.
    unsafe {
        let pfd = libc::syscall(libc::SYS_pidfd_open, s.0, 0);
        if pfd < 0 {
            return Err(format!("pidfd_open: {}", errno()));
        }
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pfd, 1, 0);
        let e = errno();
        libc::close(pfd as i32);
        if fd < 0 {
            return Err(format!("pidfd_getfd: {e}"));
        }
        libc::close(fd as i32);
    }
    Ok("pidfd_open and pidfd_getfd".into())
}

fn check_set_tid() -> Result<String, String> {
    // Find a pid that just became free, then ask for it.
    let pid = match sys::fork_with_pid(None).map_err(|e| e.to_string())? {
        // SAFETY: the child exits at once.
        0 => unsafe { libc::_exit(0) },
        p => p,
    };
    let _ = waitpid(Pid::from_raw(pid), None);
    match sys::fork_with_pid(Some(pid)) {
        // SAFETY: the child exits at once.
        Ok(0) => unsafe { libc::_exit(0) },
        Ok(p) => {
            let _ = waitpid(Pid::from_raw(p), None);
            if p == pid {
                Ok("a process can be created with a chosen pid".into())
            } else {
                Err(format!("asked for pid {pid}, got {p}"))
            }
        }
        Err(e) => Err(format!("clone3 with set_tid: {e}")),
    }
}

/// Run `f` in a forked child and report its exit code as the result.
fn in_child(f: fn() -> i32) -> i32 {
    // SAFETY: the child runs only raw system calls and _exit.
    match unsafe { libc::fork() } {
        0 => unsafe { libc::_exit(f()) },
        p if p > 0 => match waitpid(Pid::from_raw(p), None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => c,
            _ => 255,
        },
        _ => 255,
    }
}

fn check_mm_map() -> Result<String, String> {
    let code = in_child(|| {
        let mut size: u32 = 0;
        // SAFETY: PR_SET_MM_MAP_SIZE writes the struct size into `size`.
        let r = unsafe { libc::prctl(libc::PR_SET_MM, 15, &mut size as *mut u32, 0, 0) };
        if r < 0 || size == 0 {
            1
        } else {
            0
        }
    });
    if code == 0 {
        Ok("PR_SET_MM_MAP available".into())
    } else {
        Err("prctl(PR_SET_MM, PR_SET_MM_MAP) unavailable (kernel without CONFIG_CHECKPOINT_RESTORE?)".into())
    }
}

fn check_vdso() -> Result<String, String> {
    let code = in_child(|| {
        // With a vDSO mapped already, a kernel that supports the call says EEXIST.
        // SAFETY: arch_prctl with an integer argument.
        let r = unsafe { libc::syscall(libc::SYS_arch_prctl, 0x2003, 0x1000_0000u64) };
        // SAFETY: reading errno.
        let e = unsafe { *libc::__errno_location() };
        if r < 0 && e == libc::EEXIST {
            0
        } else {
            1
        }
    });
    if code == 0 {
        Ok("ARCH_MAP_VDSO_64 available".into())
    } else {
        Err("arch_prctl(ARCH_MAP_VDSO_64) unavailable".into())
    }
}

fn check_kcmp() -> Result<String, String> {
    match sys::same_file(std::process::id() as i32, 0, 0) {
        Some(true) => Ok("kcmp(KCMP_FILE) available".into()),
        _ => Err(format!("kcmp: {}", errno())),
    }
}

fn check_tool(tool: &'static str) -> Result<String, String> {
    match std::process::Command::new(tool).arg("-V").output() {
        Ok(_) => Ok(format!("{tool} found")),
        Err(e) => Err(format!("{tool}: {e}")),
    }
}

/// Unix socket diagnostics, by which the capture tells which socket of a
/// process is whose peer (`socketpairs`): without them a unix socket pair
/// is refused like any socket.
fn check_unix_diag() -> Result<String, String> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut fds = [0i32; 2];
    // SAFETY: socketpair writes two fds into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } < 0
    {
        return Err(format!("socketpair: {}", errno()));
    }
    // SAFETY: both fds are fresh and ours.
    let (a, b) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let ino = |fd: &std::os::fd::OwnedFd| {
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .unwrap_or(0)
    };
    match crate::resources::socketpairs::diag(ino(&a)) {
        Some(d) if d.peer == Some(ino(&b)) => {
            Ok("sock_diag names a unix socket's peer: unix socket pairs move".into())
        }
        _ => Err("sock_diag for unix sockets unavailable (CONFIG_UNIX_DIAG): unix socket pairs are refused".into()),
    }
}

type Check = (&'static str, bool, Box<dyn Fn() -> Result<String, String>>);

/// What an image captured here records of this CPU (part `cpu`): another
/// node takes it only with the same features, or more.
fn check_cpu() -> Result<String, String> {
    use crate::resources::cpu::{CpuState, FEATURES};
    let c = CpuState::here();
    let empty = CpuState {
        words: vec![],
        ..c.clone()
    };
    let has = c.missing_on(&empty);
    let level = |names: &[&str]| names.iter().all(|n| has.contains(n));
    let x86 = if level(&["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"]) {
        "x86-64-v4"
    } else if level(&["avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe"]) {
        "x86-64-v3"
    } else if level(&[
        "cx16", "lahf_lm", "popcnt", "sse3", "sse4_1", "sse4_2", "ssse3",
    ]) {
        "x86-64-v2"
    } else {
        "x86-64"
    };
    Ok(format!(
        "{} family {} model {}, {x86}, {} of the {} features pmig compares, {}-byte xsave area",
        c.vendor,
        c.family,
        c.model,
        has.len(),
        FEATURES.len(),
        c.xsave_size()
    ))
}

pub fn run_checks() -> Vec<CheckResult> {
    let list: Vec<Check> = vec![
        ("ptrace", true, Box::new(check_ptrace)),
        ("syscall injection", true, Box::new(check_inject)),
        ("pagemap", true, Box::new(check_pagemap)),
        ("clone3 set_tid", true, Box::new(check_set_tid)),
        ("PR_SET_MM_MAP", true, Box::new(check_mm_map)),
        ("vDSO remap", true, Box::new(check_vdso)),
        ("kcmp", true, Box::new(check_kcmp)),
        ("PAGEMAP_SCAN", false, Box::new(check_pagemap_scan)),
        ("userfaultfd", false, Box::new(check_uffd)),
        ("pidfd", false, Box::new(check_pidfd)),
        ("seccomp suspension", false, Box::new(check_seccomp_suspend)),
        ("unix socket diagnostics", false, Box::new(check_unix_diag)),
        ("CPU", false, Box::new(check_cpu)),
        ("ip (cluster)", false, Box::new(|| check_tool("ip"))),
        ("tc (cluster)", false, Box::new(|| check_tool("tc"))),
    ];
    list.into_iter()
        .map(|(name, required, f)| {
            let r = f();
            CheckResult {
                name,
                ok: r.is_ok(),
                required,
                detail: r.unwrap_or_else(|e| e),
            }
        })
        .collect()
}
