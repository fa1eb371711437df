/* shm_fbox.c - the fast box: how the few-byte eager messages of collectives cross between
 * two ranks in the time of the two cache-line moves they need. Each channel has a ring of
 * one-line cells; the sender fills the next cell and publishes it, the receiver polls that
 * one cell, consumes cells in order and hands each to the oldest matching receive, or keeps
 * a copy until one is posted. Neither side loads a line the other writes on the way. */
#include "internal.h"
#include <stdlib.h>
#include <string.h>

/* Small messages of collectives only: user sends stay synchronous. */
static int fits_cell(uint32_t ctx, size_t bytes)
{
    return ctx_is_coll(ctx) && bytes <= FBOX_DATA;
}

int fbox_fits(const mlsys_request *r)
{
    return fits_cell(r->ctx, r->bytes);
}

static int put(mlsys_world *w, int dst, const void *buf, size_t bytes, uint32_t ctx, int tag,
               uint64_t seq)
{
    shm_peer *p = &w->peers[dst];
    shm_chan *ch = shm_channel(w->h, w->rank, dst);
    if (p->fb_sent - p->fb_taken_seen >= FBOX_CELLS) {   /* full, as far as we know: look */
        p->fb_taken_seen = atomic_load_explicit(&ch->fb_taken, memory_order_acquire);
        if (p->fb_sent - p->fb_taken_seen >= FBOX_CELLS)
            return 0;
    }
    fbox_cell *c = &ch->fb[p->fb_sent % FBOX_CELLS];
    c->seq = seq;
    c->ctx = ctx;
    c->tag = tag;
    c->bytes = (uint32_t)bytes;
    if (bytes)
        memcpy(c->data, buf, bytes);
    atomic_store_explicit(&c->pub, ++p->fb_sent, memory_order_release);
    shm_bell_ring(w->h, dst);
    return 1;
}

int fbox_post(mlsys_request *r)
{
    return put(r->comm->w, r->peer_world, r->sbuf, r->bytes, r->ctx, r->tag, r->seq);
}

/* A send that must wait behind an older unposted one to the same peer cannot go now. */
int fbox_send_now(mlsys_comm *c, const void *buf, size_t bytes, int dst, int tag)
{
    mlsys_world *w = c->w;
    uint32_t ctx = comm_ctx(c);
    if (!fits_cell(ctx, bytes) || shm_send_queued(w->pending_tail, dst) ||
        !put(w, dst, buf, bytes, ctx, tag, w->send_seq[dst] + 1))
        return 0;
    w->send_seq[dst]++;
    return 1;
}

/* ---- receiver side ---- */

static fbox_cell *head(shm_chan *ch, const shm_peer *p)
{
    fbox_cell *c = &ch->fb[p->fb_next % FBOX_CELLS];
    return atomic_load_explicit(&c->pub, memory_order_acquire) == p->fb_next + 1 ? c : NULL;
}

/* A slot message from src not yet taken may be older than the head cell: loaded after the
 * cell, so that any slot message posted before it is counted. */
static int slots_waiting(shm_chan *ch, const shm_peer *p)
{
    return atomic_load_explicit(&ch->posted, memory_order_acquire) != p->slot_taken;
}

static fbox_msg *kept(mlsys_world *w, int src, uint32_t ctx, int tag)
{
    for (fbox_msg *m = w->unexp; m; m = m->next)
        if (m->src == src && m->ctx == ctx && m->tag == tag)
            return m;
    return NULL;
}

/* The oldest pending receive of the key (src, ctx, tag), or NULL. */
static mlsys_request *oldest_recv(mlsys_world *w, int src, uint32_t ctx, int tag)
{
    for (mlsys_request *r = w->pending; r; r = r->next)
        if (r->kind == REQ_RECV && r->peer_world == src && r->ctx == ctx && r->tag == tag)
            return r;
    return NULL;
}

