/* harness.h - the rank side of every implement exercise's check. The checker compiles the
 * learner's file together with the exercise's check.c (which includes this header) into one
 * program linked against the core library, and starts it on N ranks. Each rank calls the
 * learner's function on prepared inputs, compares with a reference it computes itself, and
 * writes what happened to <dir>/rank<r>, one record per line, for the checker to read:
 *   case K LABEL           case K starts ("N=3, length 7"): what was running if a rank dies
 *   fail K MESSAGE         this rank's result is wrong ("rank 2, element 5: expected 9.0, got 3.0")
 *   returned K             the learner's function came back in case K
 *   error K KIND MESSAGE   a runtime call in the learner's code failed: deadlock|runtime|aborted;
 *                          or (KIND peer) the checker's own meeting of the ranks failed
 *   info MESSAGE           a measurement to show
 *   crash SIG OFF...       a fatal signal, with the return addresses of the stack as offsets
 *                          into this program (the checker turns them into file:line)
 *   done                   the rank went through every case
 * Cases run in lockstep: after each, the ranks agree (with the built-in all_reduce, outside
 * the learner's counters) whether anyone failed, and then all stop together. */
#ifndef EX_HARNESS_H
#define EX_HARNESS_H

#include "mlsys.h"
#include "nn/nn.h"
#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#define H_FN static __attribute__((unused))
#define H_EXIT_REPORTED 3       /* exit status: an error was recorded, stop the job */

typedef struct harness {
    mlsys_comm *c;
    int rank, size;
    FILE *rec;
    int ncase;
    char label[200];
    int failed;             /* this rank failed the current case */
    uint64_t seed;          /* inputs are drawn from it (the checker prints it) */
    int port;               /* MASTER_PORT the launcher exported */
    int saved_out;
    FILE *cap;
} harness;

/* check.c defines this: run every case for this world size. */
static void ex_check_main(harness *h);

