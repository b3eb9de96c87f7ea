//! Post-copy on one machine, without the network: the source is frozen, the
//! destination resumes at once with only registers, state and the pages the
//! restore itself touches; every other page comes later, on fault or pushed
//! in the background, straight from the frozen source. The workload keeps a
//! running sum of its memory and verifies it at the end.

use pmig_engine::lazy::{handover_pages, LazyMemory};
use pmig_engine::ptrace::Frozen;
use pmig_engine::resources::memory::Backing;
use pmig_tests::{serial, start_dirtier, Guard, HEAVY};
use std::sync::atomic::{AtomicBool, Ordering};

fn read_src(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let n = pmig_engine::sys::process_vm_read(pid, addr, &mut b).expect("read the frozen source");
    assert_eq!(n, len);
    b
}

// Every test here restores in this process, at an area chosen free in this
// process's address space and then mapped (MAP_FIXED_NOREPLACE): a test
// running beside it may map memory there in between (seen once: "map the
// restorer area …: File exists"). So they take turns (HEAVY).

#[test]
fn postcopy_resumes_first_then_pages_follow() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let mut child = start_dirtier(40000, &mut guard);
    let src = child.id() as i32;

    // Handover: state and a handful of pages only.
    let mut frozen = Frozen::freeze(src).unwrap();
    let keep = handover_pages(&frozen).unwrap();
    let stage = tempfile::tempdir().unwrap();
    let mut w = pmig_image::ImageWriter::create(stage.path()).unwrap();
    let keep_fn = |p: u64| keep.contains(&p);
    let pi = pmig_engine::dump::capture_filtered(&mut frozen, &mut w, Some(&keep_fn)).unwrap();
    pi.write_parts(&mut w).unwrap();
    w.finish(pmig_engine::dump::manifest_for(src)).unwrap();
    let anon_sent: u64 = pi
        .memory
        .vmas
        .iter()
        .filter(|v| v.backing == Backing::Anon)
        .map(|v| v.bytes_in_image())
        .sum();
    assert!(
        anon_sent < 1 << 20,
        "the handover sent {anon_sent} bytes of anonymous memory"
    );

    let outdir = tempfile::tempdir().unwrap();
    let outfile = outdir.path().join("out.txt");
    let opts = pmig_engine::RestoreOptions {
        stdio: [None, Some(outfile.clone()), None],
        pidfile: None,
        lazy: true,
        skeleton: false,
        cpu_check: Default::default(),
    };
    let r = pmig_engine::restore(stage.path(), &opts).expect("lazy restore");
    guard.track_pid(r.pid);
    let owed: Vec<(u64, u64)> = pi
        .memory
        .vmas
        .iter()
        .filter(|v| v.backing == Backing::Anon)
        .flat_map(|v| v.owed())
        .collect();
    let registered = pi
        .memory
        .vmas
        .iter()
        .filter(|v| v.backing == Backing::Anon && v.owes_pages())
        .map(|v| (v.start, v.len()))
        .collect();
    let owed_pages: u64 = owed.iter().map(|r| r.1 / 4096).sum();
    assert!(
        owed_pages >= 16384,
        "64 MiB must be owed, got {owed_pages} pages"
    );
    let lm = LazyMemory::new(r.uffd.expect("a userfaultfd"), &owed, registered);

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Faults first: each one asks for its page, read from the source.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if lm.wait(20) {
                    for p in lm.handle_events().unwrap().ask {
                        lm.install(p, &read_src(src, p, 4096)).unwrap();
                    }
                }
            }
        });
        // The background push, in address order, 64 pages at a time.
        let list = lm.owed_list();
        for chunk in list.chunks(64) {
            let (a, b) = (chunk[0], *chunk.last().unwrap());
            if b - a == (chunk.len() as u64 - 1) * 4096 {
                lm.install(a, &read_src(src, a, chunk.len() * 4096))
                    .unwrap();
            } else {
                for &p in chunk {
                    lm.install(p, &read_src(src, p, 4096)).unwrap();
                }
            }
        }
        for _ in 0..10_000 {
            if lm.owed_pages() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(lm.owed_pages(), 0, "pages still owed after the push");
    let stats = lm.stats();
    assert_eq!(
        stats.installed_pages + stats.dropped_pages,
        owed_pages,
        "every owed page installed or released: {stats:?}"
    );
    lm.finish_in_process(r.pid, r.uffd_fd_in_process.unwrap())
        .unwrap();
    // The residual dependency has ended: the source can go.
    frozen.kill().unwrap();
    let _ = child.wait();
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", r.pid))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|p| p.display().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !fds.iter().any(|f| f.contains("userfaultfd")),
        "the process still holds a userfaultfd: {fds:?}"
    );

    let mut status = 0;
    // SAFETY: waiting for our own child (the restored process).
    let w = unsafe { libc::waitpid(r.pid, &mut status, 0) };
    assert_eq!(w, r.pid);
    let text = std::fs::read_to_string(&outfile).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "restored workload failed: {text}"
    );
    assert!(text.contains("verify=ok"), "workload output: {text}");
    eprintln!("post-copy: {stats:?}");
}

/// The dirtier, frozen after a handover capture and restored lazily here:
/// nothing is installed yet.
struct LazyDirtier {
    child: std::process::Child,
    src: i32,
    frozen: Frozen,
    pid: i32,
    uffd_in_process: i32,
    lm: LazyMemory,
    outfile: std::path::PathBuf,
    _outdir: tempfile::TempDir,
    _guard: Guard,
}

impl LazyDirtier {
    fn new() -> LazyDirtier {
        let mut guard = Guard::new();
        let child = start_dirtier(40000, &mut guard);
        let src = child.id() as i32;
        let (frozen, pi, stage) = capture_handover(src);
        let outdir = tempfile::tempdir().unwrap();
        let outfile = outdir.path().join("out.txt");
        let r =
            pmig_engine::restore(stage.path(), &lazy_to(outfile.clone())).expect("lazy restore");
        guard.track_pid(r.pid);
        let (owed, registered) = owed_and_registered(&pi);
        let lm = LazyMemory::new(r.uffd.expect("a userfaultfd"), &owed, registered);
        LazyDirtier {
            child,
            src,
            frozen,
            pid: r.pid,
            uffd_in_process: r.uffd_fd_in_process.unwrap(),
            lm,
            outfile,
            _outdir: outdir,
            _guard: guard,
        }
    }