/* The head cell is taken: tell the sender at once, it may wait for room (or sleep). */
static void took(mlsys_world *w, int src, shm_chan *ch, shm_peer *p, uint64_t upto)
{
    p->fb_next = upto;
    atomic_store_explicit(&ch->fb_taken, upto, memory_order_release);
    shm_bell_ring(w->h, src);
}

/* Only when nothing can come before the first cell in line: no older receive of the same
 * key, no kept copy from src, no slot message from src not yet taken. */
int fbox_recv_now(mlsys_comm *c, const void *in, void *out, size_t bytes, mlsys_dtype dt,
                  mlsys_op op, int src, int tag, int *status)
{
    mlsys_world *w = c->w;
    uint32_t ctx = comm_ctx(c);
    shm_peer *p = &w->peers[src];
    shm_chan *ch = shm_channel(w->h, src, w->rank);
    fbox_cell *cell = head(ch, p);
    if (!cell || cell->ctx != ctx || cell->tag != tag)
        return 0;
    for (const fbox_msg *m = w->unexp; m; m = m->next)
        if (m->src == src)
            return 0;
    if (oldest_recv(w, src, ctx, tag) || slots_waiting(ch, p))
        return 0;
    *status = shm_recv_bytes(c, in, out, bytes, dt, op, src, tag, cell->data, cell->bytes);
    w->recv_seq[src] = cell->seq;
    took(w, src, ch, p, p->fb_next + 1);
    return 1;
}

/* The oldest pending receive that this cell's message is for, if it may take it now: not
 * when a kept message of the same key is older, nor while a slot message of the channel
 * waits (it may be older and of the same key: the receive's own scan compares them). */
static mlsys_request *taker(mlsys_world *w, int src, const fbox_cell *c, int slots)
{
    if (slots || kept(w, src, c->ctx, c->tag))
        return NULL;
    return oldest_recv(w, src, c->ctx, c->tag);
}

static void keep(mlsys_world *w, int src, const fbox_cell *c)
{
    fbox_msg *m = mlsys_xmalloc(sizeof *m);
    *m = (fbox_msg){.src = src, .ctx = c->ctx, .tag = c->tag, .bytes = c->bytes,
                    .seq = c->seq};
    memcpy(m->data, c->data, c->bytes);
    if (w->unexp_tail)
        w->unexp_tail->next = m;
    else
        w->unexp = m;
    w->unexp_tail = m;
}

static int waiting_for(const mlsys_world *w, int src)
{
    for (const mlsys_request *r = w->pending; r; r = r->next)
        if (r->kind == REQ_RECV && r->peer_world == src)
            return 1;
    return 0;
}

/* Cells are taken in order. One that no receive can take yet is copied aside only while a
 * receive from src waits (it may be for a later cell); otherwise it stays in the ring for
 * the receive that will come, and costs no copy. */
void fbox_drain(mlsys_world *w, int src)
{
    shm_chan *ch = shm_channel(w->h, src, w->rank);
    shm_peer *p = &w->peers[src];
    uint64_t next = p->fb_next;
    for (fbox_cell *c; (c = head(ch, p)); p->fb_next++) {
        mlsys_request *r = taker(w, src, c, slots_waiting(ch, p));
        if (r)
            shm_recv_finish(r, c->data, c->bytes, c->seq);
        else if (waiting_for(w, src))
            keep(w, src, c);
        else
            break;
    }
    if (p->fb_next != next)
        took(w, src, ch, p, p->fb_next);
}

fbox_msg *fbox_find(mlsys_world *w, const mlsys_request *r)
{
    return kept(w, r->peer_world, r->ctx, r->tag);
}

void fbox_forget(mlsys_world *w, fbox_msg *m)
{
    fbox_msg **pp = &w->unexp, *prev = NULL;
    while (*pp && *pp != m) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = m->next;
    if (w->unexp_tail == m)
        w->unexp_tail = prev;
    free(m);
}

void fbox_fini(mlsys_world *w)
{
    while (w->unexp) {
        fbox_msg *m = w->unexp;
        w->unexp = m->next;
        free(m);
    }
    w->unexp_tail = NULL;
}
