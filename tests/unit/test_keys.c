/* test_keys.c - the front end's keys as a learner meets them: q goes back one screen and
 * quits only from the first one, Q quits from anywhere and asks while a job runs, one meaning
 * per key (h moves, t shows a hint), a footer that keeps help and q at 80 columns, a help
 * overlay that scrolls and lists exactly the current screen's keys, and the form's typing
 * rules. The screens are driven through their class tables, off screen, without curses. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../lab/ui/ui.h"
#include "../../lab/exercise/exercise.h"
#include "../../lab/job/runner.h"

static int has_key(const ui_key_help *k, const char *key, const char *what)
{
    for (; k && k->key; k++)
        if (!strcmp(k->key, key) && (!what || strstr(k->what, what)))
            return 1;
    return 0;
}

START_TEST(shell_keys_have_one_meaning)
{
    /* q is the screen's to take first; unhandled, the shell goes back one screen */
    ck_assert_int_eq(ui_shell_key('q', 0, 0), UI_SHELL_PASS);
    /* Q quits at once when nothing runs, and asks first while a job runs */
    ck_assert_int_eq(ui_shell_key('Q', 0, 0), UI_SHELL_QUIT);
    ck_assert_int_eq(ui_shell_key('Q', 0, 1), UI_SHELL_CONFIRM);
    ck_assert_int_eq(ui_shell_key(UI_KEY_F10, 0, 1), UI_SHELL_CONFIRM);
    ck_assert_int_eq(ui_shell_key('?', 0, 0), UI_SHELL_HELP);
    ck_assert_int_eq(ui_shell_key(UI_KEY_F1, 0, 0), UI_SHELL_HELP);
    /* in a text field ? and Q are text; F1 still opens the help */
    ck_assert_int_eq(ui_shell_key('?', 1, 0), UI_SHELL_PASS);
    ck_assert_int_eq(ui_shell_key('Q', 1, 1), UI_SHELL_PASS);
    ck_assert_int_eq(ui_shell_key(UI_KEY_F1, 1, 0), UI_SHELL_HELP);
    /* the footer says what q does where it is */
    ck_assert(has_key(ui_global_keys(1, 0, 0, 0), "q", "quit"));
    ck_assert(has_key(ui_global_keys(2, 0, 0, 0), "q", "back"));
    ck_assert(has_key(ui_global_keys(3, 0, 0, 0), "?/F1", "help"));
    ck_assert(!has_key(ui_global_keys(2, 1, 0, 0), "q", NULL));
    /* the help lists Q and Esc beside q on a screen that is not the first */
    ck_assert(has_key(ui_global_keys(2, 0, 1, 1), "Q/F10", "quit"));
    ck_assert(has_key(ui_global_keys(2, 0, 1, 1), "q/Esc", "back"));
}
END_TEST

START_TEST(footer_keeps_help_and_q_at_80_columns)
{
    static const ui_key_help many[] = {
        {"space", "pause"}, {"n/→", "step"}, {"b/←", "back"}, {"+/-", "speed"},
        {"[/]", "collective"}, {"Home/End", "first/last"}, {"r", "rerun"},
        {"Tab/1-5", "view"}, {"j/k", "scroll"}, {NULL, NULL}
    };
    grid *g = grid_create(80, 24);
    ui_draw_footer(g, 23, 80, many);
    char *f = grid_dump(g);
    ck_assert_msg(strstr(f, "?/F1 help") && strstr(f, "q back"), "%s", f);
    free(f);
    grid_free(g);
}
END_TEST

START_TEST(help_scrolls_in_a_small_terminal)
{
    static char names[40][16];
    static ui_key_help keys[41];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "k%02d", i);
        keys[i] = (ui_key_help){names[i], "a key"};
    }
    keys[40] = (ui_key_help){NULL, NULL};
    grid *g = grid_create(80, 24);
    int top = 0;
    int more = ui_draw_help_at(g, "test", ui_global_keys(2, 0, 1, 1), keys, NULL, &top);
    char *f = grid_dump(g);
    ck_assert_int_eq(more, 1);
    ck_assert_msg(strstr(f, "k00") && !strstr(f, "k39"), "%s", f);
    ck_assert_msg(strstr(f, "j/k scroll"), "the overlay says how to scroll: %s", f);
    free(f);
    top = 1000;                 /* G: clamped to the last page, which shows the last rows */
    grid_clear(g);
    more = ui_draw_help_at(g, "test", ui_global_keys(2, 0, 1, 1), keys, NULL, &top);
    f = grid_dump(g);
    ck_assert_int_eq(more, 0);
    ck_assert_int_lt(top, 1000);
    ck_assert_msg(strstr(f, "k39") && strstr(f, "Ctrl-C") && !strstr(f, "k00"), "%s", f);
    free(f);
    grid_free(g);
}
END_TEST