    /// Installs every page still owed, as a push would, and waits (bounded)
    /// until nothing is owed.
    fn install_the_rest(&self) {
        for p in self.lm.owed_list() {
            self.lm.install(p, &read_src(self.src, p, 4096)).unwrap();
        }
        for _ in 0..10_000 {
            if self.lm.owed_pages() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Once every page is installed: ends the lazy restore and the frozen
    /// original; the restored dirtier must finish and verify its memory.
    fn finish(mut self) {
        self.lm
            .finish_in_process(self.pid, self.uffd_in_process)
            .unwrap();
        self.frozen.kill().unwrap();
        let _ = self.child.wait();
        let status = exit_status(self.pid, 30_000).expect("the restored program did not finish");
        let text = std::fs::read_to_string(&self.outfile).unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 && text.contains("verify=ok"),
            "status {status:#x}, output {text:?}"
        );
    }
}

/// ampom's predictions: a page asked for as a prediction and then faulted
/// on is handed back once, as a page to ask for again (a source answers
/// predictions after faults), never as a new request.
#[test]
fn a_fault_on_a_predicted_page_asks_for_it_again_once() {
    let _g = serial(&HEAVY);
    let d = LazyDirtier::new();
    let (src, lm) = (d.src, &d.lm);
    // Every owed page predicted, none answered yet.
    let list = lm.owed_list();
    assert_eq!(lm.prefetch(&list).len(), list.len());
    assert!(lm.prefetch(&list).is_empty(), "a page predicted twice");

    let stop = AtomicBool::new(false);
    let promoted = std::sync::Mutex::new(Vec::new());
    let asked = std::sync::Mutex::new(Vec::<u64>::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if lm.wait(20) {
                    let h = lm.handle_events().unwrap();
                    asked.lock().unwrap().extend(&h.ask);
                    for &p in &h.promote {
                        lm.install(p, &read_src(src, p, 4096)).unwrap();
                    }
                    promoted.lock().unwrap().extend(h.promote);
                }
            }
        });
        // Faults only, until a few dozen pages have been asked for again.
        for _ in 0..10_000 {
            if promoted.lock().unwrap().len() >= 64 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Then the rest, as a push would.
        d.install_the_rest();
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(lm.owed_pages(), 0, "pages still owed after the push");
    let promoted = promoted.into_inner().unwrap();
    assert!(
        promoted.len() >= 64,
        "faults on predicted pages asked again for {} pages",
        promoted.len()
    );
    let once: std::collections::HashSet<u64> = promoted.iter().copied().collect();
    assert_eq!(once.len(), promoted.len(), "a page asked for again twice");
    let asked = asked.into_inner().unwrap();
    assert!(
        asked.is_empty(),
        "predicted pages asked for as new requests: {asked:x?}"
    );
    d.finish();
}

/// A page a fault waits for is handed back to ask for again once it has
/// waited the time given since it was last asked for, and no longer once
/// it is here.
#[test]
fn a_page_a_fault_waits_for_too_long_is_asked_for_again() {
    let _g = serial(&HEAVY);
    let d = LazyDirtier::new();
    let (src, lm) = (d.src, &d.lm);
    let hour = std::time::Duration::from_secs(3600);
    assert!(
        lm.overdue(std::time::Duration::ZERO).is_empty(),
        "no fault yet"
    );

    let stop = AtomicBool::new(false);
    // The first page asked for is withheld; every other is answered.
    let withheld = std::sync::Mutex::new(None::<u64>);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if lm.wait(20) {
                    for p in lm.handle_events().unwrap().ask {
                        let mut w = withheld.lock().unwrap();
                        if w.is_none() {
                            *w = Some(p);
                            continue;
                        }
                        lm.install(p, &read_src(src, p, 4096)).unwrap();
                    }
                }
            }
        });
        let mut page = None;
        for _ in 0..10_000 {
            page = *withheld.lock().unwrap();
            if page.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let page = page.expect("no fault in 10 s");
        assert!(lm.overdue(hour).is_empty());
        assert!(lm.overdue(std::time::Duration::ZERO).contains(&page));
        // Just asked for again: due only once the time has passed again.
        assert!(lm.overdue(hour).is_empty());
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert!(lm
            .overdue(std::time::Duration::from_millis(50))
            .contains(&page));
        lm.install(page, &read_src(src, page, 4096)).unwrap();
        assert!(!lm.overdue(std::time::Duration::ZERO).contains(&page));
        d.install_the_rest();
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(lm.owed_pages(), 0, "pages still owed");
    assert!(lm.stats().asked_again >= 2, "{:?}", lm.stats());
    d.finish();
}

/// Builds the C program `source` as `name` in a new directory and starts
/// it, tracked by `guard`, reading its stdout up to its READY line; returns
/// the directory, the child and its pid.
fn start_c(
    name: &str,
    source: &str,
    guard: &mut Guard,
) -> (tempfile::TempDir, std::process::Child, i32) {
    let (dir, child, pid, _out) = start_c_with(name, source, &[], guard);
    (dir, child, pid)
}

/// [`start_c`] with arguments (`{dir}` in one stands for the new
/// directory); also returns the reader of its stdout, past READY.
fn start_c_with(
    name: &str,
    source: &str,
    args: &[&str],
    guard: &mut Guard,
) -> (
    tempfile::TempDir,
    std::process::Child,
    i32,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let dir = tempfile::tempdir().unwrap();
    let src_c = dir.path().join(format!("{name}.c"));
    let bin = dir.path().join(name);
    std::fs::write(&src_c, source).unwrap();
    let built = std::process::Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&bin)
        .arg(&src_c)
        .status()
        .expect("run cc");
    assert!(built.success(), "cc failed");
    let mut child = std::process::Command::new(&bin)
        .args(
            args.iter()
                .map(|a| a.replace("{dir}", &dir.path().to_string_lossy())),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    guard.track_pid(pid);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("READY"), "{name}: {line}");
    (dir, child, pid, out)
}

/// Freezes `src` and captures it with the handover pages only, as post-copy
/// does, into a new directory: the frozen source, its image and the
/// directory.
fn capture_handover(src: i32) -> (Frozen, pmig_engine::image::ProcessImage, tempfile::TempDir) {
    let (frozen, pi, stage, _) = capture_handover_keeping(src, &Default::default());
    (frozen, pi, stage)
}

/// [`capture_handover`] keeping `also` besides the handover pages (a
/// skeleton's stop keeps the pages its first capture kept); also returns
/// the pages kept.
fn capture_handover_keeping(
    src: i32,
    also: &std::collections::HashSet<u64>,
) -> (
    Frozen,
    pmig_engine::image::ProcessImage,
    tempfile::TempDir,
    std::collections::HashSet<u64>,
) {
    let mut frozen = Frozen::freeze(src).unwrap();
    let mut keep = handover_pages(&frozen).unwrap();
    keep.extend(also);
    let stage = tempfile::tempdir().unwrap();
    let mut w = pmig_image::ImageWriter::create(stage.path()).unwrap();
    let keep_fn = |p: u64| keep.contains(&p);
    let pi = pmig_engine::dump::capture_filtered(&mut frozen, &mut w, Some(&keep_fn)).unwrap();
    pi.write_parts(&mut w).unwrap();
    w.finish(pmig_engine::dump::manifest_for(src)).unwrap();
    (frozen, pi, stage, keep)
}

/// Address ranges: (start, length).
type Ranges = Vec<(u64, u64)>;

/// The pages a lazy restore of `pi` owes, and the ranges it registers.
fn owed_and_registered(pi: &pmig_engine::image::ProcessImage) -> (Ranges, Ranges) {
    let anon = || pi.memory.vmas.iter().filter(|v| v.backing == Backing::Anon);
    (
        anon().flat_map(|v| v.owed()).collect(),
        anon()
            .filter(|v| v.owes_pages())
            .map(|v| (v.start, v.len()))
            .collect(),
    )
}

/// A lazy restore's options, the process's stdout going to `out`.
fn lazy_to(out: std::path::PathBuf) -> pmig_engine::RestoreOptions {
    pmig_engine::RestoreOptions {
        stdio: [None, Some(out), None],
        pidfile: None,
        lazy: true,
        skeleton: false,
        cpu_check: Default::default(),
    }
}

