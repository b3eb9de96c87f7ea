/*
 * pmig restorer: freestanding, position-independent, no libc.
 *
 * pmig maps this code, its plan and the thread stacks into a gap of the target
 * address space, then jumps to restorer_entry(plan) on a stack inside that
 * area. The restorer executes the plan: it tears down the old address space,
 * rebuilds the target's, recreates the threads, and every thread finally
 * stops on an int3 so that pmig (its tracer) loads the final registers and
 * removes the restorer area.
 */
#include "plan.h"

#define __NR_write 1
#define __NR_pread64 17
#define __NR_nanosleep 35
#define __NR_gettid 186
#define __NR_getpid 39
#define __NR_exit_group 231
#define __NR_clone3 435
#define __NR_close 3
#define __NR_dup3 292
#define O_CLOEXEC_ 02000000

static inline s64 sys6(u64 nr, u64 a, u64 b, u64 c, u64 d, u64 e, u64 f)
{
	s64 ret;
	register u64 r10 __asm__("r10") = d;
	register u64 r8 __asm__("r8") = e;
	register u64 r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

static __attribute__((noreturn)) void fail(const struct plan *p, u64 idx, s64 ret)
{
	struct op_failure f;
	f.magic = FAILURE_MAGIC;
	f.op_index = idx;
	f.result = ret;
	f.tid = (u64)sys6(__NR_gettid, 0, 0, 0, 0, 0, 0);
	sys6(__NR_write, p->status_fd, (u64)&f, sizeof(f), 0, 0, 0);
	for (;;)
		sys6(__NR_exit_group, 127, 0, 0, 0, 0, 0);
}

struct clone_args {
	u64 flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
		set_tid_size, cgroup;
};

static void run_ops(const struct plan *p, u64 first, u64 count);

/* The compiler may emit calls to these even in freestanding code. */
__attribute__((visibility("hidden"))) void *memset(void *d, int c, unsigned long n)
{
	unsigned char *p = d;
	while (n--)
		*p++ = (unsigned char)c;
	return d;
}

__attribute__((visibility("hidden"))) void *memcpy(void *d, const void *s, unsigned long n)
{
	unsigned char *p = d;
	const unsigned char *q = s;
	while (n--)
		*p++ = *q++;
	return d;
}

/* The new thread's entry: called on its own stack with callee-saved registers
 * carrying the plan and its op range (see do_clone). */
__attribute__((noreturn, used, noipa, visibility("hidden"))) void
thread_start(const struct plan *p, u64 first, u64 count)
{
	run_ops(p, first, count);
	fail(p, first + count, -1); /* a thread's ops must end with OP_TRAP */
}

static s64 do_clone(const struct plan *p, struct clone_args *ca, u64 first, u64 count)
{
	s64 ret;
	register u64 r12 __asm__("r12") = (u64)p;
	register u64 r13 __asm__("r13") = first;
	register u64 r14 __asm__("r14") = count;
	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 /* child: new stack, 16-byte aligned by pmig */
			 "xor %%ebp, %%ebp\n\t"
			 "mov %%r12, %%rdi\n\t"
			 "mov %%r13, %%rsi\n\t"
			 "mov %%r14, %%rdx\n\t"
			 "call thread_start\n\t"
			 "ud2\n"
			 "1:\n\t"
			 : "=a"(ret)
			 : "a"((u64)__NR_clone3), "D"((u64)ca), "S"((u64)sizeof(*ca)), "r"(r12),
			   "r"(r13), "r"(r14)
			 : "rcx", "r11", "memory");
	return ret;
}

static u64 subst(u64 v, u64 code)
{
	switch (code) {
	case SUBST_PID:
		return (u64)sys6(__NR_getpid, 0, 0, 0, 0, 0, 0);
	case SUBST_TID:
		return (u64)sys6(__NR_gettid, 0, 0, 0, 0, 0, 0);
	case SUBST_PID_AT:
		*(volatile u32 *)v = (u32)sys6(__NR_getpid, 0, 0, 0, 0, 0, 0);
		return v;
	default:
		return v;
	}
}

