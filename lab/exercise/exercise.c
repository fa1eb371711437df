/* exercise.c - what every exercise kind shares: where the source tree, the core library and
 * the learner's workspace are; copying starters into the workspace; verdicts; judging a
 * predicted number or choice against the lab's own answer within the stated tolerance; and
 * reading the "key = value" answers files of experiments. */
#include "exercise.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *ex_kind_name(ex_kind k)
{
    switch (k) {
    case EX_PREDICT: return "predict";
    case EX_EXPERIMENT: return "experiment";
    case EX_IMPLEMENT: return "implement";
    }
    return "?";
}

const char *ex_failure_name(ex_failure f)
{
    switch (f) {
    case EXF_NONE: return "passed";
    case EXF_ANSWER: return "answer";
    case EXF_COMPILE: return "compile error";
    case EXF_WRONG: return "wrong result";
    case EXF_DEADLOCK: return "deadlock";
    case EXF_CRASH: return "crash";
    case EXF_HANG: return "hang";
    case EXF_RUNTIME: return "runtime error";
    case EXF_SETUP: return "cannot check";
    }
    return "?";
}

/* ---- paths ---- */

int ex_pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void parent_dir(char *p)
{
    char *s = strrchr(p, '/');
    if (s && s != p)
        *s = 0;
    else if (s)
        s[1] = 0;
}

static int is_src_tree(const char *dir)
{
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/core/mlsys.h", dir);
    snprintf(b, sizeof b, "%s/assets/exercises", dir);
    return is_file(a) && is_dir(b);
}

/* The first of dir/name, dir/../name that exists, into out. */
static int find_near(const char *exe_dir, const char *name, char *out, size_t n)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", exe_dir);
    for (int up = 0; up < 2; up++) {
        ex_pathf(out, n, "%s/%s", d, name);
        if (is_file(out))
            return 0;
        parent_dir(d);
    }
    out[0] = 0;
    return -1;
}

int ex_context_init(ex_context *cx, char *err, size_t n)
{
    memset(cx, 0, sizeof *cx);
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        snprintf(err, n, "cannot read /proc/self/exe: %s", strerror(errno));
        return -1;
    }
    exe[len] = 0;
    parent_dir(exe);

    const char *s = getenv("MLSYS_LAB_SRC");
    if (s && *s) {
        if (!is_src_tree(s)) {
            snprintf(err, n, "MLSYS_LAB_SRC=%s has no core/mlsys.h and assets/exercises", s);
            return -1;
        }
        snprintf(cx->src, sizeof cx->src, "%s", s);
    } else {
        char d[PATH_MAX];
        snprintf(d, sizeof d, "%s", exe);
        for (int up = 0; up < 5 && !cx->src[0]; up++) {
            if (is_src_tree(d))
                snprintf(cx->src, sizeof cx->src, "%s", d);
            parent_dir(d);
        }
        if (!cx->src[0]) {
            snprintf(err, n, "cannot find the source tree (core/mlsys.h, assets/exercises) "
                     "above %s; set MLSYS_LAB_SRC", exe);
            return -1;
        }
    }

    s = getenv("MLSYS_LAB_LIB");
    if (s && *s) {
        if (is_dir(s))
            snprintf(cx->lib, sizeof cx->lib, "%s/libmlsys.a", s);
        else
            snprintf(cx->lib, sizeof cx->lib, "%s", s);
    } else {
        find_near(exe, "libmlsys.a", cx->lib, sizeof cx->lib);
    }
    s = getenv("MLSYS_LAB_BIN");
    if (s && *s)
        snprintf(cx->bin, sizeof cx->bin, "%s", s);
    else
        find_near(exe, "mlsys-lab", cx->bin, sizeof cx->bin);
    if (cx->bin[0] && cx->bin[0] != '/') {      /* relative to where we were started */
        char cwd[PATH_MAX], tmp[PATH_MAX];
        if (getcwd(cwd, sizeof cwd)) {
            ex_pathf(tmp, sizeof tmp, "%s/%s", cwd, cx->bin);
            snprintf(cx->bin, sizeof cx->bin, "%s", tmp);
        }
    }

    const char *home = getenv("HOME");
    s = getenv("MLSYS_LAB_HOME");
    const char *xdg = getenv("XDG_DATA_HOME");
    if (s && *s)
        snprintf(cx->workspace, sizeof cx->workspace, "%s/exercises", s);
    else if (xdg && *xdg)
        snprintf(cx->workspace, sizeof cx->workspace, "%s/mlsys-lab/exercises", xdg);
    else if (home && *home)
        snprintf(cx->workspace, sizeof cx->workspace, "%s/.local/share/mlsys-lab/exercises", home);
    else {
        snprintf(err, n, "neither MLSYS_LAB_HOME nor HOME is set: where should the workspace go?");
        return -1;
    }
    char state[PATH_MAX];
    if (ex_state_dir(state, sizeof state) != 0) {
        snprintf(err, n, "neither MLSYS_LAB_HOME, XDG_STATE_HOME nor HOME is set: where should "
                 "progress go?");
        return -1;
    }
    ex_pathf(cx->progress, sizeof cx->progress, "%s/progress", state);

    s = getenv("MLSYS_LAB_CC");
    snprintf(cx->cc, sizeof cx->cc, "%s", s && *s ? s : "cc");
    long t;
    s = getenv("MLSYS_EX_TIMEOUT_MS");
    if (s && mlsys_parse_long(s, &t) == 0 && t > 0 && t < 600000)
        cx->timeout_override_ms = (int)t;
    s = getenv("MLSYS_EX_LIMIT_MS");
    if (s && mlsys_parse_long(s, &t) == 0 && t > 0 && t < 600000)
        cx->limit_override_ms = (int)t;
    return 0;
}