/// The wait status of our child `pid` once it has exited, polled every
/// millisecond at most `polls` times; None if it has not exited by then.
fn exit_status(pid: i32, polls: u32) -> Option<i32> {
    let mut status = 0;
    (0..polls)
        .any(|_| {
            // SAFETY: waiting for our own child (a restored process).
            let w = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            w == pid || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                false
            }
        })
        .then_some(status)
}

/// Whether our child `pid` ended within about `polls` ms: `Some(Some(status))`
/// reaped here, `Some(None)` gone, reaped by another thread of this process
/// (a tracer's wait), `None` still there.
fn ended(pid: i32, polls: u32) -> Option<Option<i32>> {
    let mut status = 0;
    for _ in 0..polls {
        // SAFETY: waiting for our own child (a restored process).
        let w = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if w == pid {
            return Some(Some(status));
        }
        if w < 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Some(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}

/// A program that fills 8 MiB of anonymous memory, says READY, and on
/// SIGUSR1 unmaps it and says so before it exits.
const UNMAPPER: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
static volatile sig_atomic_t go;
static void on_usr1(int s) { (void)s; go = 1; }
int main(void) {
    size_t n = 8 << 20;
    char *a = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return 3;
    memset(a, 7, n);
    sigset_t usr1, none;
    sigemptyset(&usr1);
    sigemptyset(&none);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, 0);
    signal(SIGUSR1, on_usr1);
    printf("READY\n");
    fflush(stdout);
    while (!go) sigsuspend(&none);
    if (munmap(a, n)) return 2;
    printf("unmapped\n");
    fflush(stdout);
    return 0;
}
"#;

/// The end of a lazy restore while a thread of the process unmaps memory
/// still registered with the userfaultfd: that thread waits in the kernel
/// until its unmap event is read, and cannot be stopped meanwhile. Closing
/// the process's userfaultfd must read the event (and so let it go) rather
/// than wait for it to stop (which, before the fix, hung for ever).
#[test]
fn the_end_of_a_lazy_restore_lets_a_thread_unmapping_registered_memory_go() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let (dir, mut child, src) = start_c("unmapper", UNMAPPER, &mut guard);

    let (frozen, pi, stage) = capture_handover(src);
    let outfile = dir.path().join("out.txt");
    let opts = lazy_to(outfile.clone());
    let r = pmig_engine::restore(stage.path(), &opts).expect("lazy restore");
    guard.track_pid(r.pid);
    let (owed, registered) = owed_and_registered(&pi);
    assert!(
        registered.iter().any(|r| r.1 >= 8 << 20),
        "the 8 MiB are not registered: {registered:?}"
    );
    let lm = LazyMemory::new(r.uffd.expect("a userfaultfd"), &owed, registered);
    // Every page in, before the process runs anything: no fault to serve.
    for p in lm.owed_list() {
        lm.install(p, &read_src(src, p, 4096)).unwrap();
    }
    assert_eq!(lm.owed_pages(), 0);
    frozen.kill().unwrap();
    let _ = child.wait();

    // SAFETY: signalling the process this test restored.
    assert_eq!(unsafe { libc::kill(r.pid, libc::SIGUSR1) }, 0);
    // Bounded: until it waits in munmap for its event to be read.
    let waiting = (0..10_000).any(|_| {
        let st = std::fs::read_to_string(format!("/proc/{}/stat", r.pid)).unwrap_or_default();
        let wchan = std::fs::read_to_string(format!("/proc/{}/wchan", r.pid)).unwrap_or_default();
        let d = st
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('D'));
        d && wchan.contains("userfaultfd") || {
            std::thread::sleep(std::time::Duration::from_millis(1));
            false
        }
    });
    assert!(waiting, "the process never waited for its unmap event");

    lm.finish_in_process(r.pid, r.uffd_fd_in_process.unwrap())
        .expect("the userfaultfd closed while a thread unmapped registered memory");
    // The close is injected under ptrace by a thread of this process, so a
    // process caught on its way out is reaped by that thread's wait (the
    // tracer's), not by ours: then its end shows as gone, with its output.
    let text = || std::fs::read_to_string(&outfile).unwrap_or_default();
    match ended(r.pid, 10_000) {
        Some(Some(status)) => assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x}, output {:?}",
            text()
        ),
        Some(None) => {}
        None => panic!(
            "the process did not exit after its munmap: stat {:?}, output {:?}",
            std::fs::read_to_string(format!("/proc/{}/stat", r.pid)).unwrap_or_default(),
            text()
        ),
    }
    assert_eq!(text(), "unmapped\n");
}

/// Pages that arrive after the restored process has exited have nowhere to
/// go and are owed no more: installing them is no error (a post-copy whose
/// program ends early must not report it lost).
#[test]
fn pages_for_a_process_that_exited_are_dropped_not_an_error() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let (dir, mut child, src) = start_c("unmapper", UNMAPPER, &mut guard);

    let (frozen, pi, stage) = capture_handover(src);
    let opts = lazy_to(dir.path().join("out.txt"));
    let r = pmig_engine::restore(stage.path(), &opts).expect("lazy restore");
    guard.track_pid(r.pid);
    let (owed, registered) = owed_and_registered(&pi);
    let lm = LazyMemory::new(r.uffd.expect("a userfaultfd"), &owed, registered);
    let list = lm.owed_list();
    let n = list.len() as u64;
    assert!(n >= 2048, "8 MiB must be owed, got {n} pages");
    // Half of them in, then the process is killed and reaped.
    for &p in &list[..list.len() / 2] {
        lm.install(p, &read_src(src, p, 4096)).unwrap();
    }
    let page = list[list.len() / 2];
    let data = read_src(src, page, 4096);
    frozen.kill().unwrap();
    let _ = child.wait();
    // SAFETY: killing and reaping the process this test restored.
    unsafe { libc::kill(r.pid, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::waitpid(r.pid, &mut status, 0) }, r.pid);
    assert_eq!(
        lm.install(page, &data)
            .expect("a page for an exited process"),
        0
    );
    assert_eq!(lm.owed_pages(), 0, "pages still owed to an exited process");
    let st = lm.stats();
    assert_eq!(st.installed_pages + st.dropped_pages, n, "{st:?}");
}

/// A program with a 1 ms interval timer that waits for 2000 of its ticks
/// over 8 MiB of its own memory, then says so.
const TICKER: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
static volatile sig_atomic_t ticks;
static void on_alrm(int s) { (void)s; ticks++; }
int main(void) {
    size_t n = 8 << 20;
    char *a = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return 3;
    memset(a, 5, n);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, 0);
    printf("READY\n");
    fflush(stdout);
    while (ticks < 2000) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, 0);
    }
    for (size_t i = 0; i < n; i += 4096)
        if (a[i] != 5) return 4;
    printf("ticked\n");
    fflush(stdout);
    return 0;
}
"#;

