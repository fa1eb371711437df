/* run_draw.c - what the run screen shows: the tabs of the views, the current view drawn from
 * the frame the player shows, a scrubber (where that frame sits among those recorded, with
 * the keys that move it), the notices (an algorithm that fell back, what a key could not
 * do), the status line, the title, and the keys and help lines for the footer and overlay.
 * Nothing here depends on which view is current: every view reads the same frame. */
#include "run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void run_draw_title(run *r, char *out, size_t n)
{
    if (!r->l || r->replay) {
        snprintf(out, n, "%s", r->title);
        return;
    }
    const char *dot = ui_options()->ascii ? "-" : "·";
    if (!r->l->rank_main)
        snprintf(out, n, "%s %s one process", r->l->id, dot);
    else if (r->started && !r->ran_ranks)
        snprintf(out, n, "%s %s no ranks started", r->l->id, dot);
    else
        snprintf(out, n, "%s %s %d rank%s%s", r->l->id, dot, r->nranks, r->nranks == 1 ? "" :
                 "s", r->gated ? ", gated" : "");
}

const ui_key_help *run_draw_keys(run *r)
{
    int k = 0, ascii = ui_options()->ascii;
    r->keys[k++] = (ui_key_help){"space", r->paused ? "play" : "pause"};
    r->keys[k++] = (ui_key_help){ascii ? "n/Right" : "n/→", "step"};
    r->keys[k++] = (ui_key_help){ascii ? "b/Left" : "b/←", "back"};
    r->keys[k++] = (ui_key_help){"+/-", "speed"};
    r->keys[k++] = (ui_key_help){"[/]", "collective"};
    r->keys[k++] = (ui_key_help){"Home/End", "first/last"};
    r->keys[k++] = (ui_key_help){"{/}", "a tenth"};
    r->keys[k++] = (ui_key_help){"r", r->replay ? "restart" : "rerun"};
    snprintf(r->tabkey, sizeof r->tabkey, "Tab/1-%d", r->nviews);
    r->keys[k++] = (ui_key_help){r->tabkey, "view"};
    const ui_key_help *vk = r->v[r->cur].cls->keys;
    for (int i = 0; vk && vk[i].key && k < (int)(sizeof r->keys / sizeof r->keys[0]) - 1; i++)
        r->keys[k++] = vk[i];
    r->keys[k] = (ui_key_help){NULL, NULL};
    return r->keys;
}

const char *const *run_draw_help(run *r)
{
    int k = 0, max = (int)(sizeof r->help_lines / sizeof r->help_lines[0]) - 1;
    const view_class *c = r->v[r->cur].cls;
    r->help_lines[k++] = c->help;
    r->help_lines[k++] = "Every view shows the same step: a step ends where every rank has "
                         "reached its next gate (its next algorithm step).";
    if (r->replay)
        r->help_lines[k++] = "A replay: the trace's steps play from the start; the scrubber "
                             "under the view moves with b, n, Home, End, [, ] and { }.";
    else if (r->gated)
        r->help_lines[k++] = "Gated: the ranks wait at every step until n lets them take the "
                             "next one; space lets them run at the chosen speed.";
    else if (r->l && r->l->rank_main)
        r->help_lines[k++] = "To hold the ranks at every step, go back (q) and turn gated on "
                             "in the lab's form.";
    const char *const *notes = c->notes ? c->notes(ui_options()->ascii) : NULL;
    for (int i = 0; notes && notes[i] && k < max; i++)
        r->help_lines[k++] = notes[i];
    r->help_lines[k] = NULL;
    return r->help_lines;
}

/* One line: where the shown frame sits among those recorded, and the keys that move it. */
static void draw_scrubber(run *r, grid *g, int x, int y, int w)
{
    int total = sm_nframes(r->sm) - 1, ascii = g->ascii;
    char l[64];
    snprintf(l, sizeof l, " step %d/%d ", r->frame, total);
    const char *keys = ascii ? "  b/n Home/End [/] {/}" : "  b/n Home/End [/] {/}";
    int lw = (int)strlen(l), kw = w >= 70 ? (int)strlen(keys) : 0, bw = w - lw - kw - 2;
    grid_put(g, x, y, l, GRID_BOLD);
    if (bw >= 4) {
        int pos = total > 0 ? (int)((long)r->frame * (bw - 1) / total) : 0;
        for (int i = 0; i < bw; i++)
            grid_set(g, x + lw + 1 + i, y, i == pos ? (ascii ? '#' : 0x25cf) :
                     i < pos ? (ascii ? '=' : 0x2501) : (ascii ? '-' : 0x2500),
                     i <= pos ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD : GRID_DIM);
    }
    if (kw)
        grid_put(g, x + w - kw, y, keys, GRID_DIM);
}

