/* chapters.c - the table of chapters in reading order, and lookup of a lab by id. Each
 * chapter's struct lives in its own folder (chapters/chNN/chNN.c); adding a chapter is one
 * line here. */
#include "lab.h"
#include <string.h>

extern const chapter ch01_chapter, ch02_chapter, ch03_chapter, ch04_chapter, ch05_chapter,
    ch06_chapter, ch07_chapter, ch08_chapter, ch09_chapter, ch10_chapter, ch11_chapter,
    ch12_chapter, ch13_chapter, ch14_chapter;

const chapter *const lab_chapters[] = {
    &ch01_chapter, &ch02_chapter, &ch03_chapter, &ch04_chapter, &ch05_chapter, &ch06_chapter,
    &ch07_chapter, &ch08_chapter, &ch09_chapter, &ch10_chapter, &ch11_chapter, &ch12_chapter,
    &ch13_chapter, &ch14_chapter, NULL
};

const lab *lab_find(const char *id)
{
    if (!id)
        return NULL;
    for (int i = 0; lab_chapters[i]; i++)
        for (int k = 0; lab_chapters[i]->labs && lab_chapters[i]->labs[k]; k++)
            if (!strcmp(lab_chapters[i]->labs[k]->id, id))
                return lab_chapters[i]->labs[k];
    return NULL;
}
