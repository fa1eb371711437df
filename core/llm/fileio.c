/* fileio.c - the file plumbing every core/llm format shares: an atomic writer (temporary
 * file in the same directory, fsync, rename, fsync of the directory) so a good file is never
 * replaced by a half-written one, and never replaces what is not a regular file (a device,
 * a FIFO, a directory); and a whole-file reader that refuses what is not a regular file
 * (without blocking on a FIFO) or is larger than the caller allows. */
#include "llm.h"
#include "llm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
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

/* What stands at path, in words, when it is something a writer must not replace; NULL for
 * nothing there or a regular file. A symbolic link is judged by what it points to. */
static const char *not_replaceable(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return NULL;
    if (S_ISLNK(st.st_mode) && stat(path, &st) != 0)
        return "a symbolic link to nothing";
    if (S_ISREG(st.st_mode))
        return NULL;
    return S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a regular file";
}

static int write_target_check(const char *path, char *err, size_t errlen)
{
    const char *what = not_replaceable(path);
    if (what) {
        snprintf(err, errlen, "%s: not written: it is %s (name a regular file)", path, what);
        return -1;
    }
    return 0;
}

/* Fault injection for the tests of interrupted writes: with MLSYS_CRASH_BEFORE_RENAME (or
 * MLSYS_CRASH_AFTER_RENAME) set to a file's base name, a process writing that file kills
 * itself with SIGKILL once the temporary file is complete, just before (after) the rename
 * that commits it: the two moments an interruption is the hardest on a writer. */
static void crash_point(const char *var, const char *path)
{
    const char *name = getenv(var), *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (name && *name && !strcmp(name, base))
        raise(SIGKILL);
}

int llm_write_atomic(const char *path, const void *const *parts, const size_t *sizes,
                     int nparts, char *err, size_t errlen)
{
    if (write_target_check(path, err, errlen))
        return -1;
    /* a link to a regular file: replace the file it names, and keep the link */
    char *real = NULL;
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
        real = realpath(path, NULL);
    const char *shown = path;
    if (real)
        path = real;
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 32);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", shown);
        free(real);
        return -1;
    }
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);                   /* our own leftover: this pid is us */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create %s: %s", shown, tmp, strerror(errno));
        free(tmp);
        free(real);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < nparts && rc == 0; i++)
        if (sizes[i] && write_all(fd, parts[i], sizes[i]) != 0) {
            snprintf(err, errlen, "%s: write failed: %s", shown, strerror(errno));
            rc = -1;
        }
    if (rc == 0 && fsync(fd) != 0) {
        snprintf(err, errlen, "%s: fsync failed: %s", shown, strerror(errno));
        rc = -1;
    }
    if (close(fd) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: close failed: %s", shown, strerror(errno));
        rc = -1;
    }
    if (rc == 0)
        crash_point("MLSYS_CRASH_BEFORE_RENAME", path);
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: rename from %s failed: %s", shown, tmp, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
    } else {                       /* make the rename itself durable */
        crash_point("MLSYS_CRASH_AFTER_RENAME", path);
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
    free(real);
    return rc;
}

int llm_open_regular(const char *path, uint64_t max_bytes, int *fdp, uint64_t *size,
                     char *err, size_t errlen)
{
    *fdp = -1;
    /* O_NONBLOCK: opening a FIFO with no writer returns at once (and fstat then refuses
     * it) instead of waiting forever; on a regular file it changes nothing */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
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
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                 : "a device or socket");
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        snprintf(err, errlen, "%s: %llu bytes, more than the %llu this reader accepts", path,
                 (unsigned long long)st.st_size, (unsigned long long)max_bytes);
        close(fd);
        return -1;
    }
    *fdp = fd;
    *size = (uint64_t)st.st_size;
    return 0;
}

int llm_read_exact(int fd, void *buf, size_t n, const char *path, char *err, size_t errlen)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got != n) {
        snprintf(err, errlen, "%s: shrank while being read (%zu of %zu bytes)", path, got, n);
        return -1;
    }
    return 0;
}

int llm_read_file(const char *path, uint64_t max_bytes, unsigned char **buf, size_t *len,
                  char *err, size_t errlen)
{
    *buf = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    if (llm_open_regular(path, max_bytes, &fd, &size, err, errlen))
        return -1;
    if (size > mlsys_mem_available()) {
        snprintf(err, errlen, "%s: %llu bytes, more than this machine has free", path,
                 (unsigned long long)size);
        close(fd);
        return -1;
    }
    size_t n = (size_t)size;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        snprintf(err, errlen, "%s: cannot allocate %zu bytes", path, n);
        close(fd);
        return -1;
    }
    int rc = llm_read_exact(fd, b, n, path, err, errlen);
    close(fd);
    if (rc) {
        free(b);
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}
