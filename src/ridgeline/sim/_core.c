/* The simulator's engine core in C: the continuous-batching scheduler of scheduler.py and the
 * static-arrival loops of runner.py, step for step, for the configurations that dominate long
 * runs (open-loop arrivals, no prefix groups, no P/D split, the roofline step time).
 *
 * Bit-identical to the Python engine: every integer is exact, every float operation is the
 * Python one in the same order (no FMA contraction: built with -ffp-contract=off), and a test
 * compares the two on seeded workloads with preemptions. Loaded with ctypes (core.py); the
 * module init below only lets setuptools build it as an extension.
 *
 * Steps run one at a time: with the decode set kept as aggregates (count, sum of contexts,
 * counts by block phase, a heap of finish steps) a decode step costs a few operations, so
 * no fast-forward is needed to be fast.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { WAITING = 0, PREFILL = 1, DECODE = 2, FINISHED = 3 };
enum { ROUTE_RR = 0, ROUTE_LO = 1, ROUTE_AFFINITY = 2, ROUTE_LEAST_KV = 3 };
enum { NVARS = 11 };  /* perf/ops.py WORK_VARS: any n s pt pairs pc dq dc u pre dec */
enum { V_ANY, V_N, V_S, V_PT, V_PAIRS, V_PC, V_DQ, V_DC, V_U, V_PRE, V_DEC };

typedef struct {
    int64_t id, prompt, output, g, nc, a, g_join, join_step, finish_step, seg_start;
    int64_t admit_order, tag;
    int64_t group, max_prefix_blocks, nshared;   /* prefix group (-1: none); shared blocks */
    int64_t pre0, has_ft;   /* a P/D hand-off: preemptions on the prefill side, 1st token */
    double sent, ft;
    int32_t state, preemptions, prev, next, nseg, capseg;
    int64_t seg_in[4];
    int64_t *seg_ext;      /* pairs (first, last step): seg_in while nseg <= 2, then here */
} Seq;

/* Not a stored pointer into seg_in: the slot array moves when it grows. */
#define SEG(q) ((q)->seg_ext ? (q)->seg_ext : (q)->seg_in)

typedef struct { int64_t fs, ao, tag; int32_t slot; } DEnt;
typedef struct PNode { int64_t g, i, ref; int32_t prev, next; } PNode;
/* A dynamic arrival (runner._Sim.dyn): a closed-loop user's next request or a P/D hand-off,
 * ordered by time, then by when it was pushed. */
typedef struct { double t, ft, sent; int64_t seq, kind, i, pre, prep, dest1; } DynEnt;
/* dest1: a hand-off's decode replica + 1, picked when its transfer was queued; 0: none. */
enum { KIND_NEW = 0, KIND_HANDOFF = 1 };
/* A router's pool of replicas [lo, lo + n) (cluster.Router). */
typedef struct { int64_t lo, n, rr_next; int64_t *tree; int64_t tree_size; } Pool;
typedef struct { double key; int64_t version; int32_t rep; } LEnt;

typedef struct {
    double clock;
    int64_t step_index;
    int32_t *wq; int64_t wq_head, wq_len, wq_cap;
    int32_t run_head, run_tail; int64_t run_len;
    int32_t *pf; int64_t pf_len;
    int64_t nseqs;
    int64_t dec_count, dec_a_sum;
    int64_t *residue;
    DEnt *dh; int64_t dh_len, dh_cap;
    int64_t free_fresh;
    /* prefix cache (kv_cache.py BlockPool): cached blocks (group, index) in nodes, found
     * through an open-addressing table; refcount-0 ones on an LRU list (evictable) */
    struct PNode *nodes; int64_t node_cap; int32_t *node_free; int64_t n_node_free;
    int32_t *tab; int64_t tab_cap, n_cached;
    int32_t lru_head, lru_tail; int64_t n_evictable;
    int64_t prefix_queries, prefix_hits;
    int64_t admit_counter, num_pre, prompt_total, gen_total, num_finished, num_rejected;
    double *ends; int64_t ends_base, ends_len, ends_cap;
    int64_t version;
    double link_free;       /* a prefill replica's outbound KV link: free from this time */
    double link_in_free;    /* a decode replica's inbound KV link: free from this time */
    /* transfers queued to this decode replica and not arrived, and their prompts' blocks:
     * the routers count them as its load (cluster.py Replica.expect) */
    int64_t inflight, inflight_blocks;
} Rep;

typedef struct {
    /* configuration */
    int64_t R, router, mns, mnbt, chunked, bs, num_blocks, record_timeline, prefix_caching;
    double *dec_p, *dec_q; int64_t ndec;
    double c_dc, m_dc;
    int64_t nrows; double *rows;   /* nrows x 2 x NVARS (compute, memory) */
    double lin[NVARS], jd_c[NVARS], jd_m[NVARS];
    int64_t has_jd, has_lin, moe_u;
    double num_experts, miss;
    /* state */
    Seq *seqs; int64_t seq_cap; int32_t *free_slots; int64_t nfree;
    Rep *reps;
    LEnt *lh; int64_t lh_len, lh_cap;
    Pool pools[2];          /* entry (mixed or prefill) and decode replicas */
    int64_t pd_p;           /* prefill replicas (0: no P/D split) */
    int64_t dynamic, concurrency;   /* arrivals made during the run; closed-loop users */
    double kv_lat, kv_bpt, link_bw;
    int64_t link_queue;     /* each link (prefill out, decode in) carries one KV at a time */
    double *xfer_wait, *xfer_s; int64_t n_xfer;   /* per request (rl_set_xfer), or NULL */
    DynEnt *dyn; int64_t dyn_len, dyn_cap, dyn_seq;
    int64_t next_req;       /* closed loop: the next user request (0: open loop) */
    int64_t ptr, tag_counter, done;
    /* the current call's inputs */
    const double *in_arrival, *in_think;
    const int64_t *in_prompt, *in_output, *in_group, *in_ptoks;
    int64_t n_total, n_static;
    /* scratch (one step) */
    int32_t *ch_slot; int64_t *ch_len; int32_t *snap; int32_t *fin; int64_t nfin;
    /* outputs since the last drain */
    int64_t out_len, out_cap;
    int64_t *o_id, *o_rep, *o_pre, *o_status, *o_ntok;
    double *o_sent, *o_end;
    int64_t ev_len, ev_cap; double *ev;
    /* rl_set_direct: token times written straight to request id's slot of the caller's
     * array, ev_direct[ev_off[id] ..], instead of to `ev` in finish order */
    double *ev_direct; const int64_t *ev_off; int64_t n_direct;
    int64_t tl_len, tl_cap;
    int64_t *t_rep, *t_batch, *t_pf, *t_dec, *t_used, *t_wait;
    double *t_start, *t_end;
    /* totals (streamed timeline) */
    int64_t steps, batch_sum, max_used;
    int64_t error;
} Core;

static void *xrealloc(Core *c, void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) c->error = 2;
    return q ? q : p;
}


/* Python's -(-a // b) for b > 0: the ceiling of a / b for any sign of a. */
static inline int64_t ceil_div(int64_t a, int64_t b) {
    int64_t q = a / b, r = a % b;
    return (r != 0 && a > 0) ? q + 1 : q;
}

/* Python's a % b for b > 0 (never negative). */
static inline int64_t pmod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return r < 0 ? r + b : r;
}

/* ---- step time: CompiledStep._pq, the same terms in the same order ---------------------- */

static double affine(const double *coef, const double *x, int skip) {
    double acc = 0.0;
    int first = 1;
    for (int v = 0; v < NVARS; v++) {
        if (coef[v] == 0.0 || v == skip) continue;
        double term = coef[v] * x[v];
        if (first) { acc = term; first = 0; }
        else acc = acc + term;
    }
    return acc;
}