/// A restore held stopped (stop-copy fills the memory before the process
/// runs) while the process's interval timer, armed again by the restore,
/// keeps firing: its signal must wait for the process to run, not stop the
/// call injected after the release (that failed every stop-copy of a
/// program with a 10 ms timer: "got SIGALRM during an injected system
/// call").
#[test]
fn a_held_restore_lets_a_fast_timer_fire_only_once_the_process_runs() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let (dir, mut child, src) = start_c("ticker", TICKER, &mut guard);

    let (frozen, pi, stage) = capture_handover(src);
    let (owed, registered) = owed_and_registered(&pi);
    let outfile = dir.path().join("out.txt");
    let opts = lazy_to(outfile.clone());
    let mut release = |r: &pmig_engine::Restored| -> pmig_engine::Result<()> {
        // Held longer than many periods of its timer.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let fd = r.uffd.as_ref().expect("a userfaultfd").try_clone().unwrap();
        let lm = LazyMemory::new(fd, &owed, registered.clone());
        for p in lm.owed_list() {
            lm.install(p, &read_src(src, p, 4096))?;
        }
        assert_eq!(lm.owed_pages(), 0);
        lm.finish();
        Ok(())
    };
    let r = pmig_engine::restore_held(stage.path(), &opts, Some(&mut release))
        .expect("a held restore of a process with a fast timer");
    guard.track_pid(r.pid);
    frozen.kill().unwrap();
    let _ = child.wait();
    let status = exit_status(r.pid, 30_000).expect("the restored ticker did not finish");
    let text = std::fs::read_to_string(&outfile).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status:#x}, output {text:?}"
    );
    assert_eq!(text, "ticked\n");
}

/// Fills 8 MiB, says READY and, on SIGUSR1, replaces itself with itself in
/// `after` mode, which opens /dev/null on every free fd up to 511 and waits.
const EXECER: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static volatile sig_atomic_t go;
static void on_usr1(int s) { (void)s; go = 1; }
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "after")) {
        while (open("/dev/null", O_RDONLY) < 511) {}
        for (;;) pause();
    }
    size_t n = 8 << 20;
    char *a = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return 3;
    memset(a, 7, n);
    sigset_t usr1, none;
    sigemptyset(&usr1);
    sigemptyset(&none);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, 0);
    signal(SIGUSR1, on_usr1);
    printf("READY\n");
    fflush(stdout);
    while (!go) sigsuspend(&none);
    sigprocmask(SIG_UNBLOCK, &usr1, 0);
    execl("/proc/self/exe", argv[0], "after", (char *)0);
    return 5;
}
"#;

/// A process that replaced its program while pages were owed no longer
/// holds the userfaultfd (opened close-on-exec), and its number may name
/// another file of the new program: the end of the lazy restore must leave
/// that file open.
#[test]
fn the_end_of_a_lazy_restore_leaves_a_new_programs_files_alone() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let (dir, mut child, src) = start_c("execer", EXECER, &mut guard);

    let (frozen, pi, stage) = capture_handover(src);
    let opts = lazy_to(dir.path().join("out.txt"));
    let r = pmig_engine::restore(stage.path(), &opts).expect("lazy restore");
    guard.track_pid(r.pid);
    let (owed, registered) = owed_and_registered(&pi);
    let lm = LazyMemory::new(r.uffd.expect("a userfaultfd"), &owed, registered);
    for p in lm.owed_list() {
        lm.install(p, &read_src(src, p, 4096)).unwrap();
    }
    frozen.kill().unwrap();
    let _ = child.wait();
    let fd = r.uffd_fd_in_process.unwrap();
    assert!(fd < 511, "the userfaultfd is fd {fd}");
    let link = format!("/proc/{}/fd/{fd}", r.pid);
    // SAFETY: signalling the process this test restored.
    assert_eq!(unsafe { libc::kill(r.pid, libc::SIGUSR1) }, 0);
    // Bounded: until the new program has opened its files.
    let reopened = (0..10_000).any(|_| {
        std::fs::read_link(&link).is_ok_and(|l| l.as_os_str() == "/dev/null")
            && std::fs::read_link(format!("/proc/{}/fd/511", r.pid)).is_ok()
            || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                false
            }
    });
    assert!(reopened, "the new program did not open fd {fd}");
    lm.finish_in_process(r.pid, fd).unwrap();
    assert_eq!(
        std::fs::read_link(&link)
            .ok()
            .map(|l| l.display().to_string()),
        Some("/dev/null".to_string()),
        "fd {fd} of the new program was closed"
    );
}

