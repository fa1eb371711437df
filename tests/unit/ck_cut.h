/* ck_cut.h - a long report cut to what a Check failure message can hold. Check replaces a
 * message over its limit (4 KiB unless CK_MAX_MSG_SIZE says otherwise) with "Message string
 * too long" and the reason is lost; ck_cut keeps the lines that say what failed first (each
 * cut to a quarter of the room), then the rest while room lasts, and says what it left out.
 * Header-only: each suite is its own executable. */
#ifndef MLSYS_TEST_CK_CUT_H
#define MLSYS_TEST_CK_CUT_H

#include <stdio.h>
#include <string.h>

#define CK_CUT_ROOM 3000      /* well under Check's 4096, with room for the assertion's text */

/* Append line [p, p+n) to out (len bytes used of cap), cut to at most max bytes. 1 if it
 * fitted, 0 when out is full. */
static inline int ck_cut_line(char *out, size_t cap, size_t *len, const char *p, size_t n,
                              size_t max)
{
    const char *more = " [...]";
    size_t take = n > max ? max : n;
    size_t need = take + (n > max ? strlen(more) : 0) + 1;
    if (*len + need + 1 > cap)
        return 0;
    memcpy(out + *len, p, take);
    *len += take;
    if (n > max) {
        memcpy(out + *len, more, strlen(more));
        *len += strlen(more);
    }
    out[(*len)++] = '\n';
    out[*len] = 0;
    return 1;
}

/* The lines of text that contain key first, then the others, into out (cap bytes, at most
 * CK_CUT_ROOM used). Returns out. */
static inline const char *ck_cut(const char *text, const char *key, char *out, size_t cap)
{
    size_t len = 0, left = 0;
    if (cap > CK_CUT_ROOM)
        cap = CK_CUT_ROOM;
    out[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const char *p = text; p && *p;) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            const char *k = key && *key ? strstr(p, key) : NULL;
            int is_key = k && k < p + n;
            if (is_key == (pass == 0) && !ck_cut_line(out, cap, &len, p, n, cap / 4))
                left++;
            p = e ? e + 1 : p + n;
        }
    }
    if (left) {
        char tail[64];
        int t = snprintf(tail, sizeof tail, "(%zu more lines left out)", left);
        if (len + (size_t)t + 1 > cap)
            len = cap > (size_t)t + 1 ? cap - (size_t)t - 1 : 0;
        memcpy(out + len, tail, (size_t)t + 1);
    }
    return out;
}

#endif
