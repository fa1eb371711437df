/* exercises_table.c - every chapter's exercise table, in curriculum order. Each table lives
 * in chapters/chNN/exercises.c; a chapter with exercises adds one line here. */
#include "exercise.h"
#include <string.h>

extern const exercise *const ch01_exercises[], *const ch02_exercises[],
    *const ch03_exercises[], *const ch04_exercises[];

const exercise *const *const ex_chapter_tables[] = {
    ch01_exercises, ch02_exercises, ch03_exercises, ch04_exercises, NULL
};

int ex_count(void)
{
    int n = 0;
    for (int t = 0; ex_chapter_tables[t]; t++)
        for (int i = 0; ex_chapter_tables[t][i]; i++)
            n++;
    return n;
}

const exercise *ex_at(int k)
{
    for (int t = 0; ex_chapter_tables[t]; t++)
        for (int i = 0; ex_chapter_tables[t][i]; i++)
            if (k-- == 0)
                return ex_chapter_tables[t][i];
    return NULL;
}

const exercise *ex_find(const char *id)
{
    if (!id)
        return NULL;
    for (int t = 0; ex_chapter_tables[t]; t++)
        for (int i = 0; ex_chapter_tables[t][i]; i++)
            if (!strcmp(ex_chapter_tables[t][i]->id, id))
                return ex_chapter_tables[t][i];
    return NULL;
}
