/* ptracer PROG ARGS...: runs PROG as a ptrace'd child (PTRACE_TRACEME), passing
 * every signal on, and exits with its status. Used by the refusal test for an
 * already traced process when strace is not installed. Not a scenario. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: ptracer PROG ARGS...\n"); return 2; }
    pid_t c = fork();
    if (c < 0) { perror("fork"); return 2; }
    if (c == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL)) { perror("PTRACE_TRACEME"); _exit(2); }
        execv(argv[1], argv + 1);
        perror("execv");
        _exit(2);
    }
    for (int first = 1;; first = 0) {
        int st;
        if (waitpid(c, &st, 0) < 0) { perror("waitpid"); return 2; }
        if (WIFEXITED(st)) return WEXITSTATUS(st);
        if (WIFSIGNALED(st)) { signal(WTERMSIG(st), SIG_DFL); raise(WTERMSIG(st)); return 128 + WTERMSIG(st); }
        int sig = WSTOPSIG(st);
        if (first && sig == SIGTRAP) sig = 0;   /* the exec stop */
        ptrace(PTRACE_CONT, c, NULL, (void *)(long)sig);
    }
}
