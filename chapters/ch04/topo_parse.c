/* topo_parse.c - parser and analysis of the `nvidia-smi topo -m` matrix (see topo_parse.h).
 * Fixes the original inspector's parser: a column's identity comes from the header (NIC
 * columns are NICs, not GPUs 8, 9, ...), NV<k> is accepted for any k, affinity columns are
 * read as affinities, and malformed input gets a one-line reason instead of a wrong answer. */
#include "topo_parse.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (TOPO_MAX_DEVS + 16)

typedef struct tokens {
    int n;
    int overflow;              /* more cells than MAX_TOKENS */
    char *t[MAX_TOKENS];
} tokens;

typedef enum { INFO_OTHER, INFO_CPU, INFO_NUMA, INFO_GPU_NUMA } info_kind;

static void fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* A copy without what a terminal would not show: ANSI escape sequences (nvidia-smi underlines
 * its header with ESC[4m ... ESC[0m) and CRs are dropped; NULs and other control characters
 * become spaces. Tabs and newlines stay: they carry the structure. */
static char *normalise(const char *text, size_t len)
{
    char *out = malloc(len + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == 0x1b) {
            if (i + 1 < len && text[i + 1] == '[') {
                i += 2;     /* CSI: parameters up to a final byte in 0x40..0x7e */
                while (i < len && !((unsigned char)text[i] >= 0x40 && (unsigned char)text[i] <= 0x7e))
                    i++;
            } else if (i + 1 < len) {
                i++;        /* a two-byte escape */
            }
            continue;
        }
        if (ch == '\r')
            continue;
        if (ch == '\n' || ch == '\t')
            out[o++] = (char)ch;
        else if (ch < 0x20 || ch == 0x7f)
            out[o++] = ' ';
        else
            out[o++] = (char)ch;
    }
    out[o] = 0;
    return out;
}

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

static char *trim(char *s)
{
    while (*s == ' ')
        s++;
    size_t l = strlen(s);
    while (l && s[l - 1] == ' ')
        s[--l] = 0;
    return s;
}

static void push(tokens *tk, char *s)
{
    if (tk->n < MAX_TOKENS)
        tk->t[tk->n++] = s;
    else
        tk->overflow = 1;
}

/* "GPU 0" -> "GPU0" in place (older drivers put a space in the device names). */
static void squeeze_device_name(char *s)
{
    static const char *const prefixes[] = {"GPU", "NIC"};
    for (int k = 0; k < 2; k++) {
        size_t pl = strlen(prefixes[k]);
        if (strncmp(s, prefixes[k], pl) != 0 || s[pl] != ' ')
            continue;
        char *d = s + pl;
        while (*d == ' ')
            d++;
        if (all_digits(d))
            memmove(s + pl, d, strlen(d) + 1);
    }
}

/* Join token i+1 onto token i (with a space, or without when glue is 0); the later token
 * moves left inside the same line buffer, so the tokens after it stay intact. */
static void join_next(tokens *tk, int i, int glue)
{
    char *a = tk->t[i], *b = tk->t[i + 1];
    size_t la = strlen(a), lb = strlen(b);
    if (glue)
        a[la++] = ' ';
    memmove(a + la, b, lb + 1);
    for (int k = i + 1; k + 1 < tk->n; k++)
        tk->t[k] = tk->t[k + 1];
    tk->n--;
}

/* Split one line into cells. With tabs (what nvidia-smi prints) the cells are the tab-separated
 * fields, trimmed, empty ones dropped (the header starts with a tab, rows have an empty field
 * before "GPU NUMA ID"). Without tabs (a copy from a web page, older drivers), cells are runs
 * of non-spaces, and the multi-word column names are glued back together. */
static void split_cells(char *line, tokens *tk)
{
    tk->n = 0;
    tk->overflow = 0;
    if (strchr(line, '\t')) {
        char *p = line;
        for (;;) {
            char *tab = strchr(p, '\t');
            if (tab)
                *tab = 0;
            char *cell = trim(p);
            if (*cell) {
                squeeze_device_name(cell);
                push(tk, cell);
            }
            if (!tab)
                break;
            p = tab + 1;
        }
        return;
    }
    for (char *p = line; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char *start = p;
        while (*p && *p != ' ')
            p++;
        if (*p)
            *p++ = 0;
        push(tk, start);
    }
    for (int i = 0; i + 1 < tk->n; i++) {
        const char *a = tk->t[i], *b = tk->t[i + 1];
        if ((!strcmp(a, "GPU") || !strcmp(a, "NIC")) && all_digits(b))
            join_next(tk, i, 0);
        else if ((!strcmp(a, "CPU") || !strcmp(a, "NUMA")) && !strcmp(b, "Affinity"))
            join_next(tk, i, 1);
        else if (!strcmp(a, "GPU") && !strcmp(b, "NUMA") && i + 2 < tk->n &&
                 !strcmp(tk->t[i + 2], "ID")) {
            join_next(tk, i, 1);
            join_next(tk, i, 1);
        }
    }
}

static int is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t')
            return 0;
    return 1;
}