static void run_ops(const struct plan *p, u64 first, u64 count)
{
	const struct op *ops = (const struct op *)p->ops;
	for (u64 i = first; i < first + count; i++) {
		const struct op *o = &ops[i];
		u64 a[6];
		for (int k = 0; k < 6; k++)
			a[k] = subst(o->args[k], (o->subst >> (4 * k)) & 0xf);
		s64 ret;
		switch (o->kind) {
		case OP_SYSCALL:
			ret = sys6(o->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
			if ((o->check == CHECK_NONNEG && ret < 0) ||
			    (o->check == CHECK_EQ && (u64)ret != o->expect))
				fail(p, i, ret);
			break;
		case OP_PREAD_FULL: {
			u64 done = 0;
			while (done < a[2]) {
				u64 want = a[2] - done;
				if (want > 0x40000000UL)
					want = 0x40000000UL;
				ret = sys6(__NR_pread64, a[0], a[1] + done, want, a[3] + done, 0, 0);
				if (ret == -4 /* EINTR */)
					continue;
				if (ret <= 0)
					fail(p, i, ret == 0 ? -5 /* EIO: short image */ : ret);
				done += (u64)ret;
			}
			break;
		}
		case OP_CLONE_THREAD: {
			struct clone_args ca = { 0 };
			u64 tid = a[1];
			ca.flags = a[0];
			ca.stack = a[2];
			ca.stack_size = a[3];
			if (tid) {
				ca.set_tid = (u64)&tid;
				ca.set_tid_size = 1;
			}
			ret = do_clone(p, &ca, a[4], a[5]);
			/* pmig asks for a tid only when no live task has it, but the
			 * kernel frees a dead thread's id a moment after its process
			 * was reaped: retry for up to about 200 ms. */
			for (int tries = 0; ret == -17 /* EEXIST */ && tid && tries < 200; tries++) {
				struct { long sec, nsec; } ts = { 0, 1000000 };
				sys6(__NR_nanosleep, (u64)&ts, 0, 0, 0, 0, 0);
				ret = do_clone(p, &ca, a[4], a[5]);
			}
			if (ret == -17 /* EEXIST */ && tid) {
				/* The thread id is taken: the thread gets a new one. */
				ca.set_tid = 0;
				ca.set_tid_size = 0;
				ret = do_clone(p, &ca, a[4], a[5]);
			}
			if (ret < 0)
				fail(p, i, ret);
			if (o->expect)
				*(volatile u32 *)o->expect = (u32)ret;
			break;
		}
		case OP_STORE_TID: {
			u32 tid = a[1] ? *(volatile u32 *)a[1]
				       : (u32)sys6(__NR_getpid, 0, 0, 0, 0, 0, 0);
			*(volatile u32 *)a[0] = tid;
			break;
		}
		case OP_SYSCALL_FD:
			ret = sys6(o->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
			if (ret < 0)
				fail(p, i, ret);
			if ((u64)ret != o->expect) {
				s64 d = sys6(__NR_dup3, (u64)ret, o->expect, O_CLOEXEC_, 0, 0, 0);
				sys6(__NR_close, (u64)ret, 0, 0, 0, 0, 0);
				if (d < 0)
					fail(p, i, d);
			}
			break;
		case OP_AMX_FIRST_USE:
			/* A thread has no room for AMX tile data until it first
			 * touches it: the kernel traps that use (XFD) and makes the
			 * room then, if the process has permission. Touched here, so
			 * that pmig can set the thread's saved tile state. */
			__asm__ volatile("ldtilecfg (%0)\n\ttilezero %%tmm0\n\ttilerelease"
					 : : "r"(a[0]) : "memory");
			break;
		case OP_TRAP:
			__asm__ volatile("mov %0, %%r15\n\tint3" : : "r"(a[0]) : "r15", "memory");
			/* pmig replaces all registers at this stop; reaching here is a bug. */
			fail(p, i, -1);
		default:
			fail(p, i, -22);
		}
	}
}

__attribute__((noreturn, section(".text.entry"))) void restorer_entry(const struct plan *p)
{
	if (p->magic != PLAN_MAGIC || p->version != PLAN_VERSION)
		fail(p, ~0UL, -22);
	run_ops(p, p->main_first, p->main_count);
	fail(p, p->main_first + p->main_count, -1);
}
