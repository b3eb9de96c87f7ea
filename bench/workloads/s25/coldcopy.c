/* bench/workloads/s25/coldcopy.c - how fast fresh memory fills, by a plain
 * copy and by UFFDIO_COPY (BENCHMARKS.md, "Pages of zeros in the page
 * streams (protocol 17)": where stop-copy's install spends its time).
 * Usage: coldcopy MIB CHUNK_KIB
 * Maps MIB MiB of fresh anonymous memory and fills it by memcpy from a
 * CHUNK_KIB buffer; unmaps it, maps MIB MiB again, registers it with a
 * userfaultfd (missing faults) and fills it by UFFDIO_COPY of the same
 * buffer. Prints both rates in GB/s. On a VM whose host backs guest memory
 * on first use, the first fill pays for that and the second, which gets
 * the pages just freed, does not. Build: cc -O2 -o coldcopy coldcopy.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: coldcopy MIB CHUNK_KIB\n");
		return 2;
	}
	size_t len = (size_t)atol(argv[1]) << 20, chunk = (size_t)atol(argv[2]) << 10;
	if (!len || !chunk || chunk % 4096 || len % chunk) {
		fprintf(stderr, "coldcopy: CHUNK_KIB must be a multiple of 4 dividing MIB MiB\n");
		return 2;
	}
	char *buf = malloc(chunk);
	if (!buf)
		return 1;
	memset(buf, 7, chunk);
	char *a = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED) {
		perror("coldcopy: mmap");
		return 1;
	}
	double t = now();
	for (size_t o = 0; o < len; o += chunk)
		memcpy(a + o, buf, chunk);
	double plain = now() - t;
	munmap(a, len);
	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	struct uffdio_api api = {.api = UFFD_API};
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
		perror("coldcopy: userfaultfd");
		return 1;
	}
	char *b = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct uffdio_register r = {.range = {(unsigned long)b, len},
				    .mode = UFFDIO_REGISTER_MODE_MISSING};
	if (b == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &r)) {
		perror("coldcopy: register");
		return 1;
	}
	t = now();
	for (size_t o = 0; o < len; o += chunk) {
		struct uffdio_copy c = {.dst = (unsigned long)b + o, .src = (unsigned long)buf,
					.len = chunk};
		if (ioctl(uffd, UFFDIO_COPY, &c)) {
			perror("coldcopy: UFFDIO_COPY");
			return 1;
		}
	}
	double uc = now() - t;
	printf("memcpy into fresh memory %.2f GB/s, UFFDIO_COPY into fresh memory %.2f GB/s\n",
	       len / plain / 1e9, len / uc / 1e9);
	return 0;
}
