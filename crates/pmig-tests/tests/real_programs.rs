//! Real programs that no one here wrote, dumped mid-run and restored: each
//! must finish with output identical to an uninterrupted run.

use pmig_tests::{dump_ok, only_stdio, pmig_bin, serial, wait_timeout, Guard, HEAVY};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

fn cpu_ms(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 1000 / 100)
}

fn fd_pos(pid: i32, fd: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The standard input of both runs.
enum Input<'a> {
    Null,
    File(&'a Path),
    /// A pipe holding these bytes (at most one pipe's capacity), whose
    /// write end is closed as soon as they are in: the shell's here-string,
    /// or the end of a pipeline whose writer has exited.
    Piped(&'a [u8]),
    /// A file holding these bytes, deleted once opened: the shell's
    /// here-document, or a here-string longer than a pipe holds.
    Deleted(&'a [u8]),
}

/// Bytes left unread in the pipe on stdin of `pid` (opened for reading
/// through /proc, and closed again at once).
fn unread_stdin(pid: i32) -> Option<i32> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/0"))
        .ok()?;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    (unsafe { libc::ioctl(f.as_raw_fd(), libc::FIONREAD, &mut n) } == 0).then_some(n)
}

/// How to tell that the program is in the middle of its work.
enum MidRun {
    /// At least this much CPU time used.
    Cpu(u64),
    /// Input fd has been read past its start but not to its end.
    Reading { fd: i32, size: u64 },
    /// Its stdin pipe has been read from, but holds some bytes still.
    PipeRead { size: usize },
}

fn big_file(dir: &Path, mib: usize) -> PathBuf {
    let p = dir.join(format!("input-{mib}.bin"));
    let mut f = File::create(&p).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for c in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block).unwrap();
    }
    p
}

