/* exercises_table.c - every exercise in curriculum order, read from the chapter table
 * (lab_chapters[i]->exercises, set in chapters/chNN/chNN.c from chNN_exercises.c), so a
 * chapter's exercises are listed in one place only: its own struct. */
#include "exercise.h"
#include <string.h>

int ex_count(void)
{
    int n = 0;
    for (int c = 0; lab_chapters[c]; c++)
        for (int i = 0; lab_chapters[c]->exercises && lab_chapters[c]->exercises[i]; i++)
            n++;
    return n;
}

const exercise *ex_at(int k)
{
    if (k < 0)
        return NULL;
    for (int c = 0; lab_chapters[c]; c++)
        for (int i = 0; lab_chapters[c]->exercises && lab_chapters[c]->exercises[i]; i++)
            if (k-- == 0)
                return lab_chapters[c]->exercises[i];
    return NULL;
}

const exercise *ex_find(const char *id)
{
    if (!id)
        return NULL;
    for (int c = 0; lab_chapters[c]; c++)
        for (int i = 0; lab_chapters[c]->exercises && lab_chapters[c]->exercises[i]; i++)
            if (!strcmp(lab_chapters[c]->exercises[i]->id, id))
                return lab_chapters[c]->exercises[i];
    return NULL;
}