int topo_link_parse(const char *cell, topo_link *out)
{
    static const struct { const char *code; topo_link_kind kind; } codes[] = {
        {"X", TOPO_L_SELF}, {"PIX", TOPO_L_PIX}, {"PXB", TOPO_L_PXB}, {"PHB", TOPO_L_PHB},
        {"NODE", TOPO_L_NODE}, {"SYS", TOPO_L_SYS}, {"SOC", TOPO_L_SYS},
    };
    topo_link l = {TOPO_L_NONE, 0};
    if (!cell)
        return -1;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (!strcmp(cell, codes[i].code)) {
            l.kind = codes[i].kind;
            if (out)
                *out = l;
            return 0;
        }
    /* NV<k>: any positive link count (NV1 ... NV18 today, more tomorrow) */
    if (cell[0] == 'N' && cell[1] == 'V' && all_digits(cell + 2) && strlen(cell + 2) <= 4) {
        int k = atoi(cell + 2);
        if (k < 1)
            return -1;
        l.kind = TOPO_L_NV;
        l.nvlinks = k;
        if (out)
            *out = l;
        return 0;
    }
    return -1;
}

const char *topo_link_code(const topo_link *l, char *buf, size_t n)
{
    static const char *const names[] = {"?", "X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"};
    if (!l || (int)l->kind < 0 || l->kind > TOPO_L_SYS)
        snprintf(buf, n, "?");
    else if (l->kind == TOPO_L_NV)
        snprintf(buf, n, "NV%d", l->nvlinks);
    else
        snprintf(buf, n, "%s", names[l->kind]);
    return buf;
}

const char *topo_link_meaning(topo_link_kind kind)
{
    switch (kind) {
    case TOPO_L_SELF: return "the device itself";
    case TOPO_L_NV:   return "NVLink: k bonded links, GPU to GPU or through NVSwitch";
    case TOPO_L_PIX:  return "PCIe through at most one bridge (same PCIe switch)";
    case TOPO_L_PXB:  return "PCIe through several bridges, without the host bridge";
    case TOPO_L_PHB:  return "PCIe through a host bridge (the CPU's root complex)";
    case TOPO_L_NODE: return "PCIe plus the link between host bridges of one NUMA node";
    case TOPO_L_SYS:  return "PCIe plus the inter-socket link (QPI/UPI/Infinity Fabric)";
    default:          return "unknown";
    }
}

static int valid_name(const char *s)
{
    if (!isalpha((unsigned char)s[0]) || strlen(s) >= TOPO_NAME_MAX)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_.:-", *s))
            return 0;
    return 1;
}

static int numbered(const char *s, const char *prefix, int *k)
{
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl) != 0 || !all_digits(s + pl) || strlen(s + pl) > 9)
        return 0;
    *k = atoi(s + pl);
    return 1;
}

static int is_info_name(const char *s)
{
    return strchr(s, ' ') || strstr(s, "Affinity") || !strcmp(s, "NUMA") || !strcmp(s, "ID") ||
           !strcmp(s, "CPU");
}

