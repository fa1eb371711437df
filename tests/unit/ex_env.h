/* ex_env.h - what the exercise suites share: a fresh workspace and state folder per test
 * (each test runs in its own fork, so g_ex_tmp is the test's), removed after, and the
 * exercise context over it. Header-only, like the suites' other helpers. */
#ifndef TESTS_EX_ENV_H
#define TESTS_EX_ENV_H

#include "../../lab/exercise/exercise.h"
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_ex_tmp[PATH_MAX];

static void fresh_env(void)
{
    snprintf(g_ex_tmp, sizeof g_ex_tmp, "%s/mlsys-ex-test-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(g_ex_tmp));
    char home[PATH_MAX + 16], state[PATH_MAX + 16];
    snprintf(home, sizeof home, "%s/home", g_ex_tmp);
    snprintf(state, sizeof state, "%s/state", g_ex_tmp);
    setenv("MLSYS_LAB_HOME", home, 1);
    setenv("XDG_STATE_HOME", state, 1);
    unsetenv("MLSYS_WATCH_POLL");
    unsetenv("MLSYS_EX_TIMEOUT_MS");
    unsetenv("MLSYS_EX_LIMIT_MS");
}

static void remove_tmp(void)
{
    char cmd[PATH_MAX + 32];
    if (g_ex_tmp[0] && strstr(g_ex_tmp, "mlsys-ex-test-")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_ex_tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_ex_tmp);
    }
}

static void get_cx(ex_context *cx)
{
    char err[512];
    ck_assert_msg(ex_context_init(cx, err, sizeof err) == 0, "%s", err);
}

#endif
