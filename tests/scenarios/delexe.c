/* delexe: a program whose executable was deleted while it runs (a binary
 * replaced by an upgrade, a build directory cleaned). The scenario copies
 * itself into its working directory, runs the copy (exec, same pid), and
 * the copy deletes itself before READY.
 * Checked: /proc/self/exe still names a deleted file, that file still holds
 * an ELF image of the size the copy had, and a pattern in the data segment
 * is intact (the code that checks it runs from the deleted file). */
#include "common.h"
#include <sys/stat.h>

#define LEN (8 * 4096)
static char data[LEN];
static off_t exe_size;

static int check(void) {
    char link[512] = {0};
    CHECK(readlink("/proc/self/exe", link, sizeof link - 1) > 0, "readlink exe: %s", strerror(errno));
    size_t n = strlen(link);
    CHECK(n > 10 && !strcmp(link + n - 10, " (deleted)"), "exe is %s", link);
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0, "open /proc/self/exe: %s", strerror(errno));
    struct stat st;
    char magic[4] = {0};
    int ok = fstat(fd, &st) == 0 && pread(fd, magic, 4, 0) == 4;
    close(fd);
    CHECK(ok, "read the executable: %s", strerror(errno));
    CHECK(!memcmp(magic, "\177ELF", 4), "the executable is not ELF");
    CHECK(st.st_size == exe_size, "the executable is %lld bytes, was %lld", (long long)st.st_size,
          (long long)exe_size);
    CHECK(st.st_nlink == 0, "the executable has %lu links", (unsigned long)st.st_nlink);
    long bad = scn_verify(data, LEN, 51);
    CHECK(bad < 0, "data word %ld differs", bad);
    return 1;
}

int main(int argc, char **argv) {
    scn_name = "delexe";
    if (argc < 2 || strcmp(argv[1], "copy") != 0) {
        char name[] = "delexe-copy-XXXXXX";
        int out = mkstemp(name);
        int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (out < 0 || in < 0) scn_die("open the copy");
        static char buf[65536];
        ssize_t r;
        while ((r = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)r) != r) scn_die("write the copy");
        if (r < 0 || fchmod(out, 0755) || close(out) || close(in)) scn_die("finish the copy");
        char *args[] = {name, "copy", NULL};
        execv(name, args);
        scn_die("exec the copy");
    }
    struct stat st;
    if (stat(argv[0], &st)) scn_die("stat %s", argv[0]);
    exe_size = st.st_size;
    if (unlink(argv[0])) scn_die("unlink %s", argv[0]);
    scn_fill(data, LEN, 51);
    scn_run(check, NULL);
}