static void pq(const Core *c, double pt, double pairs, double pc, double ps, double dq,
               double *P, double *Q) {
    double x[NVARS];
    x[V_PT] = pt; x[V_PAIRS] = pairs; x[V_PC] = pc; x[V_DQ] = dq; x[V_DC] = 0.0;
    x[V_N] = pt + dq;
    x[V_S] = ps + dq;
    x[V_ANY] = x[V_N] > 0 ? 1.0 : 0.0;
    x[V_PRE] = pt > 0 ? 1.0 : 0.0;
    x[V_DEC] = dq > 0 ? 1.0 : 0.0;
    x[V_U] = c->moe_u ? c->num_experts * (1.0 - pow(c->miss, x[V_N])) : 0.0;
    double t = 0.0;
    for (int64_t j = 0; j < c->nrows; j++) {
        const double *row = c->rows + j * 2 * NVARS;
        double cc = affine(row, x, -1);
        double mm = affine(row + NVARS, x, -1);
        t += cc > mm ? cc : mm;
    }
    if (c->has_lin) t += affine(c->lin, x, -1);
    if (!c->has_jd) { *P = t; *Q = t; return; }
    *P = t + affine(c->jd_c, x, V_DC);
    *Q = t + affine(c->jd_m, x, V_DC);
}

static double step_seconds(const Core *c, int64_t pf_tokens, int64_t pf_pairs, int64_t pf_ctx,
                           int64_t pf_seqs, int64_t n_dec, int64_t dec_ctx) {
    double p, q;
    if (pf_tokens || pf_pairs || pf_ctx || pf_seqs)
        pq(c, (double)pf_tokens, (double)pf_pairs, (double)pf_ctx, (double)pf_seqs,
           (double)n_dec, &p, &q);
    else { p = c->dec_p[n_dec]; q = c->dec_q[n_dec]; }
    double dc = (double)dec_ctx;
    double x = dc * c->c_dc + p;
    double y = dc * c->m_dc + q;
    return x > y ? x : y;
}

/* ---- sequences ------------------------------------------------------------------------- */

static int32_t seq_new(Core *c) {
    if (!c->nfree) {
        int64_t old = c->seq_cap, cap = old ? 2 * old : 1024;
        c->seqs = xrealloc(c, c->seqs, (size_t)cap * sizeof(Seq));
        c->free_slots = xrealloc(c, c->free_slots, (size_t)cap * sizeof(int32_t));
        if (c->error) return -1;
        memset(c->seqs + old, 0, (size_t)(cap - old) * sizeof(Seq));
        for (int64_t i = cap - 1; i >= old; i--) c->free_slots[c->nfree++] = (int32_t)i;
        c->seq_cap = cap;
    }
    int32_t s = c->free_slots[--c->nfree];
    Seq *q = &c->seqs[s];
    memset(q, 0, sizeof(Seq));
    q->capseg = 2;
    return s;
}

static void seq_free(Core *c, int32_t s) {
    Seq *q = &c->seqs[s];
    free(q->seg_ext);
    q->seg_ext = NULL;
    c->free_slots[c->nfree++] = s;
}

static void seg_append(Core *c, Seq *q, int64_t a, int64_t b) {
    if (q->nseg == q->capseg) {
        int32_t cap = 2 * q->capseg;
        int64_t *p = malloc((size_t)cap * 2 * sizeof(int64_t));
        if (!p) { c->error = 2; return; }
        memcpy(p, SEG(q), (size_t)q->nseg * 2 * sizeof(int64_t));
        free(q->seg_ext);
        q->seg_ext = p;
        q->capseg = cap;
    }
    SEG(q)[2 * q->nseg] = a;
    SEG(q)[2 * q->nseg + 1] = b;
    q->nseg++;
}

/* ---- a replica's containers ------------------------------------------------------------ */

static void wq_grow(Core *c, Rep *r) {
    int64_t cap = r->wq_cap ? 2 * r->wq_cap : 64;
    int32_t *w = malloc((size_t)cap * sizeof(int32_t));
    if (!w) { c->error = 2; return; }
    for (int64_t i = 0; i < r->wq_len; i++) w[i] = r->wq[(r->wq_head + i) % r->wq_cap];
    free(r->wq);
    r->wq = w; r->wq_head = 0; r->wq_cap = cap;
}
static void wq_push_back(Core *c, Rep *r, int32_t s) {
    if (r->wq_len == r->wq_cap) wq_grow(c, r);
    r->wq[(r->wq_head + r->wq_len) % r->wq_cap] = s;
    r->wq_len++;
}
static void wq_push_front(Core *c, Rep *r, int32_t s) {
    if (r->wq_len == r->wq_cap) wq_grow(c, r);
    r->wq_head = (r->wq_head + r->wq_cap - 1) % r->wq_cap;
    r->wq[r->wq_head] = s;
    r->wq_len++;
}
static inline int32_t wq_front(const Rep *r) { return r->wq[r->wq_head]; }
static inline void wq_pop_front(Rep *r) {
    r->wq_head = (r->wq_head + 1) % r->wq_cap;
    r->wq_len--;
}

static void run_append(Core *c, Rep *r, int32_t s) {
    Seq *q = &c->seqs[s];
    q->prev = r->run_tail; q->next = -1;
    if (r->run_tail >= 0) c->seqs[r->run_tail].next = s; else r->run_head = s;
    r->run_tail = s;
    r->run_len++;
}
static void run_remove(Core *c, Rep *r, int32_t s) {
    Seq *q = &c->seqs[s];
    if (q->prev >= 0) c->seqs[q->prev].next = q->next; else r->run_head = q->next;
    if (q->next >= 0) c->seqs[q->next].prev = q->prev; else r->run_tail = q->prev;
    q->prev = q->next = -1;
    r->run_len--;
}

static void pf_remove(Rep *r, int32_t s) {
    int64_t j = 0;
    for (int64_t i = 0; i < r->pf_len; i++)
        if (r->pf[i] != s) r->pf[j++] = r->pf[i];
    r->pf_len = j;
}

static inline int dent_less(const DEnt *x, const DEnt *y) {
    return x->fs < y->fs || (x->fs == y->fs && x->ao < y->ao);
}
static void dh_push(Core *c, Rep *r, DEnt e) {
    if (r->dh_len == r->dh_cap) {
        r->dh_cap = r->dh_cap ? 2 * r->dh_cap : 64;
        r->dh = xrealloc(c, r->dh, (size_t)r->dh_cap * sizeof(DEnt));
        if (c->error) return;
    }
    int64_t i = r->dh_len++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!dent_less(&e, &r->dh[p])) break;
        r->dh[i] = r->dh[p];
        i = p;
    }
    r->dh[i] = e;
}
static void dh_pop(Rep *r) {
    DEnt last = r->dh[--r->dh_len];
    int64_t i = 0, n = r->dh_len;
    if (!n) return;
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        const DEnt *best = &last;
        if (l < n && dent_less(&r->dh[l], best)) { m = l; best = &r->dh[l]; }
        if (l + 1 < n && dent_less(&r->dh[l + 1], best)) m = l + 1;
        if (m == i) break;
        r->dh[i] = r->dh[m];
        i = m;
    }
    r->dh[i] = last;
}
static inline int dent_valid(const Core *c, const DEnt *e) {
    const Seq *q = &c->seqs[e->slot];
    return q->state == DECODE && q->finish_step == e->fs && q->tag == e->tag;
}
static void dh_clean(Core *c, Rep *r) {
    while (r->dh_len && !dent_valid(c, &r->dh[0])) dh_pop(r);
}

/* ---- least-outstanding: a min tree of (outstanding << 32 | index) ---------------------- */

static inline Pool *pool_of(Core *c, int64_t ri) {
    return (c->pd_p && ri >= c->pd_p) ? &c->pools[1] : &c->pools[0];
}

static void tree_set(Core *c, int64_t ri, int64_t count) {
    Pool *pl = pool_of(c, ri);
    if (!pl->tree) return;
    int64_t i = ri - pl->lo;
    int64_t k = pl->tree_size + i;
    pl->tree[k] = (count << 32) | i;
    for (k >>= 1; k >= 1; k >>= 1) {
        int64_t a = pl->tree[2 * k], b = pl->tree[2 * k + 1];
        pl->tree[k] = a < b ? a : b;
    }
}