/* ---- home: q in the reader goes back to the tree; on the tree it is the shell's (quit) ---- */

START_TEST(home_q_goes_back_then_quits)
{
    ui_screen *s = home_create();
    ck_assert(s->cls->key(s, UI_KEY_TAB) & UI_HANDLED);        /* into the reader */
    ck_assert(s->cls->key(s, 'q') & UI_HANDLED);               /* back to the tree */
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);                  /* left to the shell: quit */
    /* typing a search: q and ? are text */
    s->cls->key(s, '/');
    ck_assert(s->cls->typing && s->cls->typing(s));
    ck_assert(s->cls->key(s, 'q') & UI_HANDLED);
    s->cls->key(s, UI_KEY_ESC);
    ck_assert(!s->cls->typing(s));
    s->cls->free(s);
}
END_TEST

/* ---- the exercise pane: h is not "hint" (it moves back elsewhere); t is ---- */

START_TEST(pane_hint_is_t_not_h)
{
    char dir[] = "/tmp/mlsys-keys-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char st[600], home[600];
    snprintf(st, sizeof st, "%s/state", dir);
    snprintf(home, sizeof home, "%s/lab", dir);
    setenv("XDG_STATE_HOME", st, 1);
    setenv("MLSYS_LAB_HOME", home, 1);
    const exercise *ex = ex_find("ch03-ring-allreduce");
    ck_assert_ptr_nonnull(ex);
    expane *p = expane_create();
    expane_show(p, ex);
    ck_assert_int_eq(expane_key(p, 'h', 1), 0);
    ck_assert(expane_key(p, 't', 1) & UI_HANDLED);
    ui_key_help k[16];
    expane_keys(p, 1, k, 16);
    ck_assert(has_key(k, "t", "hint"));
    ck_assert(!has_key(k, "h", NULL));
    grid *g = grid_create(80, 30);
    expane_draw(p, g, 0, 0, 80, 30, 1);
    char *f = grid_dump(g);
    ck_assert_msg(strstr(f, "1 of") && strstr(f, "t shows the next"), "%s", f);
    free(f);
    grid_free(g);
    expane_free(p);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- the form: q backs out of a number, is typed into a file name ---- */
static int one_rank(mlsys_comm *c, const lab_args *a)
{
    (void)c;
    (void)a;
    return 0;
}
static const lab_flag kflags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {"prompt", 0, FLAG_STR, "hello", NULL, 0, 0, "a text with a value"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};
static const lab klab = {.id = "test/keys", .title = "Keys", .summary = "a lab",
                         .flags = kflags, .rank_main = one_rank, .view = "ring"};

START_TEST(form_q_and_typing)
{
    ui_screen *s = form_create(&klab);
    ck_assert(!s->cls->typing(s));                  /* on world-size */
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);       /* the shell goes back */
    const ui_key_help *k = s->cls->keys(s);
    ck_assert(!has_key(k, "Esc", NULL));            /* the footer's q back says it once */
    /* a text that holds a value not touched yet: q goes back (a learner leaving the form) */
    s->cls->key(s, UI_KEY_DOWN);
    ck_assert(!s->cls->typing(s));
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);
    s->cls->key(s, UI_KEY_RIGHT);                   /* moving its cursor starts the editing */
    ck_assert(s->cls->typing(s));
    ck_assert(s->cls->key(s, 'q') & UI_HANDLED);
    s->cls->key(s, UI_KEY_ENTER);
    /* down to trace (prompt, backend, timeout, algo, trace), an empty file name: its first
     * key may be a q ("qq.json"), so q is text there from the start, and Esc is the way back */
    for (int i = 0; i < 4; i++)
        s->cls->key(s, UI_KEY_DOWN);
    k = s->cls->keys(s);
    ck_assert(has_key(k, "type", "edit") && !has_key(k, "Left/Right", NULL));
    ck_assert(has_key(k, "Esc", "back"));
    ck_assert(s->cls->typing(s));                   /* the shell leaves q, ? and Q to it */
    ck_assert(s->cls->key(s, 'q') & UI_HANDLED);    /* the first q is text */
    ck_assert(s->cls->key(s, 'q') & UI_HANDLED);
    ck_assert(s->cls->key(s, '.') & UI_HANDLED);
    k = s->cls->keys(s);
    ck_assert(has_key(k, "Enter/Esc", "done"));
    ck_assert(s->cls->key(s, UI_KEY_ENTER) & UI_HANDLED);   /* Enter ends the typing */
    ck_assert(!s->cls->typing(s));                  /* a name that is done: q goes back */
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);
    s->cls->key(s, UI_KEY_END);
    s->cls->key(s, UI_KEY_RIGHT);                   /* back into it */
    ck_assert(s->cls->typing(s));
    ck_assert(s->cls->key(s, 'q') & UI_HANDLED);
    ck_assert(s->cls->key(s, UI_KEY_ESC) & UI_HANDLED);     /* ends the typing again */
    int r = s->cls->key(s, UI_KEY_ESC);             /* and now goes back */
    ck_assert(r & UI_BACK);
    /* the name holds what was typed, q first */
    grid *g = grid_create(120, 30);
    s->cls->draw(s, g, 0, 0, 120, 30);
    char *text = grid_dump(g);
    ck_assert_msg(strstr(text, "[qq.q") != NULL, "%s", text);
    free(text);
    grid_free(g);
    /* off the name, on a number again: q goes back */
    s->cls->key(s, UI_KEY_UP);
    ck_assert(!s->cls->typing(s));
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);
    s->cls->free(s);
}
END_TEST

