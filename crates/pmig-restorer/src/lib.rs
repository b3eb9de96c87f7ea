//! The freestanding restorer and the plan that drives it.
//!
//! The restorer (C, no libc, see `restorer/restorer.c`) is an interpreter
//! for a list of ops, most of them plain system calls. The engine's resource
//! modules append ops to a [`PlanBuilder`]; [`PlanBuilder::finish`] lays out
//! the restorer area (code, plan, data, stacks) for a chosen base address.

use std::collections::HashMap;

/// The restorer code: a flat, position-independent blob whose entry point is
/// at offset 0 and takes the plan address in `rdi`.
pub static BLOB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/restorer.bin"));

pub const PAGE: u64 = 4096;
pub const PLAN_MAGIC: u64 = 0x314e_414c_5047_4d50;
pub const PLAN_VERSION: u64 = 2;
pub const FAILURE_MAGIC: u64 = 0x4c_4941_4647_4d50;
/// Stack given to each restored thread while it runs restorer code.
pub const THREAD_STACK: u64 = 64 << 10;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawOp {
    kind: u32,
    check: u32,
    subst: u64,
    nr: u64,
    args: [u64; 6],
    expect: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawPlan {
    magic: u64,
    version: u64,
    status_fd: u64,
    ops: u64,
    n_ops: u64,
    main_first: u64,
    main_count: u64,
}

/// The record the restorer writes to the status fd when an op fails.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpFailure {
    pub magic: u64,
    pub op_index: u64,
    pub result: i64,
    pub tid: u64,
}

impl OpFailure {
    pub const SIZE: usize = std::mem::size_of::<OpFailure>();

    pub fn parse(b: &[u8]) -> Option<OpFailure> {
        if b.len() < Self::SIZE {
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        let f = OpFailure {
            magic: u(0),
            op_index: u(1),
            result: u(2) as i64,
            tid: u(3),
        };
        (f.magic == FAILURE_MAGIC).then_some(f)
    }
}

/// One argument of an op. Pointers into the plan's data and stacks are
/// resolved when the area's base address is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    Val(u64),
    /// Address of a blob previously added with [`PlanBuilder::data`].
    Data(DataRef),
    /// The running process's pid (resolved by the restorer).
    Pid,
    /// The running thread's tid (resolved by the restorer).
    Tid,
    /// Address of a slot made with [`PlanBuilder::slot`], into which the
    /// restorer stores the running process's pid (a 32-bit `pid_t`) just
    /// before the call: for calls that take a pointer to a pid, such as
    /// `ioctl(TIOCSPGRP)`, when the pid is known only once the process exists.
    PidAt(DataRef),
    /// Start address of the restorer area.
    AreaStart,
    /// `limit` minus the end address of the restorer area.
    AreaEndTo(u64),
    /// End address of the restorer area.
    AreaEnd,
}

