/* Compiled kernels of `analyze` (metrics/analysis.py), each with a numpy path beside
 * it: `itl_values`, the pooled ITL values of some requests in one pass over their events;
 * `counts_at_most`, the per-request counts of those values at or below each threshold,
 * with the values computed again from the event times instead of read from a
 * request-ordered copy, so that `analyze` can sort its only copy of a pooled sample in
 * place (analyze of 1 M requests stays under 1 GB); `sort_repeats`, that in-place sort
 * when the sample holds few distinct values (metrics/distribution.py `sort_in_place`).
 *
 * The values are the ones `_itl_samples` computes, by the same IEEE operations in the same
 * order: gap = t[p+1] - t[p]; per event gap * 1e3, per token (gap / tokens[p+1]) * 1e3
 * (compiled with -ffp-contract=off: no fused multiply-add). Non-finite values are skipped,
 * as `_grouped_sample` drops them. Counts are exact integers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* counts_at_most(times f8, offsets i8, req i8, tokens i4 or None, thresholds f8, out i4)
 * out has shape (len(thresholds), len(req)), C order (each element written). */
static PyObject *counts_at_most(PyObject *self, PyObject *args) {
    PyObject *o_times, *o_off, *o_req, *o_tok, *o_th, *o_out;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_times, &o_off, &o_req, &o_tok, &o_th, &o_out))
        return NULL;
    Py_buffer b[6];
    PyObject *objs[6] = {o_times, o_off, o_req, o_tok, o_th, o_out};
    int got = 0, ok = 0;
    const int has_tok = o_tok != Py_None;
    for (; got < 6; got++) {
        if (got == 3 && !has_tok) { b[got].buf = NULL; b[got].len = 0; continue; }
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (got == 5 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[got], &b[got], flags) < 0) goto done;
        if (b[got].itemsize != (got == 5 || got == 3 ? 4 : 8)) {
            PyErr_SetString(PyExc_ValueError, "counts_at_most: f8/i8 inputs, i4 tokens and out");
            got++;
            goto done;
        }
    }
    {
        const double *t = b[0].buf, *th = b[4].buf;
        const int64_t *off = b[1].buf, *req = b[2].buf;
        const int32_t *tok = has_tok ? b[3].buf : NULL;
        int32_t *out = b[5].buf;  /* counts per request: far below 2^31 */
        const Py_ssize_t n_ev = b[0].len / 8, n_off = b[1].len / 8, n_req = b[2].len / 8,
                         n_th = b[4].len / 8;
        if (b[5].len / 4 != n_th * n_req || (has_tok && b[3].len / 4 != n_ev)) {
            PyErr_SetString(PyExc_ValueError, "counts_at_most: sizes disagree");
            goto done;
        }
        for (Py_ssize_t j = 0; j < n_req; j++) {
            int64_t r = req[j];
            if (r < 0 || r + 1 >= n_off || off[r] < 0 || off[r + 1] > n_ev) {
                PyErr_SetString(PyExc_IndexError, "counts_at_most: request out of range");
                goto done;
            }
            int32_t c[8] = {0};  /* this request's counts, in registers (8 thresholds) */
            for (Py_ssize_t k0 = 0; k0 < n_th; k0 += 8) {
                const Py_ssize_t nk = n_th - k0 < 8 ? n_th - k0 : 8;
                for (int k = 0; k < 8; k++) c[k] = 0;
                for (int64_t p = off[r]; p + 1 < off[r + 1]; p++) {
                    double g = t[p + 1] - t[p];
                    double v = has_tok ? (g / (double)tok[p + 1]) * 1e3 : g * 1e3;
                    if (!isfinite(v)) continue;
                    for (Py_ssize_t k = 0; k < nk; k++) c[k] += v <= th[k0 + k];
                }
                for (Py_ssize_t k = 0; k < nk; k++) out[(k0 + k) * n_req + j] = c[k];
            }
        }
        ok = 1;
    }
