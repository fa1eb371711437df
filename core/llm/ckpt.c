/* ckpt.c - a training checkpoint that survives any interruption. Everything a resume needs
 * (counters, the run record, the weights, the AdamW moments) is one file, DIR/model.train
 * version 2, committed by one rename; llama2.c's DIR/model.bin is an export of its weights
 * written after it. We chose one file over a directory per step with a "latest" link or a
 * manifest renamed last: one rename is the whole commit (nothing to keep in step), the file
 * names every reader knows stay as they were, and no symbolic links (which copies and some
 * tools mishandle); the price is the weights stored twice (model.train grows by a third).
 * Also here: the sweep of temporaries that interrupted writes leave, and the comparison that
 * tells a resume of the same run from a different run. Layout in model.h. */
#include "model.h"
#include "llm.h"
#include "llm_internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define V2 2u
#define HEAD1 136              /* the version 1 head, shared */
#define HEAD2 224              /* + the run record */

static void put_run(unsigned char *p, const llm_run_record *r, uint64_t prev_hash)
{
    uint64_t u[5] = {r->data_seed, r->data_bytes, r->init_seed, r->steps, r->warmup};
    uint32_t k[4] = {r->batch, r->world, r->zero, r->sync};
    float f[2] = {r->min_lr, r->clip};
    memcpy(p, u, 40);
    memcpy(p + 40, k, 16);
    memcpy(p + 56, f, 8);
    memcpy(p + 64, &prev_hash, 8);
    memset(p + 72, 0, HEAD2 - HEAD1 - 72);
}

static void get_run(const unsigned char *p, llm_train_state *s)
{
    uint64_t u[5];
    uint32_t k[4];
    float f[2];
    memcpy(u, p, 40);
    memcpy(k, p + 40, 16);
    memcpy(f, p + 56, 8);
    llm_run_record *r = &s->run;
    r->data_seed = u[0], r->data_bytes = u[1], r->init_seed = u[2], r->steps = u[3];
    r->warmup = u[4];
    r->batch = k[0], r->world = k[1], r->zero = k[2], r->sync = k[3];
    r->min_lr = f[0], r->clip = f[1];
    r->lr = s->lr;
    r->weight_decay = s->weight_decay;
    memcpy(&s->prev_weights_hash, p + 64, 8);
}

/* The hash the next checkpoint records as its predecessor's, so that a model.bin one
 * checkpoint behind is recognised: the weights hash of the checkpoint now in DIR (its head
 * only is read; 0 if none), or, when that checkpoint holds these very weights (the same step
 * saved again, as a resume at the last step does), the predecessor it recorded. */
static uint64_t prev_hash_for(const char *tpath, uint64_t new_hash)
{
    int fd;
    uint64_t size, h = 0, prev = 0;
    uint32_t ver = 0;
    unsigned char head[HEAD2];
    char e[256];
    if (llm_open_regular(tpath, LLM_MAX_FILE_BYTES * 3, &fd, &size, e, sizeof e))
        return 0;
    if (size >= HEAD2 && llm_read_exact(fd, head, HEAD2, tpath, e, sizeof e) == 0 &&
        memcmp(head, llm_train_magic, 8) == 0) {
        memcpy(&h, head + 108, 8);
        memcpy(&ver, head + 8, 4);
        if (ver == V2)
            memcpy(&prev, head + HEAD1 + 64, 8);
    }
    close(fd);
    return h == new_hash ? prev : h;
}

static int path_in(char *out, size_t n, const char *dir, const char *name, char *err,
                   size_t errlen)
{
    if (snprintf(out, n, "%s/%s", dir, name) >= (int)n) {
        snprintf(err, errlen, "%s: the directory name is too long", dir);
        return -1;
    }
    return 0;
}

int llm_ckpt_write(const char *dir, const llm_config *c, const llm_weights *w,
                   const llm_train_state *s, char *err, size_t errlen)
{
    char tpath[4096], bpath[4096], why[200];
    llm_config cc = *c;
    if (path_in(tpath, sizeof tpath, dir, LLM_CKPT_TRAIN, err, errlen) ||
        path_in(bpath, sizeof bpath, dir, LLM_CKPT_BIN, err, errlen))
        return -1;
    if (llm_config_check(&cc, why, sizeof why) || w->n_floats != llm_file_floats(&cc) ||
        s->n != llm_param_count(&cc)) {
        snprintf(err, errlen, "%s: not written: %s", tpath,
                 llm_config_check(&cc, why, sizeof why) ? why
                 : "the weights or the moments do not match the config");
        return -1;
    }
    llm_train_state st = *s;
    st.weights_hash = llm_weights_hash(w);
    unsigned char head[HEAD2];
    llm_train_head_put(head, &cc, &st, V2);
    put_run(head + HEAD1, &s->run, prev_hash_for(tpath, st.weights_hash));
    size_t wb = w->n_floats * sizeof(float), mb = s->n * sizeof(float);
    uint64_t sum = llm_fnv1a64(head, sizeof head, LLM_FNV_INIT);
    sum = llm_fnv1a64(w->mem, wb, sum);
    sum = llm_fnv1a64(s->m, mb, sum);
    sum = llm_fnv1a64(s->v, mb, sum);
    const void *parts[5] = {head, w->mem, s->m, s->v, &sum};
    size_t sz[5] = {sizeof head, wb, mb, mb, 8};
    /* the commit: after this rename the new checkpoint is the one a resume reads */
    if (llm_write_atomic(tpath, parts, sz, 5, err, errlen))
        return -1;
    return llm_checkpoint_write(bpath, &cc, w, err, errlen);
}

