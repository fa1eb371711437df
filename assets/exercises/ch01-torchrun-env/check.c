/* check.c - ch01-torchrun-env, rank side (see ../harness.h). The expected values come from
 * the runtime (rank, world size, local rank), the launcher's loopback address and the port
 * the checker configured; the second case unsets two variables to test the default. */
#include "harness.h"
#include "api.h"

/* The value printed as NAME=value (NAME not preceded by a letter or '_'), into out.
 * Returns how many times NAME= appears. */
static int find_var(const char *text, const char *name, char *out, size_t n)
{
    int hits = 0;
    size_t len = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p += len) {
        int word = p == text || !(p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z'));
        if (!word || p[len] != '=')
            continue;
        if (hits++ == 0) {
            const char *v = p + len + 1, *e = strchr(v, '\n');
            size_t l = e ? (size_t)(e - v) : strlen(v);
            while (l && (v[l - 1] == ' ' || v[l - 1] == '\r'))
                l--;
            snprintf(out, n, "%.*s", (int)l, v);
        }
    }
    return hits;
}

static void expect(harness *h, const char *text, const char *name, const char *want)
{
    char got[128] = "";
    int hits = find_var(text, name, got, sizeof got);
    if (hits == 0)
        h_fail(h, "rank %d printed no %s= line", h->rank, name);
    else if (hits > 1)
        h_fail(h, "rank %d printed %s= %d times (expected once)", h->rank, name, hits);
    else if (strcmp(got, want))
        h_fail(h, "rank %d printed %s=%s, expected %s=%s", h->rank, name, got, name, want);
}

static void ex_check_main(harness *h)
{
    char rank[16], size[16], local[16], port[16];
    snprintf(rank, sizeof rank, "%d", mlsys_rank(h->c));
    snprintf(size, sizeof size, "%d", mlsys_size(h->c));
    snprintf(local, sizeof local, "%d", mlsys_local_rank(h->c));
    snprintf(port, sizeof port, "%d", h->port);
    for (int kase = 0; kase < 2; kase++) {
        h_case(h, kase ? "N=%d, LOCAL_RANK and MASTER_PORT unset" : "N=%d", h->size);
        char *saved_local = NULL, *saved_port = NULL;
        if (kase) {
            saved_local = strdup(getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "");
            saved_port = strdup(getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "");
            unsetenv("LOCAL_RANK");
            unsetenv("MASTER_PORT");
        }
        h_capture_begin(h);
        print_env();
        char *out = h_capture_end(h);
        h_returned(h, 0, "print_env");
        expect(h, out, "RANK", rank);
        expect(h, out, "WORLD_SIZE", size);
        expect(h, out, "LOCAL_RANK", kase ? "not set" : local);
        expect(h, out, "MASTER_ADDR", "127.0.0.1");
        expect(h, out, "MASTER_PORT", kase ? "not set" : port);
        if (kase) {
            setenv("LOCAL_RANK", saved_local, 1);
            setenv("MASTER_PORT", saved_port, 1);
            free(saved_local);
            free(saved_port);
        }
        free(out);
        if (!h_case_end(h))
            return;
    }
}
