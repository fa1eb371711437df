/* fuzz_serve.c - libFuzzer target for the HTTP server's request parser (core/serve/
 * req_parse.c, cJSON underneath): the first byte picks the route (completions or chat), the
 * rest is the body. Besides crashes, leaks and undefined behaviour, it checks the parser's
 * promises: it returns 0, 400 or 404; a refusal has a message and allocates nothing; an
 * accepted request is in range (prompt set, max_tokens -1 or >= 1, temperature in [0, 2],
 * top_p in (0, 1], at most 4 stop strings of 1..64 bytes); the error body built from a
 * refusal is JSON. Built and run by tests/fuzz/run_serve.sh (clang -fsanitize=fuzzer). */
#include "../../core/serve/srv_internal.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_serve: broken promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1)
        return 0;
    srv_kind kind = d[0] & 1 ? SRV_CHAT : SRV_COMPLETION;
    const char *model = d[0] & 2 ? "mlsys-lab" : NULL;
    srv_req r;
    char err[512], param[64];
    int rc = srv_req_parse((const char *)d + 1, n - 1, kind, model, &r, err, sizeof err, param,
                           sizeof param);
    check(rc == 0 || rc == 400 || rc == 404, "status 0, 400 or 404");
    if (rc) {
        check(err[0] != 0, "a refusal has a message");
        check(r.prompt == NULL, "a refusal keeps nothing");
        char *body = srv_resp_error(rc, err, param);
        cJSON *o = cJSON_Parse(body);
        check(o && cJSON_IsObject(cJSON_GetObjectItem(o, "error")), "the error body is JSON");
        cJSON_Delete(o);
        free(body);
        return 0;
    }
    check(r.prompt != NULL, "an accepted request has a prompt");
    check(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens");
    check(r.temperature >= 0 && r.temperature <= 2, "temperature");
    check(r.top_p > 0 && r.top_p <= 1, "top_p");
    check(r.n_stop >= 0 && r.n_stop <= LLM_MAX_STOP, "stop count");
    for (int i = 0; i < r.n_stop; i++)
        check(strlen(r.stop[i]) >= 1 && strlen(r.stop[i]) <= LLM_MAX_STOP_LEN, "stop length");
    srv_req_free(&r);
    return 0;
}