int ex_state_dir(char *out, size_t n)
{
    const char *own = getenv("MLSYS_LAB_HOME"), *xdg = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    if (own && *own)            /* one learner's everything under one folder */
        return ex_pathf(out, n, "%s", own);
    if (xdg && *xdg)
        return ex_pathf(out, n, "%s/mlsys-lab", xdg);
    if (home && *home)
        return ex_pathf(out, n, "%s/.local/state/mlsys-lab", home);
    if (n)
        out[0] = 0;
    return -1;
}

void ex_asset_path(const ex_context *cx, const exercise *ex, const char *name, char *out, size_t n)
{
    ex_pathf(out, n, "%s/assets/exercises/%s/%s", cx->src, ex->id, name ? name : "");
}

void ex_work_path(const ex_context *cx, const exercise *ex, char *out, size_t n)
{
    if (!ex->workfile) {
        out[0] = 0;
        return;
    }
    ex_pathf(out, n, "%s/%s/%s", cx->workspace, ex->id, ex->workfile);
}

/* ---- files ---- */

static int mkdir_p(const char *path, char *err, size_t n)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            snprintf(err, n, "cannot create %s: %s", tmp, strerror(errno));
            return -1;
        }
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        snprintf(err, n, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

char *ex_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0, got;
    char *s = mlsys_xmalloc(cap);
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 1024) {
            cap *= 2;
            char *t = realloc(s, cap);
            if (!t) {
                free(s);
                fclose(f);
                return NULL;
            }
            s = t;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(s);
        return NULL;
    }
    s[n] = 0;
    if (len)
        *len = n;
    return s;
}