/* The learner's "q q 6 Enter" after a run: the form must not have taken q (or 6) as text. */
START_TEST(form_after_a_run_leaves_text_alone)
{
    ui_screen *s = form_create(&klab);
    /* world-size 1, then type into the trace name (and clear it: no file), launch */
    s->cls->key(s, UI_CTRL('u'));
    s->cls->key(s, '1');
    for (int i = 0; i < 5; i++)                     /* prompt, backend, timeout, algo, trace */
        s->cls->key(s, UI_KEY_DOWN);
    s->cls->key(s, 'x');
    ck_assert(s->cls->typing(s));
    s->cls->key(s, UI_CTRL('u'));
    s->cls->key(s, UI_KEY_ENTER);                   /* ends the name */
    ck_assert(s->cls->key(s, UI_KEY_ENTER) & UI_HANDLED);   /* launches */
    /* back on the form (the shell popped the run screen): q goes back, not into a field */
    ck_assert(!s->cls->typing(s));
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);
    const ui_key_help *k = s->cls->keys(s);
    ck_assert(!has_key(k, "type", "edit"));         /* the Launch button is selected */
    s->cls->free(s);
}
END_TEST

/* ---- a run screen: busy while its job runs; the log view's keys in its help ---- */

static int idle_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    (void)c;
    usleep(300000);
    return 0;
}

START_TEST(run_screen_keys_and_busy)
{
    char err[256];
    ui_screen *s = run_create_fn("keys", 2, 0, idle_rank, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    ck_assert(s->cls->busy && s->cls->busy(s));
    const ui_key_help *k = s->cls->keys(s);
    char tab[16];
    snprintf(tab, sizeof tab, "Tab/1-%d", view_count());
    ck_assert(has_key(k, tab, "view"));
    const char *const *lines = s->cls->help(s);
    int dot = 0;
    for (int i = 0; lines[i]; i++)
        dot |= strstr(lines[i], "none (·)") != NULL;
    ck_assert_msg(dot, "the ring help names the glyph the ring draws for an empty cell");
    s->cls->key(s, '2');                            /* the log view */
    k = s->cls->keys(s);
    ck_assert(has_key(k, "o", NULL) && has_key(k, "f/F", NULL) && has_key(k, "j/k", NULL) &&
              has_key(k, "g/G", NULL));
    for (int i = 0; i < 400 && s->cls->busy(s); i++) {
        int tmo = 10;
        s->cls->tick(s, mlsys_now_ns(), &tmo);
        usleep(5000);
    }
    ck_assert(!s->cls->busy(s));
    s->cls->free(s);
}
END_TEST

/* A gated job: ] with no later collective says why nothing moved; the help names F10; q in
 * the run screen is not taken by it (the shell asks before it stops the job). */
static int gated_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    return mlsys_step(c, 0, "hold");
}