/* ---- the KV pool with its prefix cache (kv_cache.py: BlockPool) ------------------------ */

static inline uint64_t key_hash(int64_t g, int64_t i) {
    uint64_t x = (uint64_t)g * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)i + 0x632BE59BD9B4E019ULL);
    x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ULL; x ^= x >> 29;
    return x;
}

static inline int64_t free_blocks(const Rep *r) { return r->free_fresh + r->n_evictable; }
static inline int64_t used_blocks(const Core *c, const Rep *r) {
    return c->num_blocks - r->free_fresh - r->n_evictable;
}

static int64_t tab_slot(const Rep *r, int64_t g, int64_t i) {   /* slot holding it, or -1 */
    if (!r->tab_cap) return -1;
    uint64_t mask = (uint64_t)r->tab_cap - 1;
    for (uint64_t k = key_hash(g, i) & mask;; k = (k + 1) & mask) {
        int32_t n = r->tab[k];
        if (n < 0) return -1;
        if (r->nodes[n].g == g && r->nodes[n].i == i) return (int64_t)k;
    }
}
static inline int32_t find(const Rep *r, int64_t g, int64_t i) {
    int64_t k = tab_slot(r, g, i);
    return k < 0 ? -1 : r->tab[k];
}

static void tab_put(Rep *r, int32_t n) {
    uint64_t mask = (uint64_t)r->tab_cap - 1;
    uint64_t k = key_hash(r->nodes[n].g, r->nodes[n].i) & mask;
    while (r->tab[k] >= 0) k = (k + 1) & mask;
    r->tab[k] = n;
}

static int pool_insert(Core *c, Rep *r, int64_t g, int64_t i) {   /* refcount 1 */
    if ((r->n_cached + 1) * 2 > r->tab_cap) {
        int64_t cap = r->tab_cap ? 2 * r->tab_cap : 256;
        int32_t *tab = malloc((size_t)cap * sizeof(int32_t));
        if (!tab) { c->error = 2; return 0; }
        for (int64_t k = 0; k < cap; k++) tab[k] = -1;
        int32_t *old = r->tab; int64_t old_cap = r->tab_cap;
        r->tab = tab; r->tab_cap = cap;
        for (int64_t k = 0; k < old_cap; k++) if (old[k] >= 0) tab_put(r, old[k]);
        free(old);
    }
    if (!r->n_node_free) {
        int64_t old = r->node_cap, cap = old ? 2 * old : 256;
        r->nodes = xrealloc(c, r->nodes, (size_t)cap * sizeof(PNode));
        r->node_free = xrealloc(c, r->node_free, (size_t)cap * sizeof(int32_t));
        if (c->error) return 0;
        for (int64_t k = cap - 1; k >= old; k--) r->node_free[r->n_node_free++] = (int32_t)k;
        r->node_cap = cap;
    }
    int32_t n = r->node_free[--r->n_node_free];
    PNode *x = &r->nodes[n];
    x->g = g; x->i = i; x->ref = 1; x->prev = x->next = -1;
    tab_put(r, n);
    r->n_cached++;
    return 1;
}

static void pool_delete(Rep *r, int32_t n) {   /* out of the table (backward shift) */
    uint64_t mask = (uint64_t)r->tab_cap - 1;
    uint64_t j = (uint64_t)tab_slot(r, r->nodes[n].g, r->nodes[n].i);
    r->tab[j] = -1;
    for (uint64_t k = (j + 1) & mask; r->tab[k] >= 0; k = (k + 1) & mask) {
        uint64_t h = key_hash(r->nodes[r->tab[k]].g, r->nodes[r->tab[k]].i) & mask;
        int stays = j <= k ? (j < h && h <= k) : (j < h || h <= k);
        if (stays) continue;
        r->tab[j] = r->tab[k];
        r->tab[k] = -1;
        j = k;
    }
    r->node_free[r->n_node_free++] = n;
    r->n_cached--;
}

static void lru_append(Rep *r, int32_t n) {
    PNode *x = &r->nodes[n];
    x->prev = r->lru_tail; x->next = -1;
    if (r->lru_tail >= 0) r->nodes[r->lru_tail].next = n; else r->lru_head = n;
    r->lru_tail = n;
    r->n_evictable++;
}
static void lru_remove(Rep *r, int32_t n) {
    PNode *x = &r->nodes[n];
    if (x->prev >= 0) r->nodes[x->prev].next = x->next; else r->lru_head = x->next;
    if (x->next >= 0) r->nodes[x->next].prev = x->prev; else r->lru_tail = x->prev;
    x->prev = x->next = -1;
    r->n_evictable--;
}

/* BlockPool.allocate: fresh blocks first, then the least recently freed cached ones. */
static void pool_allocate(Rep *r, int64_t n) {
    int64_t take = n < r->free_fresh ? n : r->free_fresh;
    r->free_fresh -= take;
    for (int64_t k = take; k < n; k++) {
        int32_t v = r->lru_head;
        lru_remove(r, v);
        pool_delete(r, v);
    }
}

/* BlockPool.release of a sequence's blocks: private ones fresh, shared ones (its group's
 * blocks 0 .. nshared-1) one reference less, last first. */
static void pool_release(Rep *r, Seq *q, int64_t blocks) {
    r->free_fresh += blocks - q->nshared;
    for (int64_t i = q->nshared - 1; i >= 0; i--) {
        int32_t n = find(r, q->group, i);
        if (--r->nodes[n].ref == 0) lru_append(r, n);
    }
    q->nshared = 0;
}

/* BlockPool.lookup: how many of the group's blocks 0, 1, ... are cached, at most `limit`. */
static int64_t lookup(const Core *c, const Rep *r, int64_t g, int64_t limit) {
    if (!c->prefix_caching) return 0;
    int64_t k = 0;
    while (k < limit && find(r, g, k) >= 0) k++;
    return k;
}

static int64_t evictable_among(const Rep *r, int64_t g, int64_t hits) {
    int64_t n = 0;
    for (int64_t i = 0; i < hits; i++) n += r->nodes[find(r, g, i)].ref == 0;
    return n;
}

static void acquire(Rep *r, int64_t g, int64_t hits) {
    for (int64_t i = 0; i < hits; i++) {
        int32_t n = find(r, g, i);
        if (r->nodes[n].ref == 0) lru_remove(r, n);
        r->nodes[n].ref++;
    }
}

/* Scheduler._register_prefix: name the sequence's computed full prefix blocks. */
static void register_prefix(Core *c, Rep *r, Seq *q) {
    int64_t upto = q->nc / c->bs;
    if (upto > q->max_prefix_blocks) upto = q->max_prefix_blocks;
    while (q->nshared < upto) {
        if (find(r, q->group, q->nshared) >= 0) break;     /* registered by another */
        if (!pool_insert(c, r, q->group, q->nshared)) return;
        q->nshared++;
    }
}

/* ---- the scheduler (scheduler.py: Scheduler) ------------------------------------------- */

static inline int64_t num_tokens(const Seq *q) { return q->prompt + q->g; }

static void dec_remove(Core *c, Rep *r, Seq *q) {
    r->dec_count--;
    r->dec_a_sum -= q->a;
    r->residue[pmod(q->a, c->bs)]--;
}

static void evict(Core *c, Rep *r, int32_t s, int64_t n) {
    Seq *q = &c->seqs[s];
    int64_t kv;
    if (q->state == DECODE) {
        q->g = q->g_join + (n - 1 - q->join_step);
        kv = q->a + n;
        seg_append(c, q, q->seg_start, n - 1);
        dec_remove(c, r, q);
    } else {
        kv = q->nc;
        pf_remove(r, s);
    }
    pool_release(r, q, ceil_div(kv, c->bs));
    q->nc = 0;
    q->seg_start = -1;
    run_remove(c, r, s);
}

