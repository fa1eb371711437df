/* assets.c - where the lab's shipped files are (chapter texts, models, tokenizers): one rule
 * for every caller (the commands, the chapter reader and the labs' --model flags), so that
 * assets/... is found from any folder, while a file the user names from the current folder
 * is that file. */
#include "lab.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

const char *lab_asset_path(const char *rel, char *out, size_t n)
{
    if (!rel || !*rel) {
        out[0] = 0;
        return out;
    }
    snprintf(out, n, "%s", rel);
    if (rel[0] == '/' || exists(rel))
        return out;             /* what the user named, as the shell would read it */
    const char *src = getenv("MLSYS_LAB_SRC");
    char cand[PATH_MAX + 64];
    if (src && *src) {
        snprintf(cand, sizeof cand, "%s/%s", src, rel);
        if (exists(cand))
            return snprintf(out, n, "%s", cand), out;
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = k > 0 ? (exe[k] = 0, strrchr(exe, '/')) : NULL;
    if (!slash)
        return out;
    *slash = 0;
    /* build/mlsys-lab finds the tree one folder up; an installed copy, next to itself */
    const char *fmt[] = {"%s/../%s", "%s/%s"};
    for (int i = 0; i < 2; i++) {
        snprintf(cand, sizeof cand, fmt[i], exe, rel);
        char real[PATH_MAX];
        if (exists(cand))        /* "build/../assets/x" reads better as "assets/x" */
            return snprintf(out, n, "%s", realpath(cand, real) ? real : cand), out;
    }
    return out;
}