int ex_copy_file(const char *from, const char *to, char *err, size_t n)
{
    size_t len;
    char *data = ex_read_file(from, &len);
    if (!data) {
        snprintf(err, n, "cannot read %s: %s", from, strerror(errno));
        return -1;
    }
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", to, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = -1;
    if (!f) {
        snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (fwrite(data, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        goto out;
    }
    fclose(f);
    if (rename(tmp, to) != 0) {
        snprintf(err, n, "cannot rename %s to %s: %s", tmp, to, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(data);
    return rc;
}

void ex_contract_path(const ex_context *cx, const exercise *ex, char *out, size_t n)
{
    if (ex->kind != EX_IMPLEMENT) {
        if (n)
            out[0] = 0;
        return;
    }
    ex_pathf(out, n, "%s/%s/api.h", cx->workspace, ex->id);
}

/* The contract beside the learner's file: a copy of the shipped api.h, made read-only, put
 * back when missing or changed (an edited copy is kept as api.h.bak). The learner's
 * #include "api.h" finds this copy and the check's finds the shipped one: refreshed before
 * every check, they are the same text. */
static int sync_contract(const ex_context *cx, const exercise *ex, char *err, size_t n)
{
    char from[PATH_MAX], to[PATH_MAX], bak[PATH_MAX + 8];
    ex_asset_path(cx, ex, "api.h", from, sizeof from);
    ex_contract_path(cx, ex, to, sizeof to);
    if (!to[0] || !is_file(from))
        return 0;
    size_t la, lb;
    char *a = ex_read_file(from, &la), *b = ex_read_file(to, &lb);
    int same = a && b && la == lb && !memcmp(a, b, la), had = b != NULL;
    free(a);
    free(b);
    if (same)
        return 0;
    if (had) {
        snprintf(bak, sizeof bak, "%s.bak", to);
        chmod(to, 0644);
        if (rename(to, bak) != 0) {
            snprintf(err, n, "cannot keep your edited %s as %s: %s", to, bak, strerror(errno));
            return -1;
        }
    }
    if (ex_copy_file(from, to, err, n) != 0)
        return -1;
    chmod(to, 0444);                /* read, not written: the check never sees an edit */
    return 0;
}

int ex_workspace_sync(const ex_context *cx, char *err, size_t n)
{
    int created = 0;
    for (int i = 0; i < ex_count(); i++) {
        const exercise *ex = ex_at(i);
        if (!ex->starter || !ex->workfile)
            continue;
        char dir[PATH_MAX], work[PATH_MAX], from[PATH_MAX];
        ex_pathf(dir, sizeof dir, "%s/%s", cx->workspace, ex->id);
        ex_work_path(cx, ex, work, sizeof work);
        if (!is_file(work)) {
            if (mkdir_p(dir, err, n) != 0)
                return -1;
            ex_asset_path(cx, ex, ex->starter, from, sizeof from);
            if (ex_copy_file(from, work, err, n) != 0)
                return -1;
            created++;
        }
        if (sync_contract(cx, ex, err, n) != 0)
            return -1;
    }
    return created;
}

int ex_workspace_reset(const ex_context *cx, const exercise *ex, char *err, size_t n)
{
    if (!ex->starter || !ex->workfile)
        return 0;
    char dir[PATH_MAX], work[PATH_MAX], from[PATH_MAX], bak[PATH_MAX + 8];
    ex_pathf(dir, sizeof dir, "%s/%s", cx->workspace, ex->id);
    if (mkdir_p(dir, err, n) != 0)
        return -1;
    ex_work_path(cx, ex, work, sizeof work);
    if (is_file(work)) {
        snprintf(bak, sizeof bak, "%s.bak", work);
        if (ex_copy_file(work, bak, err, n) != 0)
            return -1;
    }
    ex_asset_path(cx, ex, ex->starter, from, sizeof from);
    if (ex_copy_file(from, work, err, n) != 0)
        return -1;
    return sync_contract(cx, ex, err, n);
}

/* One line into the contract's text: a new line, or (join) after a space on the last one. */
static void contract_put(char **o, const char *text, size_t len, int join)
{
    if (join) {
        (*o)[-1] = ' ';         /* the last line's newline becomes the space between */
    }
    memcpy(*o, text, len);
    *o += len;
    *(*o)++ = '\n';
}

enum { CT_NONE, CT_PROSE, CT_INDENTED, CT_CODE };

int ex_contract_hang(const char *line)
{
    int lead = (int)strspn(line, " ");
    if (!lead)
        return 0;
    /* a table row, "get()      remove and...", not an aligned formula, "A_t     = ..." */
    const char *gap = strstr(line + lead, "  ");
    if (gap && gap - line < 40 && isalpha((unsigned char)gap[strspn(gap, " ")]))
        return (int)(gap - line) + (int)strspn(gap, " ");
    return lead + 2;
}

char *ex_contract_text(const ex_context *cx, const exercise *ex)
{
    if (ex->kind != EX_IMPLEMENT)
        return NULL;
    char from[PATH_MAX];
    ex_asset_path(cx, ex, "api.h", from, sizeof from);
    char *s = ex_read_file(from, NULL);
    if (!s)
        return NULL;
    /* Comments become text: the lines of a paragraph joined (a terminal wraps them at its
     * own width), an indented line (a formula, a table row) kept whole with the lines that
     * continue it; a declaration over several lines becomes one. The guard goes. */
    char *out = mlsys_xcalloc(1, 2 * strlen(s) + 2), *o = out;
    int in_comment = 0, last = CT_NONE, last_indent = 0;
    for (char *p = s; *p;) {
        char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char *next = p + len + (e != NULL);
        p[len] = 0;
        if (!in_comment && (!strncmp(p, "#ifndef EX_API_H", 16) ||
                            !strncmp(p, "#define EX_API_H", 16) || !strncmp(p, "#endif", 6))) {
            p = next;
            continue;
        }
        char *t = p;
        while (*t == ' ' || *t == '\t')
            t++;
        if (!in_comment && strncmp(t, "/*", 2)) {       /* code, or a blank line */
            if (!*t) {
                if (last != CT_NONE && o > out)
                    *o++ = '\n';
                last = CT_NONE;
            } else {
                int join = last == CT_CODE && t != p;
                contract_put(&o, join ? t : p, strlen(join ? t : p), join);
                last = CT_CODE;
            }
            p = next;
            continue;
        }
        if (!in_comment) {
            t += 2;                 /* past the opening */
            in_comment = 1;
            last = CT_NONE;
        } else if (*t == '*' && t[1] != '/') {
            t++;                    /* the star that starts each line of a comment */
        }
        char *close = strstr(t, "*/");
        if (close) {
            *close = 0;
            in_comment = 0;
        }
        if (*t == ' ')
            t++;
        int indent = 0;
        while (t[indent] == ' ')
            indent++;
        size_t tl = strlen(t);
        while (tl && t[tl - 1] == ' ')
            tl--;
        if (tl == (size_t)indent) {
            last = CT_NONE;         /* an empty comment line ends a paragraph */
        } else if (indent == 0) {
            contract_put(&o, t, tl, last == CT_PROSE);
            last = CT_PROSE;
        } else if (last == CT_INDENTED && indent > last_indent) {
            contract_put(&o, t + indent, tl - (size_t)indent, 1);
        } else {
            contract_put(&o, t, tl, 0);
            last = CT_INDENTED;
            last_indent = indent;
        }
        if (!in_comment)
            last = CT_NONE;
        p = next;
    }
    while (o > out && (o[-1] == '\n' || o[-1] == ' '))
        o--;
    *o = 0;
    free(s);
    return out;
}

/* ---- verdicts ---- */

void ex_verdict_init(ex_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->result = EX_PASS;
    v->failure = EXF_NONE;
    v->world_size = v->rank = -1;
    v->element = -1;
}

void ex_verdict_free(ex_verdict *v)
{
    free(v->detail);
    v->detail = NULL;
    v->detail_len = v->detail_cap = 0;
}

void ex_verdict_set(ex_verdict *v, ex_result r, ex_failure f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->summary, sizeof v->summary, fmt, ap);
    va_end(ap);
    v->result = r;
    v->failure = f;
}

void ex_verdict_add(ex_verdict *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        va_end(ap2);
        return;
    }
    if (v->detail_len + (size_t)need + 2 > v->detail_cap) {
        size_t cap = v->detail_cap ? v->detail_cap : 512;
        while (cap < v->detail_len + (size_t)need + 2)
            cap *= 2;
        char *d = realloc(v->detail, cap);
        if (!d) {
            va_end(ap2);
            return;
        }
        v->detail = d;
        v->detail_cap = cap;
    }
    vsnprintf(v->detail + v->detail_len, (size_t)need + 1, fmt, ap2);
    va_end(ap2);
    v->detail_len += (size_t)need;
    if (!need || v->detail[v->detail_len - 1] != '\n') {
        v->detail[v->detail_len++] = '\n';
        v->detail[v->detail_len] = 0;
    }
}

/* ---- predict ---- */

uint64_t ex_random_seed(void)
{
    uint64_t s = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &s, sizeof s) != (ssize_t)sizeof s)
            s = 0;
        close(fd);
    }
    if (!s)
        s = mlsys_now_ns() ^ ((uint64_t)getpid() << 32);
    return s ? s : 1;
}

