/* exercise_progress.c - the learner's progress: a plain-text file under the XDG state
 * directory, one line per exercise ("ch03-ring-allreduce done hints=2 passed=1733140000",
 * with " failed=TIME" after a failed try).
 * It is written atomically (temp file, fsync, rename, fsync of the directory), so a crash
 * leaves the old or the new file, never half of one. A file that does not parse is renamed
 * to <path>.corrupt-<time> and reported, and the lines that did parse are kept: progress is
 * never silently overwritten or lost. Entries are found through a hash index, and at most
 * EX_PROGRESS_MAX_BYTES are read, so a huge file costs little. */
#include "exercise.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_HEADER "# mlsys-lab progress 1"

void ex_progress_free(ex_progress *p)
{
    free(p->e);
    free(p->idx);
    p->e = NULL;
    p->idx = NULL;
    p->n = p->cap = p->idx_cap = 0;
}

static unsigned hash_id(const char *s)
{
    unsigned h = 2166136261u;           /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot of id in the index: where it is, or the empty slot where it would go. */
static int slot_of(const ex_progress *p, const char *id)
{
    unsigned mask = (unsigned)p->idx_cap - 1, i = hash_id(id) & mask;
    while (p->idx[i] >= 0 && strcmp(p->e[p->idx[i]].id, id) != 0)
        i = (i + 1) & mask;
    return (int)i;
}

/* Keep the index at most half full, covering every entry. */
static void index_grow(ex_progress *p, int want)
{
    if (p->idx && 2 * want <= p->idx_cap)
        return;
    int cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    free(p->idx);
    p->idx = malloc((size_t)cap * sizeof *p->idx);
    if (!p->idx) {
        fprintf(stderr, "mlsys-lab: out of memory\n");
        exit(70);
    }
    p->idx_cap = cap;
    for (int i = 0; i < cap; i++)
        p->idx[i] = -1;
    for (int k = 0; k < p->n; k++)
        p->idx[slot_of(p, p->e[k].id)] = k;
}

ex_progress_entry *ex_progress_get(ex_progress *p, const char *id, int create)
{
    index_grow(p, p->n + 1);
    int slot = slot_of(p, id);
    if (p->idx[slot] >= 0)
        return &p->e[p->idx[slot]];
    if (!create)
        return NULL;
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 32;
        ex_progress_entry *e = realloc(p->e, (size_t)p->cap * sizeof *e);
        if (!e) {
            fprintf(stderr, "mlsys-lab: out of memory\n");
            exit(70);
        }
        p->e = e;
    }
    ex_progress_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    p->idx[slot] = p->n++;
    return e;
}

static int valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((ex_progress_entry *)0)->id))
        return 0;
    for (; *s; s++)
        if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) && *s != '-' && *s != '_')
            return 0;
    return 1;
}

static int parse_ll(const char *s, long long *out)
{
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* One entry line; 0 on success, -1 with why (then nothing of the line is kept). */
static int parse_line(ex_progress *p, char *line, char *why, size_t n)
{
    char *save, *id = strtok_r(line, " \t", &save), *st = strtok_r(NULL, " \t", &save);
    if (!id || !valid_id(id)) {
        snprintf(why, n, "not an exercise id");
        return -1;
    }
    if (!st || (strcmp(st, "done") && strcmp(st, "pending"))) {
        snprintf(why, n, "'%s' needs a status: done or pending", id);
        return -1;
    }
    if (ex_progress_get(p, id, 0)) {
        snprintf(why, n, "'%s' appears twice", id);
        return -1;
    }
    ex_progress_entry e;
    memset(&e, 0, sizeof e);
    e.done = !strcmp(st, "done");
    for (char *kv; (kv = strtok_r(NULL, " \t", &save));) {
        char *eq = strchr(kv, '=');
        long long v;
        if (!eq || parse_ll(eq + 1, &v) != 0) {
            snprintf(why, n, "'%.60s': expected key=number", kv);
            return -1;
        }
        *eq = 0;
        if (!strcmp(kv, "hints") && v < 1000)
            e.hints = (int)v;
        else if (!strcmp(kv, "passed"))
            e.passed_at = v;
        else if (!strcmp(kv, "failed"))
            e.failed_at = v;
        else {
            snprintf(why, n, "unknown field '%.60s'", kv);
            return -1;
        }
    }
    ex_progress_entry *slot = ex_progress_get(p, id, 1);
    snprintf(e.id, sizeof e.id, "%s", slot->id);
    *slot = e;
    return 0;
}

/* At most max bytes of a regular file, NUL-terminated; *len its length, *more when the file
 * is longer. NULL with errno on failure (EINVAL: not a regular file). */
static char *read_bounded(const char *path, size_t max, size_t *len, int *more)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        errno = S_ISREG(st.st_mode) ? e : EINVAL;
        return NULL;
    }
    /* room for what the file holds, up to the limit: never the limit itself */
    size_t want = (uint64_t)st.st_size < max ? (size_t)st.st_size : max;
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    size_t n = 0;
    while (n < want) {
        ssize_t got = read(fd, buf + n, want - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    char extra;
    *more = n == want && read(fd, &extra, 1) == 1;    /* longer than the limit (or it grew) */
    close(fd);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Move a corrupt file aside under a name that does not exist yet. */
static int back_up(const char *path, char *out, size_t n)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int k = 0; k < 100; k++) {
        if (k == 0)
            snprintf(out, n, "%s.corrupt-%s", path, stamp);
        else
            snprintf(out, n, "%s.corrupt-%s-%d", path, stamp, k);
        if (access(out, F_OK) != 0 && errno == ENOENT)
            return rename(path, out);
    }
    return -1;
}