impl From<u64> for Arg {
    fn from(v: u64) -> Arg {
        Arg::Val(v)
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Val(v as u64)
    }
}
impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::Val(v as i64 as u64)
    }
}
impl From<DataRef> for Arg {
    fn from(d: DataRef) -> Arg {
        Arg::Data(d)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataRef(u64);

impl DataRef {
    /// `off` bytes into the blob.
    pub fn at(self, off: u64) -> DataRef {
        DataRef(self.0 + off)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    None,
    NonNeg,
    Eq(u64),
}

#[derive(Clone, Debug)]
enum Kind {
    Syscall { nr: u64, check: Check },
    PreadFull,
    Clone { thread: usize },
    Trap,
    SyscallFd { nr: u64, fd: u64 },
    StoreTid { thread: usize },
    AmxFirstUse,
}

#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    args: [Arg; 6],
    what: String,
}

/// Which thread an op list belongs to. Thread 0 is the main thread.
pub type ThreadIdx = usize;

/// Builds the restorer plan.
#[derive(Default)]
pub struct PlanBuilder {
    /// Ops per thread, in order.
    threads: Vec<Vec<Op>>,
    data: Vec<u8>,
    tids: Vec<u64>,
    clone_flags: u64,
    dedup: HashMap<Vec<u8>, DataRef>,
    /// (offset in data of a pointer field, what it points to)
    patches: Vec<(u64, DataRef)>,
    /// One 4-byte slot per thread where its clone op stores the tid it got.
    tid_slots: DataRef,
}

/// The laid-out restorer area, ready to be copied to `base`.
pub struct Area {
    pub base: u64,
    /// Bytes to copy at `base` (code, plan, ops, data). The rest is stacks.
    pub bytes: Vec<u8>,
    /// Size of the code part, rounded to pages (mapped read+exec).
    pub code_len: u64,
    /// Total size of the area, including the stacks.
    pub len: u64,
    pub entry: u64,
    pub plan: u64,
    /// Top of the main thread's restorer stack (16-byte aligned).
    pub main_stack_top: u64,
    /// Human-readable description of each op, by global op index.
    pub descriptions: Vec<String>,
}

impl Area {
    /// The address of a `syscall` instruction in the area's code (mapped
    /// read+exec at `base` once the area is in place), for a tracer's
    /// injected calls.
    pub fn syscall_insn(&self) -> Option<u64> {
        let code = &self.bytes[..(self.code_len as usize).min(self.bytes.len())];
        code.windows(2)
            .position(|w| w == [0x0f, 0x05])
            .map(|i| self.base + i as u64)
    }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl PlanBuilder {
    /// `tids[i]` is the id thread `i` should get back (0 for thread 0, whose id
    /// is the process's). Thread 0 is the main thread.
    pub fn new(tids: Vec<u64>, clone_flags: u64) -> PlanBuilder {
        let mut b = PlanBuilder {
            threads: vec![Vec::new(); tids.len().max(1)],
            tids,
            clone_flags,
            ..Default::default()
        };
        b.tid_slots = b.slot(4 * b.threads.len());
        b
    }

    pub fn n_threads(&self) -> usize {
        self.threads.len()
    }

    /// Copy `bytes` into the plan's data area (8-byte aligned) and return a
    /// reference usable as an [`Arg`]. Identical blobs are stored once.
    pub fn data(&mut self, bytes: &[u8]) -> DataRef {
        if let Some(d) = self.dedup.get(bytes) {
            return *d;
        }
        while !self.data.len().is_multiple_of(16) {
            self.data.push(0);
        }
        let r = DataRef(self.data.len() as u64);
        self.data.extend_from_slice(bytes);
        self.dedup.insert(bytes.to_vec(), r);
        r
    }

    /// A plain-old-data struct into the data area.
    pub fn data_of<T: Copy>(&mut self, v: &T) -> DataRef {
        // SAFETY: T is Copy (plain data, no pointers owned); we read exactly
        // size_of::<T>() initialized bytes from a valid reference.
        let bytes = unsafe {
            std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>())
        };
        self.data(bytes)
    }

    /// `len` zeroed bytes of the data area that the restorer may write to
    /// (never shared with another blob, unlike [`data`](Self::data)).
    pub fn slot(&mut self, len: usize) -> DataRef {
        while !self.data.len().is_multiple_of(16) {
            self.data.push(0);
        }
        let r = DataRef(self.data.len() as u64);
        self.data.resize(self.data.len() + len, 0);
        r
    }

    /// A copy of `bytes` that the restorer may write to (never shared).
    pub fn data_private(&mut self, bytes: &[u8]) -> DataRef {
        let r = self.slot(bytes.len());
        let o = r.0 as usize;
        self.data[o..o + bytes.len()].copy_from_slice(bytes);
        r
    }

    /// Like [`data_of`](Self::data_of) for a struct holding, at byte offset
    /// `at`, a pointer to `target` (resolved at layout time).
    pub fn data_with_ptr<T: Copy>(&mut self, v: &T, at: usize, target: DataRef) -> DataRef {
        // SAFETY: as in data_of: plain data viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>())
        };
        assert!(at + 8 <= bytes.len());
        while !self.data.len().is_multiple_of(16) {
            self.data.push(0);
        }
        let r = DataRef(self.data.len() as u64);
        self.data.extend_from_slice(bytes);
        self.patches.push((r.0 + at as u64, target));
        r
    }

    fn push(&mut self, t: ThreadIdx, kind: Kind, args: &[Arg], what: String) {
        let mut a = [Arg::Val(0); 6];
        a[..args.len()].copy_from_slice(args);
        self.threads[t].push(Op {
            kind,
            args: a,
            what,
        });
    }

    /// A system call on thread `t`.
    pub fn syscall(
        &mut self,
        t: ThreadIdx,
        nr: i64,
        args: &[Arg],
        check: Check,
        what: impl Into<String>,
    ) {
        self.push(
            t,
            Kind::Syscall {
                nr: nr as u64,
                check,
            },
            args,
            what.into(),
        );
    }

    /// A system call on thread `t` whose result, an fd, is moved to fd `fd`.
    pub fn syscall_to_fd(
        &mut self,
        t: ThreadIdx,
        nr: i64,
        args: &[Arg],
        fd: i32,
        what: impl Into<String>,
    ) {
        self.push(
            t,
            Kind::SyscallFd {
                nr: nr as u64,
                fd: fd as u64,
            },
            args,
            what.into(),
        );
    }

    /// Read `len` bytes from `fd` at `offset` into `addr`, all of them.
    pub fn pread_full(
        &mut self,
        t: ThreadIdx,
        fd: i32,
        addr: u64,
        len: u64,
        offset: u64,
        what: impl Into<String>,
    ) {
        self.push(
            t,
            Kind::PreadFull,
            &[fd.into(), addr.into(), len.into(), offset.into()],
            what.into(),
        );
    }

    /// Thread `t`: store the tid that thread `thread` got (a 32-bit value) at
    /// `dst`, a blob made with [`data_private`](Self::data_private) or
    /// [`slot`](Self::slot). Only after `thread` was created on `t` (thread 0
    /// exists from the start): for structures that name a thread, such as a
    /// `sigevent` with `SIGEV_THREAD_ID`, when the thread's id is known only
    /// once it exists.
    pub fn store_tid(&mut self, t: ThreadIdx, dst: DataRef, thread: ThreadIdx, what: String) {
        assert!(thread < self.threads.len(), "no thread {thread}");
        self.push(t, Kind::StoreTid { thread }, &[Arg::Data(dst)], what);
    }

    /// Thread `t`: use AMX tile data once (load a one-tile configuration,
    /// zero the tile, release the tiles). A thread has no room for tile
    /// data until its first use, which the kernel traps to make it (only
    /// for a process that has permission, `ARCH_REQ_XCOMP_PERM`); pmig
    /// can set a thread's saved tile state only after. The tiles are in
    /// their initial state afterwards.
    pub fn amx_first_use(&mut self, t: ThreadIdx, what: impl Into<String>) {
        // Palette 1; tile 0: one row of 64 bytes (colsb[0] at byte 16,
        // rows[0] at byte 48).
        let mut cfg = [0u8; 64];
        cfg[0] = 1;
        cfg[16] = 64;
        cfg[48] = 1;
        let cfg = self.data(&cfg);
        self.push(t, Kind::AmxFirstUse, &[Arg::Data(cfg)], what.into());
    }

    /// Main thread: create thread `thread` (which then runs its own ops).
    pub fn clone_thread(&mut self, thread: ThreadIdx) {
        let what = format!("create thread {} (tid {})", thread, self.tids[thread]);
        self.push(0, Kind::Clone { thread }, &[], what);
    }

    /// Lay the plan out for an area at `base`. Every thread's op list gets a
    /// final trap appended.
    pub fn finish(mut self, base: u64, status_fd: i32) -> Area {
        for t in 0..self.threads.len() {
            self.push(
                t,
                Kind::Trap,
                &[Arg::Val(t as u64)],
                format!("thread {t} ready"),
            );
        }
        let code_len = round_up(BLOB.len() as u64, PAGE);
        let plan_at = base + code_len;
        let ops_at = plan_at + std::mem::size_of::<RawPlan>() as u64;
        let n_ops: usize = self.threads.iter().map(|t| t.len()).sum();
        let data_at = round_up(ops_at + (n_ops * std::mem::size_of::<RawOp>()) as u64, 16);
        let stacks_at = round_up(data_at + self.data.len() as u64, PAGE);
        // Stack of thread t: [stacks_at + t*THREAD_STACK, +THREAD_STACK)
        let len = stacks_at - base + THREAD_STACK * self.threads.len() as u64;

        // Global op order: main thread first, then each other thread.
        let mut firsts = Vec::new();
        let mut idx = 0u64;
        for t in &self.threads {
            firsts.push(idx);
            idx += t.len() as u64;
        }
        let area_end = base + len;
        let resolve = |a: &Arg| -> (u64, u64) {
            match a {
                Arg::Val(v) => (*v, 0),
                Arg::AreaStart => (base, 0),
                Arg::AreaEnd => (area_end, 0),
                Arg::AreaEndTo(limit) => (limit.saturating_sub(area_end), 0),
                Arg::Data(DataRef(o)) => (data_at + o, 0),
                Arg::Pid => (0, 1),
                Arg::Tid => (0, 2),
                Arg::PidAt(DataRef(o)) => (data_at + o, 3),
            }
        };
        let mut raw = Vec::with_capacity(n_ops);
        let mut descriptions = Vec::with_capacity(n_ops);
        for (t, ops) in self.threads.iter().enumerate() {
            for op in ops {
                let mut r = RawOp::default();
                for (k, a) in op.args.iter().enumerate() {
                    let (v, s) = resolve(a);
                    r.args[k] = v;
                    r.subst |= s << (4 * k);
                }
                match &op.kind {
                    Kind::Syscall { nr, check } => {
                        r.kind = 1;
                        r.nr = *nr;
                        match check {
                            Check::None => r.check = 0,
                            Check::NonNeg => r.check = 1,
                            Check::Eq(v) => {
                                r.check = 2;
                                r.expect = *v
                            }
                        }
                    }
                    Kind::PreadFull => r.kind = 2,
                    Kind::Clone { thread } => {
                        r.kind = 3;
                        r.args = [
                            self.clone_flags,
                            self.tids[*thread],
                            stacks_at + *thread as u64 * THREAD_STACK,
                            THREAD_STACK,
                            firsts[*thread],
                            self.threads[*thread].len() as u64,
                        ];
                        r.subst = 0;
                        r.expect = data_at + self.tid_slots.0 + 4 * *thread as u64;
                    }
                    Kind::StoreTid { thread } => {
                        r.kind = 6;
                        r.args[1] = if *thread == 0 {
                            0
                        } else {
                            data_at + self.tid_slots.0 + 4 * *thread as u64
                        };
                    }
                    Kind::Trap => r.kind = 4,
                    Kind::AmxFirstUse => r.kind = 7,
                    Kind::SyscallFd { nr, fd } => {
                        r.kind = 5;
                        r.nr = *nr;
                        r.expect = *fd;
                    }
                }
                raw.push(r);
                descriptions.push(if t == 0 {
                    op.what.clone()
                } else {
                    format!("thread {t}: {}", op.what)
                });
            }
        }
        let plan = RawPlan {
            magic: PLAN_MAGIC,
            version: PLAN_VERSION,
            status_fd: status_fd as u64,
            ops: ops_at,
            n_ops: n_ops as u64,
            main_first: 0,
            main_count: self.threads[0].len() as u64,
        };
        let mut bytes = vec![0u8; (stacks_at - base) as usize];
        bytes[..BLOB.len()].copy_from_slice(BLOB);
        let put = |bytes: &mut Vec<u8>, at: u64, src: &[u8]| {
            let o = (at - base) as usize;
            bytes[o..o + src.len()].copy_from_slice(src);
        };
        // SAFETY: RawPlan and RawOp are repr(C) plain data without padding
        // holes that matter (all fields initialized); we view them as bytes.
        unsafe {
            put(
                &mut bytes,
                plan_at,
                std::slice::from_raw_parts(
                    &plan as *const RawPlan as *const u8,
                    std::mem::size_of::<RawPlan>(),
                ),
            );
            put(
                &mut bytes,
                ops_at,
                std::slice::from_raw_parts(
                    raw.as_ptr() as *const u8,
                    raw.len() * std::mem::size_of::<RawOp>(),
                ),
            );
        }
        for (at, DataRef(target)) in &self.patches {
            let o = *at as usize;
            self.data[o..o + 8].copy_from_slice(&(data_at + target).to_le_bytes());
        }
        put(&mut bytes, data_at, &self.data);
        Area {
            base,
            bytes,
            code_len,
            len,
            entry: base,
            plan: plan_at,
            // Slot 0 of the stacks is the main thread's; clones use slots 1..n.
            main_stack_top: stacks_at + THREAD_STACK - 64,
            descriptions,
        }
    }

    /// The area size `finish` will produce (to choose a base address first).
    pub fn area_len(&self) -> u64 {
        let n_ops: usize = self.threads.iter().map(|t| t.len() + 1).sum();
        let code_len = round_up(BLOB.len() as u64, PAGE);
        let ops =
            std::mem::size_of::<RawPlan>() as u64 + (n_ops * std::mem::size_of::<RawOp>()) as u64;
        round_up(code_len + ops + 16 + self.data.len() as u64, PAGE)
            + THREAD_STACK * self.threads.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_plan_h() {
        assert_eq!(std::mem::size_of::<RawOp>(), 4 + 4 + 8 + 8 + 48 + 8);
        assert_eq!(std::mem::size_of::<RawPlan>(), 7 * 8);
        assert_eq!(OpFailure::SIZE, 32);
        let h = include_str!("../restorer/plan.h");
        assert!(h.contains("0x314e414c50474d50ULL"));
        assert!(h.contains("#define PLAN_VERSION 2"));
        assert!(h.contains("0x4c494146474d50ULL"));
    }

    #[test]
    fn blob_is_flat_code() {
        assert!(BLOB.len() > 64 && BLOB.len() < 64 * 1024);
    }

    #[test]
    fn finish_lays_out_ops_and_data() {
        let mut b = PlanBuilder::new(vec![0, 1234], 0x50f00);
        let d = b.data(b"hello");
        b.syscall(
            0,
            1,
            &[1i32.into(), d.into(), 5u64.into()],
            Check::Eq(5),
            "write",
        );
        b.clone_thread(1);
        b.syscall(1, 186, &[Arg::Tid], Check::NonNeg, "gettid");
        let predicted = b.area_len();
        let a = b.finish(0x10000000, 99);
        assert_eq!(a.len, predicted);
        assert_eq!(a.descriptions.len(), 5);
        assert_eq!(a.descriptions[4], "thread 1: thread 1 ready");
        assert_eq!(a.main_stack_top % 16, 0);
        // The main thread's stack must not be any clone's (slot t for thread t).
        let plan_off = (a.plan - a.base) as usize;
        let clone_op = plan_off + 56 + 80; // op 1 of the main thread
        let stack_lo =
            u64::from_le_bytes(a.bytes[clone_op + 40..clone_op + 48].try_into().unwrap());
        assert!(
            a.main_stack_top < stack_lo,
            "main stack overlaps thread 1's stack"
        );
        let plan_off = (a.plan - a.base) as usize;
        let magic = u64::from_le_bytes(a.bytes[plan_off..plan_off + 8].try_into().unwrap());
        assert_eq!(magic, PLAN_MAGIC);
        // the data landed where the write op points
        let op0 = plan_off + 56;
        let arg1 = u64::from_le_bytes(a.bytes[op0 + 32..op0 + 40].try_into().unwrap());
        let o = (arg1 - a.base) as usize;
        assert_eq!(&a.bytes[o..o + 5], b"hello");
        // thread op: tid substitution recorded in subst bits
        let op3 = op0 + 3 * 80;
        let subst = u64::from_le_bytes(a.bytes[op3 + 8..op3 + 16].try_into().unwrap());
        assert_eq!(subst & 0xf, 2);
    }

    #[test]
    fn pid_at_points_at_its_own_slot() {
        let mut b = PlanBuilder::new(vec![0], 0);
        let zeros = b.data(&[0u8; 4]);
        let slot = b.slot(4);
        assert_ne!(slot, zeros, "a slot is never shared with a data blob");
        assert_ne!(b.slot(4), slot);
        b.syscall(
            0,
            16,
            &[0i32.into(), 0x540fu64.into(), Arg::PidAt(slot)],
            Check::None,
            "ioctl",
        );
        let a = b.finish(0x10000000, 9);
        let op0 = (a.plan - a.base) as usize + 56;
        let subst = u64::from_le_bytes(a.bytes[op0 + 8..op0 + 16].try_into().unwrap());
        assert_eq!((subst >> 8) & 0xf, 3, "SUBST_PID_AT on argument 2");
        let arg2 = u64::from_le_bytes(a.bytes[op0 + 40..op0 + 48].try_into().unwrap());
        let o = (arg2 - a.base) as usize;
        assert_eq!(&a.bytes[o..o + 4], &[0u8; 4]);
        assert!(include_str!("../restorer/plan.h").contains("SUBST_PID_AT = 3"));
    }
}