long ex_draw_int(mlsys_rng *r, long lo, long hi)
{
    if (hi <= lo)
        return lo;
    return lo + (long)(mlsys_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

void ex_set_choices(ex_question *q, mlsys_rng *r, const char *const *texts, int n)
{
    int order[EX_MAX_CHOICES];
    if (n > EX_MAX_CHOICES)
        n = EX_MAX_CHOICES;
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {      /* Fisher-Yates */
        int j = (int)ex_draw_int(r, 0, i);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    q->nchoices = n;
    for (int i = 0; i < n; i++) {
        snprintf(q->choices[i], sizeof q->choices[i], "%s", texts[order[i]]);
        if (order[i] == 0)
            q->answer = i;
    }
}

char *ex_fmt_int(char *buf, size_t n, long long v)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", v < 0 ? -v : v);
    size_t len = strlen(digits), k = 0;
    char tmp[48];
    if (v < 0)
        tmp[k++] = '-';
    for (size_t i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0)
            tmp[k++] = ',';
        tmp[k++] = digits[i];
    }
    tmp[k] = 0;
    snprintf(buf, n, "%s", tmp);
    return buf;
}

void exercise_predict_draw(const exercise *ex, uint64_t seed, ex_question *q)
{
    memset(q, 0, sizeof *q);
    if (ex->kind == EX_PREDICT && ex->draw)
        ex->draw(seed, q);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

/* "42", "-1.5e6", "7/4", "1,000,000" (commas as thousands separators), with an optional
 * trailing unit word that is ignored ("94000 bytes"). 0 on success. */
static int parse_number(const char *in, double *out)
{
    char buf[128];
    size_t k = 0;
    for (const char *p = in; *p && k + 1 < sizeof buf; p++)
        if (*p != ',' && *p != '_')
            buf[k++] = *p;
    buf[k] = 0;
    char *s = trim(buf), *end;
    if (!*s)
        return -1;
    errno = 0;
    double a = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(a))
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end == '/') {
        char *e2;
        double b = strtod(end + 1, &e2);
        if (e2 == end + 1 || b == 0.0 || !isfinite(b))
            return -1;
        a /= b;
        end = e2;
    }
    while (isspace((unsigned char)*end))
        end++;
    for (; *end; end++)       /* a unit word may follow; digits may not */
        if (!isalpha((unsigned char)*end) && *end != '%' && !isspace((unsigned char)*end))
            return -1;
    *out = a;
    return 0;
}