static void preempt_tail(Core *c, Rep *r, int64_t n) {
    int32_t v = r->run_tail;
    evict(c, r, v, n);
    Seq *q = &c->seqs[v];
    q->state = WAITING;
    q->preemptions++;
    r->num_pre++;
    wq_push_front(c, r, v);
}

static void finish(Core *c, Rep *r, int32_t s, int64_t blocks, int64_t n) {
    Seq *q = &c->seqs[s];
    pool_release(r, q, blocks);
    q->state = FINISHED;
    q->finish_step = n;
    run_remove(c, r, s);
    r->num_finished++;
    r->nseqs--;
    c->fin[c->nfin++] = s;
}

static void emit_first(Core *c, Rep *r, int32_t s, int64_t n) {
    Seq *q = &c->seqs[s];
    if (!q->nseg) r->prompt_total += q->prompt;
    q->g++;
    r->gen_total++;
    q->seg_start = n;
    if (q->g == q->output) {
        seg_append(c, q, n, n);
        finish(c, r, s, ceil_div(q->nc, c->bs), n);
        return;
    }
    q->state = DECODE;
    q->a = q->nc - n - 1;
    q->g_join = q->g;
    q->join_step = n;
    q->finish_step = n + q->output - q->g;
    q->tag = ++c->tag_counter;
    DEnt e = { q->finish_step, q->admit_order, q->tag, s };
    dh_push(c, r, e);
    r->dec_count++;
    r->dec_a_sum += q->a;
    r->residue[pmod(q->a, c->bs)]++;
}

static void finish_decodes(Core *c, Rep *r, int64_t n) {
    while (r->dh_len) {
        DEnt top = r->dh[0];
        if (!dent_valid(c, &top)) { dh_pop(r); continue; }
        if (top.fs != n) break;
        dh_pop(r);
        Seq *q = &c->seqs[top.slot];
        q->g = q->output;
        seg_append(c, q, q->seg_start, n);
        dec_remove(c, r, q);
        finish(c, r, top.slot, ceil_div(q->a + n + 1, c->bs), n);
    }
}

/* Scheduler._admission_plan without a prefix cache: chunk and new blocks, or 0. */
static int admission_plan(const Core *c, const Rep *r, const Seq *q, int64_t budget,
                          int scheduled_any, int64_t *chunk, int64_t *new_blocks,
                          int64_t *hits_out) {
    int64_t computed = q->nc, hits = 0;
    if (q->max_prefix_blocks && computed == 0) {
        /* At least one token is computed to sample from (as vLLM: hits <= n - 1). */
        int64_t limit = (num_tokens(q) - 1) / c->bs;
        if (limit > q->max_prefix_blocks) limit = q->max_prefix_blocks;
        hits = lookup(c, r, q->group, limit);
        computed = hits * c->bs;
    }
    int64_t remaining = num_tokens(q) - computed;
    int64_t ch;
    if (c->chunked) ch = remaining < budget ? remaining : budget;
    else {
        if (remaining > budget && scheduled_any) return 0;
        ch = remaining;
    }
    int64_t nb = ceil_div(computed + ch, c->bs) - ceil_div(computed, c->bs);
    if (computed > hits * c->bs) nb += ceil_div(computed, c->bs);
    int64_t avail = free_blocks(r) - (hits ? evictable_among(r, q->group, hits) : 0);
    if (nb > avail) return 0;
    *chunk = ch;
    *new_blocks = nb;
    *hits_out = hits;
    return 1;
}

static int head_admissible(const Core *c, const Rep *r) {
    if (!r->wq_len || r->run_len >= c->mns) return 0;
    int64_t budget = c->mnbt - r->dec_count;
    if (budget <= 0) return 0;
    int64_t ch, nb, hits;
    return admission_plan(c, r, &c->seqs[wq_front(r)], budget, r->dec_count > 0, &ch, &nb,
                          &hits);
}

typedef struct { double duration; int64_t pf_tokens, pf_seqs, n_dec, npre; } StepOut;

/* Scheduler.step: 1 if a step was taken, 0 if not (nothing to do, or only preempted). */
static int step(Core *c, Rep *r, StepOut *o) {
    int64_t n = r->step_index, bs = c->bs;
    int64_t npre = 0;
    int64_t need = r->dec_count ? r->residue[pmod(-n, bs)] : 0;
    while (need > free_blocks(r)) {
        Seq *v = &c->seqs[r->run_tail];
        if (v->state == DECODE && pmod(v->a + n, bs) == 0) need -= 1;
        preempt_tail(c, r, n);
        npre++;
    }
    if (need) pool_allocate(r, need);
    int64_t n_dec = r->dec_count;
    int64_t dec_ctx = r->dec_a_sum + n_dec * n;
    int64_t budget = c->mnbt - n_dec;
    int64_t nch = 0;

    /* 2. running prefills, over a snapshot (preemptions below edit the list) */
    int64_t nsnap = r->pf_len;
    memcpy(c->snap, r->pf, (size_t)nsnap * sizeof(int32_t));
    for (int64_t i = 0; i < nsnap; i++) {
        if (budget <= 0) break;
        int32_t s = c->snap[i];
        Seq *q = &c->seqs[s];
        if (q->state != PREFILL) continue;
        int64_t left = num_tokens(q) - q->nc;
        int64_t ch = left < budget ? left : budget;
        int64_t nb = ceil_div(q->nc + ch, bs) - ceil_div(q->nc, bs);
        int scheduled = 1;
        while (nb > free_blocks(r)) {
            int32_t v = r->run_tail;
            if (c->seqs[v].state == DECODE) { scheduled = 0; break; }
            preempt_tail(c, r, n);
            npre++;
            if (v == s) { scheduled = 0; break; }
        }
        if (!scheduled) break;
        pool_allocate(r, nb);
        budget -= ch;
        c->ch_slot[nch] = s; c->ch_len[nch] = ch; nch++;
    }

    /* 3. admissions, not in a step that preempted */
    if (!npre) {
        while (r->wq_len && r->run_len < c->mns && budget > 0) {
            int32_t s = wq_front(r);
            Seq *q = &c->seqs[s];
            int64_t ch, nb, hits;
            if (!admission_plan(c, r, q, budget, nch > 0 || n_dec > 0, &ch, &nb, &hits))
                break;
            wq_pop_front(r);
            if (q->max_prefix_blocks && q->nc == 0) {
                r->prefix_queries += num_tokens(q);
                r->prefix_hits += hits * bs;
            }
            if (hits) {
                acquire(r, q->group, hits);
                q->nshared = hits;
            }
            q->nc = hits * bs > q->nc ? hits * bs : q->nc;
            pool_allocate(r, nb);
            q->state = PREFILL;
            q->admit_order = r->admit_counter++;
            run_append(c, r, s);
            r->pf[r->pf_len++] = s;
            budget -= ch;
            c->ch_slot[nch] = s; c->ch_len[nch] = ch; nch++;
        }
    }
    o->npre = npre;
    if (!nch && !n_dec) return 0;

    int64_t pf_tokens = 0, pf_pairs = 0, pf_ctx = 0, pf_seqs = 0;
    for (int64_t i = 0; i < nch; i++) {
        Seq *q = &c->seqs[c->ch_slot[i]];
        int64_t ch = c->ch_len[i], p = q->nc;
        if (ch == 1 && q->g > 0 && p == num_tokens(q) - 1) { n_dec++; dec_ctx += p; }
        else {
            pf_tokens += ch;
            pf_pairs += ch * p + ch * (ch + 1) / 2;
            pf_ctx += p;
            pf_seqs++;
        }
    }
    o->pf_tokens = pf_tokens; o->pf_seqs = pf_seqs; o->n_dec = n_dec;
    r->gen_total += r->dec_count;
    for (int64_t i = 0; i < nch; i++) {
        int32_t s = c->ch_slot[i];
        Seq *q = &c->seqs[s];
        q->nc += c->ch_len[i];
        if (q->max_prefix_blocks) register_prefix(c, r, q);
        if (q->nc == num_tokens(q)) emit_first(c, r, s, n);
    }
    if (nch) {
        int64_t j = 0;
        for (int64_t i = 0; i < r->pf_len; i++)
            if (c->seqs[r->pf[i]].state == PREFILL) r->pf[j++] = r->pf[i];
        r->pf_len = j;
    }
    finish_decodes(c, r, n);
    r->step_index = n + 1;
    o->duration = step_seconds(c, pf_tokens, pf_pairs, pf_ctx, pf_seqs, n_dec, dec_ctx);
    return 1;
}