static info_kind info_of(const char *s)
{
    if (!strcmp(s, "CPU Affinity"))
        return INFO_CPU;
    if (!strcmp(s, "NUMA Affinity"))
        return INFO_NUMA;
    if (!strcmp(s, "GPU NUMA ID"))
        return INFO_GPU_NUMA;
    return INFO_OTHER;
}

/* The header line: it names GPU0 and holds no link code (a row "GPU0 X NV4 ..." names GPU0
 * too, but its cells are links). */
static int looks_like_header(const tokens *tk)
{
    int gpu0 = 0;
    for (int i = 0; i < tk->n; i++) {
        if (!strcmp(tk->t[i], "GPU0"))
            gpu0 = 1;
        if (topo_link_parse(tk->t[i], NULL) == 0)
            return 0;
    }
    return gpu0;
}

static int find_dev(const topo_matrix *m, const char *name)
{
    for (int i = 0; i < m->ndev; i++)
        if (!strcmp(m->dev[i].name, name))
            return i;
    return -1;
}

static void copy_field(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
}

static int parse_header(topo_matrix *m, const tokens *tk, info_kind *info, int lineno, char *err,
                        size_t errlen)
{
    if (tk->overflow) {
        fail(err, errlen, "line %d: the header has more than %d columns", lineno, MAX_TOKENS);
        return -1;
    }
    int in_info = 0;
    for (int i = 0; i < tk->n; i++) {
        const char *s = tk->t[i];
        if (!in_info && is_info_name(s))
            in_info = 1;
        if (in_info) {
            info[m->ninfo] = info_of(s);
            m->has_cpu_affinity |= info[m->ninfo] == INFO_CPU;
            m->has_numa_affinity |= info[m->ninfo] == INFO_NUMA;
            m->has_gpu_numa_id |= info[m->ninfo] == INFO_GPU_NUMA;
            m->ninfo++;
            continue;
        }
        if (m->ndev >= TOPO_MAX_DEVS) {
            fail(err, errlen, "line %d: more than %d devices in the header", lineno, TOPO_MAX_DEVS);
            return -1;
        }
        if (!valid_name(s) || (!strncmp(s, "GPU", 3) && !all_digits(s + 3))) {
            fail(err, errlen, "line %d: '%.40s' is not a device name (header column %d)", lineno,
                 s, i + 1);
            return -1;
        }
        if (find_dev(m, s) >= 0) {
            fail(err, errlen, "line %d: column %s appears twice in the header", lineno, s);
            return -1;
        }
        topo_dev *d = &m->dev[m->ndev];
        memset(d, 0, sizeof *d);
        copy_field(d->name, sizeof d->name, s);
        int k;
        if (numbered(s, "GPU", &k)) {
            if (k >= TOPO_MAX_DEVS) {
                fail(err, errlen, "line %d: %s: GPU index above %d", lineno, s, TOPO_MAX_DEVS - 1);
                return -1;
            }
            d->kind = TOPO_GPU;
            d->index = k;
            m->gpu_dev[k] = m->ndev;
            m->ngpu++;
        } else {
            d->kind = TOPO_NIC;     /* "NIC0" today, "mlx5_0" on older drivers */
            d->index = numbered(s, "NIC", &k) ? k : m->nnic;
            m->nnic++;
        }
        m->ndev++;
    }
    if (m->ngpu == 0) {
        fail(err, errlen, "line %d: the header names no GPU column", lineno);
        return -1;
    }
    return 0;
}

