/* The trace reader's compiled fast path: request lines of a ridgeline trace straight into
 * the reader's preallocated columns (trace/reader.py, `_scan_file`).
 *
 * It answers only for what it can prove the exact path (json.loads + table.build_columns)
 * reads to the same columns: a line that is one JSON object of request fields, in a strict
 * subset of JSON (no NaN/Infinity literals, no duplicate known keys, no escapes in keys,
 * numbers of at most 40 characters, nesting up to 32 deep in unknown fields). Any other
 * line makes `scan` answer CANNOT for its batch, and the reader reads that batch by the
 * Python paths, which give every error and warning. Numbers are converted exactly as
 * float() does: Clinger's fast path (an integer mantissa below 2^53 and a power of ten up
 * to 10^22, both exact, so one IEEE multiplication or division rounds correctly), else
 * PyOS_string_to_double, which is float()'s own correctly rounded conversion. Strings
 * with escapes are decoded by json.loads itself (rare: error messages).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { ST_DONE = 0, ST_NEED = 1, ST_CANNOT = 2, ST_FULL = 3 };
enum { N_REQ = 11, N_COLS = 13 };
/* Request columns, in table._REQUEST_COLUMNS order, then the two event columns. */
enum { C_SCHED, C_SENT, C_END, C_TTFT, C_TPOT, C_E2E, C_PROMPT, C_OUTPUT, C_STATUS,
       C_SOURCE, C_COUNTS, C_TIMES, C_TOKENS };

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
                                 1e20, 1e21, 1e22};

static const char *STATUSES[] = {"ok", "error", "cutoff", "rejected", NULL};
static const char *SOURCES[] = {"usage", "tokenizer", "chunks", "requested", "simulated",
                                "unknown", NULL};

typedef struct {
    const char *p, *end;  /* cursor within one stripped line */
    PyObject *json_loads;
    int error;            /* a Python exception is set (not a CANNOT) */
} Cur;

static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r')) c->p++;
}

/* A JSON number as float() gives it (for a JSON integer: float(int), the same correctly
 * rounded value). `is_int`: no fraction and no exponent. Returns 0 on CANNOT.
 * The line ends with '}' (checked before parsing), so a digit loop stops inside it. */
static int parse_number(Cur *c, double *out, int *is_int, int64_t *ival) {
    const char *s = c->p, *q = s;
    int neg = 0;
    uint64_t m = 0;
    int digits = 0, frac = 0;  /* significant digits in m, digits after the point */
    long exp10 = 0;
    if (*q == '-') { neg = 1; q++; }
    if (*q == '0') {
        q++;
    } else if ((unsigned)(*q - '1') < 9u) {
        const char *d0 = q;
        while ((unsigned)(*q - '0') < 10u) { m = m * 10 + (uint64_t)(*q - '0'); q++; }
        digits = (int)(q - d0);
    } else {
        return 0;
    }
    *is_int = 1;
    if (*q == '.') {
        *is_int = 0;
        q++;
        if ((unsigned)(*q - '0') >= 10u) return 0;
        if (m == 0) while (*q == '0') { frac++; q++; }  /* leading zeros: not significant */
        const char *d0 = q;
        while ((unsigned)(*q - '0') < 10u) { m = m * 10 + (uint64_t)(*q - '0'); q++; }
        digits += (int)(q - d0);
        frac += (int)(q - d0);
    }
    if (*q == 'e' || *q == 'E') {
        *is_int = 0;
        q++;
        int eneg = 0;
        if (*q == '+' || *q == '-') { eneg = *q == '-'; q++; }
        if ((unsigned)(*q - '0') >= 10u) return 0;
        while ((unsigned)(*q - '0') < 10u) {
            if (exp10 < 100000) exp10 = exp10 * 10 + (*q - '0');
            q++;
        }
        if (eneg) exp10 = -exp10;
    }
    if (q - s > 40) return 0;  /* long numbers: the Python paths */
    c->p = q;
    if (out == NULL) return 1;  /* an unknown field's number: valid JSON is enough */
    int exact = digits <= 19;  /* m holds every significant digit (no wrap-around) */
    if (*is_int) {
        /* For the token columns: the integer itself (at most 18 digits, no sign). */
        *ival = (!neg && digits <= 18) ? (int64_t)m : -1;
        if (m == 0) { *out = 0.0; return 1; }  /* float(int("-0")) is +0.0 */
    }
    long e = exp10 - frac;
    if (exact && m < (1ULL << 53) && e >= -22 && e <= 22) {
        double v = (double)m;
        v = e < 0 ? v / POW10[-e] : v * POW10[e];
        *out = neg ? -v : v;
        return 1;
    }
    if (*is_int && q - s > 17) return 0;  /* float(int) of a long integer: Python paths */
    char tmp[48];
    memcpy(tmp, s, (size_t)(q - s));
    tmp[q - s] = '\0';
    char *endp = NULL;
    double v = PyOS_string_to_double(tmp, &endp, NULL);
    if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (endp != tmp + (q - s)) return 0;
    *out = v;
    return 1;
}