H_FN void h_rec(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
H_FN void h_rec(harness *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(h->rec, fmt, ap);
    va_end(ap);
    fputc('\n', h->rec);
    fflush(h->rec);
}

H_FN void h_exit(harness *h, int code)
{
    fflush(stdout);
    fflush(stderr);
    fflush(h->rec);
    _exit(code);
}

/* The checker's own collective (between cases) failed: another rank is gone or stuck. */
H_FN void h_sync_failed(harness *h)
{
    h_rec(h, "error %d peer %s", h->ncase, mlsys_errmsg(h->c));
    h_exit(h, H_EXIT_REPORTED);
}

/* Begin a case: all ranks meet, the label is recorded, errors and counters are cleared. */
H_FN void h_case(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
H_FN void h_case(harness *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->label, sizeof h->label, fmt, ap);
    va_end(ap);
    h->ncase++;
    h->failed = 0;
    if (mlsys_barrier(h->c) != MLSYS_OK)
        h_sync_failed(h);
    h_rec(h, "case %d %s", h->ncase, h->label);
    mlsys_set_error(h->c, MLSYS_OK, "%s", "");
    mlsys_reset_counters(h->c);
}

/* After the learner's call: rc is what it returned (0 for functions without a status).
 * A runtime error (the comm's last error is set) or a non-zero rc ends the job here. */
H_FN void h_returned(harness *h, int rc, const char *fn)
{
    const char *msg = mlsys_errmsg(h->c);
    int has = strcmp(msg, "no error") != 0 && msg[0];
    h_rec(h, "returned %d", h->ncase);
    if (rc == 0 && !has)
        return;
    const char *kind = "runtime";
    if (has && strstr(msg, "deadlock suspected"))
        kind = "deadlock";
    else if (has && strstr(msg, "aborted"))
        kind = "aborted";
    if (has && !strncmp(msg, "rank ", 5))
        h_rec(h, "error %d %s %s%s", h->ncase, kind, msg,
              rc == 0 ? " (and the error code was not passed on)" : "");
    else if (has)
        h_rec(h, "error %d %s rank %d: %s%s", h->ncase, kind, h->rank, msg,
              rc == 0 ? " (and the error code was not passed on)" : "");
    else
        h_rec(h, "error %d runtime rank %d: %s returned %d", h->ncase, h->rank, fn, rc);
    h_exit(h, H_EXIT_REPORTED);
}

H_FN void h_fail(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
H_FN void h_fail(harness *h, const char *fmt, ...)
{
    if (h->failed)
        return;
    h->failed = 1;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    h_rec(h, "fail %d %s", h->ncase, msg);
}

H_FN void h_info(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
H_FN void h_info(harness *h, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    h_rec(h, "info %s", msg);
}

/* End a case: 1 when every rank passed it, 0 when someone failed (then stop). */
H_FN int h_case_end(harness *h)
{
    int any = h->failed;
    if (mlsys_allreduce(h->c, &any, &any, 1, MLSYS_I32, MLSYS_MAX) != MLSYS_OK)
        h_sync_failed(h);
    return !any;
}

/* "10.0" for whole numbers, "0.0123457" otherwise, "nan", "inf". */
H_FN const char *h_num(char *buf, size_t n, double x)
{
    if (isfinite(x) && fabs(x) < 1e15 && x == floor(x))
        snprintf(buf, n, "%.1f", x);
    else
        snprintf(buf, n, "%.9g", x);
    return buf;
}

/* 1 when got is within max(abs_tol, rel_tol·|expect|) of expect. A NaN or an infinity never
 * passes, whatever the tolerance and however the comparison is written: a result that
 * overflowed (exp of a large input) must fail the check. */
H_FN int h_close(double expect, double got, double abs_tol, double rel_tol)
{
    if (!isfinite(got) || !isfinite(expect))
        return 0;
    double tol = fmax(abs_tol, rel_tol * fabs(expect));
    return fabs(got - expect) <= tol;
}

/* Compare n floats; the first difference becomes this rank's failure. what names the
 * array ("" for the main buffer); offset is added to the printed element index. */
H_FN int h_cmp_f32(harness *h, const float *expect, const float *got, size_t n, double abs_tol,
                   double rel_tol, const char *what, size_t offset)
{
    for (size_t i = 0; i < n; i++)
        if (!h_close(expect[i], got[i], abs_tol, rel_tol)) {
            char a[48], b[48];
            h_fail(h, "rank %d, %s%selement %zu: expected %s, got %s", h->rank, what,
                   what[0] ? " " : "", i + offset, h_num(a, sizeof a, expect[i]),
                   h_num(b, sizeof b, got[i]));
            return 0;
        }
    return 1;
}

/* Catch what the learner's code prints to stdout between begin and end. The text is also
 * echoed to the real stdout, so it shows in the checker's output tail. */
H_FN void h_capture_begin(harness *h)
{
    fflush(stdout);
    h->cap = tmpfile();
    h->saved_out = dup(STDOUT_FILENO);
    if (h->cap && h->saved_out >= 0)
        dup2(fileno(h->cap), STDOUT_FILENO);
}

H_FN char *h_capture_end(harness *h)
{
    fflush(stdout);
    if (h->saved_out >= 0) {
        dup2(h->saved_out, STDOUT_FILENO);
        close(h->saved_out);
        h->saved_out = -1;
    }
    size_t cap = 4096, n = 0, got;
    char *s = malloc(cap);
    if (!s)
        abort();
    if (h->cap) {
        rewind(h->cap);
        while ((got = fread(s + n, 1, cap - n - 1, h->cap)) > 0) {
            n += got;
            if (cap - n < 1024) {
                cap *= 2;
                s = realloc(s, cap);
                if (!s)
                    abort();
            }
        }
        fclose(h->cap);
        h->cap = NULL;
    }
    s[n] = 0;
    fputs(s, stdout);
    fflush(stdout);
    return s;
}

/* Lines of text that contain needle. */
H_FN int h_count_lines(const char *text, const char *needle)
{
    int k = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[512];
        size_t l = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, p, l);
        line[l] = 0;
        if (strstr(line, needle))
            k++;
        p += len + (e != NULL);
    }
    return k;
}

/* ---- a fatal signal in the learner's code: leave the stack behind, then die of it ---- */

extern const char __executable_start[], etext[];
static int h_crash_fd = -1;

static void h_put_hex(char *buf, size_t *k, uintptr_t v)
{
    char tmp[2 * sizeof v];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    buf[(*k)++] = ' ';
    buf[(*k)++] = '0';
    buf[(*k)++] = 'x';
    while (n)
        buf[(*k)++] = tmp[--n];
}

static int h_in_program(uintptr_t pc)
{
    return pc > (uintptr_t)__executable_start && pc <= (uintptr_t)etext;
}

/* The faulting instruction comes first, exact; then the return addresses of the callers
 * (minus one, so that each names the line of its call). */
static void h_on_crash(int sig, siginfo_t *si, void *ucv)
{
    (void)si;
    uintptr_t fault = 0;
#if defined(__x86_64__)
    fault = (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    fault = (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.pc;
#else
    (void)ucv;
#endif
    void *pcs[48];
    int n = backtrace(pcs, 48);
    char buf[49 * 20 + 32];
    size_t k = 0;
    memcpy(buf, "crash ", 6);
    k = 6;
    buf[k++] = (char)('0' + sig / 10);
    buf[k++] = (char)('0' + sig % 10);
    int from = 1;                /* pcs[0] is this handler */
    if (h_in_program(fault)) {
        h_put_hex(buf, &k, fault - (uintptr_t)__executable_start);
        for (int i = 0; i < n; i++)
            if ((uintptr_t)pcs[i] == fault)
                from = i + 1;
    }
    for (int i = from; i < n; i++) {
        uintptr_t pc = (uintptr_t)pcs[i];
        if (h_in_program(pc))
            h_put_hex(buf, &k, pc - 1 - (uintptr_t)__executable_start);
    }
    buf[k++] = '\n';
    if (h_crash_fd >= 0 && write(h_crash_fd, buf, k) < 0)
        k = 0;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void h_catch_crashes(harness *h)
{
    static char stack[1 << 16];
    stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    void *warm[2];
    backtrace(warm, 2);          /* loads what backtrace needs now, not inside the handler */
    fflush(h->rec);
    h_crash_fd = fileno(h->rec);
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = h_on_crash;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

int main(int argc, char **argv)
{
    nn_gemm_start(argv);    /* BLAS threads and the GEMM kernel, once, as every lab program */
    if (argc < 4) {
        fprintf(stderr, "usage: %s RESULT-DIR SEED PORT (started by `mlsys-lab check`)\n", argv[0]);
        return 2;
    }
    harness h;
    memset(&h, 0, sizeof h);
    h.saved_out = -1;
    h.c = mlsys_init();
    if (!h.c)
        return 2;
    h.rank = mlsys_rank(h.c);
    h.size = mlsys_size(h.c);
    h.seed = strtoull(argv[2], NULL, 10);
    h.port = atoi(argv[3]);
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%d", argv[1], h.rank);
    h.rec = fopen(path, "w");
    if (!h.rec) {
        perror(path);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
#ifndef __SANITIZE_ADDRESS__
    h_catch_crashes(&h);         /* (a sanitizer build reports crashes itself) */
#endif
    ex_check_main(&h);
    h_rec(&h, "done");
    fclose(h.rec);
    fflush(stdout);
    mlsys_finalize(h.c);
    return 0;
}

#endif