static void status_line(run *r, grid *g, int x, int y, int w)
{
    char left[400], right[200];
    grid_attr la = 0;
    int last = play_last(r);
    if (!r->started) {
        snprintf(left, sizeof left, "not started");
    } else if (r->replay) {
        snprintf(left, sizeof left, "replay of %zu events%s", r->rd.n,
                 r->frame < last ? "" : ": the end (r plays it again)");
    } else if (r->done && r->frame < last && r->result == 0) {
        snprintf(left, sizeof left, "ended; showing step %d of %d (End: the last)", r->frame,
                 last);
    } else if (r->done && r->result == 0 && r->skipped) {
        snprintf(left, sizeof left, w >= 110 ? "finished: every rank exited 0 (skipped %d "
                 "step%s to keep up: b goes back)" : "finished (skipped %d step%s: b goes back)",
                 r->skipped, r->skipped == 1 ? "" : "s");
        la = GRID_PAIR(UI_PAIR_OK) | GRID_BOLD;
    } else if (r->done) {
        snprintf(left, sizeof left, "%s", r->result != 0 ? r->why : !r->ran_ranks ? r->why :
                 "finished: every rank exited 0");
        la = r->result == 0 ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD : GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD;
    } else if (r->gated && job_all_at_gate(r)) {
        const sm_frame *gf = w >= 100 ? sm_frame_at(r->sm, sm_nframes(r->sm) - 1) : NULL;
        snprintf(left, sizeof left, "the ranks wait at gate %d: n lets them take it%s%s%s",
                 sm_nframes(r->sm) - 1, gf && gf->label[0] ? " (" : "",
                 gf && gf->label[0] ? gf->label : "", gf && gf->label[0] ? ")" : "");
        la = GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD;
    } else if (r->skipped && r->frame >= last - 1) {
        snprintf(left, sizeof left, "running (skipped %d step%s to keep up: b goes back)",
                 r->skipped, r->skipped == 1 ? "" : "s");
        la = GRID_PAIR(UI_PAIR_OK);
    } else {
        snprintf(left, sizeof left, "running");
        la = GRID_PAIR(UI_PAIR_OK);
    }
    const char *dot = g->ascii ? " - " : " · ";
    int ms = play_speed_ms(r);
    char sp[32];
    if (ms)
        snprintf(sp, sizeof sp, "%d ms/step", ms);
    else
        snprintf(sp, sizeof sp, "no animation");
    int narrow = w < 100, wide = w >= 140;
    if (narrow)
        snprintf(sp, sizeof sp, "%d ms", ms);
    int ended = (r->done || r->replay) && r->frame >= last;
    const char *state = ended ? "the end" : r->paused ? "paused" : "playing";
    int used;
    uint64_t dropped = sm_tape_dropped(r->sm);
    /* what the learner acts on first; the speed and the counts where there is room */
    used = snprintf(right, sizeof right, "%s%sstep %d/%d", state, dot, r->frame,
                    sm_nframes(r->sm) - 1);
    if (wide)
        used += snprintf(right + used, sizeof right - (size_t)used, "%s%s", dot, sp);
    if (!narrow)
        used += snprintf(right + used, sizeof right - (size_t)used, "%s%llu events", dot,
                         (unsigned long long)r->events);
    if (dropped && !narrow)
        used += snprintf(right + used, sizeof right - (size_t)used, "%s%llu not kept", dot,
                         (unsigned long long)dropped);
    if (r->lost || wide)
        snprintf(right + used, sizeof right - (size_t)used, "%s%llu lost", dot,
                 (unsigned long long)r->lost);
    int rw = grid_text_width(right, strlen(right));
    grid_fill(g, x, y, w, 1, ' ', GRID_PAIR(UI_PAIR_BAR) | GRID_REVERSE);
    view_put_clipped(g, x + 1, y, w - rw - 4, left, la | GRID_REVERSE);
    grid_put(g, x + w - rw - 1, y, right, (r->lost ? GRID_PAIR(UI_PAIR_ERR) :
             GRID_PAIR(UI_PAIR_BAR)) | GRID_REVERSE);
}

void run_draw_screen(run *r, grid *g, int x, int y, int w, int h)
{
    /* the view tabs */
    int cx = x + 1;
    for (int i = 0; i < r->nviews; i++) {
        char t[48];
        snprintf(t, sizeof t, " %d %s ", i + 1, r->v[i].cls->title);
        cx += grid_put(g, cx, y, t, i == r->cur ? GRID_PAIR(UI_PAIR_SEL) | GRID_REVERSE |
                       GRID_BOLD : GRID_DIM);
        cx++;
    }
    if (!r->replay && r->l)
        view_put_clipped(g, cx + 2, y, x + w - cx - 3, r->l->title, GRID_DIM);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = r->nranks;
    ctx.anim = play_anim(r, mlsys_now_ns());
    ctx.ascii = g->ascii;
    ctx.live = r->job != NULL && !r->done;
    ctx.gate_step = r->gated ? r->gate : NULL;
    /* a rank that ended well shows as running while the frame shown is before its end: its
     * box is in the past; a failure shows at once */
    int *shown = mlsys_xcalloc((size_t)(r->nranks ? r->nranks : 1), sizeof *shown);
    int behind = r->frame < play_last(r);
    for (int k = 0; k < r->nranks; k++)
        shown[k] = behind && r->rank_state[k] == VIEW_RANK_DONE ? VIEW_RANK_RUNNING
                   : r->rank_state[k];
    ctx.rank_state = r->replay ? NULL : shown;
    ctx.rank_code = r->replay ? NULL : r->rank_code;
    ctx.sm = r->sm;
    ctx.frame = r->frame;
    /* rows under the view: the scrubber (a replay, an ended job), a notice, the status */
    int scrub = r->replay || r->done;
    int notice = r->nnotes || r->say[0];
    int vh = h - 3 - scrub - (notice ? 1 : 0);
    play_sync(r, r->cur);
    r->v[r->cur].cls->draw(r->v[r->cur].data, g, x + 1, y + 2, w - 2, vh, &ctx);
    grid_unclip(g);
    free(shown);
    int row = y + 2 + vh;
    if (scrub)
        draw_scrubber(r, g, x + 1, row++, w - 2);
    if (notice) {
        char note[400];
        if (r->say[0])
            snprintf(note, sizeof note, "%s", r->say);
        else
            snprintf(note, sizeof note, "you chose %s, but %s%s", r->forced, r->notes[0],
                     r->nnotes > 1 ? " (more in the log)" : "");
        grid_fill(g, x, row, w, 1, ' ', 0);
        view_put_clipped(g, x + 1, row, w - 2, note, GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD);
    }
    status_line(r, g, x, y + h - 1, w);
}