done:
    for (int i = 0; i < got; i++)
        if (i != 3 || has_tok) PyBuffer_Release(&b[i]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* itl_values(times f8, offsets i8, req i8, tokens i4 or None, out f8) -> n
 * The pooled ITL values of the requests `req` (trace indices, increasing) written to out
 * in trace order, as `_itl_into` computes them: per event gap * 1e3, per token
 * (gap / tokens) * 1e3, non-finite quotients kept. out must be long enough. */
static PyObject *itl_values(PyObject *self, PyObject *args) {
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    Py_buffer b[5];
    const int has_tok = objs[3] != Py_None;
    int got = 0, ok = 0;
    Py_ssize_t k = 0;
    for (; got < 5; got++) {
        if (got == 3 && !has_tok) { b[got].buf = NULL; b[got].len = 0; continue; }
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (got == 4 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[got], &b[got], flags) < 0) goto done;
        if (b[got].itemsize != (got == 3 ? 4 : 8)) {
            PyErr_SetString(PyExc_ValueError, "itl_values: f8/i8 arrays, i4 tokens expected");
            got++;
            goto done;
        }
    }
    {
        const double *t = b[0].buf;
        const int64_t *off = b[1].buf, *req = b[2].buf;
        const int32_t *tok = has_tok ? b[3].buf : NULL;
        double *out = b[4].buf;
        const Py_ssize_t n_ev = b[0].len / 8, n_off = b[1].len / 8, n_req = b[2].len / 8,
                         cap = b[4].len / 8;
        if (has_tok && b[3].len / 4 != n_ev) {
            PyErr_SetString(PyExc_ValueError, "itl_values: sizes disagree");
            goto done;
        }
        for (Py_ssize_t j = 0; j < n_req; j++) {
            int64_t r = req[j];
            if (r < 0 || r + 1 >= n_off || off[r] < 0 || off[r + 1] > n_ev) {
                PyErr_SetString(PyExc_IndexError, "itl_values: request out of range");
                goto done;
            }
            int64_t gaps = off[r + 1] - off[r] - 1;
            if (gaps <= 0) continue;
            if (k + gaps > cap) {
                PyErr_SetString(PyExc_ValueError, "itl_values: out too short");
                goto done;
            }
            for (int64_t p = off[r]; p + 1 < off[r + 1]; p++) {
                double g = t[p + 1] - t[p];
                out[k++] = has_tok ? (g / (double)tok[p + 1]) * 1e3 : g * 1e3;
            }
        }
        ok = 1;
    }
done:
    for (int i = 0; i < got; i++)
        if (i != 3 || has_tok) PyBuffer_Release(&b[i]);
    if (!ok) return NULL;
    return PyLong_FromSsize_t(k);
}

/* sort_repeats(xs f8, max_distinct) -> bool
 * Sorts xs in place when it holds at most max_distinct distinct values, by counting them:
 * each value's count in a hash table (open addressing), the distinct values sorted, then
 * each written out as many times as it occurs. A simulated run's pooled ITL gaps are
 * ~20 M values but only ~400 k distinct ones (one per engine step and its neighbours),
 * and a request's consecutive gaps touch neighbouring steps, so the table stays in cache:
 * a fraction of a comparison sort's cost. The result is xs.sort() bit for bit: of finite
 * values only +0.0 and -0.0 compare equal, so with no NaN and no -0.0 the sorted array
 * is unique. Returns False, xs untouched, when a NaN or a -0.0 is met, or there are more
 * distinct values than max_distinct or than a quarter of the values read so far (the
 * caller sorts as before). */
typedef struct { uint64_t key; int64_t count; } repeat_slot;

static int cmp_slot(const void *a, const void *b) {
    double x, y;
    memcpy(&x, &((const repeat_slot *)a)->key, 8);
    memcpy(&y, &((const repeat_slot *)b)->key, 8);
    return (x > y) - (x < y);
}

