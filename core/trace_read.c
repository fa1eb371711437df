/* trace_read.c - the reader: a Chrome trace written by trace.c (cJSON) back into events and
 * output lines, for a replay in the same views as a live job. Per record the file has its
 * phase (b/e async p2p spans, B/E collectives and compute, i steps, marks, memory and flow
 * records, s/f message flows), the rank as tid, and args bytes/peer/tag/step (a memory or
 * flow record's typed fields in args.mem / args.flow); optional args (dtype, op, chunk, val,
 * algo) are read when a newer writer adds them. Lines of category "output" are the ranks'
 * output. Without cJSON the reader says why. */
#include "internal.h"
#include "trace.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRACE_READ_MAX_BYTES (512ull << 20)   /* a larger file is refused */

#ifdef HAVE_CJSON
#include <cjson/cJSON.h>

/* Up to max bytes of s as one quoted line: control and non-ASCII bytes escaped. */
static void quote_cut(const char *s, size_t avail, size_t max, char *out, size_t n)
{
    size_t o = 0, i;
    if (n < 8)
        return;
    out[o++] = '\'';
    for (i = 0; i < avail && s[i] && i < max && o + 6 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            o += (size_t)snprintf(out + o, n - o, "\\n");
        else if (c == '\t')
            o += (size_t)snprintf(out + o, n - o, "\\t");
        else if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\')
            o += (size_t)snprintf(out + o, n - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    out[o++] = '\'';
    out[o] = 0;
    if (i < avail && s[i] && o + 4 < n)
        snprintf(out + o, n - o, "...");
}

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* A number field of o as an int32, or dflt. */
static int32_t inum(const cJSON *o, const char *k, int32_t dflt)
{
    double v = num(o, k, dflt);
    return v >= -2147483648.0 && v <= 2147483647.0 ? (int32_t)v : dflt;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* args.mem or args.flow back into the union of the event. */
static void typed_args(mlsys_event *e, const cJSON *args)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(args, "mem");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(args, "flow");
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(args, "label");
    if (cJSON_IsObject(m)) {
        e->kind = MLSYS_EV_MEM;
        memset(&e->mem, 0, sizeof e->mem);
        e->mem.pool = (int16_t)inum(m, "pool", 0);
        e->mem.op = (int8_t)inum(m, "op", 0);
        e->mem.cached = (uint8_t)inum(m, "cached", 0);
        e->mem.block = inum(m, "block", -1);
        e->mem.owner = inum(m, "owner", -1);
        e->mem.refs = inum(m, "refs", 0);
        e->mem.index = inum(m, "index", -1);
        e->mem.aux = inum(m, "aux", 0);
    } else if (cJSON_IsObject(f)) {
        e->kind = MLSYS_EV_FLOW;
        memset(&e->flow, 0, sizeof e->flow);
        e->flow.from = (int16_t)inum(f, "from", -1);
        e->flow.to = (int16_t)inum(f, "to", -1);
        e->flow.what = (int16_t)inum(f, "what", 0);
        e->flow.phase = (int16_t)inum(f, "phase", -1);
        e->flow.count = inum(f, "count", 0);
        e->flow.version = inum(f, "version", 0);
        e->flow.seq = inum(f, "seq", -1);
        e->flow.spare = inum(f, "spare", 0);
    } else {
        return;
    }
    e->label[0] = 0;
    if (cJSON_IsString(lab))
        snprintf(e->label, sizeof e->label, "%s", lab->valuestring);
}

static int kind_of_cat(const char *cat)
{
    for (int k = 0; k < MLSYS_EV_KIND_COUNT; k++)
        if (!strcmp(mlsys_event_kind_name(k), cat))
            return k;
    return MLSYS_EV_MARK;
}

/* The message fields, and the optional ones a newer writer adds, from args. */
static void message_args(mlsys_event *e, const cJSON *args)
{
    e->bytes = (uint64_t)num(args, "bytes", 0);
    e->peer = (int32_t)num(args, "peer", -1);
    e->tag = (int32_t)num(args, "tag", -1);
    e->step = (int32_t)num(args, "step", -1);
    e->chunk = (int32_t)num(args, "chunk", -1);
    e->dtype = (int32_t)num(args, "dtype", -1);
    e->op = (int16_t)num(args, "op", -1);
    e->algo = (int16_t)num(args, "algo", -1);
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(args, "val");
    for (int k = 0; cJSON_IsArray(vals) && k < 4 && k < cJSON_GetArraySize(vals); k++) {
        const cJSON *x = cJSON_GetArrayItem(vals, k);
        e->val[k] = cJSON_IsNumber(x) ? x->valuedouble : cJSON_IsNull(x) ? NAN : 0;
    }
}

/* One record of the file into e (its rank and time already set); 0 when it is an event, -1
 * when it rebuilds none. */
static int record(const cJSON *it, const char *ph, const char *cat, const char *name,
                  mlsys_event *e)
{
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "args");
    if (cJSON_IsObject(args))
        message_args(e, args);
    if (!strcmp(cat, "p2p")) {
        int send = !strncmp(name, "send", 4);
        e->kind = (int16_t)(ph[0] == 'b' ? (send ? MLSYS_EV_SEND_BEGIN : MLSYS_EV_RECV_BEGIN)
                            : (send ? MLSYS_EV_SEND_END : MLSYS_EV_RECV_END));
        const char *id = str(it, "id");
        if (id)
            e->span_id = strtoull(id, NULL, 16);
        /* a collective's messages say so through the open collective of their rank */
    } else if (!strcmp(cat, "collective") || !strcmp(cat, "collective_end")) {
        e->kind = (int16_t)(ph[0] == 'B' ? MLSYS_EV_COLL_BEGIN : MLSYS_EV_COLL_END);
        char word[64];
        const char *sp = strchr(name, ' ');
        snprintf(word, sizeof word, "%.*s", (int)(sp ? sp - name : (long)strlen(name)), name);
        mlsys_coll c;
        if (mlsys_coll_parse(word, &c) == 0)
            e->coll = (int16_t)c;
        snprintf(e->label, sizeof e->label, "%s", sp ? sp + 1 : "");
    } else if (!strcmp(cat, "compute") || !strcmp(cat, "compute_end")) {
        e->kind = (int16_t)(ph[0] == 'B' ? MLSYS_EV_COMPUTE_BEGIN : MLSYS_EV_COMPUTE_END);
        snprintf(e->label, sizeof e->label, "%s", name);
    } else if (!strcmp(cat, "step")) {
        e->kind = MLSYS_EV_STEP;
        const char *p = name;
        if (!strncmp(p, "step ", 5)) {
            p += 5;
            while (*p == '-' || (*p >= '0' && *p <= '9'))
                p++;
            while (*p == ' ')
                p++;
        }
        snprintf(e->label, sizeof e->label, "%s", p);
    } else if ((!strcmp(cat, "mem") || !strcmp(cat, "flow")) && cJSON_IsObject(args)) {
        typed_args(e, args);
        if (e->kind != MLSYS_EV_MEM && e->kind != MLSYS_EV_FLOW)
            return -1;          /* a record without its fields: nothing to rebuild */
    } else {
        e->kind = (int16_t)kind_of_cat(cat);
        snprintf(e->label, sizeof e->label, "%s", name);
    }
    return 0;
}

/* A flow arrow's id is the msg_id of the event just before it on its rank (file order). */
static void message_id(mlsys_trace *t, int rank, const char *ph, double id)
{
    for (size_t k = t->n; k-- > 0;) {
        if (t->ev[k].rank != rank)
            continue;
        int want = ph[0] == 's' ? MLSYS_EV_SEND_BEGIN : MLSYS_EV_RECV_END;
        if (t->ev[k].kind == want && !t->ev[k].msg_id)
            t->ev[k].msg_id = (uint64_t)id;
        break;
    }
}

int mlsys_trace_parse(const char *text, size_t len, mlsys_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        char near[128] = "";
        if (at && at >= text && at < text + len)
            quote_cut(at, (size_t)(text + len - at), 24, near, sizeof near);
        snprintf(err, errlen, "not valid JSON%s%s", near[0] ? " near " : "", near);
        return -1;
    }
    const cJSON *arr = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root,
                                                                              "traceEvents");
    if (!cJSON_IsArray(arr)) {
        snprintf(err, errlen, "no traceEvents array: not a trace written by --trace");
        cJSON_Delete(root);
        return -1;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        const char *ph = str(it, "ph"), *cat = str(it, "cat"), *name = str(it, "name");
        if (!ph || !cat || !name || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(it, "tid")))
            continue;
        int rank = (int)num(it, "tid", -1);
        if (rank >= MLSYS_TRACE_TID_ASYNC)  /* a rank's other tracks (trace.h) */
            rank %= MLSYS_TRACE_TID_ASYNC;
        if (rank < 0 || rank >= MLSYS_TRACE_MAX_RANKS)
            continue;
        double ts = num(it, "ts", 0);
        uint64_t t_ns = (uint64_t)((ts < 0 ? 0 : ts) * 1000.0 + 0.5) + 1;
        if (!strcmp(cat, "mem_usage"))
            continue;           /* Perfetto's counter track of a USAGE record: a copy */
        if (!strcmp(cat, "output")) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "args");
            const char *line = cJSON_IsObject(args) ? str(args, "text") : NULL;
            const char *stream = cJSON_IsObject(args) ? str(args, "stream") : NULL;
            if (line)
                trace_add_line_at(t, t_ns, rank, stream && !strcmp(stream, "stderr"), line);
            continue;
        }
        if (!strcmp(cat, "msg")) {
            message_id(t, rank, ph, num(it, "id", 0));
            continue;
        }
        mlsys_event e;
        memset(&e, 0, sizeof e);
        e.t_ns = t_ns;
        e.rank = rank;
        e.peer = e.tag = -1;
        e.coll = e.algo = e.op = -1;
        e.step = e.chunk = e.dtype = -1;
        if (record(it, ph, cat, name, &e) != 0)
            continue;
        mlsys_trace_collect(t, &e, 1);
    }
    cJSON_Delete(root);
    mlsys_trace_sort(t);
    /* a rank's events between its collective's begin and end belong to that collective */
    int open[MLSYS_TRACE_MAX_RANKS];
    for (int k = 0; k < MLSYS_TRACE_MAX_RANKS; k++)
        open[k] = -1;
    for (size_t i = 0; i < t->n; i++) {
        mlsys_event *e = &t->ev[i];
        if (e->kind == MLSYS_EV_COLL_BEGIN)
            open[e->rank] = e->coll;
        if (e->coll < 0 && e->kind != MLSYS_EV_COLL_END && e->kind != MLSYS_EV_MEM &&
            e->kind != MLSYS_EV_FLOW)
            e->coll = (int16_t)open[e->rank];
        if (e->kind == MLSYS_EV_COLL_END)
            open[e->rank] = -1;
    }
    return 0;
}