/* A JSON string at the cursor: its raw inside [*a, *b) and whether it has escapes.
 * Returns 0 on CANNOT (a control character, no closing quote). */
static int scan_string(Cur *c, const char **a, const char **b, int *esc) {
    if (c->p >= c->end || *c->p != '"') return 0;
    const char *q = c->p + 1;
    *esc = 0;
    *a = q;
    while (q < c->end) {
        unsigned char ch = (unsigned char)*q;
        if (ch == '"') { *b = q; c->p = q + 1; return 1; }
        if (ch < 0x20) return 0;  /* json.loads (strict) refuses control characters */
        if (ch == '\\') {
            *esc = 1;
            q++;
            if (q >= c->end) return 0;
        }
        q++;
    }
    return 0;
}

/* A Python str of the string whose inside is [a, b): decoded as json.loads decodes bytes
 * (UTF-8 with surrogatepass); with escapes, by json.loads. NULL with no exception set:
 * CANNOT; NULL with c->error: a real error. */
static PyObject *make_str(Cur *c, const char *a, const char *b, int esc) {
    if (!esc) {
        PyObject *s = PyUnicode_DecodeUTF8(a, b - a, "surrogatepass");
        if (s == NULL) PyErr_Clear();
        return s;
    }
    PyObject *raw = PyBytes_FromStringAndSize(a - 1, (b - a) + 2);  /* with its quotes */
    if (raw == NULL) { c->error = 1; return NULL; }
    PyObject *s = PyObject_CallOneArg(c->json_loads, raw);
    Py_DECREF(raw);
    if (s == NULL) { PyErr_Clear(); return NULL; }
    if (!PyUnicode_Check(s)) { Py_DECREF(s); return NULL; }
    return s;
}

static int lit(Cur *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) { c->p += n; return 1; }
    return 0;
}

/* Skip any JSON value (an unknown field), validating it. Returns 0 on CANNOT. */
static int skip_value(Cur *c, int depth) {
    if (depth > 32 || c->p >= c->end) return 0;
    char ch = *c->p;
    if (ch == '"') {
        const char *a, *b;
        int esc;
        if (!scan_string(c, &a, &b, &esc)) return 0;
        /* Validate the UTF-8 (and escapes) as json.loads would. */
        PyObject *s = make_str(c, a, b, esc);
        if (s == NULL) return 0;
        Py_DECREF(s);
        return 1;
    }
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == close) { c->p++; return 1; }
        for (;;) {
            if (ch == '{') {
                const char *a, *b;
                int esc;
                if (!scan_string(c, &a, &b, &esc) || esc) return 0;
                for (const char *k = a; k < b; k++) if ((unsigned char)*k >= 0x80) return 0;
                skip_ws(c);
                if (c->p >= c->end || *c->p != ':') return 0;
                c->p++;
                skip_ws(c);
            }
            if (!skip_value(c, depth + 1)) return 0;
            skip_ws(c);
            if (c->p >= c->end) return 0;
            if (*c->p == ',') { c->p++; skip_ws(c); continue; }
            if (*c->p == close) { c->p++; return 1; }
            return 0;
        }
    }
    if (lit(c, "true") || lit(c, "false") || lit(c, "null")) return 1;
    int is_int;
    int64_t iv;
    return parse_number(c, NULL, &is_int, &iv);
}