int ex_progress_load(ex_progress *p, const char *path, char *msg, size_t n)
{
    memset(p, 0, sizeof *p);
    snprintf(p->path, sizeof p->path, "%s", path);
    msg[0] = 0;
    size_t len;
    int more = 0;
    char *text = read_bounded(path, EX_PROGRESS_MAX_BYTES, &len, &more);
    if (!text) {
        if (errno == ENOENT)
            return 0;
        if (errno == EINVAL)
            snprintf(msg, n, "the progress file %s is not a regular file: move it away to go on",
                     path);
        else
            snprintf(msg, n, "cannot read the progress file %s: %s", path, strerror(errno));
        return -1;
    }
    char why[200] = "";
    int lineno = 0, bad = 0, seen_header = 0;
    if (more) {
        snprintf(why, sizeof why, "it is larger than %u KiB; only its first %u KiB were read",
                 EX_PROGRESS_MAX_BYTES >> 10, EX_PROGRESS_MAX_BYTES >> 10);
        bad++;
        char *nl = strrchr(text, '\n');    /* the last line read may be cut: drop it */
        if (nl)
            nl[1] = 0;
    }
    /* lines one by one; a NUL inside a line ends that line's text and makes it bad */
    for (char *line = text, *next; line < text + len && *line != 0; line = next) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        next = nl ? nl + 1 : text + len;
        if (nl)
            *nl = 0;
        lineno++;
        size_t l = strlen(line);
        int has_nul = line + l < (nl ? nl : text + len);
        if (l && line[l - 1] == '\r')
            line[--l] = 0;
        char w[128] = "";
        if (!seen_header) {
            seen_header = 1;
            if (strcmp(line, PROGRESS_HEADER) != 0)
                snprintf(w, sizeof w, "line 1 is not '%s'", PROGRESS_HEADER);
        } else if (has_nul) {
            snprintf(w, sizeof w, "line %d contains NUL bytes", lineno);
        } else if (!l || line[0] == '#') {
            continue;
        } else if (parse_line(p, line, w + 20, sizeof w - 20) != 0) {
            char tmp[108];
            snprintf(tmp, sizeof tmp, "%s", w + 20);
            snprintf(w, sizeof w, "line %d: %s", lineno, tmp);
        }
        if (w[0] && !bad++)
            snprintf(why, sizeof why, "%s", w);
        else if (w[0] && more && bad == 2)
            snprintf(why + strlen(why), sizeof why - strlen(why), "; %s", w);
    }
    if (!seen_header && !bad++)
        snprintf(why, sizeof why, "it is empty (no '%s' line)", PROGRESS_HEADER);
    free(text);
    if (!bad)
        return 0;
    char bak[PATH_MAX + 64];
    if (back_up(path, bak, sizeof bak) != 0) {
        ex_progress_free(p);
        snprintf(msg, n, "the progress file %s is corrupt (%s) and could not be backed up (%s); "
                 "it was left as it is: move it away to go on", path, why, strerror(errno));
        return -1;
    }
    snprintf(msg, n, "the progress file %s is corrupt (%s): kept as %s; the %d good "
             "entr%s kept", path, why, bak, p->n, p->n == 1 ? "y is" : "ies are");
    return 1;
}

static int mkdir_parent(const char *path)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", path);
    for (char *s = d + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(d, 0755) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return 0;
}

int ex_progress_save(const ex_progress *p, char *msg, size_t n)
{
    if (mkdir_parent(p->path) != 0) {
        snprintf(msg, n, "cannot create the directory of %s: %s", p->path, strerror(errno));
        return -1;
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", p->path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(msg, n, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        snprintf(msg, n, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "%s\n# one line per exercise: ID done|pending hints=N passed=UNIX-TIME "
            "[failed=UNIX-TIME of the last failed try]\n", PROGRESS_HEADER);
    for (int i = 0; i < p->n; i++) {
        fprintf(f, "%s %s hints=%d passed=%lld", p->e[i].id, p->e[i].done ? "done" : "pending",
                p->e[i].hints, p->e[i].passed_at);
        if (p->e[i].failed_at)
            fprintf(f, " failed=%lld", p->e[i].failed_at);
        fputc('\n', f);
    }
    int bad = fflush(f) != 0 || fsync(fd) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        snprintf(msg, n, "cannot write %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, p->path) != 0) {
        snprintf(msg, n, "cannot rename %s to %s: %s", tmp, p->path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", p->path);
    char *slash = strrchr(d, '/');
    if (slash) {
        *slash = 0;
        int dfd = open(*d ? d : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

int exercise_record(const ex_context *cx, const exercise *ex, int passed, char *msg, size_t n)
{
    ex_progress p;
    int rc = ex_progress_load(&p, cx->progress, msg, n);
    if (rc < 0)
        return -1;
    ex_progress_entry *e = ex_progress_get(&p, ex->id, 1);
    if (passed && !e->done) {
        e->done = 1;
        e->passed_at = (long long)time(NULL);
    } else if (!passed) {
        e->failed_at = (long long)time(NULL);
    }
    char m2[512];
    int src = ex_progress_save(&p, m2, sizeof m2);
    if (src != 0 && !msg[0])
        snprintf(msg, n, "%s", m2);
    ex_progress_free(&p);
    return src != 0 ? -1 : rc;
}