/* ---- outputs --------------------------------------------------------------------------- */

static int grow_out(Core *c, int64_t more) {
    if (c->out_len + more <= c->out_cap) return 1;
    int64_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < c->out_len + more) cap *= 2;
    size_t i8 = (size_t)cap * sizeof(int64_t), f8 = (size_t)cap * sizeof(double);
    c->o_id = xrealloc(c, c->o_id, i8); c->o_rep = xrealloc(c, c->o_rep, i8);
    c->o_pre = xrealloc(c, c->o_pre, i8); c->o_status = xrealloc(c, c->o_status, i8);
    c->o_ntok = xrealloc(c, c->o_ntok, i8);
    c->o_sent = xrealloc(c, c->o_sent, f8); c->o_end = xrealloc(c, c->o_end, f8);
    if (c->error) return 0;
    c->out_cap = cap;
    return 1;
}

static int grow_ev(Core *c, int64_t more) {
    if (c->ev_len + more <= c->ev_cap) return 1;
    int64_t cap = c->ev_cap ? c->ev_cap : 1 << 16;
    while (cap < c->ev_len + more) cap *= 2;
    c->ev = xrealloc(c, c->ev, (size_t)cap * sizeof(double));
    if (c->error) return 0;
    c->ev_cap = cap;
    return 1;
}

/* Where the `ntok` token times of request `id` go: its slot of the direct array (a slot too
 * small for them is an error, never a write past it), else the end of `ev`. */
static double *ev_dest(Core *c, int64_t id, int64_t ntok) {
    if (c->ev_direct) {
        if (id < 0 || id >= c->n_direct || ntok > c->ev_off[id + 1] - c->ev_off[id]) {
            c->error = 4;
            return NULL;
        }
        return c->ev_direct + c->ev_off[id];
    }
    if (!grow_ev(c, ntok)) return NULL;
    double *at = c->ev + c->ev_len;
    c->ev_len += ntok;
    return at;
}

static void record(Core *c, int64_t id, double sent, double end, int64_t rep, int64_t pre,
                   int64_t status, int64_t ntok) {
    if (!grow_out(c, 1)) return;
    int64_t k = c->out_len++;
    c->o_id[k] = id; c->o_sent[k] = sent; c->o_end[k] = end; c->o_rep[k] = rep;
    c->o_pre[k] = pre; c->o_status[k] = status; c->o_ntok[k] = ntok;
    c->done++;
}

/* Drop a replica's step end times that no in-flight sequence will read. */
static void ends_make_room(Core *c, Rep *r) {
    int64_t first = r->ends_base + r->ends_len;
    for (int32_t s = r->run_head; s >= 0; s = c->seqs[s].next) {
        const Seq *q = &c->seqs[s];
        int64_t f = q->nseg ? SEG(q)[0] : q->seg_start;
        if (f >= 0 && f < first) first = f;
    }
    for (int64_t i = 0; i < r->wq_len; i++) {
        const Seq *q = &c->seqs[r->wq[(r->wq_head + i) % r->wq_cap]];
        int64_t f = q->nseg ? SEG(q)[0] : q->seg_start;
        if (f >= 0 && f < first) first = f;
    }
    for (int64_t k = 0; k < c->nfin; k++) {   /* finished in this step, not yet booked */
        const Seq *q = &c->seqs[c->fin[k]];
        if (q->nseg && SEG(q)[0] < first) first = SEG(q)[0];
    }
    int64_t drop = first - r->ends_base;
    if (drop > 0) {
        memmove(r->ends, r->ends + drop, (size_t)(r->ends_len - drop) * sizeof(double));
        r->ends_len -= drop;
        r->ends_base = first;
    }
    if (r->ends_len * 2 >= r->ends_cap) {
        r->ends_cap = r->ends_cap ? 2 * r->ends_cap : 1024;
        r->ends = xrealloc(c, r->ends, (size_t)r->ends_cap * sizeof(double));
    }
}

static void log_step(Core *c, Rep *r, int64_t ri, double t0, double end, const StepOut *o) {
    int64_t batch = o->pf_seqs + o->n_dec;
    int64_t used = used_blocks(c, r);
    if (!c->record_timeline) {
        c->steps++;
        c->batch_sum += batch;
        if (used > c->max_used) c->max_used = used;
        return;
    }
    if (c->tl_len == c->tl_cap) {
        int64_t cap = c->tl_cap ? 2 * c->tl_cap : 4096;
        size_t i8 = (size_t)cap * sizeof(int64_t), f8 = (size_t)cap * sizeof(double);
        c->t_rep = xrealloc(c, c->t_rep, i8); c->t_batch = xrealloc(c, c->t_batch, i8);
        c->t_pf = xrealloc(c, c->t_pf, i8); c->t_dec = xrealloc(c, c->t_dec, i8);
        c->t_used = xrealloc(c, c->t_used, i8); c->t_wait = xrealloc(c, c->t_wait, i8);
        c->t_start = xrealloc(c, c->t_start, f8); c->t_end = xrealloc(c, c->t_end, f8);
        if (c->error) return;
        c->tl_cap = cap;
    }
    int64_t k = c->tl_len++;
    c->t_rep[k] = ri; c->t_start[k] = t0; c->t_end[k] = end; c->t_batch[k] = batch;
    c->t_pf[k] = o->pf_tokens; c->t_dec[k] = o->n_dec; c->t_used[k] = used;
    c->t_wait[k] = r->wq_len;
}

static inline int dyn_less(const DynEnt *x, const DynEnt *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}
static int64_t pick(Core *c, Pool *pl, int64_t key);

static void dyn_push(Core *c, DynEnt e) {
    if (c->dyn_len == c->dyn_cap) {
        c->dyn_cap = c->dyn_cap ? 2 * c->dyn_cap : 1024;
        c->dyn = xrealloc(c, c->dyn, (size_t)c->dyn_cap * sizeof(DynEnt));
        if (c->error) return;
    }
    e.seq = c->dyn_seq++;
    int64_t i = c->dyn_len++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!dyn_less(&e, &c->dyn[p])) break;
        c->dyn[i] = c->dyn[p];
        i = p;
    }
    c->dyn[i] = e;
}
static DynEnt dyn_pop(Core *c) {
    DynEnt top = c->dyn[0], last = c->dyn[--c->dyn_len];
    int64_t i = 0, n = c->dyn_len;
    if (n) {
        for (;;) {
            int64_t l = 2 * i + 1, m = i;
            const DynEnt *best = &last;
            if (l < n && dyn_less(&c->dyn[l], best)) { m = l; best = &c->dyn[l]; }
            if (l + 1 < n && dyn_less(&c->dyn[l + 1], best)) m = l + 1;
            if (m == i) break;
            c->dyn[i] = c->dyn[m];
            i = m;
        }
        c->dyn[i] = last;
    }
    return top;
}

/* runner._Sim._request_done: a closed-loop user sends its next request think_s later. */
static void request_done(Core *c, double end) {
    if (c->next_req && c->next_req < c->n_total) {
        int64_t j = c->next_req++;
        DynEnt e = { end + c->in_think[j], NAN, NAN, 0, KIND_NEW, j, 0, -1, 0 };
        dyn_push(c, e);
    }
}

