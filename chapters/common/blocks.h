/* blocks.h - the event schema of the blocks view (lab/ui/views/blocks.c): rows of blocks,
 * each with a value (drawn as a shade) and a state, groups outlined over a range of blocks,
 * and a caption. Chapter 5 sends gradients, buckets and ZeRO shards; chapter 9 can send KV
 * pages and page tables the same way. Header-only, depends on core/mlsys.h alone, so any
 * chapter can emit these events without pulling in the front end. */
#ifndef MLSYS_BLOCKS_H
#define MLSYS_BLOCKS_H

#include "../../core/mlsys.h"
#include <stdio.h>
#include <string.h>

/* Every event is a MLSYS_EV_MARK whose label starts with "blk:". Fields:
 *
 *   label            peer (row)     chunk          tag          val[]           other
 *   "blk:size"       row or -1      -              blocks       -               resets the row
 *   "blk:name:TEXT"  row or -1      -              -            -               row's name
 *   "blk:val"        row or -1      first block    count 1..4   values          shades
 *   "blk:state"      row or -1      first block    count 1..4   BLK_* codes     states
 *   "blk:group:TEXT" row/-1 = all   first block    blocks       -               outline, TEXT
 *                                                                               its name; step =
 *                                                                               group id (same id
 *                                                                               replaces it)
 *   "blk:phase:TEXT" -              -              -            group id/-1    caption of what
 *                                                                               follows (below)
 *   "blk:clear"      -              -              -            -               forget everything;
 *                                                                               step = generation:
 *                                                                               the same one again
 *                                                                               (other ranks) is
 *                                                                               ignored
 *
 * A phase names what happens NEXT: at "blk:phase:" the picture on screen becomes the
 * "before" picture and the events that follow build the new one; step = the group it is
 * about (drawn highlighted), or -1. Ranks all send the same phase: repeats are ignored.
 * Row -1 means "the emitting rank's row" (rank r draws row r). Shades are scaled by the
 * largest |value| shown; the sign picks the colour (and the glyph set under --ascii). */
enum { BLK_FREE = 0, BLK_USED = 1, BLK_SHARED = 2, BLK_OWNED = 3, BLK_EVICTED = 4,
       BLK_STATE_COUNT };

/* Limits of the view: more rows, blocks or groups than these are dropped. */
#define BLK_MAX_ROWS 64
#define BLK_MAX_BLOCKS 512
#define BLK_MAX_GROUPS 64

static inline void blk_emit(mlsys_comm *c, const char *label, int row, int chunk, int tag,
                            int step, const double *v, int nv)
{
    if (!c || !mlsys_tracing(c))
        return;
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MARK;
    e.peer = row;
    e.chunk = chunk;
    e.tag = tag;
    e.step = step;
    e.coll = -1;
    e.algo = -1;
    e.op = -1;
    for (int i = 0; i < nv && i < 4; i++)
        e.val[i] = v[i];
    size_t n = strlen(label);
    if (n > sizeof e.label - 1)
        n = sizeof e.label - 1;     /* labels longer than 31 bytes are cut */
    memcpy(e.label, label, n);
    e.label[n] = 0;
    mlsys_emit(c, &e);
}

/* A row of n values (or states when states != 0), four to an event. */
static inline void blk_emit_row(mlsys_comm *c, int row, const double *v, int n, int states)
{
    for (int i = 0; i < n; i += 4) {
        int k = n - i < 4 ? n - i : 4;
        blk_emit(c, states ? "blk:state" : "blk:val", row, i, k, -1, v + i, k);
    }
}

#endif