/* Inserts key k (count c) into table t of 2^bits slots; returns its slot. */
static uint64_t repeat_slot_of(repeat_slot *t, int bits, uint64_t k) {
    const uint64_t mask = ((uint64_t)1 << bits) - 1;
    uint64_t h = (k * 0x9E3779B97F4A7C15ULL) >> (64 - bits);
    while (t[h].key != k && t[h].key != UINT64_MAX) h = (h + 1) & mask;
    return h;
}

static int sort_repeats_c(double *x, Py_ssize_t n, Py_ssize_t max_distinct) {
    /* The table starts small and doubles at half full (memory as the distinct values);
     * an empty slot's key is UINT64_MAX, a NaN, never a key. */
    const uint64_t empty = UINT64_MAX, neg_zero = (uint64_t)1 << 63;
    int bits = 12;
    repeat_slot *t = malloc(sizeof(repeat_slot) << bits);
    if (t == NULL) return 0;
    memset(t, 0xff, sizeof(repeat_slot) << bits);
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t k;
        memcpy(&k, &x[i], 8);
        if (x[i] != x[i] || k == neg_zero) { free(t); return 0; }
        uint64_t h = repeat_slot_of(t, bits, k);
        if (t[h].key == k) { t[h].count++; continue; }
        /* More than a quarter of the values so far new (past the first 64 k): mostly
         * distinct values (a measured trace's), not worth counting; give up early. */
        if (++distinct > max_distinct || 4 * distinct > i + 65536) { free(t); return 0; }
        t[h].key = k;
        t[h].count = 1;
        if (2 * distinct > ((Py_ssize_t)1 << bits)) {
            repeat_slot *g = malloc(sizeof(repeat_slot) << (bits + 1));
            if (g == NULL) { free(t); return 0; }
            memset(g, 0xff, sizeof(repeat_slot) << (bits + 1));
            for (uint64_t j = 0; j < ((uint64_t)1 << bits); j++)
                if (t[j].key != empty) g[repeat_slot_of(g, bits + 1, t[j].key)] = t[j];
            free(t);
            t = g;
            bits++;
        }
    }
    Py_ssize_t d = 0;
    for (uint64_t h = 0; h < ((uint64_t)1 << bits); h++)
        if (t[h].key != empty) t[d++] = t[h];
    qsort(t, (size_t)d, sizeof(repeat_slot), cmp_slot);
    Py_ssize_t i = 0;
    for (Py_ssize_t j = 0; j < d; j++) {
        double v;
        memcpy(&v, &t[j].key, 8);
        for (int64_t c = 0; c < t[j].count; c++) x[i++] = v;
    }
    free(t);
    return 1;
}

static PyObject *sort_repeats(PyObject *self, PyObject *args) {
    PyObject *o_x;
    Py_ssize_t max_distinct;
    if (!PyArg_ParseTuple(args, "On", &o_x, &max_distinct)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(o_x, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    if (b.itemsize != 8 || b.format == NULL || strcmp(b.format, "d") != 0 || max_distinct < 1) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "sort_repeats: a contiguous f8 array, max_distinct >= 1");
        return NULL;
    }
    int done;
    Py_BEGIN_ALLOW_THREADS
    done = sort_repeats_c(b.buf, b.len / 8, max_distinct);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return PyBool_FromLong(done);
}

static PyMethodDef methods[] = {
    {"itl_values", itl_values, METH_VARARGS,
     "Pooled ITL values of some requests, in trace order (see _kernels.c)."},
    {"counts_at_most", counts_at_most, METH_VARARGS,
     "Per-request counts of pooled ITL values <= each threshold (see _kernels.c)."},
    {"sort_repeats", sort_repeats, METH_VARARGS,
     "Sort an f8 array of few distinct values in place by counting (see _kernels.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "analyze's compiled kernel.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