fn run_and_compare(name: &str, argv: &[&str], stdin: Input, mid: MidRun, dir: &Path) {
    let _g = serial(&HEAVY);
    let mut guard = Guard::new();
    let spawn = |out: &Path| {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..])
            .current_dir(dir)
            .stdin(match stdin {
                Input::File(p) => Stdio::from(File::open(p).unwrap()),
                Input::Piped(_) => Stdio::piped(),
                Input::Deleted(data) => {
                    let p = dir.join(format!("{name}.stdin"));
                    std::fs::write(&p, data).unwrap();
                    let f = File::open(&p).unwrap();
                    std::fs::remove_file(&p).unwrap();
                    Stdio::from(f)
                }
                Input::Null => Stdio::null(),
            })
            .stdout(Stdio::from(File::create(out).unwrap()))
            .stderr(Stdio::null());
        let mut child = only_stdio(&mut c)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", argv[0]));
        if let Input::Piped(data) = stdin {
            assert!(
                data.len() <= 64 << 10,
                "{name}: more input than a pipe holds"
            );
            let mut w = child.stdin.take().expect("a pipe on stdin");
            w.write_all(data).unwrap();
            // Closed here: nobody writes to the pipe any more.
        }
        child
    };
    // Reference run.
    let reference = dir.join(format!("{name}.ref"));
    let mut r = spawn(&reference);
    let st = wait_timeout(&mut r, LIMIT).expect("reference run finished in time");
    assert!(st.success(), "{name}: reference run failed: {st:?}");

    // Migrated run: dump mid-run, restore, let it finish.
    let migrated = dir.join(format!("{name}.mig"));
    let mut child = spawn(&migrated);
    let pid = child.id() as i32;
    guard.track_pid(pid);
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < LIMIT,
            "{name}: never reached the middle of its run"
        );
        let ready = match mid {
            MidRun::Cpu(ms) => cpu_ms(pid).unwrap_or(0) >= ms,
            MidRun::Reading { fd, size } => fd_pos(pid, fd).is_some_and(|p| p > 0 && p < size),
            MidRun::PipeRead { size } => {
                unread_stdin(pid).is_some_and(|n| n > 0 && (n as usize) < size)
            }
        };
        if ready {
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("{name}: finished ({st:?}) before it could be dumped: make its work larger");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let img = dir.join(format!("{name}.img"));
    dump_ok(pid, &img, false);
    let _ = child.wait();
    let mut restore = only_stdio(
        Command::new(pmig_bin())
            .args(["restore", "--dir"])
            .arg(&img),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("run pmig restore");
    let st = wait_timeout(&mut restore, LIMIT).unwrap_or_else(|| {
        let _ = restore.kill();
        panic!("{name}: restored run did not finish in time")
    });
    let mut err = String::new();
    std::io::Read::read_to_string(restore.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(st.success(), "{name}: restored run failed: {st:?}: {err}");
    let a = std::fs::read(&reference).unwrap();
    let b = std::fs::read(&migrated).unwrap();
    assert!(!a.is_empty(), "{name}: reference produced no output");
    assert!(
        a == b,
        "{name}: output differs after dump and restore ({} vs {} bytes)",
        a.len(),
        b.len()
    );
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pmig-real-")
        .tempdir()
        .unwrap()
}

#[test]
fn python3_computation() {
    let d = tmp();
    let prog = "import hashlib\nh=hashlib.sha256()\nfor i in range(4000000): h.update(str(i*i).encode())\nprint(h.hexdigest())\nprint(sum(x*x for x in range(3000000)))\n";
    run_and_compare(
        "python3",
        &["python3", "-c", prog],
        Input::Null,
        MidRun::Cpu(300),
        d.path(),
    );
}

#[test]
fn bc_computes_pi() {
    let d = tmp();
    let input = d.path().join("pi.bc");
    std::fs::write(&input, "scale=2500\n4*a(1)\nquit\n").unwrap();
    run_and_compare(
        "bc",
        &["bc", "-l"],
        Input::File(&input),
        MidRun::Cpu(300),
        d.path(),
    );
}

/// A program reading a pipe whose writer is gone (a here-string, or a
/// pipeline whose first command has exited): the bytes still in the pipe
/// move with it, and it reads them and then end-of-file, as it would have.
#[test]
fn python3_reads_a_pipe_whose_writer_is_gone() {
    let d = tmp();
    let input: String = (1..=9000).map(|i| format!("{i}\n")).collect();
    let prog = "import sys\nt = 0\nfor l in sys.stdin:\n    t += sum(range(int(l) * 4))\n    print(l.strip(), t)\nprint('end', t)\n";
    run_and_compare(
        "python3-stdin-pipe",
        &["python3", "-c", prog],
        Input::Piped(input.as_bytes()),
        MidRun::PipeRead { size: input.len() },
        d.path(),
    );
}

/// A program reading a deleted file (a here-document): the file's bytes
/// move with it, and it reads on from where it was.
#[test]
fn python3_reads_a_deleted_file() {
    let d = tmp();
    let input: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let prog = "import sys\nt = 0\nfor l in sys.stdin:\n    t += sum(range(int(l) * 2))\n    print(l.strip(), t)\nprint('end', t)\n";
    run_and_compare(
        "python3-deleted-stdin",
        &["python3", "-c", prog],
        Input::Deleted(input.as_bytes()),
        MidRun::Reading {
            fd: 0,
            size: input.len() as u64,
        },
        d.path(),
    );
}

#[test]
fn gzip_compresses_a_large_file() {
    let d = tmp();
    let f = big_file(d.path(), 64);
    run_and_compare(
        "gzip",
        &["gzip", "-9", "-c", f.to_str().unwrap()],
        Input::Null,
        MidRun::Cpu(500),
        d.path(),
    );
}

#[test]
fn sha256sum_reads_a_large_file() {
    let d = tmp();
    let f = big_file(d.path(), 512);
    run_and_compare(
        "sha256sum",
        &["sha256sum", f.to_str().unwrap()],
        Input::Null,
        MidRun::Reading {
            fd: 3,
            size: 512 << 20,
        },
        d.path(),
    );
}

#[test]
fn static_binary_built_by_gcc() {
    let d = tmp();
    let src = d.path().join("st.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void){unsigned long h=1469598103934665603UL;\nfor(unsigned long i=0;i<2500000000UL;i++){h^=i;h*=1099511628211UL;}\nprintf(\"%lx\\n\",h);return 0;}\n",
    )
    .unwrap();
    let bin = d.path().join("st");
    let st = Command::new("cc")
        .args(["-O1", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc -static failed");
    run_and_compare(
        "static",
        &[bin.to_str().unwrap()],
        Input::Null,
        MidRun::Cpu(300),
        d.path(),
    );
}
