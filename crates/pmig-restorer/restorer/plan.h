/*
 * The contract between pmig (Rust) and the freestanding restorer (C).
 *
 * pmig builds a "plan": a header followed by an array of ops. Each op is
 * one system call (or one of a few compound steps) that the restorer runs in
 * order. Resource modules in the engine only append ops, so supporting a new
 * kind of resource rarely needs new C.
 *
 * Every pointer in the plan is absolute: pmig maps the restorer area at an
 * address it chose, before the restorer starts.
 *
 * Keep in sync with crates/pmig-restorer/src/lib.rs (struct layouts are
 * checked by a unit test there).
 */
#ifndef PMIG_PLAN_H
#define PMIG_PLAN_H

typedef unsigned long u64;
typedef long s64;
typedef unsigned int u32;

#define PLAN_MAGIC 0x314e414c50474d50ULL /* "PMGPLAN1" */
#define PLAN_VERSION 2

enum op_kind {
	OP_SYSCALL = 1,      /* nr, args[0..6] */
	OP_PREAD_FULL = 2,   /* args: fd, addr, len, offset: loop until len bytes read */
	OP_CLONE_THREAD = 3, /* args: clone flags, set_tid (0 = any), stack low, stack size,
				op index of the thread's first op, number of its ops */
	OP_TRAP = 4,         /* args[0] = thread index: r15 = index; int3. Final stop. */
	OP_SYSCALL_FD = 5,   /* like OP_SYSCALL, the result must be an fd; it is moved
				to fd number `expect` (close-on-exec) */
	OP_STORE_TID = 6,    /* args: address of a 4-byte field, address of a thread's
				tid slot (0 = the main thread: getpid()). Stores the
				tid that thread got into the field. */
	OP_AMX_FIRST_USE = 7, /* args[0] = address of a 64-byte tile configuration:
				 ldtilecfg, tilezero tmm0, tilerelease. The first use of
				 AMX tile data in this thread, after which the kernel
				 keeps room for it (it has none before: XFD). */
};
/* OP_CLONE_THREAD stores the new thread's tid at the address in `expect`
 * (its tid slot) when that is not 0. */

/* How the result of OP_SYSCALL is checked. */
enum op_check {
	CHECK_NONE = 0,   /* ignore the result */
	CHECK_NONNEG = 1, /* fail if the result is negative (an errno) */
	CHECK_EQ = 2,     /* fail unless the result equals `expect` */
};

/* Per-argument substitutions, 4 bits per argument in `subst`. */
enum op_subst {
	SUBST_NONE = 0,
	SUBST_PID = 1, /* replaced by getpid() at run time */
	SUBST_TID = 2, /* replaced by gettid() at run time */
	SUBST_PID_AT = 3, /* the argument is the address of a 4-byte slot in the plan's
			     data: getpid() is stored there, the address is passed */
};

struct op {
	u32 kind;
	u32 check;
	u64 subst;
	u64 nr;
	u64 args[6];
	u64 expect;
};

struct plan {
	u64 magic;
	u64 version;
	u64 status_fd; /* failures are reported here as struct op_failure */
	u64 ops;       /* address of the op array */
	u64 n_ops;     /* total ops in the array */
	u64 main_first;/* the main thread runs ops [main_first, main_first + main_count) */
	u64 main_count;
};

#define FAILURE_MAGIC 0x4c494146474d50ULL /* "PMGFAIL" */
struct op_failure {
	u64 magic;
	u64 op_index;
	s64 result;
	u64 tid;
};

#endif