/* One step of replica ri at its clock; books it and its finished requests. 0 on error. */
static int advance(Core *c, int64_t ri) {
    Rep *r = &c->reps[ri];
    StepOut o = {0};
    c->nfin = 0;
    double t0 = r->clock;
    if (!step(c, r, &o)) {
        if (!o.npre) { c->error = 3; return 0; }   /* no progress: a bug */
        return 1;
    }
    double end = t0 + o.duration;
    if (r->ends_len == r->ends_cap) ends_make_room(c, r);
    if (c->error) return 0;
    r->ends[r->ends_len++] = end;
    r->clock = end;
    log_step(c, r, ri, t0, end, &o);
    for (int64_t k = 0; k < c->nfin; k++) {
        int32_t s = c->fin[k];
        Seq *q = &c->seqs[s];
        double fin_end = r->ends[q->finish_step - r->ends_base];
        int64_t pre = q->pre0 + q->preemptions;
        tree_set(c, ri, r->nseqs + r->inflight);
        if (c->pd_p && ri < c->pd_p && c->in_output[q->id] > 1) {
            /* A prefill instance emitted the first token: the KV travels to a decode one. */
            double busy = (double)q->prompt * c->kv_bpt / c->link_bw;
            double start = fin_end;
            int64_t dest1 = 0;
            if (c->link_queue) {
                /* The decode replica is the router's choice now (the transfer is queued);
                 * the sender's outbound and the receiver's inbound link are each held for
                 * the bytes, and the transfer starts once both are free. */
                int64_t g = c->in_group ? c->in_group[q->id] : -1;
                int64_t di = pick(c, &c->pools[1], g >= 0 ? g : q->id);
                Rep *d = &c->reps[di];
                d->inflight++;
                d->inflight_blocks += ceil_div(q->prompt, c->bs);
                tree_set(c, di, d->nseqs + d->inflight);
                if (r->link_free > start) start = r->link_free;
                if (d->link_in_free > start) start = d->link_in_free;
                r->link_free = d->link_in_free = start + busy;
                dest1 = di + 1;
            }
            double arrive = start + (c->kv_lat + busy);
            if (c->xfer_wait && q->id < c->n_xfer) {
                c->xfer_wait[q->id] = start - fin_end;
                c->xfer_s[q->id] = arrive - start;
            }
            DynEnt e = { arrive, fin_end, q->sent, 0, KIND_HANDOFF, q->id, pre, ri, dest1 };
            dyn_push(c, e);
            seq_free(c, s);
            continue;
        }
        int64_t ntok = q->has_ft ? 1 : 0;
        const int64_t *seg = SEG(q);
        for (int32_t j = 0; j < q->nseg; j++) ntok += seg[2 * j + 1] - seg[2 * j] + 1;
        double *at = ev_dest(c, q->id, ntok);
        if (!at) return 0;
        if (q->has_ft) *at++ = q->ft;
        for (int32_t j = 0; j < q->nseg; j++) {
            int64_t a = seg[2 * j], b = seg[2 * j + 1];
            memcpy(at, r->ends + (a - r->ends_base), (size_t)(b - a + 1) * sizeof(double));
            at += b - a + 1;
        }
        record(c, q->id, q->sent, fin_end, ri, pre, 0, ntok);
        seq_free(c, s);
        request_done(c, fin_end);
    }
    return !c->error;
}

/* Scheduler.next_finish_start_s: no sequence leaves replica r before this time. */
static double finish_bound(Core *c, Rep *r) {
    double now = r->clock;
    int64_t b = r->dec_count;
    if (!b || r->pf_len || head_admissible(c, r) || b >= c->ndec) return now;
    dh_clean(c, r);
    int64_t n0 = r->step_index;
    int64_t k = r->dh[0].fs - n0;
    double cd = c->c_dc, md = c->m_dc;
    if (k <= 0 || cd < 0 || md < 0 || b * ceil_div(k + 1, c->bs) > free_blocks(r)) return now;
    double dc = (double)(r->dec_a_sum + b * n0);
    double x = dc * cd + c->dec_p[b];
    double y = dc * md + c->dec_q[b];
    double first = x > y ? x : y;
    return now + (double)k * first * (1.0 - 1e-9);
}

static void lh_push(Core *c, double key, int32_t ri, int64_t version) {
    if (c->lh_len == c->lh_cap) {
        c->lh_cap = c->lh_cap ? 2 * c->lh_cap : 1024;
        c->lh = xrealloc(c, c->lh, (size_t)c->lh_cap * sizeof(LEnt));
        if (c->error) return;
    }
    LEnt e = { key, version, ri };
    int64_t i = c->lh_len++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        LEnt *pe = &c->lh[p];
        if (!(e.key < pe->key || (e.key == pe->key && e.rep < pe->rep))) break;
        c->lh[i] = *pe;
        i = p;
    }
    c->lh[i] = e;
}
static void lh_pop(Core *c) {
    LEnt last = c->lh[--c->lh_len];
    int64_t i = 0, n = c->lh_len;
    if (!n) return;
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        const LEnt *best = &last;
        for (int64_t ch = l; ch <= l + 1 && ch < n; ch++) {
            const LEnt *x = &c->lh[ch];
            if (x->key < best->key || (x->key == best->key && x->rep < best->rep)) {
                m = ch; best = x;
            }
        }
        if (m == i) break;
        c->lh[i] = c->lh[m];
        i = m;
    }
    c->lh[i] = last;
}
static void schedule(Core *c, int64_t ri) {
    Rep *r = &c->reps[ri];
    r->version++;
    /* least-kv reads every replica's KV use, which changes every step: each busy replica
     * is brought to every arrival (its clock as the key), as runner._Sim._run_heap does. */
    if (r->nseqs)
        lh_push(c, (c->router == ROUTE_LEAST_KV || c->dynamic) ? r->clock : finish_bound(c, r),
                (int32_t)ri, r->version);
}

/* Router.pick for least-kv: lowest KV use (blocks: one pool size for all), then fewest
 * outstanding, then lowest index. */
static int64_t least_kv(const Core *c, const Pool *pl) {
    int64_t best = pl->lo, bu = INT64_MAX, bn = INT64_MAX;
    for (int64_t i = pl->lo; i < pl->lo + pl->n; i++) {
        const Rep *r = &c->reps[i];
        int64_t u = used_blocks(c, r) + r->inflight_blocks;
        int64_t n = r->nseqs + r->inflight;
        if (u < bu || (u == bu && n < bn)) { best = i; bu = u; bn = n; }
    }
    return best;
}

/* Replica ri through its steps that start before t (or until `limit` outputs wait). */
static int catch_up(Core *c, int64_t ri, double t, int64_t limit) {
    Rep *r = &c->reps[ri];
    while (r->clock < t && r->nseqs) {
        if (!advance(c, ri)) return -1;
        if (c->out_len >= limit) return 1;
    }
    return 0;
}

/* ---- the public entry points (core.py) ------------------------------------------------- */