static int parse_choice(const ex_question *q, const char *in, int *out)
{
    char buf[160];
    snprintf(buf, sizeof buf, "%s", in);
    char *s = trim(buf);
    size_t n = strlen(s);
    if (n == 0)
        return -1;
    if (n >= 2 && s[1] == ')')            /* "b)" or "b) text" */
        n = 1;
    if (n == 1 && isalpha((unsigned char)s[0])) {
        int i = tolower((unsigned char)s[0]) - 'a';
        if (i >= 0 && i < q->nchoices) {
            *out = i;
            return 0;
        }
    }
    if (n == 1 && isdigit((unsigned char)s[0])) {
        int i = s[0] - '1';
        if (i >= 0 && i < q->nchoices) {
            *out = i;
            return 0;
        }
    }
    for (int i = 0; i < q->nchoices; i++)
        if (!strcasecmp(s, q->choices[i])) {
            *out = i;
            return 0;
        }
    /* "y"/"n" for yes/no questions */
    for (int i = 0; i < q->nchoices; i++)
        if (strlen(s) == 1 && tolower((unsigned char)s[0]) == tolower((unsigned char)q->choices[i][0])
            && (!strcasecmp(q->choices[i], "yes") || !strcasecmp(q->choices[i], "no"))) {
            *out = i;
            return 0;
        }
    return -1;
}

