/* test_req_parse.c - the request parser of the HTTP face (core/serve/req_parse.c) on its own,
 * without a server: the edges test_serve_http's table of bad requests does not reach. The
 * model's name matches whole (a prefix of it is 404), a stop string of exactly the longest
 * length is served and one byte more is 400, 64 content parts are served and 65 are 400, a
 * conversation is its messages one a line, top_k 1 is greedy's 1 (0 and -1 mean none), and a
 * prompt array of two strings is 400 (only one string is served). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../core/serve/srv_internal.h"

#ifdef HAVE_CJSON

/* Parse body as kind; the status (0 when served), and the field named in *param. */
static int parse(const char *body, srv_kind kind, srv_req *r, char *param)
{
    char err[256];
    return srv_req_parse(body, strlen(body), kind, "mlsys-lab", r, err, sizeof err, param, 64);
}

static void expect_status(const char *body, srv_kind kind, int status, const char *field)
{
    srv_req r;
    char param[64] = "";
    int st = parse(body, kind, &r, param);
    ck_assert_msg(st == status, "%.120s: status %d, expected %d", body, st, status);
    if (st == 0)
        srv_req_free(&r);
    else if (field)
        ck_assert_msg(!strcmp(param, field), "%.120s: param '%s', expected '%s'", body, param,
                      field);
}

START_TEST(model_name_matches_whole)
{
    expect_status("{\"model\":\"mlsys-lab\",\"prompt\":\"x\"}", SRV_COMPLETION, 0, NULL);
    expect_status("{\"model\":\"mlsys\",\"prompt\":\"x\"}", SRV_COMPLETION, 404, "model");
    expect_status("{\"model\":\"\",\"prompt\":\"x\"}", SRV_COMPLETION, 404, "model");
    expect_status("{\"model\":\"mlsys-lab2\",\"prompt\":\"x\"}", SRV_COMPLETION, 404, "model");
}
END_TEST

START_TEST(stop_string_length_edge)
{
    char body[512], stop[LLM_MAX_STOP_LEN + 2];
    memset(stop, 'z', sizeof stop);
    stop[LLM_MAX_STOP_LEN] = 0;
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"stop\":[\"%s\"]}", stop);
    srv_req r;
    char param[64] = "";
    ck_assert_int_eq(parse(body, SRV_COMPLETION, &r, param), 0);
    ck_assert_int_eq(r.n_stop, 1);
    ck_assert_str_eq(r.stop[0], stop);
    srv_req_free(&r);
    stop[LLM_MAX_STOP_LEN] = 'z';
    stop[LLM_MAX_STOP_LEN + 1] = 0;
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"stop\":\"%s\"}", stop);
    expect_status(body, SRV_COMPLETION, 400, "stop");
    /* as many stop strings as are served, and one more */
    char many[512] = "{\"prompt\":\"x\",\"stop\":[";
    for (int i = 0; i < LLM_MAX_STOP; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"s%d\"", i ? "," : "", i);
    strcat(many, "]}");
    ck_assert_int_eq(parse(many, SRV_COMPLETION, &r, param), 0);
    ck_assert_int_eq(r.n_stop, LLM_MAX_STOP);
    srv_req_free(&r);
    many[strlen(many) - 2] = 0;
    strcat(many, ",\"one more\"]}");
    expect_status(many, SRV_COMPLETION, 400, "stop");
}
END_TEST

/* content: an array of n text parts "p0" "p1" ...; their text is the parts joined */
static char *parts_body(int n)
{
    size_t cap = 64 + (size_t)n * 40;
    char *b = malloc(cap);
    snprintf(b, cap, "{\"messages\":[{\"role\":\"user\",\"content\":[");
    for (int i = 0; i < n; i++)
        snprintf(b + strlen(b), cap - strlen(b), "%s{\"type\":\"text\",\"text\":\"p%d\"}",
                 i ? "," : "", i);
    strcat(b, "]}]}");
    return b;
}

START_TEST(content_parts_edge)
{
    char *b = parts_body(64), param[64] = "";
    srv_req r;
    ck_assert_int_eq(parse(b, SRV_CHAT, &r, param), 0);
    ck_assert(!strncmp(r.prompt, "p0p1p2", 6));
    ck_assert(strlen(r.prompt) > 3 && !strcmp(r.prompt + strlen(r.prompt) - 3, "p63"));
    srv_req_free(&r);
    free(b);
    b = parts_body(65);
    expect_status(b, SRV_CHAT, 400, "messages");
    free(b);
}
END_TEST

START_TEST(chat_is_one_message_a_line)
{
    srv_req r;
    char param[64] = "";
    ck_assert_int_eq(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                           "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
                           "\"content\":[{\"type\":\"text\",\"text\":\"Hel\"},{\"type\":\"text\","
                           "\"text\":\"lo\"}]}]}", SRV_CHAT, &r, param), 0);
    ck_assert_str_eq(r.prompt, "Be brief.\nHi\nHello");
    ck_assert_int_eq(r.kind, SRV_CHAT);
    srv_req_free(&r);
}
END_TEST

START_TEST(top_k_values)
{
    static const struct { const char *v; int want; } cases[] = {
        {"1", 1}, {"2", 2}, {"40", 40}, {"0", 0}, {"-1", 0}, {"null", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[128], param[64] = "";
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"top_k\":%s}", cases[i].v);
        srv_req r;
        ck_assert_int_eq(parse(body, SRV_COMPLETION, &r, param), 0);
        ck_assert_msg(r.top_k == cases[i].want, "top_k %s: %d, expected %d", cases[i].v,
                      r.top_k, cases[i].want);
        srv_req_free(&r);
    }
    expect_status("{\"prompt\":\"x\",\"top_k\":-2}", SRV_COMPLETION, 400, "top_k");
    expect_status("{\"prompt\":\"x\",\"top_k\":1.5}", SRV_COMPLETION, 400, "top_k");
}
END_TEST

START_TEST(prompt_array_of_one)
{
    srv_req r;
    char param[64] = "";
    ck_assert_int_eq(parse("{\"prompt\":[\"only\"]}", SRV_COMPLETION, &r, param), 0);
    ck_assert_str_eq(r.prompt, "only");
    srv_req_free(&r);
    expect_status("{\"prompt\":[\"one\",\"two\"]}", SRV_COMPLETION, 400, "prompt");
    expect_status("{\"prompt\":[]}", SRV_COMPLETION, 400, "prompt");
    expect_status("{\"prompt\":[5]}", SRV_COMPLETION, 400, "prompt");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("req_parse");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, model_name_matches_whole);
    tcase_add_test(tc, stop_string_length_edge);
    tcase_add_test(tc, content_parts_edge);
    tcase_add_test(tc, chat_is_one_message_a_line);
    tcase_add_test(tc, top_k_values);
    tcase_add_test(tc, prompt_array_of_one);
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
    printf("test_req_parse: skipped: built without cJSON (libcjson-dev)\n");
    return 0;
}
#endif
