/* ui_progress.c - the labs a learner has run to the end, for the marks in the chapter tree:
 * one "ID ok|failed UNIXTIME" line per lab in the file labs of the state directory (beside
 * the exercise progress: $MLSYS_LAB_HOME when set, see ex_state_dir), rewritten atomically
 * (temp file, fsync, rename). Exercise progress is the exercise engine's own file; this one
 * only knows labs. */
#include "ui.h"
#include "../exercise/exercise.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_LABS 256

static int state_path(char *out, size_t n, int make_dirs)
{
    char dir[1024];
    if (ex_state_dir(dir, sizeof dir) != 0)
        return -1;
    if (make_dirs) {
        /* mkdir -p, one level at a time */
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = 0;
                mkdir(dir, 0755);
                *p = '/';
            }
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return -1;
    }
    int k = snprintf(out, n, "%s/labs", dir);
    return k > 0 && (size_t)k < n ? 0 : -1;
}

typedef struct entry {
    char id[96];
    int ok;
    long long when;
} entry;

static int load(entry *e, int max)
{
    char path[1100];
    if (state_path(path, sizeof path, 0) != 0)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    char line[256], id[96], st[16];
    long long when;
    while (n < max && fgets(line, sizeof line, f))
        if (sscanf(line, "%95s %15s %lld", id, st, &when) == 3) {
            snprintf(e[n].id, sizeof e[n].id, "%s", id);
            e[n].ok = !strcmp(st, "ok");
            e[n].when = when;
            n++;
        }
    fclose(f);
    return n;
}

int ui_progress_lab(const char *lab_id)
{
    entry e[MAX_LABS];
    int n = load(e, MAX_LABS);
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].id, lab_id))
            return e[i].ok ? 1 : -1;
    return 0;
}

void ui_progress_record(const char *lab_id, int ok)
{
    entry e[MAX_LABS];
    int n = load(e, MAX_LABS), i;
    for (i = 0; i < n; i++)
        if (!strcmp(e[i].id, lab_id))
            break;
    if (i == n) {
        if (n == MAX_LABS)
            return;
        n++;
        snprintf(e[i].id, sizeof e[i].id, "%s", lab_id);
        e[i].ok = ok;
    } else {
        e[i].ok = e[i].ok || ok;    /* once run to the end, a later failure does not undo it */
    }
    e[i].when = (long long)time(NULL);
    char path[1100], tmp[1200];
    if (state_path(path, sizeof path, 1) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return;
    }
    for (int k = 0; k < n; k++)
        fprintf(f, "%s %s %lld\n", e[k].id, e[k].ok ? "ok" : "failed", e[k].when);
    int bad = fflush(f) != 0 || fsync(fd) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0)
        unlink(tmp);
}
