/* golden.h - frame goldens shared by the view suites: compare a rendered frame with
 * tests/frames/NAME.txt (under MLSYS_LAB_SRC when set), report the first differing line, and
 * with GENERATE=1 write the file instead. Header-only: each suite is its own executable. */
#ifndef MLSYS_TEST_GOLDEN_H
#define MLSYS_TEST_GOLDEN_H

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *golden_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static void golden(const char *name, const char *text)
{
    char path[512];
    const char *src = getenv("MLSYS_LAB_SRC");
    snprintf(path, sizeof path, "%s%stests/frames/%s.txt", src ? src : "", src ? "/" : "", name);
    const char *gen = getenv("GENERATE");
    if (gen && *gen && strcmp(gen, "0")) {
        FILE *f = fopen(path, "wb");
        ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
        fputs(text, f);
        fclose(f);
        return;
    }
    char *want = golden_read(path);
    ck_assert_msg(want != NULL, "golden %s is missing (make GENERATE=1 to write it)", path);
    if (strcmp(want, text) != 0) {
        /* the first differing line, to make the failure readable */
        int line = 1;
        const char *a = want, *b = text;
        while (*a && *a == *b) {
            if (*a == '\n')
                line++;
            a++;
            b++;
        }
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        fprintf(stderr, "golden %s differs at line %d:\n  want: %.*s\n  got:  %.*s\n"
                "--- got frame ---\n%s", name, line, (int)(ea ? ea - a : (long)strlen(a)), a,
                (int)(eb ? eb - b : (long)strlen(b)), b, text);
        free(want);
        ck_abort_msg("golden %s differs at line %d (GENERATE=1 rewrites it)", name, line);
    }
    free(want);
}

#endif
