/* test_trace_promises.c - the trace file's round trip at its edges, which the other trace
 * tests do not reach: every control byte of a label survives (escaped: the file holds none
 * raw), values that JSON cannot hold (infinities, NaN) leave a file that still parses (as
 * null, read back as NaN), a step event of a negative step keeps its label, a record written
 * without the optional fields reads back with their "none" values (-1), and the tracks a
 * rank's events land on are the ones trace.h names (second-thread compute on HOST + rank, a
 * non-blocking collective on ASYNC + rank, the rest on the rank). */
#include "../../core/trace.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CJSON
#include <cjson/cJSON.h>

static mlsys_event ev_of(int kind, int rank, uint64_t t_ns)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.t_ns = t_ns;
    e.coll = e.algo = e.op = -1;
    e.chunk = e.dtype = -1;
    e.peer = e.tag = -1;
    e.step = -1;
    return e;
}

/* Write ev[0..n) to a file, read the text back (malloc'd). */
static char *write_read(const mlsys_event *ev, size_t n, size_t *len)
{
    char path[] = "/tmp/mlsys-trace-promises-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert_int_eq(mlsys_trace_write_json(path, ev, n, 0), 0);
    FILE *f = fopen(path, "rb");
    ck_assert(f != NULL);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)sz + 1);
    ck_assert(fread(s, 1, (size_t)sz, f) == (size_t)sz);
    s[sz] = 0;
    fclose(f);
    unlink(path);
    *len = (size_t)sz;
    return s;
}