/* One number for a float column (null: NaN). */
static int float_value(Cur *c, double *out) {
    if (lit(c, "null")) { *out = NAN; return 1; }
    int is_int;
    int64_t iv;
    return parse_number(c, out, &is_int, &iv);
}

/* A token-count column (table._int_column): null -1; a number that is a non-negative
 * integer up to 1e18 (5.0 included, as there); anything else is the exact path's error. */
static int int_value(Cur *c, int64_t *out) {
    double v;
    if (!float_value(c, &v)) return 0;
    if (isnan(v)) { *out = -1; return 1; }
    if (v < 0 || v != floor(v) || v > 1e18) return 0;
    *out = (int64_t)v;
    return 1;
}

static int code_value(Cur *c, const char **names, int8_t *out) {
    const char *a, *b;
    int esc;
    if (!scan_string(c, &a, &b, &esc) || esc) return 0;
    for (int i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if ((size_t)(b - a) == n && memcmp(a, names[i], n) == 0) { *out = (int8_t)i; return 1; }
    }
    return 0;
}

/* A string or null (error_kind, error). */
static int opt_str(Cur *c, PyObject **out) {
    if (lit(c, "null")) { Py_INCREF(Py_None); Py_XSETREF(*out, Py_None); return 1; }
    const char *a, *b;
    int esc;
    if (!scan_string(c, &a, &b, &esc)) return 0;
    PyObject *s = make_str(c, a, b, esc);
    if (s == NULL) return 0;
    Py_XSETREF(*out, s);
    return 1;
}

enum { K_TYPE, K_ID, K_SCHED, K_SENT, K_END, K_TTFT, K_TPOT, K_E2E, K_PROMPT, K_OUTPUT,
       K_SOURCE, K_STATUS, K_EKIND, K_ERROR, K_TIMES, K_TOKENS, K_UNKNOWN };
static const char *KEYS[] = {"type", "id", "scheduled_s", "sent_s", "end_s", "ttft_s",
                             "tpot_s", "e2e_s", "prompt_tokens", "output_tokens",
                             "token_count_source", "status", "error_kind", "error",
                             "event_times_s", "event_tokens", NULL};

static int key_of(const char *a, const char *b) {
    size_t n = (size_t)(b - a);
    int i;
    switch (n) {  /* by length first: one memcmp for the usual keys */
    case 2: i = K_ID; break;
    case 4: i = K_TYPE; break;
    case 5: i = a[0] == 'e' && a[1] == 'n' ? K_END : a[0] == 'e' && a[1] == '2' ? K_E2E
                                                                                 : K_ERROR; break;
    case 6: i = a[0] == 's' && a[1] == 'e' ? K_SENT : a[0] == 's' ? K_STATUS
                                                                   : a[1] == 't' ? K_TTFT
                                                                   : K_TPOT; break;
    case 10: i = K_EKIND; break;
    case 11: i = K_SCHED; break;
    case 12: i = K_TOKENS; break;
    case 13: i = a[0] == 'p' ? K_PROMPT : a[0] == 'o' ? K_OUTPUT : K_TIMES; break;
    case 18: i = K_SOURCE; break;
    default: return K_UNKNOWN;
    }
    return memcmp(a, KEYS[i], n) == 0 ? i : K_UNKNOWN;
}

typedef struct {
    double f[6];           /* scheduled, sent, end, ttft, tpot, e2e */
    int64_t prompt, output;
    int8_t status, source;
    PyObject *id, *ekind, *error;
    int64_t n_times, n_tokens;
    int has_tokens;
} Rec;

/* An array of numbers written from ev[at] on (capacity cap). ints: token counts. */
static int number_array(Cur *c, void *ev, int64_t at, int64_t cap, int ints, int64_t *count,
                        int *full) {
    if (c->p >= c->end || *c->p != '[') return 0;
    c->p++;
    skip_ws(c);
    int64_t k = 0;
    if (c->p < c->end && *c->p == ']') { c->p++; *count = 0; return 1; }
    for (;;) {
        double v;
        int is_int;
        int64_t iv;
        if (!parse_number(c, &v, &is_int, &iv)) return 0;
        if (at + k >= cap) { *full = 1; return 0; }
        if (ints) {
            /* int32 column (table.EVENT_TOKENS_MAX): a larger count is the exact path's
             * error */
            if (!is_int || iv < 0 || iv > INT32_MAX) return 0;
            ((int32_t *)ev)[at + k] = (int32_t)iv;
        } else {
            ((double *)ev)[at + k] = v;
        }
        k++;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ',') { c->p++; skip_ws(c); continue; }
        if (*c->p == ']') { c->p++; *count = k; return 1; }
        return 0;
    }
}

