/* print.c - output in rank order. Ranks that print at the same moment interleave in no
 * fixed order; here every rank hands its text to rank 0, which prints ranks 0..N-1 in turn,
 * so headless output is deterministic and tests can compare it. Under the front end
 * (MLSYS_PRINT_TAGS=1) each line rank 0 prints for another rank starts with a tag naming
 * that rank, which the front end strips, so its log shows every line under its own rank. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(mlsys_event) == 128, "events are 128-byte records");
_Static_assert(sizeof(mlsys_mem_info) == 24 && sizeof(mlsys_flow_info) == 24,
               "memory and flow records fill the message fields of the union");

#define PRINT_TAG 11

static char *vformat(const char *fmt, va_list ap, size_t *len)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        n = 0;
    char *s = mlsys_xmalloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    *len = (size_t)n;
    return s;
}

/* Rank 0 writes rank r's text: as it is, or with "\001r<r>\002" before each line when the
 * front end asked for tags (headless output stays byte for byte what it was). */
static void put_for_rank(const char *t, size_t n, int r)
{
    static int tags = -1;
    if (tags < 0) {
        const char *e = getenv("MLSYS_PRINT_TAGS");
        tags = e && !strcmp(e, "1");
    }
    if (!tags) {
        fwrite(t, 1, n, stdout);
        return;
    }
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (t + i)) + 1 : n - i;
        printf("\001r%d\002", r);
        fwrite(t + i, 1, len, stdout);
        i += len;
    }
}

const char *mlsys_print_untag(const char *line, int *rank)
{
    if (line[0] != '\001' || line[1] != 'r' || line[2] < '0' || line[2] > '9')
        return line;
    int r = 0, i = 2;
    while (line[i] >= '0' && line[i] <= '9' && r < 1000000)
        r = r * 10 + (line[i++] - '0');
    if (line[i] != '\002')
        return line;
    *rank = r;
    return line + i + 1;
}

/* Text travels as int32 words (the runtime has no byte type): n bytes in ceil(n/4) words. */
int mlsys_print_ordered(mlsys_comm *c, const char *fmt, ...)
{
    va_list ap;
    size_t len;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap, &len);
    va_end(ap);
    int rc = 0;
    c->in_coll++;
    /* the text's journey to rank 0 is not the lab's communication: no events for the views
     * (they would show it as messages of the lab). Tracing is the process's, so first let
     * the non-blocking collectives in flight finish (their events are the lab's); the
     * receives below would wait for them anyway. */
    if (icoll_fence_needed(c))
        icoll_fence(c);
    int tracing = c->w->tracing;
    c->w->tracing = 0;
    if (c->rank == 0) {
        fputs(s, stdout);
        for (int i = 1; i < c->size && !rc; i++) {
            int64_t n = 0;
            rc = mlsys_recv(c, &n, 1, MLSYS_I64, i, PRINT_TAG);
            if (rc)
                break;
            size_t words = ((size_t)n + 3) / 4;
            char *t = mlsys_xcalloc(words * 4 + 1, 1);
            rc = mlsys_recv(c, t, words, MLSYS_I32, i, PRINT_TAG);
            if (!rc)
                put_for_rank(t, (size_t)n, i);
            free(t);
        }
        fflush(stdout);
    } else {
        int64_t n = (int64_t)len;
        size_t words = (len + 3) / 4;
        char *t = mlsys_xcalloc(words * 4 + 1, 1);
        memcpy(t, s, len);
        rc = mlsys_send(c, &n, 1, MLSYS_I64, 0, PRINT_TAG);
        if (!rc)
            rc = mlsys_send(c, t, words, MLSYS_I32, 0, PRINT_TAG);
        free(t);
    }
    c->w->tracing = tracing;
    c->in_coll--;
    free(s);
    return rc;
}

void mlsys_print_root(mlsys_comm *c, const char *fmt, ...)
{
    if (c->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

int mlsys_stdout_is_terminal(void)
{
    /* Open MPI sets OMPI_COMM_WORLD_SIZE in every process mpirun starts */
    return isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE");
}
