/* shm_fbox.c - the fast box: how the few-byte eager messages of collectives cross between
 * two ranks in the time of the two cache-line moves they need. Each channel has a ring of
 * one-line cells; the sender fills the next cell and publishes it, the receiver polls that
 * one cell, consumes cells in order and hands each to the oldest matching receive, or keeps
 * a copy until one is posted. Neither side loads a line the other writes on the way. */
#include "internal.h"
#include <stdlib.h>
#include <string.h>

/* Small messages of collectives only (odd contexts): user sends stay synchronous. */
int fbox_fits(const mlsys_request *r)
{
    return (r->ctx & 1u) && r->bytes <= FBOX_DATA;
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

static uint32_t coll_ctx(const mlsys_comm *c)
{
    return c->ctx + (c->in_coll ? 1u : 0u);
}

/* A send that must wait behind an older unposted one to the same peer cannot go now. */
int fbox_send_now(mlsys_comm *c, const void *buf, size_t bytes, int dst, int tag)
{
    mlsys_world *w = c->w;
    uint32_t ctx = coll_ctx(c);
    if (!(ctx & 1u) || bytes > FBOX_DATA)
        return 0;
    for (const mlsys_request *r = w->pending; r; r = r->next)
        if (r->kind == REQ_SEND && r->slot < 0 && r->peer_world == dst)
            return 0;
    if (!put(w, dst, buf, bytes, ctx, tag, w->send_seq[dst] + 1))
        return 0;
    w->send_seq[dst]++;
    return 1;
}

/* Only when nothing can come before the first cell in line: no older receive of the same
 * key, no kept copy from src, no slot message from src not yet taken. */
int fbox_recv_now(mlsys_comm *c, const void *in, void *out, size_t bytes, mlsys_dtype dt,
                  mlsys_op op, int src, int tag, int *status)
{
    mlsys_world *w = c->w;
    uint32_t ctx = coll_ctx(c);
    shm_peer *p = &w->peers[src];
    shm_chan *ch = shm_channel(w->h, src, w->rank);
    fbox_cell *cell = &ch->fb[p->fb_next % FBOX_CELLS];
    if (atomic_load_explicit(&cell->pub, memory_order_acquire) != p->fb_next + 1 ||
        cell->ctx != ctx || cell->tag != tag)
        return 0;
    for (const fbox_msg *m = w->unexp; m; m = m->next)
        if (m->src == src)
            return 0;
    for (const mlsys_request *r = w->pending; r; r = r->next)
        if (r->kind == REQ_RECV && r->peer_world == src && r->ctx == ctx && r->tag == tag)
            return 0;
    if (atomic_load_explicit(&ch->posted, memory_order_acquire) != p->slot_taken)
        return 0;
    *status = shm_recv_bytes(c, in, out, bytes, dt, op, src, tag, cell->data, cell->bytes);
    w->recv_seq[src] = cell->seq;
    p->fb_next++;
    atomic_store_explicit(&ch->fb_taken, p->fb_next, memory_order_release);
    shm_bell_ring(w->h, src);       /* a sender may sleep on a full ring */
    return 1;
}

/* The oldest pending receive that this cell's message is for, if it may take it now: not
 * when a kept message of the same key is older, nor while a slot message of the channel
 * waits (it may be older and of the same key: the receive's own scan compares them). */
static mlsys_request *taker(mlsys_world *w, int src, const fbox_cell *c, int slots_waiting)
{
    if (slots_waiting)
        return NULL;
    for (const fbox_msg *m = w->unexp; m; m = m->next)
        if (m->src == src && m->ctx == c->ctx && m->tag == c->tag)
            return NULL;
    for (mlsys_request *r = w->pending; r; r = r->next)
        if (r->kind == REQ_RECV && r->peer_world == src && r->ctx == c->ctx && r->tag == c->tag)
            return r;
    return NULL;
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
    uint64_t first = p->fb_next;
    for (;;) {
        fbox_cell *c = &ch->fb[p->fb_next % FBOX_CELLS];
        if (atomic_load_explicit(&c->pub, memory_order_acquire) != p->fb_next + 1)
            break;
        int slots_waiting =
            atomic_load_explicit(&ch->posted, memory_order_acquire) != p->slot_taken;
        mlsys_request *r = taker(w, src, c, slots_waiting);
        if (r)
            shm_recv_finish(r, c->data, c->bytes, c->seq);
        else if (waiting_for(w, src))
            keep(w, src, c);
        else
            break;
        p->fb_next++;
    }
    if (p->fb_next != first) {     /* every cell we took, at once: the sender may wait */
        atomic_store_explicit(&ch->fb_taken, p->fb_next, memory_order_release);
        shm_bell_ring(w->h, src);   /* a sender may sleep on a full ring */
    }
}

fbox_msg *fbox_find(mlsys_world *w, const mlsys_request *r)
{
    for (fbox_msg *m = w->unexp; m; m = m->next)
        if (m->src == r->peer_world && m->ctx == r->ctx && m->tag == r->tag)
            return m;
    return NULL;
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