/* One stripped line into `r` and the event columns from ne on. 1: a request; 0: CANNOT
 * (or FULL when *full, or a Python error when c->error). */
static int parse_line(Cur *c, Rec *r, double *times, int32_t *tokens, int64_t ne,
                      int64_t cap_ne, int *full) {
    uint32_t seen = 0;
    for (int i = 0; i < 6; i++) r->f[i] = NAN;
    r->prompt = r->output = -1;
    r->status = 0;       /* "ok" */
    r->source = 5;       /* "unknown" */
    r->n_times = r->n_tokens = 0;
    r->has_tokens = 0;
    if (c->p >= c->end || *c->p != '{' || c->end[-1] != '}') return 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') return 0;  /* no id */
    for (;;) {
        const char *a, *b;
        int esc;
        if (!scan_string(c, &a, &b, &esc) || esc) return 0;
        int key = key_of(a, b);
        if (key == K_UNKNOWN) {
            for (const char *k = a; k < b; k++) if ((unsigned char)*k >= 0x80) return 0;
        } else {
            if (seen & (1u << key)) return 0;  /* json.loads keeps the last: Python paths */
            seen |= 1u << key;
        }
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return 0;
        c->p++;
        skip_ws(c);
        int ok = 1;
        switch (key) {
        case K_TYPE: {
            const char *ta, *tb;
            int tesc;
            ok = scan_string(c, &ta, &tb, &tesc) && !tesc && tb - ta == 7
                 && memcmp(ta, "request", 7) == 0;
            break;
        }
        case K_ID: {
            const char *ia, *ib;
            int iesc;
            if (!scan_string(c, &ia, &ib, &iesc)) return 0;  /* an integer id: Python paths */
            PyObject *s = make_str(c, ia, ib, iesc);
            if (s == NULL) return 0;
            Py_XSETREF(r->id, s);
            break;
        }
        case K_SCHED: case K_SENT: case K_END: case K_TTFT: case K_TPOT: case K_E2E:
            ok = float_value(c, &r->f[key - K_SCHED]);
            break;
        case K_PROMPT: ok = int_value(c, &r->prompt); break;
        case K_OUTPUT: ok = int_value(c, &r->output); break;
        case K_SOURCE: ok = code_value(c, SOURCES, &r->source); break;
        case K_STATUS: ok = code_value(c, STATUSES, &r->status); break;
        case K_EKIND: ok = opt_str(c, &r->ekind); break;
        case K_ERROR: ok = opt_str(c, &r->error); break;
        case K_TIMES:
            if (lit(c, "null")) r->n_times = 0;
            else ok = number_array(c, times, ne, cap_ne, 0, &r->n_times, full);
            break;
        case K_TOKENS:
            if (lit(c, "null")) r->has_tokens = 0;
            else {
                r->has_tokens = 1;
                ok = number_array(c, tokens, ne, cap_ne, 1, &r->n_tokens, full);
            }
            break;
        default:
            ok = skip_value(c, 0);
        }
        if (!ok) return 0;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ',') { c->p++; skip_ws(c); continue; }
        if (*c->p == '}') { c->p++; break; }
        return 0;
    }
    skip_ws(c);
    if (c->p != c->end) return 0;  /* more after the object */
    if (r->id == NULL || isnan(r->f[1])) return 0;  /* id and sent_s are required */
    if (r->has_tokens && r->n_tokens != r->n_times) return 0;
    if (!r->has_tokens) {
        if (ne + r->n_times > cap_ne) { *full = 1; return 0; }
        for (int64_t k = 0; k < r->n_times; k++) tokens[ne + k] = 1;
    }
    return 1;
}

static inline int is_space(char ch) {  /* bytes.strip(): ASCII whitespace */
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\x0b' || ch == '\x0c';
}