Core *rl_new(const int64_t *cfg, const double *fcfg, const double *dec_p, const double *dec_q,
             const double *rows, const double *vecs) {
    /* cfg: R, router, mns, mnbt, chunked, bs, num_blocks, record_timeline, ndec, nrows,
     *      has_jd, has_lin, moe_u, prefix_caching, prefill replicas (P/D; 0: none),
     *      closed-loop users (0: open loop);
     * fcfg: c_dc, m_dc, num_experts, miss, KV transfer latency s, bytes/token, link B/s,
     *       link queue (1: each prefill replica's outbound and each decode replica's inbound link
     *       carry one KV at a time; the receiver is picked when the transfer is queued);
     * vecs: lin, jd_c, jd_m (NVARS each). */
    Core *c = calloc(1, sizeof(Core));
    if (!c) return NULL;
    c->R = cfg[0]; c->router = cfg[1]; c->mns = cfg[2]; c->mnbt = cfg[3]; c->chunked = cfg[4];
    c->bs = cfg[5]; c->num_blocks = cfg[6]; c->record_timeline = cfg[7]; c->ndec = cfg[8];
    c->nrows = cfg[9]; c->has_jd = cfg[10]; c->has_lin = cfg[11]; c->moe_u = cfg[12];
    c->prefix_caching = cfg[13]; c->pd_p = cfg[14]; c->concurrency = cfg[15];
    c->kv_lat = fcfg[4]; c->kv_bpt = fcfg[5]; c->link_bw = fcfg[6];
    c->link_queue = fcfg[7] != 0.0;
    c->dynamic = c->pd_p > 0 || c->concurrency > 0;
    c->next_req = c->concurrency > 0 ? -1 : 0;
    c->c_dc = fcfg[0]; c->m_dc = fcfg[1]; c->num_experts = fcfg[2]; c->miss = fcfg[3];
    c->dec_p = malloc((size_t)c->ndec * sizeof(double));
    c->dec_q = malloc((size_t)c->ndec * sizeof(double));
    c->rows = malloc((size_t)(c->nrows ? c->nrows : 1) * 2 * NVARS * sizeof(double));
    c->reps = calloc((size_t)c->R, sizeof(Rep));
    c->ch_slot = malloc((size_t)(c->mns + 1) * sizeof(int32_t));
    c->ch_len = malloc((size_t)(c->mns + 1) * sizeof(int64_t));
    c->snap = malloc((size_t)(c->mns + 1) * sizeof(int32_t));
    c->fin = malloc((size_t)(c->mns + 1) * sizeof(int32_t));
    if (!c->dec_p || !c->dec_q || !c->rows || !c->reps || !c->ch_slot || !c->ch_len ||
        !c->snap || !c->fin)
        c->error = 2;
    if (c->error) return c;
    memcpy(c->dec_p, dec_p, (size_t)c->ndec * sizeof(double));
    memcpy(c->dec_q, dec_q, (size_t)c->ndec * sizeof(double));
    memcpy(c->rows, rows, (size_t)c->nrows * 2 * NVARS * sizeof(double));
    memcpy(c->lin, vecs, NVARS * sizeof(double));
    memcpy(c->jd_c, vecs + NVARS, NVARS * sizeof(double));
    memcpy(c->jd_m, vecs + 2 * NVARS, NVARS * sizeof(double));
    for (int64_t i = 0; i < c->R; i++) {
        Rep *r = &c->reps[i];
        r->run_head = r->run_tail = -1;
        r->lru_head = r->lru_tail = -1;
        r->free_fresh = c->num_blocks;
        r->residue = calloc((size_t)c->bs, sizeof(int64_t));
        r->pf = malloc((size_t)(c->mns + 1) * sizeof(int32_t));
        if (!r->residue || !r->pf) { c->error = 2; return c; }
    }
    c->pools[0].lo = 0; c->pools[0].n = c->pd_p ? c->pd_p : c->R;
    c->pools[1].lo = c->pd_p; c->pools[1].n = c->pd_p ? c->R - c->pd_p : 0;
    for (int k = 0; k < 2; k++) {
        Pool *pl = &c->pools[k];
        if (c->router != ROUTE_LO || pl->n < 2) continue;
        int64_t size = 1;
        while (size < pl->n) size *= 2;
        pl->tree_size = size;
        pl->tree = malloc((size_t)(2 * size) * sizeof(int64_t));
        if (!pl->tree) { c->error = 2; return c; }
        for (int64_t j = 0; j < 2 * size; j++) pl->tree[j] = INT64_MAX;
        for (int64_t i = 0; i < pl->n; i++) tree_set(c, pl->lo + i, 0);
    }
    return c;
}

void rl_free(Core *c) {
    if (!c) return;
    for (int64_t i = 0; c->reps && i < c->R; i++) {
        Rep *r = &c->reps[i];
        free(r->wq); free(r->pf); free(r->residue); free(r->dh); free(r->ends);
        free(r->nodes); free(r->node_free); free(r->tab);
    }
    for (int64_t s = 0; s < c->seq_cap; s++) free(c->seqs[s].seg_ext);
    free(c->seqs); free(c->free_slots); free(c->reps); free(c->lh); free(c->dyn);
    free(c->pools[0].tree); free(c->pools[1].tree);
    free(c->dec_p); free(c->dec_q); free(c->rows);
    free(c->ch_slot); free(c->ch_len); free(c->snap); free(c->fin);
    free(c->o_id); free(c->o_rep); free(c->o_pre); free(c->o_status); free(c->o_ntok);
    free(c->o_sent); free(c->o_end); free(c->ev);
    free(c->t_rep); free(c->t_batch); free(c->t_pf); free(c->t_dec); free(c->t_used);
    free(c->t_wait); free(c->t_start); free(c->t_end);
    free(c);
}

/* Router.pick over a pool; `key`: prefix-affinity's group (or request index). */
static int64_t pick(Core *c, Pool *pl, int64_t key) {
    if (pl->n == 1) return pl->lo;
    if (c->router == ROUTE_AFFINITY) return pl->lo + key % pl->n;
    if (c->router == ROUTE_RR) return pl->lo + pl->rr_next++ % pl->n;
    if (c->router == ROUTE_LEAST_KV) return least_kv(c, pl);
    return pl->lo + (pl->tree[1] & 0xffffffffLL);
}

/* The next arrival's time: a static one, or an earlier dynamic one. */
static double next_arrival(const Core *c) {
    double a = c->ptr < c->n_static ? c->in_arrival[c->ptr] : INFINITY;
    return (c->dyn_len && c->dyn[0].t < a) ? c->dyn[0].t : a;
}

/* Hand the next arrival to a replica (runner._Sim._dispatch_next). 0: done; 1: the lazy
 * loop's catch-up filled the outputs first (nothing consumed: call again); -1: error. */
static int dispatch(Core *c, int64_t limit) {
    double a = c->ptr < c->n_static ? c->in_arrival[c->ptr] : INFINITY;
    DynEnt e;
    int from_dyn = c->dyn_len && c->dyn[0].t < a;
    if (from_dyn) e = c->dyn[0];
    else { e.t = a; e.kind = KIND_NEW; e.i = c->ptr; e.ft = NAN; e.sent = a; e.pre = 0; e.prep = -1;
           e.dest1 = 0; }
    int64_t i = e.i;
    double t = e.t;
    int64_t g = c->in_group ? c->in_group[i] : -1;
    int64_t key = g >= 0 ? g : i;
    Pool *pl = &c->pools[e.kind == KIND_HANDOFF ? 1 : 0];
    int64_t rr_before = pl->rr_next;
    int64_t ri = (e.kind == KIND_HANDOFF && e.dest1) ? e.dest1 - 1 : pick(c, pl, key);
    Rep *r = &c->reps[ri];
    if (c->R > 1 && !c->dynamic) {   /* the lazy loop: bring it up to t first */
        int st = catch_up(c, ri, t, limit);
        if (st) { schedule(c, ri); pl->rr_next = rr_before; return st; }
    }
    if (from_dyn) dyn_pop(c);
    else c->ptr++;
    if (e.kind == KIND_HANDOFF && e.dest1) {   /* its transfer is no longer in flight */
        r->inflight--;
        r->inflight_blocks -= ceil_div(c->in_prompt[i], c->bs);
        tree_set(c, ri, r->nseqs + r->inflight);
    }
    int64_t p = c->in_prompt[i];
    int64_t out = (e.kind == KIND_NEW && c->pd_p) ? 1 : c->in_output[i];
    double sent = e.kind == KIND_NEW ? t : e.sent;
    int too_long = ceil_div(p + out - 1, c->bs) > c->num_blocks ||
                   (!c->chunked && e.kind == KIND_NEW && p > c->mnbt);
    if (too_long) {
        r->num_rejected++;
        if (e.kind == KIND_HANDOFF) {   /* the first token came from the prefill instance */
            double *at = ev_dest(c, i, 1);
            if (!at) return -1;
            *at = e.ft;
            record(c, i, sent, t, e.prep, e.pre, 1, 1);
        } else {
            record(c, i, sent, t, -1, 0, 1, 0);
        }
        request_done(c, t);
        return c->error ? -1 : 0;
    }
    int32_t s = seq_new(c);
    if (s < 0) return -1;
    Seq *q = &c->seqs[s];
    q->id = i; q->sent = sent; q->prompt = p; q->output = out;
    q->state = WAITING; q->admit_order = -1; q->seg_start = -1; q->join_step = -1;
    q->finish_step = -1; q->prev = q->next = -1;
    q->group = g;
    q->max_prefix_blocks = g >= 0 ? c->in_ptoks[i] / c->bs : 0;
    if (e.kind == KIND_HANDOFF) {   /* prompt KV transferred, first token emitted */
        q->g = 1; q->nc = p; q->has_ft = 1; q->ft = e.ft; q->pre0 = e.pre;
    }
    wq_push_back(c, r, s);
    r->nseqs++;
    tree_set(c, ri, r->nseqs + r->inflight);
    if (r->clock < t) r->clock = t;
    if (c->R > 1 || c->dynamic) schedule(c, ri);
    return c->error ? -1 : 0;
}