/* Version 2, read piece by piece straight into its buffers (the checksum follows along). */
static int read_v2(const char *path, int fd, uint64_t size, const unsigned char *head,
                   llm_config *c, llm_weights *w, llm_train_state *s, char *err,
                   size_t errlen)
{
    char why[200];
    int32_t h[7];
    memcpy(h, head + 16, 28);
    if (llm_config_of_header(h, c, why, sizeof why)) {
        snprintf(err, errlen, "%s: bad header: %s", path, why);
        return -1;
    }
    uint64_t nn, np = llm_param_count(c), nf = llm_file_floats(c);
    memcpy(&nn, head + 116, 8);
    if (nn != np) {
        snprintf(err, errlen, "%s: holds %llu moments per tensor set, the model has %llu", path,
                 (unsigned long long)nn, (unsigned long long)np);
        return -1;
    }
    uint64_t want = HEAD2 + 4 * nf + 8 * np + 8;
    if (size != want) {
        snprintf(err, errlen, "%s: %s: %llu bytes, the header (dim %d, %d layers) needs %llu",
                 path, size < want ? "truncated" : "wrong size", (unsigned long long)size,
                 c->dim, c->n_layers, (unsigned long long)want);
        return -1;
    }
    if (want > mlsys_mem_available()) {
        snprintf(err, errlen, "%s: %llu bytes of checkpoint, more than this machine has free",
                 path, (unsigned long long)want);
        return -1;
    }
    if (llm_weights_alloc(w, c, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    if (llm_train_state_alloc(s, c)) {
        snprintf(err, errlen, "%s: cannot allocate %llu moments", path,
                 (unsigned long long)(2 * np));
        llm_weights_free(w);
        return -1;
    }
    uint64_t stored;
    if (llm_read_exact(fd, w->mem, nf * sizeof(float), path, err, errlen) ||
        llm_read_exact(fd, s->m, np * sizeof(float), path, err, errlen) ||
        llm_read_exact(fd, s->v, np * sizeof(float), path, err, errlen) ||
        llm_read_exact(fd, &stored, 8, path, err, errlen))
        goto bad;
    uint64_t sum = llm_fnv1a64(head, HEAD2, LLM_FNV_INIT);
    sum = llm_fnv1a64(w->mem, nf * sizeof(float), sum);
    sum = llm_fnv1a64(s->m, np * sizeof(float), sum);
    sum = llm_fnv1a64(s->v, np * sizeof(float), sum);
    if (sum != stored) {
        snprintf(err, errlen, "%s: checksum mismatch (the file is damaged)", path);
        goto bad;
    }
    llm_train_head_get(head, s);
    get_run(head + HEAD1, s);
    s->version = V2;
    if (s->weights_hash != llm_weights_hash(w)) {
        snprintf(err, errlen, "%s: its weights do not match the hash it records", path);
        goto bad;
    }
    for (size_t i = 0; i < w->n_floats; i++)
        if (!isfinite(w->mem[i])) {
            snprintf(err, errlen, "%s: weight %zu of %zu is not finite", path, i, w->n_floats);
            goto bad;
        }
    return 0;
bad:
    llm_weights_free(w);
    llm_train_state_free(s);
    return -1;
}

/* What a training state must hold to be resumed: finite moments (v, a mean of squares, not
 * negative), AdamW's constants in their ranges, a step inside its run. A file can pass its
 * checksum and still hold these, when the run that wrote it had gone wrong. 0, or -1. */
static int state_sane(const char *path, const llm_train_state *s, char *err, size_t errlen)
{
    const char *bad = NULL;
    char why[160];
    if (!(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1)) {
        snprintf(why, sizeof why, "AdamW's betas are %g and %g; each must lie in [0, 1)",
                 (double)s->beta1, (double)s->beta2);
        bad = why;
    } else if (!(s->eps > 0) || !isfinite(s->eps)) {
        snprintf(why, sizeof why, "AdamW's eps is %g; it must be above 0", (double)s->eps);
        bad = why;
    } else if (!(s->lr >= 0) || !isfinite(s->lr) || !(s->weight_decay >= 0) ||
               !isfinite(s->weight_decay)) {
        snprintf(why, sizeof why, "learning rate %g or weight decay %g is not a finite "
                 "non-negative number", (double)s->lr, (double)s->weight_decay);
        bad = why;
    } else if (s->version >= V2 && s->step > s->run.steps) {
        snprintf(why, sizeof why, "step %llu is beyond its run of %llu steps",
                 (unsigned long long)s->step, (unsigned long long)s->run.steps);
        bad = why;
    }
    for (size_t i = 0; !bad && i < s->n; i++)
        if (!isfinite(s->m[i]) || !isfinite(s->v[i]) || s->v[i] < 0) {
            snprintf(why, sizeof why, "optimizer moment %zu of %zu is %g / %g (not finite, or a "
                     "negative second moment)", i, s->n, (double)s->m[i], (double)s->v[i]);
            bad = why;
        }
    if (!bad)
        return 0;
    snprintf(err, errlen, "%s: %s: the run that wrote it went wrong; start over with --force",
             path, bad);
    return -1;
}

int llm_ckpt_read(const char *dir, llm_config *c, llm_weights *w, llm_train_state *s,
                  int *bin_stale, char *err, size_t errlen)
{
    char tpath[4096], bpath[4096];
    memset(w, 0, sizeof *w);
    memset(s, 0, sizeof *s);
    if (bin_stale)
        *bin_stale = 0;
    if (path_in(tpath, sizeof tpath, dir, LLM_CKPT_TRAIN, err, errlen) ||
        path_in(bpath, sizeof bpath, dir, LLM_CKPT_BIN, err, errlen))
        return -1;
    int fd;
    uint64_t size;
    if (llm_open_regular(tpath, LLM_MAX_FILE_BYTES * 3, &fd, &size, err, errlen))
        return -1;
    unsigned char head[HEAD2];
    uint32_t ver = 0;
    if (size < 16 || llm_read_exact(fd, head, 16, tpath, err, errlen) ||
        memcmp(head, llm_train_magic, 8) != 0) {
        snprintf(err, errlen, "%s: not an MLSys Lab training state (bad magic)", tpath);
        close(fd);
        return -1;
    }
    memcpy(&ver, head + 8, 4);
    if (ver == V2) {
        int rc = size < HEAD2 ? -1 : llm_read_exact(fd, head + 16, HEAD2 - 16, tpath, err,
                                                    errlen);
        if (size < HEAD2)
            snprintf(err, errlen, "%s: truncated: %llu bytes, the header alone is %d", tpath,
                     (unsigned long long)size, HEAD2);
        if (!rc)
            rc = read_v2(tpath, fd, size, head, c, w, s, err, errlen);
        close(fd);
        if (rc)
            return -1;
        if (state_sane(tpath, s, err, errlen)) {
            llm_weights_free(w);
            llm_train_state_free(s);
            return -1;
        }
        /* model.bin: this checkpoint's export, or the previous one's (an interruption fell
         * between the two renames), or missing; anything else (other weights, a damaged
         * file) was put there by someone, and is refused rather than overwritten */
        llm_config bc;
        llm_weights bw;
        char e2[256];
        struct stat st;
        int missing = lstat(bpath, &st) != 0 && errno == ENOENT, stale = missing;
        if (!missing) {
            if (llm_checkpoint_read(bpath, &bc, &bw, e2, sizeof e2) == 0) {
                uint64_t bh = llm_weights_hash(&bw);
                llm_weights_free(&bw);
                stale = bh != s->weights_hash;
                if (stale && (bh != s->prev_weights_hash || !bh)) {
                    snprintf(err, errlen, "%s holds neither the weights of %s nor those of the "
                             "checkpoint before it: it was replaced (move it away to resume "
                             "from %s alone)", bpath, tpath, tpath);
                    llm_weights_free(w);
                    llm_train_state_free(s);
                    return -1;
                }
            } else {                 /* damaged: not ours to overwrite without a word */
                snprintf(err, errlen, "%s (move it away to resume from %s alone)", e2, tpath);
                llm_weights_free(w);
                llm_train_state_free(s);
                return -1;
            }
        }
        if (bin_stale)
            *bin_stale = stale;
        return 0;
    }
    close(fd);
    if (ver != 1) {
        snprintf(err, errlen, "%s: version %u, this build reads 1 and 2", tpath, ver);
        return -1;
    }
    /* version 1: the weights are model.bin's, and the hash proves the two belong together */
    if (llm_checkpoint_read(bpath, c, w, err, errlen))
        return -1;
    if (llm_train_state_read(tpath, c, s, err, errlen)) {
        llm_weights_free(w);
        return -1;
    }
    if (s->weights_hash != llm_weights_hash(w)) {
        snprintf(err, errlen, "%s does not belong to %s (the weights hash differs)", tpath,
                 bpath);
        llm_weights_free(w);
        llm_train_state_free(s);
        return -1;
    }
    if (state_sane(tpath, s, err, errlen)) {
        llm_weights_free(w);
        llm_train_state_free(s);
        return -1;
    }
    return 0;
}

/* NAME.tmp.PID: the pid, or -1 when the name is not one of llm_write_atomic's temporaries */
static long tmp_pid(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    if (!t || t == name)
        return -1;
    const char *d = t + 5;
    char *end;
    if (*d < '0' || *d > '9')
        return -1;
    long pid = strtol(d, &end, 10);
    if (*end)
        return -1;
    return pid;
}

/* 1 while process pid runs (a zombie no longer writes: it counts as gone) */
static int pid_running(long pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 0;
    char p[64], buf[256];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

int llm_ckpt_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    int removed = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = tmp_pid(e->d_name);
        if (pid <= 0)
            continue;
        /* a writer that is still running keeps its file */
        if (pid != (long)getpid() && pid_running(pid))
            continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p && unlink(p) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* ---- resume: the same run, or another ---- */

typedef enum { F_U64, F_U32, F_F32, F_SYNC } field_kind;
static const struct {
    const char *flag;
    size_t off;
    field_kind kind;
    int refuse;                /* 1: a difference changes the run */
} run_fields[] = {
    {"--data-seed", offsetof(llm_run_record, data_seed), F_U64, 1},
    {"--data-bytes", offsetof(llm_run_record, data_bytes), F_U64, 1},
    {"--seed", offsetof(llm_run_record, init_seed), F_U64, 1},
    {"--batch", offsetof(llm_run_record, batch), F_U32, 1},
    {"-w", offsetof(llm_run_record, world), F_U32, 1},
    {"--lr", offsetof(llm_run_record, lr), F_F32, 0},
    {"--min-lr", offsetof(llm_run_record, min_lr), F_F32, 0},
    {"--warmup", offsetof(llm_run_record, warmup), F_U64, 0},
    {"--steps", offsetof(llm_run_record, steps), F_U64, 0},
    {"--wd", offsetof(llm_run_record, weight_decay), F_F32, 0},
    {"--clip", offsetof(llm_run_record, clip), F_F32, 0},
    {"--zero", offsetof(llm_run_record, zero), F_U32, 0},
    {"--sync", offsetof(llm_run_record, sync), F_SYNC, 0},
};

static void field_text(const llm_run_record *r, size_t i, char *out, size_t n)
{
    const char *p = (const char *)r + run_fields[i].off;
    uint64_t u;
    uint32_t k;
    float f;
    switch (run_fields[i].kind) {
    case F_U64: memcpy(&u, p, 8); snprintf(out, n, "%llu", (unsigned long long)u); break;
    case F_U32: memcpy(&k, p, 4); snprintf(out, n, "%u", k); break;
    case F_F32: memcpy(&f, p, 4); snprintf(out, n, "%g", (double)f); break;
    case F_SYNC: memcpy(&k, p, 4); snprintf(out, n, "%s", k ? "allreduce" : "ddp"); break;
    }
}

static int field_differs(const llm_run_record *a, const llm_run_record *b, size_t i)
{
    size_t w = run_fields[i].kind == F_U64 ? 8 : 4;
    return memcmp((const char *)a + run_fields[i].off, (const char *)b + run_fields[i].off, w)
           != 0;
}

int llm_run_compare(const llm_train_state *stored, const llm_run_record *given, char *notes,
                    size_t nlen, char *err, size_t errlen)
{
    llm_run_record old = stored->run;
    size_t count = sizeof run_fields / sizeof run_fields[0], used = 0;
    if (nlen)
        notes[0] = 0;
    if (stored->version < V2) {              /* only the data seed is known (rng_key) */
        old = *given;
        old.data_seed = stored->rng_key;
        count = 1;
    }
    for (size_t i = 0; i < count; i++) {
        if (!field_differs(&old, given, i))
            continue;
        char a[40], b[40];
        field_text(&old, i, a, sizeof a);
        field_text(given, i, b, sizeof b);
        if (run_fields[i].refuse) {
            snprintf(err, errlen, "%s %s differs from the checkpoint's %s (step %llu): it "
                     "would change the run; resume with %s %s, or start over with --force",
                     run_fields[i].flag, b, a, (unsigned long long)stored->step,
                     run_fields[i].flag, a);
            return -1;
        }
        if (used < nlen)
            used += (size_t)snprintf(notes + used, nlen - used, "%s%s %s (was %s)",
                                     used ? ", " : "", run_fields[i].flag, b, a);
    }
    return 0;
}