static int parse_row(topo_matrix *m, const tokens *tk, const info_kind *info, int *seen,
                     int lineno, char *err, size_t errlen)
{
    const char *label = tk->t[0];
    int r = find_dev(m, label);
    if (r < 0) {
        fail(err, errlen, "line %d: '%.40s' is not a device of the header (a matrix row must "
             "start with one)", lineno, label);
        return -1;
    }
    if (seen[r]) {
        fail(err, errlen, "line %d: a second row for %s", lineno, label);
        return -1;
    }
    int cells = tk->n - 1;
    if (cells < m->ndev) {
        fail(err, errlen, "line %d: row %s has %d link cells, the header has %d devices "
             "(truncated row)", lineno, label, cells, m->ndev);
        return -1;
    }
    if (tk->overflow || cells > m->ndev + m->ninfo) {
        fail(err, errlen, "line %d: row %s has %s%d fields, the header has %d columns (extra "
             "columns)", lineno, label, tk->overflow ? "over " : "", cells, m->ndev + m->ninfo);
        return -1;
    }
    for (int c = 0; c < m->ndev; c++) {
        topo_link l;
        const char *cell = tk->t[1 + c];
        if (topo_link_parse(cell, &l) != 0) {
            fail(err, errlen, "line %d: row %s, column %s: unknown connection '%.20s'", lineno,
                 label, m->dev[c].name, cell);
            return -1;
        }
        if ((l.kind == TOPO_L_SELF) != (c == r)) {
            fail(err, errlen, "line %d: row %s, column %s: %s where %s", lineno, label,
                 m->dev[c].name, cell, c == r ? "the diagonal must be X" : "only the diagonal "
                 "may be X");
            return -1;
        }
        m->link[r][c] = l;
    }
    topo_dev *d = &m->dev[r];
    for (int j = 0; j + m->ndev < cells; j++) {
        const char *v = tk->t[1 + m->ndev + j];
        if (info[j] == INFO_CPU)
            copy_field(d->cpu_affinity, sizeof d->cpu_affinity, v);
        else if (info[j] == INFO_NUMA)
            copy_field(d->numa_affinity, sizeof d->numa_affinity, v);
        else if (info[j] == INFO_GPU_NUMA)
            copy_field(d->gpu_numa_id, sizeof d->gpu_numa_id, v);
    }
    seen[r] = 1;
    return 0;
}

/* "NIC0: mlx5_0" lines of the NIC legend give the NICs their system names. */
static void parse_legend_line(topo_matrix *m, const tokens *tk)
{
    if (tk->n < 1)
        return;
    char name[TOPO_NAME_MAX + 2];
    const char *alias = NULL;
    const char *colon = strchr(tk->t[0], ':');
    if (!colon || colon - tk->t[0] >= TOPO_NAME_MAX)
        return;
    memcpy(name, tk->t[0], (size_t)(colon - tk->t[0]));
    name[colon - tk->t[0]] = 0;
    if (colon[1])
        alias = colon + 1;
    else if (tk->n >= 2)
        alias = tk->t[1];
    int d = find_dev(m, name);
    if (d >= 0 && alias && m->dev[d].kind == TOPO_NIC)
        copy_field(m->dev[d].alias, sizeof m->dev[d].alias, alias);
}

int topo_parse(const char *text, size_t len, topo_matrix *m, char *err, size_t errlen)
{
    enum { FIND_HEADER, ROWS, AFTER } state = FIND_HEADER;
    int rc = -1, lineno = 0;
    int seen[TOPO_MAX_DEVS] = {0};
    info_kind info[MAX_TOKENS];
    tokens *tk = malloc(sizeof *tk);
    char *buf = NULL;
    if (err && errlen)
        err[0] = 0;
    if (!m || (!text && len)) {
        fail(err, errlen, "%s", !m ? "no matrix to fill" : "no input text");
        goto out;
    }
    buf = normalise(text ? text : "", text ? len : 0);
    if (!tk || !buf) {
        fail(err, errlen, "out of memory");
        goto out;
    }
    memset(m, 0, sizeof *m);
    for (int i = 0; i < TOPO_MAX_DEVS; i++)
        m->gpu_dev[i] = -1;
    if (strspn(buf, " \t\n") == strlen(buf)) {
        fail(err, errlen, "empty input: no topology matrix");
        goto out;
    }
    for (char *line = buf, *next; line; line = next) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        next = nl ? nl + 1 : NULL;
        lineno++;
        if (state == FIND_HEADER) {
            split_cells(line, tk);
            if (!looks_like_header(tk))
                continue;
            if (parse_header(m, tk, info, lineno, err, errlen) != 0)
                goto out;
            state = ROWS;
        } else if (state == ROWS) {
            if (is_blank(line) || strstr(line, "Legend")) {
                state = AFTER;
                continue;
            }
            split_cells(line, tk);
            if (parse_row(m, tk, info, seen, lineno, err, errlen) != 0)
                goto out;
        } else {
            split_cells(line, tk);
            parse_legend_line(m, tk);
        }
    }
    if (state == FIND_HEADER) {
        fail(err, errlen, "no header line naming GPU0 (is this `nvidia-smi topo -m` output?)");
        goto out;
    }
    for (int i = 0; i < m->ndev; i++)
        if (!seen[i]) {
            fail(err, errlen, "no row for %s (truncated matrix)", m->dev[i].name);
            goto out;
        }
    for (int a = 0; a < m->ndev; a++)
        for (int b = a + 1; b < m->ndev; b++)
            if (m->link[a][b].kind != m->link[b][a].kind ||
                m->link[a][b].nvlinks != m->link[b][a].nvlinks)
                m->asymmetric++;
    rc = 0;