/// Changes between the two captures of a skeleton migration: on its first
/// SIGUSR2 it writes on (its file's offset moves), raises a blocked SIGUSR1
/// (pending), arms a 60 s interval timer and rewrites a byte of every page
/// of 4 MiB. Then, as its second argument says, it changes its memory's
/// layout as an allocator does (a skeleton follows): `map` maps and fills
/// 1 MiB more, `heap` moves its program break 2 MiB up and fills that,
/// `unmap` unmaps 1 MiB it mapped before, `protect` makes half of a 64 KiB
/// mapping read-only, `noreserve` maps and fills 1 MiB with `MAP_NORESERVE`
/// (as glibc maps a new heap of an arena), `endthread` lets a thread it
/// started before READY end (it writes a word first) and joins it, `attrs`
/// gives itself an alternate signal stack, a new name and a timer slack,
/// `action` gives SIGHUP a handler,
/// `newthread` starts a thread that waits (and at the end is let go, and
/// writes a word, and is joined),
/// `wx` writes 8 KiB of a read-only mapping it never touched before, made
/// writable for that and read-only again, as a JIT does (the first capture
/// saw no page there), `files` closes, opens, copies and flags descriptors
/// and changes its working directory and umask, `file` maps its data file
/// read-only, privately written and shared written, `renoreserve` maps the
/// 1 MiB it mapped before again, alike but with `MAP_NORESERVE` (a flag no
/// call changes in place), `refile` maps its data file over a page of
/// anonymous memory, `tempfile` closes a file that is gone (deleted
/// before the skeleton was made) and opens the next one under its number,
/// `tempghost` the same with a file it deleted itself before the first
/// capture (which takes it as a deleted file, made again in the skeleton),
/// `ghostpos` writes on to a file it deleted before the first capture,
/// `ghostcame` to one it deletes after it (a deleted file the skeleton
/// did not have);
/// or it makes a change a skeleton cannot follow:
/// `shared` maps shared anonymous memory. It says STEP, and
/// on its second SIGUSR2 checks all of it and says PASS, or FAIL and why.
const CHANGER: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
static volatile sig_atomic_t step;
static char alt[65536];
static void on_usr2(int s) { (void)s; step++; }
static void on_hup(int s) { (void)s; }
static sem_t go;
static volatile int thread_wrote;
static void *waiter(void *x) {
    while (sem_wait(&go)) {}
    thread_wrote = x ? *(int *)x : 0;
    return 0;
}
/* The number of threads the kernel lists for this process. */
static int threads_now(void) {
    char line[256];
    int n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
    if (f) fclose(f);
    return n;
}
/* Whether the mapping that starts at p has flag `nr` (MAP_NORESERVE). */
static int noreserve(const void *p) {
    char line[512], want[64];
    snprintf(want, sizeof want, "%lx-", (unsigned long)p);
    FILE *m = fopen("/proc/self/smaps", "r");
    int in = 0, nr = 0;
    while (m && fgets(line, sizeof line, m)) {
        if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && line[0] != 'V')
            in = !strncmp(line, want, strlen(want));
        else if (in && !strncmp(line, "VmFlags:", 8))
            nr = strstr(line, " nr") != 0;
    }
    if (m) fclose(m);
    return nr;
}
int main(int argc, char **argv) {
    size_t n = 4 << 20;
    unsigned char *a = malloc(n);
    if (!a) return 3;
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7);
    char path[4096];
    snprintf(path, sizeof path, "%s/data", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "0123456789", 10) != 10) return 4;
    const char *change = argc > 2 ? argv[2] : "";
    unsigned char *gone = mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *half = mmap(0, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (gone == MAP_FAILED || half == MAP_FAILED) return 3;
    memset(gone, 1, 1 << 20);
    memset(half, 2, 64 << 10);
    unsigned char *ro = mmap(0, 64 << 10, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ro == MAP_FAILED) return 3;
    /* "files": one descriptor to close, one to make a copy of fd, one to
       give other flags. */
    int closed_fd = -1, swapped = -1, flagged = -1, fresh = -1;
    if (!strcmp(change, "files")) {
        closed_fd = open(path, O_RDONLY);
        swapped = open(path, O_RDONLY);
        flagged = open(path, O_RDONLY);
        if (closed_fd < 0 || swapped < 0 || flagged < 0) return 3;
    }
    /* "tempfile": a file open at the first capture and gone (the test
       deletes it) before the skeleton is made; the change closes it and
       opens the next one under the same number, as a program moving on
       to its next temporary file does. */
    int tfd = -1;
    char tpath[4096], tnext[4096];
    snprintf(tpath, sizeof tpath, "%s/temp", argv[1]);
    snprintf(tnext, sizeof tnext, "%s/temp2", argv[1]);
    /* "tempghost": the same, but the program deletes the file itself
       before the first capture, which takes it as a deleted file. */
    int temp = !strcmp(change, "tempfile") || !strcmp(change, "tempghost");
    /* "ghostpos": a file it deleted before the first capture and writes
       on after it: the offset and bytes of the stop. "ghostcame": the
       same file deleted after the first capture only. */
    int ghostcame = !strcmp(change, "ghostcame");
    int ghostpos = ghostcame || !strcmp(change, "ghostpos");
    if (ghostpos) {
        tfd = open(tpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (tfd < 0 || write(tfd, "old", 3) != 3 || (!ghostcame && unlink(tpath))) return 3;
    }
    if (temp) {
        tfd = open(tpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (tfd < 0 || write(tfd, "old", 3) != 3) return 3;
        if (!strcmp(change, "tempghost") && unlink(tpath)) return 3;
    }
    pthread_t th;
    static int answer = 42;
    sem_init(&go, 0, 0);
    if (!strcmp(change, "endthread") && pthread_create(&th, 0, waiter, &answer)) return 3;
    /* SIGUSR1 stays blocked throughout, its waits included: once raised
       it must be pending at the end. */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, 0);
    signal(SIGUSR2, on_usr2);
    printf("READY\n");
    fflush(stdout);
    while (step < 1) sigsuspend(&usr1);
    if (write(fd, "abcdef", 6) != 6) return 5;
    raise(SIGUSR1);
    struct itimerval it = {{60, 0}, {60, 0}};
    setitimer(ITIMER_REAL, &it, 0);
    for (size_t i = 0; i < n; i += 4096) a[i] ^= 0x5a;
    unsigned char *more = 0;
    if (!strcmp(change, "action")) signal(SIGHUP, on_hup);
    unsigned char *heap = 0;
    if (!strcmp(change, "map") || !strcmp(change, "noreserve")) {
        int nr = strcmp(change, "map") ? MAP_NORESERVE : 0;
        more = mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | nr, -1, 0);
        if (more == MAP_FAILED) return 6;
        memset(more, 9, 1 << 20);
        if (noreserve(more) != !!nr) return 7;
    }
    if (!strcmp(change, "renoreserve")) {
        int f = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED;
        if (mmap(gone, 1 << 20, PROT_READ | PROT_WRITE, f, -1, 0) != gone) return 6;
        memset(gone, 1, 1 << 20);
        if (!noreserve(gone)) return 7;
    }
    if (!strcmp(change, "heap")) {
        heap = sbrk(2 << 20);
        if (heap == (void *)-1) return 6;
        memset(heap, 8, 2 << 20);
    }
    if (!strcmp(change, "unmap") && munmap(gone, 1 << 20)) return 6;
    if (!strcmp(change, "protect") && mprotect(half + (32 << 10), 32 << 10, PROT_READ)) return 6;
    /* "file": the data file mapped three ways: read-only, privately
       written (a private copy) and shared written (the file changes).
       "shared": shared anonymous memory, which a skeleton cannot follow. */
    char *fmap = 0, *fpriv = 0, *fshared = 0, *shm = 0;
    /* "refile": the first page of `spare` mapped again, from the file. */
    char *spare = mmap(0, 16384, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (spare == MAP_FAILED) return 3;
    memset(spare, 3, 16384);
    if (!strcmp(change, "refile") && mmap(spare, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) != spare)
        return 6;
    if (!strcmp(change, "file")) {
        fmap = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        fpriv = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        fshared = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fmap == MAP_FAILED || fpriv == MAP_FAILED || fshared == MAP_FAILED) return 6;
        memcpy(fpriv, "PRIV", 4);
        fshared[10] = 'S';
    }
    if (!strcmp(change, "shared")) {
        shm = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shm == MAP_FAILED) return 6;
        shm[7] = 5;
    }
    if (!strcmp(change, "endthread")) {
        sem_post(&go);
        if (pthread_join(th, 0)) return 6;
    }
    if (!strcmp(change, "newthread") && pthread_create(&th, 0, waiter, &answer)) return 6;
    if (!strcmp(change, "wx")) {
        if (mprotect(ro, 64 << 10, PROT_READ | PROT_WRITE)) return 6;
        memset(ro, 7, 8 << 10);
        if (mprotect(ro, 64 << 10, PROT_READ)) return 6;
    }
    if (!strcmp(change, "attrs")) {
        stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
        if (sigaltstack(&ss, 0) || prctl(PR_SET_NAME, "renamed") ||
            prctl(PR_SET_TIMERSLACK, 123456))
            return 6;
    }
    if (!strcmp(change, "files")) {
        char p2[4096], sub[4096];
        snprintf(p2, sizeof p2, "%s/fresh", argv[1]);
        snprintf(sub, sizeof sub, "%s/sub", argv[1]);
        fresh = open(p2, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fresh < 0 || write(fresh, "hello", 5) != 5 || dup2(fresh, 60) != 60 ||
            close(closed_fd) || dup2(fd, swapped) != swapped ||
            fcntl(flagged, F_SETFL, O_NONBLOCK) || fcntl(flagged, F_SETFD, FD_CLOEXEC) ||
            mkdir(sub, 0700) || chdir(sub))
            return 6;
        umask(027);
    }
    if (ghostpos && (write(tfd, "more", 4) != 4 || (ghostcame && unlink(tpath)))) return 6;
    if (temp) {
        int next = open(tnext, O_RDWR | O_CREAT | O_TRUNC, 0600);
        unlink(tpath);
        if (next < 0 || close(tfd) || dup2(next, tfd) != tfd || close(next) ||
            write(tfd, "next", 4) != 4)
            return 6;
    }
    printf("STEP\n");
    fflush(stdout);
    while (step < 2) sigsuspend(&usr1);
    char why[256] = "";
    off_t pos = lseek(fd, 0, SEEK_CUR);
    if (pos != 16) snprintf(why, sizeof why, "offset %ld, want 16", (long)pos);
    sigset_t p;
    sigpending(&p);
    if (!*why && !sigismember(&p, SIGUSR1)) snprintf(why, sizeof why, "SIGUSR1 is not pending");
    struct itimerval now;
    getitimer(ITIMER_REAL, &now);
    if (!*why && (now.it_value.tv_sec < 50 || now.it_interval.tv_sec != 60))
        snprintf(why, sizeof why, "timer: %ld s left, interval %ld s",
                 (long)now.it_value.tv_sec, (long)now.it_interval.tv_sec);
    for (size_t i = 0; i < n && !*why; i++) {
        unsigned char want = (unsigned char)(i * 7) ^ (i % 4096 ? 0 : 0x5a);
        if (a[i] != want) snprintf(why, sizeof why, "memory differs at byte %zu", i);
    }
    for (size_t i = 0; more && i < (1 << 20) && !*why; i++)
        if (more[i] != 9) snprintf(why, sizeof why, "the new mapping differs at byte %zu", i);
    if (!*why && more && noreserve(more) != !strcmp(change, "noreserve"))
        snprintf(why, sizeof why, "the new mapping's MAP_NORESERVE is not as it was made");
    if (!*why && !strcmp(change, "renoreserve") && !noreserve(gone))
        snprintf(why, sizeof why, "the mapping made again lost its MAP_NORESERVE");
    for (size_t i = 0; heap && i < (2 << 20) && !*why; i++)
        if (heap[i] != 8) snprintf(why, sizeof why, "the heap's new part differs at byte %zu", i);
    if (!*why && heap && sbrk(0) != heap + (2 << 20))
        snprintf(why, sizeof why, "the program break is %p, want %p", sbrk(0), (void *)(heap + (2 << 20)));
    if (!*why && ghostpos) {
        char got[8] = "";
        off_t at = lseek(tfd, 0, SEEK_CUR);
        if (at != 7 || pread(tfd, got, 7, 0) != 7 || memcmp(got, "oldmore", 7))
            snprintf(why, sizeof why, "the deleted file: offset %ld, bytes \"%s\"", (long)at, got);
    } else if (!*why && tfd >= 0) {
        char got[8] = "";
        if (lseek(tfd, 0, SEEK_CUR) != 4 || pread(tfd, got, 4, 0) != 4 || memcmp(got, "next", 4))
            snprintf(why, sizeof why, "the next temporary file is not at its fd (read \"%s\")", got);
    }
    if (!*why && !strcmp(change, "unmap")) {
        void *p2 = mmap(gone, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p2 != gone) snprintf(why, sizeof why, "the unmapped 1 MiB is mapped");
    } else {
        for (size_t i = 0; i < (1 << 20) && !*why; i++)
            if (gone[i] != 1) snprintf(why, sizeof why, "a mapping differs at byte %zu", i);
    }
    for (size_t i = 0; i < (64 << 10) && !*why; i++)
        if (half[i] != 2) snprintf(why, sizeof why, "the 64 KiB differ at byte %zu", i);
    for (size_t i = 0; i < (64 << 10) && !*why; i++)
        if (ro[i] != (!strcmp(change, "wx") && i < (8 << 10) ? 7 : 0))
            snprintf(why, sizeof why, "the read-only mapping differs at byte %zu", i);
    int want_threads = strcmp(change, "newthread") ? 1 : 2;
    if (!*why && threads_now() != want_threads)
        snprintf(why, sizeof why, "%d threads, want %d", threads_now(), want_threads);
    struct sigaction hup;
    sigaction(SIGHUP, 0, &hup);
    if (!*why && (hup.sa_handler == on_hup) != !strcmp(change, "action"))
        snprintf(why, sizeof why, "SIGHUP's handler is %p", (void *)hup.sa_handler);
    if (!*why && !strcmp(change, "newthread")) {
        sem_post(&go);
        if (pthread_join(th, 0) || thread_wrote != 42 || threads_now() != 1)
            snprintf(why, sizeof why, "the new thread wrote %d (want 42), %d threads left",
                     thread_wrote, threads_now());
    }
    if (!*why && !strcmp(change, "endthread") && thread_wrote != 42)
        snprintf(why, sizeof why, "the ended thread's word is %d, want 42", thread_wrote);
    if (!*why && !strcmp(change, "attrs")) {
        stack_t ss;
        char name[16] = "";
        long slack = prctl(PR_GET_TIMERSLACK);
        if (sigaltstack(0, &ss) || ss.ss_sp != alt || ss.ss_size != sizeof alt)
            snprintf(why, sizeof why, "the alternate stack is %p (%zu bytes), want %p",
                     ss.ss_sp, ss.ss_size, (void *)alt);
        else if (prctl(PR_GET_NAME, name) || strcmp(name, "renamed"))
            snprintf(why, sizeof why, "the thread is named '%s', want 'renamed'", name);
        else if (slack != 123456)
            snprintf(why, sizeof why, "the timer slack is %ld, want 123456", slack);
    }
    if (!*why && fmap) {
        char now[17] = "";
        if (memcmp(fmap, "0123456789Sbcdef", 16))
            snprintf(why, sizeof why, "the read-only file mapping reads '%.16s'", fmap);
        else if (memcmp(fpriv, "PRIV456789abcdef", 16))
            snprintf(why, sizeof why, "the private file mapping reads '%.16s'", fpriv);
        else if (memcmp(fshared, "0123456789Sbcdef", 16))
            snprintf(why, sizeof why, "the shared file mapping reads '%.16s'", fshared);
        else if ((fshared[11] = 'T', pread(fd, now, 16, 0) != 16) || memcmp(now, "0123456789STcdef", 16))
            snprintf(why, sizeof why, "a write to the shared mapping left the file '%s'", now);
    }
    for (int i = 0; i < 16384 && !*why; i++) {
        int want = !strcmp(change, "refile") && i < 16 ? "0123456789abcdef"[i]
                   : !strcmp(change, "refile") && i < 4096 ? 0 : 3;
        if (spare[i] != want)
            snprintf(why, sizeof why, "byte %d of the spare mapping is %d, want %d", i, spare[i], want);
    }
    if (!*why && shm && shm[7] != 5)
        snprintf(why, sizeof why, "the shared memory holds %d, want 5", shm[7]);
    if (!*why && !strcmp(change, "files")) {
        char buf[8] = "", cwd[4096] = "";
        mode_t m = umask(0);
        umask(m);
        errno = 0;
        if (fcntl(closed_fd, F_GETFD) != -1 || errno != EBADF)
            snprintf(why, sizeof why, "the closed fd %d is open", closed_fd);
        else if (lseek(fresh, 0, SEEK_CUR) != 5)
            snprintf(why, sizeof why, "the new file's offset is %ld, want 5", (long)lseek(fresh, 0, SEEK_CUR));
        else if (write(60, "x", 1) != 1 || lseek(fresh, 0, SEEK_CUR) != 6)
            snprintf(why, sizeof why, "fd 60 does not share the new file's offset");
        else if (pread(fresh, buf, 6, 0) != 6 || memcmp(buf, "hellox", 6))
            snprintf(why, sizeof why, "the new file reads '%s', want 'hellox'", buf);
        else if (lseek(swapped, 0, SEEK_CUR) != 16 || lseek(fd, 3, SEEK_SET) != 3 ||
                 lseek(swapped, 0, SEEK_CUR) != 3 || (fcntl(swapped, F_GETFL) & O_ACCMODE) != O_RDWR)
            snprintf(why, sizeof why, "fd %d is not the copy of fd %d it was made", swapped, fd);
        else if (!(fcntl(flagged, F_GETFL) & O_NONBLOCK) || !(fcntl(flagged, F_GETFD) & FD_CLOEXEC))
            snprintf(why, sizeof why, "fd %d lost its O_NONBLOCK or close-on-exec", flagged);
        else if (!getcwd(cwd, sizeof cwd) || strlen(cwd) < 4 || strcmp(cwd + strlen(cwd) - 4, "/sub"))
            snprintf(why, sizeof why, "the working directory is %s", cwd);
        else if (m != 027)
            snprintf(why, sizeof why, "the umask is %o, want 27", (unsigned)m);
    }
    if (!*why && !strcmp(change, "protect")) {
        /* Read-only now: mprotect to the same succeeds either way, so ask
           the kernel through msync-free means: /proc/self/maps. */
        char line[512], want[64];
        snprintf(want, sizeof want, "%lx-", (unsigned long)(half + (32 << 10)));
        FILE *m = fopen("/proc/self/maps", "r");
        int ro = 0;
        while (m && fgets(line, sizeof line, m))
            if (!strncmp(line, want, strlen(want)) && !strncmp(strchr(line, ' ') + 1, "r--p", 4)) ro = 1;
        if (m) fclose(m);
        if (!ro) snprintf(why, sizeof why, "the protected half is not read-only");
    }
    printf("%s%s\n", *why ? "FAIL " : "PASS", why);
    fflush(stdout);
    return *why ? 1 : 0;
}
"#;