START_TEST(run_screen_says_what_keys_cannot_do)
{
    char err[256];
    ui_screen *s = run_create_fn("gated", 2, 1, gated_rank, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    ck_assert(s->cls->key(s, ']') & UI_HANDLED);
    grid *g = grid_create(100, 30);
    s->cls->draw(s, g, 0, 1, 100, 28);
    char *f = grid_dump(g);
    ck_assert_msg(strstr(f, "no later collective recorded yet: n lets the ranks take their "
                           "next step"), "%s", f);
    free(f);
    ck_assert_int_eq(s->cls->key(s, 'q'), 0);       /* the shell's: it asks while busy */
    ck_assert(s->cls->busy(s));
    ck_assert(has_key(ui_global_keys(2, 0, 1, 1), "Q/F10", "quit"));
    ck_assert(has_key(ui_global_keys(1, 0, 0, 1), "q/Q/F10", "quit"));
    ck_assert(has_key(ui_global_keys(2, 0, 1, 1), "q/Esc", "asks first"));
    /* no ranks (a replay): Ctrl-C stops nothing */
    ck_assert(!has_key(ui_global_keys(2, 0, 0, 1), "Ctrl-C", "rank"));
    grid_free(g);
    s->cls->free(s);
}
END_TEST

/* ---- the algorithm a learner picks never changes silently ---- */

START_TEST(algo_fallbacks_are_said)
{
    char t[300];
    ck_assert_int_eq(runner_algo_warn("auto", 5, t, sizeof t), 0);
    ck_assert_int_eq(runner_algo_warn("recursive_doubling", 5, t, sizeof t), 1);
    ck_assert_msg(strstr(t, "power of two") && strstr(t, "all_reduce"), "%s", t);
    ck_assert_int_eq(runner_algo_warn("recursive_doubling", 4, t, sizeof t), 1);
    ck_assert_msg(!strstr(t, "power of two"), "%s", t);
    ck_assert_int_eq(runner_algo_warn("ring", 4, t, sizeof t), 1);
    ck_assert_msg(strstr(t, "fewer elements than ranks"), "%s", t);
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_COLL_BEGIN;
    e.coll = MLSYS_COLL_ALLREDUCE;
    e.dtype = MLSYS_F32;
    e.bytes = 8;                        /* 2 floats */
    snprintf(e.label, sizeof e.label, "direct");
    ck_assert_int_eq(runner_algo_note("ring", 5, &e, t, sizeof t), 1);
    ck_assert_msg(strstr(t, "2 elements on 5 ranks ran direct"), "%s", t);
    snprintf(e.label, sizeof e.label, "ring");
    ck_assert_int_eq(runner_algo_note("ring", 5, &e, t, sizeof t), 0);
    /* a call whose algorithm the lab chose itself is no fallback of the learner's */
    snprintf(e.label, sizeof e.label, "direct");
    e.tag = MLSYS_ALGO_BY_LAB;
    ck_assert_int_eq(runner_algo_note("ring", 5, &e, t, sizeof t), 0);
    e.tag = MLSYS_ALGO_BY_USER;
    e.coll = MLSYS_COLL_SCATTER;
    snprintf(e.label, sizeof e.label, "tree");
    ck_assert_int_eq(runner_algo_note("ring", 5, &e, t, sizeof t), 1);
    ck_assert_msg(strstr(t, "has no ring"), "%s", t);
}
END_TEST

static Suite *keys_suite(void)
{
    Suite *s = suite_create("keys");
    TCase *t = tcase_create("keys");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, shell_keys_have_one_meaning);
    tcase_add_test(t, footer_keeps_help_and_q_at_80_columns);
    tcase_add_test(t, help_scrolls_in_a_small_terminal);
    tcase_add_test(t, home_q_goes_back_then_quits);
    tcase_add_test(t, pane_hint_is_t_not_h);
    tcase_add_test(t, form_q_and_typing);
    tcase_add_test(t, form_after_a_run_leaves_text_alone);
    tcase_add_test(t, run_screen_keys_and_busy);
    tcase_add_test(t, algo_fallbacks_are_said);
    tcase_add_test(t, run_screen_says_what_keys_cannot_do);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(keys_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
