/* run_bin.h - what the suites that run the real program share: where the binary is
 * (MLSYS_LAB_BIN, set by tests/run-unit.sh) and reading a captured output file whole.
 * Header-only: each suite is its own executable. */
#ifndef MLSYS_TEST_RUN_BIN_H
#define MLSYS_TEST_RUN_BIN_H

#include <stdlib.h>
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

#endif