/// Lets `src` (a CHANGER) change, then captures its stop as a skeleton
/// migration's source does (keeping the pages the first capture kept);
/// returns the frozen source, its image and its directory.
fn change_and_capture(
    src: i32,
    out: &mut impl std::io::BufRead,
    keep: &std::collections::HashSet<u64>,
) -> (Frozen, pmig_engine::image::ProcessImage, tempfile::TempDir) {
    // SAFETY: signalling the program this test started.
    assert_eq!(unsafe { libc::kill(src, libc::SIGUSR2) }, 0);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "STEP\n");
    let (frozen, pi, stage, _) = capture_handover_keeping(src, keep);
    (frozen, pi, stage)
}

/// Installs every page `pi` owes into the restored process `r` from the
/// frozen source `src`, then closes the process's userfaultfd.
fn fill_all(r: &pmig_engine::Restored, pi: &pmig_engine::image::ProcessImage, src: i32) {
    let (owed, registered) = owed_and_registered(pi);
    let fd = r.uffd.as_ref().expect("a userfaultfd").try_clone().unwrap();
    let lm = LazyMemory::new(fd, &owed, registered);
    for p in lm.owed_list() {
        lm.install(p, &read_src(src, p, 4096)).unwrap();
    }
    assert_eq!(lm.owed_pages(), 0);
    lm.finish_in_process(r.pid, r.uffd_fd_in_process.unwrap())
        .unwrap();
}