#else

int mlsys_trace_parse(const char *text, size_t len, mlsys_trace *t, char *err, size_t errlen)
{
    (void)text;
    (void)len;
    memset(t, 0, sizeof *t);
    snprintf(err, errlen, "this build cannot read traces: cJSON was not found (install "
             "libcjson-dev and rebuild)");
    return -1;
}

#endif

int mlsys_trace_load(const char *path, mlsys_trace *t, char *err, size_t errlen)
{
    /* only a regular file of a sane size: /dev/zero or a FIFO would be read forever, a
     * huge (or sparse) file would fill the memory */
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file (a trace is a file written with "
                 "--trace)", path);
        close(fd);
        return -1;
    }
    if ((unsigned long long)st.st_size > TRACE_READ_MAX_BYTES) {
        snprintf(err, errlen, "%s is %llu MiB: larger than the %llu MiB a trace may have",
                 path, (unsigned long long)st.st_size >> 20, TRACE_READ_MAX_BYTES >> 20);
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = mlsys_xmalloc(cap);
    for (;;) {
        if (len == cap) {
            if (cap >= TRACE_READ_MAX_BYTES) {      /* it grew while we read */
                snprintf(err, errlen, "%s is larger than the %llu MiB a trace may have", path,
                         TRACE_READ_MAX_BYTES >> 20);
                free(buf);
                close(fd);
                return -1;
            }
            cap *= 2;
            buf = mlsys_xrealloc(buf, cap);
        }
        ssize_t k = read(fd, buf + len, cap - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    close(fd);
    buf = mlsys_xrealloc(buf, len + 1);     /* text ends here for whoever quotes it */
    buf[len] = 0;
    int rc = mlsys_trace_parse(buf, len, t, err, errlen);
    free(buf);
    if (rc == 0 && t->n == 0 && t->nl == 0) {
        mlsys_trace_free(t);
        snprintf(err, errlen, "%s has no events of a job", path);
        return -1;
    }
    return rc;
}