int ex_question_judge(const ex_question *q, const char *answer, ex_verdict *v)
{
    if (!answer || !*answer) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "no answer given");
        return v->result;
    }
    if (q->nchoices > 0) {
        int pick;
        if (parse_choice(q, answer, &pick) != 0) {
            ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "'%s' is not one of the choices (answer with "
                           "a letter, a) to %c))", answer, 'a' + q->nchoices - 1);
            return v->result;
        }
        int right = (int)q->answer;
        if (pick == right)
            ex_verdict_set(v, EX_PASS, EXF_NONE, "right: %c) %s", 'a' + right, q->choices[right]);
        else
            ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "not %c) %s", 'a' + pick, q->choices[pick]);
        return v->result;
    }
    double x;
    if (parse_number(answer, &x) != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "'%s' is not a number (plain, 1.5e6 or a "
                       "fraction like 7/4)", answer);
        return v->result;
    }
    double tol = fmax(q->abs_tol, q->rel_tol * fabs(q->answer));
    if (fabs(x - q->answer) <= tol)
        ex_verdict_set(v, EX_PASS, EXF_NONE, "right: %.10g%s%s", q->answer, q->unit[0] ? " " : "",
                       q->unit);
    else
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%.10g is not it (%s)", x,
                       x < q->answer ? "too small" : "too large");
    return v->result;
}

int exercise_predict_judge(const exercise *ex, uint64_t seed, const char *answer, ex_verdict *v)
{
    if (ex->kind != EX_PREDICT || !ex->draw) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s is not a predict exercise", ex->id);
        return v->result;
    }
    ex_question q;
    exercise_predict_draw(ex, seed, &q);
    v->seed = seed;
    return ex_question_judge(&q, answer, v);
}

/* ---- answers files ---- */

int ex_answers_read(const char *path, ex_answers *a, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    char *text = ex_read_file(path, NULL);
    if (!text) {
        snprintf(err, n, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            continue;       /* free text: ignored, so that notes do not break the file */
        *eq = 0;
        char *k = trim(s), *val = trim(eq + 1);
        if (!*k || a->n >= 32)
            continue;
        snprintf(a->key[a->n], sizeof a->key[0], "%s", k);
        snprintf(a->val[a->n], sizeof a->val[0], "%s", val);
        a->n++;
    }
    free(text);
    return 0;
}

const char *ex_answer_get(const ex_answers *a, const char *key, ex_verdict *v)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->key[i], key)) {
            if (a->val[i][0])
                return a->val[i];
            break;
        }
    ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "fill in '%s' in the answers file", key);
    return NULL;
}

int ex_answer_number(const ex_answers *a, const char *key, double *out, ex_verdict *v)
{
    const char *s = ex_answer_get(a, key, v);
    if (!s)
        return -1;
    if (parse_number(s, out) != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "'%s = %s': not a number", key, s);
        return -1;
    }
    return 0;
}

int ex_answer_choice(const ex_answers *a, const char *key, const char *const *allowed, int *out,
                     ex_verdict *v)
{
    const char *s = ex_answer_get(a, key, v);
    if (!s)
        return -1;
    for (int i = 0; allowed[i]; i++)
        if (!strcasecmp(s, allowed[i])) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    for (int i = 0; allowed[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " or " : "",
                 allowed[i]);
    ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "'%s = %s': answer %s", key, s, list);
    return -1;
}