/* scan(buf, pos, at_eof, max_lines, columns, n, ne, ids, error_kinds, errors, json_loads)
 *   -> (status, pos, nonblank_lines, raw_lines, n, ne)
 * Reads lines of buf from pos: up to max_lines non-blank ones (DONE), or until no complete
 * line is left (NEED; at_eof: the rest is the last line). FULL: the columns are full at
 * the line at pos (nothing of it written). CANNOT: a line it does not answer for; what it
 * wrote for the batch must be dropped by the caller. */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, max_lines, n, ne;
    int at_eof;
    PyObject *cols, *ids, *ekinds, *errors, *json_loads;
    if (!PyArg_ParseTuple(args, "y*npnO!nnO!O!O!O", &buf, &pos, &at_eof, &max_lines,
                          &PyTuple_Type, &cols, &n, &ne, &PyList_Type, &ids, &PyList_Type,
                          &ekinds, &PyList_Type, &errors, &json_loads))
        return NULL;
    Py_buffer col[N_COLS];
    int got = 0;
    PyObject *result = NULL;
    if (PyTuple_GET_SIZE(cols) != N_COLS) {
        PyErr_SetString(PyExc_ValueError, "scan: 13 columns expected");
        goto done;
    }
    static const Py_ssize_t item[N_COLS] = {8, 8, 8, 8, 8, 8, 8, 8, 1, 1, 8, 8, 4};
    for (; got < N_COLS; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(cols, got), &col[got],
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (col[got].itemsize != item[got]) {
            PyErr_SetString(PyExc_ValueError, "scan: column of the wrong type");
            got++;
            goto done;
        }
    }
    {
        const Py_ssize_t cap_n = col[C_SENT].len / 8, cap_ne = col[C_TIMES].len / 8;
        const char *base = (const char *)buf.buf, *bend = base + buf.len;
        const char *p = base + pos;
        Py_ssize_t nonblank = 0, raw = 0;
        int status = ST_NEED;
        Cur c = {0};
        c.json_loads = json_loads;
        Rec r = {0};
        while (nonblank < max_lines) {
            if (p >= bend) { status = ST_NEED; break; }
            const char *nl = memchr(p, '\n', (size_t)(bend - p));
            const char *le = nl ? nl : bend;
            if (!nl && !at_eof) { status = ST_NEED; break; }
            const char *a = p, *b = le;
            while (a < b && is_space(*a)) a++;
            while (b > a && is_space(b[-1])) b--;
            if (a == b) { raw++; p = nl ? nl + 1 : bend; continue; }
            if (n >= cap_n) { status = ST_FULL; break; }
            c.p = a;
            c.end = b;
            int full = 0;
            Py_CLEAR(r.id);
            Py_CLEAR(r.ekind);
            Py_CLEAR(r.error);
            if (!parse_line(&c, &r, (double *)col[C_TIMES].buf, (int32_t *)col[C_TOKENS].buf,
                            ne, cap_ne, &full)) {
                if (c.error) goto done_rec;
                status = full ? ST_FULL : ST_CANNOT;
                break;
            }
            for (int i = 0; i < 6; i++) ((double *)col[C_SCHED + i].buf)[n] = r.f[i];
            ((int64_t *)col[C_PROMPT].buf)[n] = r.prompt;
            ((int64_t *)col[C_OUTPUT].buf)[n] = r.output;
            ((int8_t *)col[C_STATUS].buf)[n] = r.status;
            ((int8_t *)col[C_SOURCE].buf)[n] = r.source;
            ((int64_t *)col[C_COUNTS].buf)[n] = r.n_times;
            if (PyList_Append(ids, r.id) < 0 ||
                PyList_Append(ekinds, r.ekind ? r.ekind : Py_None) < 0 ||
                PyList_Append(errors, r.error ? r.error : Py_None) < 0)
                goto done_rec;
            n++;
            ne += r.n_times;
            nonblank++;
            raw++;
            p = nl ? nl + 1 : bend;
        }
        if (nonblank >= max_lines) status = ST_DONE;
        result = Py_BuildValue("(innnnn)", status, (Py_ssize_t)(p - base), nonblank, raw, n,
                               ne);
    done_rec:
        Py_XDECREF(r.id);
        Py_XDECREF(r.ekind);
        Py_XDECREF(r.error);
    }
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&col[i]);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Request lines of a trace into columns (see _scan.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan",
                                    "The trace reader's compiled fast path.", -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