START_TEST(control_bytes_in_labels)
{
    mlsys_event ev[2] = {ev_of(MLSYS_EV_MARK, 0, 1000), ev_of(MLSYS_EV_MARK, 0, 2000)};
    for (int i = 0; i < 31; i++)
        ev[0].label[i] = (char)(i + 1);       /* 0x01 .. 0x1f */
    ev[0].label[31] = 0;
    snprintf(ev[1].label, sizeof ev[1].label, "a \"quote\" and a \\ back\x7f");
    size_t len;
    char *text = write_read(ev, 2, &len);
    /* JSON allows no raw control byte in a string (RFC 8259), and the writer puts only the
     * newlines between records outside them: a reader stricter than ours must take the file */
    for (size_t i = 0; i < len; i++)
        ck_assert_msg((unsigned char)text[i] >= 0x20 || text[i] == '\n', "raw byte 0x%02x at "
                      "%zu of the file", (unsigned char)text[i], i);
    mlsys_trace t;
    char err[256];
    ck_assert_msg(mlsys_trace_parse(text, len, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(t.n, 2);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(!strcmp(t.ev[k].label, ev[k].label), "label %d came back changed", k);
    mlsys_trace_free(&t);
    free(text);
}
END_TEST

START_TEST(values_json_cannot_hold)
{
    mlsys_event e = ev_of(MLSYS_EV_MARK, 1, 2000);
    e.val[0] = INFINITY;
    e.val[1] = -INFINITY;
    e.val[2] = NAN;
    e.val[3] = 1.5;
    size_t len;
    char *text = write_read(&e, 1, &len);
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "the file is not JSON: %s", text);
    cJSON_Delete(j);
    mlsys_trace t;
    char err[256];
    ck_assert_msg(mlsys_trace_parse(text, len, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(t.n, 1);
    ck_assert(isnan(t.ev[0].val[0]) && isnan(t.ev[0].val[1]) && isnan(t.ev[0].val[2]));
    ck_assert(t.ev[0].val[3] == 1.5);
    mlsys_trace_free(&t);
    free(text);
}
END_TEST

START_TEST(negative_step_keeps_its_label)
{
    mlsys_event ev[2] = {ev_of(MLSYS_EV_STEP, 0, 10), ev_of(MLSYS_EV_STEP, 0, 20)};
    ev[0].step = -1;
    snprintf(ev[0].label, sizeof ev[0].label, "warm-up");
    ev[1].step = 12;
    snprintf(ev[1].label, sizeof ev[1].label, "-3 degrees");
    size_t len;
    char *text = write_read(ev, 2, &len);
    mlsys_trace t;
    char err[256];
    ck_assert_msg(mlsys_trace_parse(text, len, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(t.n, 2);
    ck_assert_int_eq(t.ev[0].step, -1);
    ck_assert_str_eq(t.ev[0].label, "warm-up");
    ck_assert_int_eq(t.ev[1].step, 12);
    ck_assert_str_eq(t.ev[1].label, "-3 degrees");
    mlsys_trace_free(&t);
    free(text);
}
END_TEST

/* A mark as an older writer wrote it: bytes, peer, tag and step only. */
START_TEST(optional_fields_absent)
{
    const char *text = "{\"traceEvents\":[{\"name\":\"x\",\"cat\":\"mark\",\"ph\":\"i\",\"ts\":1,"
                       "\"pid\":0,\"tid\":2,\"s\":\"t\",\"args\":{\"bytes\":8,\"peer\":-1,"
                       "\"tag\":-1,\"step\":4}}]}";
    mlsys_trace t;
    char err[256];
    ck_assert_msg(mlsys_trace_parse(text, strlen(text), &t, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(t.n, 1);
    const mlsys_event *e = &t.ev[0];
    ck_assert_int_eq(e->rank, 2);
    ck_assert_int_eq(e->step, 4);
    ck_assert_int_eq(e->chunk, -1);
    ck_assert_int_eq(e->dtype, -1);
    ck_assert_int_eq(e->op, -1);
    ck_assert_int_eq(e->algo, -1);
    ck_assert_int_eq(e->coll, -1);
    mlsys_trace_free(&t);
}
END_TEST

/* The tid of the first record named name in the file's text. */
static int tid_of(const char *text, const char *name)
{
    cJSON *j = cJSON_Parse(text), *it;
    int tid = -1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "traceEvents")) {
        const cJSON *n = cJSON_GetObjectItem(it, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) {
            tid = cJSON_GetObjectItem(it, "tid")->valueint;
            break;
        }
    }
    cJSON_Delete(j);
    return tid;
}

START_TEST(tracks_as_trace_h_says)
{
    mlsys_event ev[6] = {
        ev_of(MLSYS_EV_COMPUTE_BEGIN, 2, 10), ev_of(MLSYS_EV_COMPUTE_END, 2, 20),
        ev_of(MLSYS_EV_COMPUTE_BEGIN, 2, 30), ev_of(MLSYS_EV_COMPUTE_END, 2, 40),
        ev_of(MLSYS_EV_COLL_BEGIN, 3, 50), ev_of(MLSYS_EV_COLL_END, 3, 60),
    };
    snprintf(ev[0].label, sizeof ev[0].label, "main thread");
    snprintf(ev[1].label, sizeof ev[1].label, "main thread");
    ev[0].tag = ev[1].tag = 0;
    snprintf(ev[2].label, sizeof ev[2].label, "second thread");
    snprintf(ev[3].label, sizeof ev[3].label, "second thread");
    ev[2].tag = ev[3].tag = 1;
    ev[4].coll = ev[5].coll = MLSYS_COLL_ALLREDUCE;
    snprintf(ev[4].label, sizeof ev[4].label, "ring async");
    snprintf(ev[5].label, sizeof ev[5].label, "ring async");
    size_t len;
    char *text = write_read(ev, 6, &len);
    ck_assert_int_eq(tid_of(text, "main thread"), 2);
    ck_assert_int_eq(tid_of(text, "second thread"), MLSYS_TRACE_TID_HOST + 2);
    ck_assert_int_eq(tid_of(text, "all_reduce ring async"), MLSYS_TRACE_TID_ASYNC + 3);
    /* and the reader puts them all back on their ranks */
    mlsys_trace t;
    char err[256];
    ck_assert_msg(mlsys_trace_parse(text, len, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(t.n, 6);
    for (size_t i = 0; i < t.n; i++)
        ck_assert_int_eq(t.ev[i].rank, i < 4 ? 2 : 3);
    mlsys_trace_free(&t);
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace_promises");
    TCase *tc = tcase_create("round_trip");
    tcase_add_test(tc, control_bytes_in_labels);
    tcase_add_test(tc, values_json_cannot_hold);
    tcase_add_test(tc, negative_step_keeps_its_label);
    tcase_add_test(tc, optional_fields_absent);
    tcase_add_test(tc, tracks_as_trace_h_says);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#else
int main(void)
{
    printf("test_trace_promises: skipped: built without cJSON (libcjson-dev), which reads "
           "traces\n");
    return 0;
}
#endif