out:
    free(tk);
    free(buf);
    return rc;
}

int topo_gpu_dev(const topo_matrix *m, int gpu)
{
    if (!m || gpu < 0 || gpu >= TOPO_MAX_DEVS)
        return -1;
    return m->gpu_dev[gpu];
}

const topo_link *topo_gpu_link(const topo_matrix *m, int a, int b)
{
    int da = topo_gpu_dev(m, a), db = topo_gpu_dev(m, b);
    if (da < 0 || db < 0)
        return NULL;
    return &m->link[da][db];
}

void topo_analyse(const topo_matrix *m, topo_analysis *an)
{
    memset(an, 0, sizeof *an);
    an->ngpu = m->ngpu;
    for (int a = 0; a < TOPO_MAX_DEVS; a++)
        for (int b = a + 1; b < TOPO_MAX_DEVS; b++) {
            const topo_link *l = topo_gpu_link(m, a, b);
            if (!l)
                continue;
            an->npairs++;
            if (l->kind == TOPO_L_NV) {
                if (an->nv_pairs == 0 || l->nvlinks < an->min_nvlinks)
                    an->min_nvlinks = l->nvlinks;
                if (l->nvlinks > an->max_nvlinks)
                    an->max_nvlinks = l->nvlinks;
                an->nv_pairs++;
            } else {
                an->pcie_pairs++;
            }
        }
    if (an->ngpu < 2)
        an->verdict = TOPO_SINGLE_GPU;
    else if (an->nv_pairs == an->npairs)
        an->verdict = TOPO_ALL_NVLINK;
    else if (an->nv_pairs > 0)
        an->verdict = TOPO_MIXED;
    else
        an->verdict = TOPO_NO_NVLINK;
}

const char *topo_verdict_name(topo_verdict v)
{
    switch (v) {
    case TOPO_ALL_NVLINK: return "all NVLink";
    case TOPO_MIXED:      return "mixed";
    case TOPO_NO_NVLINK:  return "none";
    default:              return "single GPU";
    }
}

size_t topo_simulated_dgx_a100(char *buf, size_t n)
{
    size_t o = 0;
#define PUT(...) do { int w_ = snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, __VA_ARGS__); \
                      if (w_ > 0) o += (size_t)w_; } while (0)
    for (int c = 0; c < 8; c++)
        PUT("\tGPU%d", c);
    PUT("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n");
    for (int r = 0; r < 8; r++) {
        PUT("GPU%d", r);
        for (int c = 0; c < 8; c++)
            PUT("\t%s", r == c ? " X " : "NV12");
        /* two sockets of 64 cores with SMT: GPUs 0-3 near socket 0, 4-7 near socket 1 */
        PUT("\t%s\t%d\t\tN/A\n", r < 4 ? "0-63,128-191" : "64-127,192-255", r < 4 ? 0 : 1);
    }
#undef PUT
    return o;
}
