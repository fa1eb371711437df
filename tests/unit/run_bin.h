/* run_bin.h - what the suites that run the real program share: where the binary is
 * (MLSYS_LAB_BIN, set by tests/run-unit.sh) and reading a captured output file whole.
 * Header-only: each suite is its own executable. */
#ifndef MLSYS_TEST_RUN_BIN_H
#define MLSYS_TEST_RUN_BIN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static inline const char *bin(void)
{
    const char *b = getenv("MLSYS_LAB_BIN");
    return b && *b ? b : "build/mlsys-lab";
}

/* The whole of fd from its start, NUL-terminated; the caller frees it. */
static inline char *slurp_fd(int fd)
{
    size_t len = 0, cap = 8192;
    char *s = malloc(cap);
    lseek(fd, 0, SEEK_SET);
    for (;;) {
        if (len + 4096 > cap)
            s = realloc(s, cap *= 2);
        ssize_t got = read(fd, s + len, cap - len - 1);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    s[len] = 0;
    return s;
}

/* Run the program with the arguments fmt makes (split by the shell, so quote what needs it),
 * stdout and stderr captured apart, under a 120 s limit. Free with bin_result_free. */
typedef struct bin_result {
    int status;             /* exit status, or 128 + the signal */
    char *out, *err;
} bin_result;

static inline bin_result run_bin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline bin_result run_bin(const char *fmt, ...)
{
    char args[1024], cmd[2048], errpath[] = "/tmp/mlsys-test-err-XXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    bin_result r = {-1, NULL, NULL};
    int fd = mkstemp(errpath);
    if (fd < 0)
        return r;
    snprintf(cmd, sizeof cmd, "exec timeout -k 5 120 '%s' %s 2>%s", bin(), args, errpath);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    if (!p) {
        close(fd);
        unlink(errpath);
        return r;
    }
    r.out = slurp_fd(fileno(p));
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.err = slurp_fd(fd);
    close(fd);
    unlink(errpath);
    return r;
}

static inline void bin_result_free(bin_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

#endif