/// Tells the restored CHANGER `pid` to check itself; its verdict.
fn verdict(pid: i32, outfile: &std::path::Path) -> String {
    // SAFETY: signalling the process this test restored.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR2) }, 0);
    let status = exit_status(pid, 30_000).expect("the restored program did not finish");
    let text = std::fs::read_to_string(outfile).unwrap();
    assert!(
        libc::WIFEXITED(status),
        "status {status:#x}, output {text:?}"
    );
    text
}

/// A skeleton built from a capture made while the process ran, and brought
/// up to the capture of its stop: the file offset, the pending signal, the
/// armed timer and the memory written in between are those of the stop.
#[test]
fn a_skeleton_is_brought_up_to_the_state_of_the_stop() {
    let _g = serial(&HEAVY);
    for change in [
        "none",
        "map",
        "heap",
        "unmap",
        "protect",
        "noreserve",
        "endthread",
        "newthread",
        "action",
        "attrs",
        "wx",
        "files",
        "file",
        "renoreserve",
        "refile",
        "tempfile",
        "tempghost",
        "ghostpos",
        "ghostcame",
    ] {
        brought_up_after(change);
    }
}

/// [`a_skeleton_is_brought_up_to_the_state_of_the_stop`] with the change
/// of layout `change` (see [`CHANGER`]).
fn brought_up_after(change: &str) {
    let (verdict, stale) = changer_moved(change);
    if let Some(e) = stale {
        panic!("{change}: the skeleton not brought up: {e}");
    }
    assert_eq!(verdict, "PASS\n", "{change}");
}

/// Starts a CHANGER doing `change`, captures it while it runs, and holds
/// the restore of that capture as a skeleton while the program changes;
/// then brings the skeleton up to the capture of the stop or, if it cannot
/// (its error is returned), checks that it is gone and restores the stop
/// the ordinary way. Returns the moved program's verdict.
fn changer_moved(change: &str) -> (String, Option<pmig_engine::EngineError>) {
    let mut guard = Guard::new();
    let (dir, mut child, src, mut out) =
        start_c_with("changer", CHANGER, &["{dir}", change], &mut guard);
    let (first, _, pre, keep) = capture_handover_keeping(src, &Default::default());
    first.detach().unwrap();
    if change == "tempfile" {
        // Gone before the skeleton is made, as if the program had deleted it.
        std::fs::remove_file(dir.path().join("temp")).unwrap();
    }
    let outfile = dir.path().join("out.txt");
    let opts = pmig_engine::RestoreOptions {
        skeleton: true,
        ..lazy_to(outfile.clone())
    };
    let mut stop = None;
    let mut skeleton_pid = 0;
    let mut bring = |r: &pmig_engine::Restored| {
        skeleton_pid = r.pid;
        // The source runs on (and changes) while the skeleton is held.
        let (frozen, pi, stage) = change_and_capture(src, &mut out, &keep);
        let dir = stage.path().to_path_buf();
        stop = Some((frozen, pi, stage));
        Ok(Some((dir, pmig_engine::Verify::Check)))
    };
    let brought =
        pmig_engine::restore_skeleton(pre.path(), &opts, pmig_engine::Verify::Check, &mut bring);
    let (frozen, pi, stage) = stop.expect("the stop was captured");
    let (r, stale) = match brought {
        Ok(r) => {
            assert_eq!(r.pid, skeleton_pid, "the process that runs is the skeleton");
            (r, None)
        }
        Err(e) => {
            assert!(skeleton_pid > 0);
            assert!(
                !std::path::Path::new(&format!("/proc/{skeleton_pid}")).exists(),
                "{change}: the skeleton {skeleton_pid} that was not brought up is still there"
            );
            let r = pmig_engine::restore(stage.path(), &lazy_to(outfile.clone()))
                .expect("the ordinary restore of the stop");
            (r, Some(e))
        }
    };
    guard.track_pid(r.pid);
    fill_all(&r, &pi, src);
    frozen.kill().unwrap();
    let _ = child.wait();
    (verdict(r.pid, &outfile), stale)
}

