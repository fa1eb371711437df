/* fileio.c - the file plumbing every core/llm format shares: an atomic writer (temporary
 * file in the same directory, fsync, rename, fsync of the directory) so a good file is never
 * replaced by a half-written one, and a whole-file reader that refuses what is not a regular
 * file or is larger than the caller allows. */
#include "llm.h"
#include "llm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t llm_fnv1a64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int llm_write_atomic(const char *path, const void *const *parts, const size_t *sizes,
                     int nparts, char *err, size_t errlen)
{
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 32);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < nparts && rc == 0; i++)
        if (sizes[i] && write_all(fd, parts[i], sizes[i]) != 0) {
            snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
            rc = -1;
        }
    if (rc == 0 && fsync(fd) != 0) {
        snprintf(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
        rc = -1;
    }
    if (close(fd) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: close failed: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
    } else {                       /* make the rename itself durable */
        char *d = strdup(path);
        if (d) {
            int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
            free(d);
        }
    }
    free(tmp);
    return rc;
}

int llm_read_file(const char *path, uint64_t max_bytes, unsigned char **buf, size_t *len,
                  char *err, size_t errlen)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s)", path,
                 S_ISDIR(st.st_mode) ? "a directory" : "a device, pipe or socket");
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        snprintf(err, errlen, "%s: %llu bytes, more than the %llu this reader accepts", path,
                 (unsigned long long)st.st_size, (unsigned long long)max_bytes);
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        snprintf(err, errlen, "%s: cannot allocate %zu bytes", path, n);
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
            free(b);
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        snprintf(err, errlen, "%s: shrank while being read (%zu of %zu bytes)", path, got, n);
        free(b);
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}