/* Run, dispatching at most `max_dispatch` arrivals, returning early once `limit` outputs
 * wait to be drained. 0: every request is done; 1: drain, then call again; 2: dispatched
 * `max_dispatch` (call again); < 0: error (-2 out of memory, -3 no progress).
 *
 * Static arrivals over several replicas: the lazy loop (runner._Sim._run_lazy). Dynamic
 * arrivals (closed loop, P/D hand-offs): every busy replica steps in order of its clock,
 * ties to the lowest index, while its clock is before the next arrival (runner._Sim.run). */
int64_t rl_run(Core *c, const double *arrival, const int64_t *prompt, const int64_t *output,
               const int64_t *group, const int64_t *ptoks, const double *think,
               int64_t n_total, int64_t n_static, int64_t max_dispatch, int64_t limit) {
    if (c->error) return -c->error;
    c->in_arrival = arrival; c->in_prompt = prompt; c->in_output = output;
    c->in_group = group; c->in_ptoks = ptoks; c->in_think = think;
    c->n_total = n_total; c->n_static = n_static;
    if (c->next_req < 0) {   /* a closed loop's first call: every user sends at t = 0 */
        int64_t users = c->concurrency < n_total ? c->concurrency : n_total;
        for (int64_t i = 0; i < users; i++) {
            DynEnt e = { 0.0, NAN, NAN, 0, KIND_NEW, i, 0, -1, 0 };
            dyn_push(c, e);
        }
        c->next_req = users;
    }
    int64_t dispatched = 0;
    for (;;) {
        if (c->out_len >= limit) return 1;
        double t_next = next_arrival(c);
        if (c->dynamic) {
            if (c->lh_len) {
                LEnt e = c->lh[0];
                if (e.version != c->reps[e.rep].version) { lh_pop(c); continue; }
                if (e.key < t_next) {
                    lh_pop(c);
                    if (!advance(c, e.rep)) return -c->error;
                    schedule(c, e.rep);
                    continue;
                }
            }
        } else if (c->R == 1) {
            int st = catch_up(c, 0, t_next, limit);
            if (st) return st < 0 ? -c->error : 1;
        } else {
            while (c->lh_len && c->lh[0].key < t_next) {
                LEnt e = c->lh[0];
                lh_pop(c);
                if (e.version != c->reps[e.rep].version) continue;
                int st = catch_up(c, e.rep, t_next, limit);
                schedule(c, e.rep);
                if (c->error) return -c->error;
                if (st) return st < 0 ? -c->error : 1;
            }
        }
        if (t_next == INFINITY) return c->error ? -c->error : 0;
        if (dispatched >= max_dispatch) return 2;
        int st = dispatch(c, limit);
        if (st < 0) return -c->error;
        if (st) return 1;
        dispatched++;
    }
}

int64_t rl_pending(const Core *c, int64_t *sizes) {
    sizes[0] = c->out_len; sizes[1] = c->ev_len; sizes[2] = c->tl_len; sizes[3] = c->done;
    return 0;
}

/* Copy the waiting outputs out and clear them. int64 columns: id, replica, preemptions,
 * status (0 ok, 1 rejected), tokens; float64: sent, end; the token times; the timeline. */
void rl_drain(Core *c, int64_t *ids, int64_t *rep, int64_t *pre, int64_t *status, int64_t *ntok,
              double *sent, double *end, double *events, int64_t *t_i64, double *t_f64) {
    size_t n = (size_t)c->out_len;
    memcpy(ids, c->o_id, n * 8); memcpy(rep, c->o_rep, n * 8); memcpy(pre, c->o_pre, n * 8);
    memcpy(status, c->o_status, n * 8); memcpy(ntok, c->o_ntok, n * 8);
    memcpy(sent, c->o_sent, n * 8); memcpy(end, c->o_end, n * 8);
    memcpy(events, c->ev, (size_t)c->ev_len * 8);
    size_t k = (size_t)c->tl_len;
    if (k) {
        memcpy(t_i64, c->t_rep, k * 8); memcpy(t_i64 + k, c->t_batch, k * 8);
        memcpy(t_i64 + 2 * k, c->t_pf, k * 8); memcpy(t_i64 + 3 * k, c->t_dec, k * 8);
        memcpy(t_i64 + 4 * k, c->t_used, k * 8); memcpy(t_i64 + 5 * k, c->t_wait, k * 8);
        memcpy(t_f64, c->t_start, k * 8); memcpy(t_f64 + k, c->t_end, k * 8);
    }
    c->out_len = 0; c->ev_len = 0; c->tl_len = 0;
}

/* A batch run (no sink): each request's token times go straight to its slot of `events`,
 * events[offsets[i] .. offsets[i + 1]) for request i (offsets: n + 1, non-decreasing, from
 * the tokens each asked for), in place of `ev` in finish order; a request that emits fewer
 * (a rejection) leaves the rest of its slot unwritten. The arrays must outlive the run. */
void rl_set_direct(Core *c, double *events, const int64_t *offsets, int64_t n) {
    c->ev_direct = events; c->ev_off = offsets; c->n_direct = n;
}

/* P/D: each handed-off request's wait for its prefill replica's link and its transfer
 * time, written to wait[id] and dur[id] (n entries; the caller's, kept alive by it). */
void rl_set_xfer(Core *c, double *wait, double *dur, int64_t n) {
    c->xfer_wait = wait; c->xfer_s = dur; c->n_xfer = n;
}

/* Per replica: running, waiting, blocks used, preemptions, prompt tokens, generation tokens,
 * finished, rejected, steps, prefix-cache queried and hit tokens (11 columns); then steps,
 * batch sum, max blocks of the streamed timeline (3 values after R x 11). */
void rl_stats(const Core *c, int64_t *out) {
    for (int64_t i = 0; i < c->R; i++) {
        const Rep *r = &c->reps[i];
        int64_t *o = out + 11 * i;
        o[0] = r->run_len; o[1] = r->wq_len; o[2] = used_blocks(c, r);
        o[3] = r->num_pre; o[4] = r->prompt_total; o[5] = r->gen_total; o[6] = r->num_finished;
        o[7] = r->num_rejected; o[8] = r->step_index; o[9] = r->prefix_queries;
        o[10] = r->prefix_hits;
    }
    out[11 * c->R] = c->steps; out[11 * c->R + 1] = c->batch_sum;
    out[11 * c->R + 2] = c->max_used;
}

/* One step time (tests compare it with CompiledStep bit for bit). */
double rl_step_seconds(const Core *c, int64_t pf_tokens, int64_t pf_pairs, int64_t pf_ctx,
                       int64_t pf_seqs, int64_t n_dec, int64_t dec_ctx) {
    return step_seconds(c, pf_tokens, pf_pairs, pf_ctx, pf_seqs, n_dec, dec_ctx);
}

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "_core",
    "The simulator's engine core (C functions loaded with ctypes by ridgeline.sim.core).",
    -1, NULL, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&core_module); }