/// A change a skeleton cannot follow (shared anonymous memory mapped)
/// makes it stale: it is killed, having never run, and the capture of the
/// stop restores the process the ordinary way.
#[test]
fn a_stale_skeleton_is_killed_and_the_stop_restored_instead() {
    let _g = serial(&HEAVY);
    let (verdict, stale) = changer_moved("shared");
    let e = stale.expect("a stale skeleton brought up");
    assert!(
        matches!(&e, pmig_engine::EngineError::Stale(w) if w.contains("a mapping of shared memory came")),
        "{e}"
    );
    assert_eq!(verdict, "PASS\n");
}

/// Event-loop state that moves on while a skeleton is held: on its first
/// SIGUSR2 it re-arms its timerfd (one-shot in 60 s becomes every 30 s),
/// adds 5 to its eventfd's count (2 before) and creates a file in the
/// directory its inotify instance watches, reading that event itself. It
/// says STEP; on its second SIGUSR2 it checks that the timer is the new
/// one, the count 7, and that no inotify event is queued (the skeleton's
/// instance saw the file come too, while it was held), then says PASS,
/// or FAIL and why.
const EVENTS: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <unistd.h>
static volatile sig_atomic_t step;
static void on_usr2(int s) { (void)s; step++; }
int main(int argc, char **argv) {
    (void)argc;
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct itimerspec once = {{0, 0}, {60, 0}};
    if (tfd < 0 || timerfd_settime(tfd, 0, &once, 0)) return 3;
    int efd = eventfd(2, EFD_NONBLOCK);
    int ifd = inotify_init1(IN_NONBLOCK);
    if (efd < 0 || ifd < 0 || inotify_add_watch(ifd, argv[1], IN_CREATE) < 0) return 4;
    sigset_t none;
    sigemptyset(&none);
    signal(SIGUSR2, on_usr2);
    printf("READY\n");
    fflush(stdout);
    while (step < 1) sigsuspend(&none);
    struct itimerspec every = {{30, 0}, {30, 0}};
    if (timerfd_settime(tfd, 0, &every, 0)) return 5;
    uint64_t five = 5;
    if (write(efd, &five, 8) != 8) return 6;
    char path[4096];
    snprintf(path, sizeof path, "%s/made", argv[1]);
    int f = open(path, O_CREAT | O_WRONLY, 0600);
    if (f < 0) return 7;
    close(f);
    char ev[4096];
    for (int i = 0; i < 1000 && read(ifd, ev, sizeof ev) <= 0; i++) usleep(1000);
    printf("STEP\n");
    fflush(stdout);
    while (step < 2) sigsuspend(&none);
    char why[256] = "";
    struct itimerspec now;
    timerfd_gettime(tfd, &now);
    if (now.it_interval.tv_sec != 30 || now.it_value.tv_sec > 30)
        snprintf(why, sizeof why, "timerfd: interval %ld s, %ld s left",
                 (long)now.it_interval.tv_sec, (long)now.it_value.tv_sec);
    uint64_t count = 0;
    if (!*why && (read(efd, &count, 8) != 8 || count != 7))
        snprintf(why, sizeof why, "eventfd count %llu, want 7", (unsigned long long)count);
    if (!*why && read(ifd, ev, sizeof ev) > 0)
        snprintf(why, sizeof why, "an inotify event is queued");
    printf("%s%s\n", *why ? "FAIL " : "PASS", why);
    fflush(stdout);
    return *why ? 1 : 0;
}
"#;

/// A skeleton's timerfd, eventfd and inotify instance are brought up to
/// the stop: the timer armed as the process last set it, the count it had,
/// and no event the skeleton's own watch saw while it was held.
#[test]
fn a_skeletons_event_loop_descriptors_are_brought_up_to_the_stop() {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let watched = tempfile::tempdir().unwrap();
    let w = watched.path().to_str().unwrap().to_string();
    let (dir, mut child, src, mut out) = start_c_with("events", EVENTS, &[&w], &mut guard);
    let (first, _, pre, keep) = capture_handover_keeping(src, &Default::default());
    first.detach().unwrap();
    let outfile = dir.path().join("out.txt");
    let opts = pmig_engine::RestoreOptions {
        skeleton: true,
        ..lazy_to(outfile.clone())
    };
    let mut stop = None;
    let mut bring = |_: &pmig_engine::Restored| {
        let (frozen, pi, stage) = change_and_capture(src, &mut out, &keep);
        let dir = stage.path().to_path_buf();
        stop = Some((frozen, pi, stage));
        Ok(Some((dir, pmig_engine::Verify::Check)))
    };
    let r =
        pmig_engine::restore_skeleton(pre.path(), &opts, pmig_engine::Verify::Check, &mut bring)
            .expect("the skeleton brought up");
    guard.track_pid(r.pid);
    let (frozen, pi, _stage) = stop.expect("the stop was captured");
    fill_all(&r, &pi, src);
    frozen.kill().unwrap();
    let _ = child.wait();
    assert_eq!(verdict(r.pid, &outfile), "PASS\n");
}

/// A handover's capture finds the pages it keeps from the threads it reads
/// (`Aids::handover`) as `handover_pages` finds them from the frozen
/// process itself: each thread's stack, the pages its registers point
/// into, its rseq area and thread descriptor, and the robust mutexes it
/// holds (two threads of `robust_ids` hold one each); with the pages the
/// caller adds. Only those of its private anonymous memory are saved.
#[test]
fn a_handover_capture_keeps_the_pages_handover_pages_names() {
    let _g = serial(&HEAVY);
    let cwd = tempfile::tempdir().unwrap();
    let mut p = pmig_tests::spawn_scenario("robust_ids", &[], cwd.path());
    p.expect_ready();
    let pid = p.pid();
    let mut frozen = Frozen::freeze(pid).unwrap();
    assert_eq!(frozen.threads.len(), 3, "the main thread and two holders");
    let named = handover_pages(&frozen).unwrap();
    // A page of no mapping: kept as asked, nothing saved of it.
    let also: std::collections::HashSet<u64> = [0x1000].into();
    let stage = tempfile::tempdir().unwrap();
    let mut w = pmig_image::ImageWriter::create(stage.path()).unwrap();
    let aids = pmig_engine::dump::Aids {
        handover: Some(also.clone()),
        ..Default::default()
    };
    let out = pmig_engine::dump::capture_with(&mut frozen, &mut w, None, aids).unwrap();
    drop(frozen);
    let kept = out.kept.expect("a handover's capture says what it kept");
    let expected: std::collections::HashSet<u64> = named.union(&also).copied().collect();
    assert_eq!(kept, expected);
    let mut saved = 0;
    for v in out
        .image
        .memory
        .vmas
        .iter()
        .filter(|v| v.backing == Backing::Anon)
    {
        for r in &v.runs {
            for page in (r.addr..r.addr + r.len).step_by(4096) {
                assert!(kept.contains(&page), "page {page:#x} saved, not kept");
                saved += 1;
            }
        }
    }
    assert!(saved > 0, "the threads' stacks at least are saved");
    p.check("robust_ids", std::time::Duration::from_secs(10));
    p.quit_ok();
}
