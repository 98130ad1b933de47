/* A Hyperscan match handler that is not Python code, and what the reader wants of its matches: each batch's
 * (line, rule) pairs. In C because the handler runs per match: on the dense capture 1.45 M matches of 746k
 * (line, rule) hits, a Python handler ~0.7 us each plus a sort of 1.45 M tuples and their parse in hit_lines
 * (1.6-1.9 s of the probe's profile). The hyperscan module still builds an argument tuple per match (and
 * takes the GIL back for it): that part stays (~0.35 us a match).
 *
 *   HitSink() -> sink
 *       sink(id, from, to, flags, ctx) records (to, id) and returns None (go on scanning): pass the sink as
 *       Database.scan's match_event_handler. sink.clear() forgets what it recorded.
 *       sink.take(block: bytes, size: int) -> list[tuple[list[tuple[int, int]], int]]
 *           The recorded matches of `block` (their ends within it) as hit_lines gives them, split into batches
 *           of `size` lines: per batch, its sorted unique (line - batch start, rule) pairs and how many distinct
 *           lines they are on; the list ends at the last batch with a pair ([] when none). Forgets the matches.
 *   Twin: bytescan.HitSinkPy (take == split_hits_py(hit_lines_py(sorted(recorded), block), size)).
 */
#include "fastlines.h"

typedef struct {
    unsigned long long to;
    unsigned long id;
} sink_match;

/* The (line, rule) pair tuples are shared between takes: a reader's batches all have the same size, so the same
 * pairs recur in every batch of a dense log (746k pairs on the dense capture, a few thousand distinct ones); a
 * tuple not made is one the garbage collector does not count and no one frees. Cached for lines below
 * CACHE_LINES (the probe's batches are 2000 lines, the stream's 500) and rules below CACHE_RULES: at most
 * 16 KiB of pointers per rule that ever hit and a 56-byte tuple per (line, rule) seen (the 150 rules on every
 * line: 19 MiB; the dense capture: 2.6k tuples). */
#define CACHE_LINES 2048
#define CACHE_RULES 4096

typedef struct {
    PyObject_HEAD
    sink_match *m;
    Py_ssize_t n, cap;
    PyObject ***rows; /* rows[rule][line]: the tuple (line, rule), or NULL */
    Py_ssize_t nrows;
} HitSink;

/* A new reference to (line, rid), from the cache when it can */
static PyObject *
pair_of(HitSink *s, Py_ssize_t line, unsigned long rid)
{
    if (line >= CACHE_LINES || rid >= CACHE_RULES)
        return Py_BuildValue("(nk)", line, rid);
    if ((Py_ssize_t)rid >= s->nrows) {
        PyObject ***grown = PyMem_Realloc(s->rows, (rid + 1) * sizeof(PyObject **));
        if (grown == NULL)
            return PyErr_NoMemory();
        for (Py_ssize_t r = s->nrows; r <= (Py_ssize_t)rid; r++)
            grown[r] = NULL;
        s->rows = grown;
        s->nrows = (Py_ssize_t)rid + 1;
    }
    if (s->rows[rid] == NULL && (s->rows[rid] = PyMem_Calloc(CACHE_LINES, sizeof(PyObject *))) == NULL)
        return PyErr_NoMemory();
    PyObject *pair = s->rows[rid][line];
    if (pair == NULL) {
        if ((pair = Py_BuildValue("(nk)", line, rid)) == NULL)
            return NULL;
        s->rows[rid][line] = pair;
    }
    return Py_NewRef(pair);
}

static void
sink_dealloc(PyObject *self)
{
    HitSink *s = (HitSink *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyMem_Free(s->m);
    for (Py_ssize_t r = 0; r < s->nrows; r++) {
        if (s->rows[r] == NULL)
            continue;
        for (Py_ssize_t i = 0; i < CACHE_LINES; i++)
            Py_XDECREF(s->rows[r][i]);
        PyMem_Free(s->rows[r]);
    }
    PyMem_Free(s->rows);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
sink_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    HitSink *s = (HitSink *)self;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "HitSink() takes no keyword arguments");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 5) {
        PyErr_SetString(PyExc_TypeError, "HitSink() takes (id, from, to, flags, context)");
        return NULL;
    }
    unsigned long id = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(args, 0));
    unsigned long long to = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(args, 2));
    if (PyErr_Occurred())
        return NULL;
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 4096;
        sink_match *grown = PyMem_Realloc(s->m, (size_t)cap * sizeof(sink_match));
        if (grown == NULL)
            return PyErr_NoMemory();
        s->m = grown;
        s->cap = cap;
    }
    s->m[s->n].to = to;
    s->m[s->n].id = id;
    s->n++;
    Py_RETURN_NONE;
}

static int
cmp_match(const void *a, const void *b)
{
    const sink_match *x = a, *y = b;
    if (x->to != y->to)
        return (x->to > y->to) - (x->to < y->to);
    return (x->id > y->id) - (x->id < y->id);
}

/* Close batches up to `upto` (exclusive): the current one with its pairs and line count, the empty ones after */
static int
close_batches(PyObject *out, PyObject **cur, Py_ssize_t *lines, Py_ssize_t upto)
{
    while (PyList_GET_SIZE(out) < upto) {
        PyObject *pairs = *cur != NULL ? *cur : PyList_New(0);
        *cur = NULL;
        if (pairs == NULL)
            return -1;
        PyObject *item = Py_BuildValue("(Nn)", pairs, *lines);
        *lines = 0;
        if (item == NULL)
            return -1;
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Append (line - batch start, rid) for each of a line's rule ids, sorted without repeats, to its batch */
static int
emit(HitSink *s, PyObject *out, PyObject **cur, Py_ssize_t *lines, Py_ssize_t line, Py_ssize_t size, fl_ids *rids)
{
    Py_ssize_t batch = line / size;
    if (close_batches(out, cur, lines, batch) < 0)
        return -1;
    if (*cur == NULL && (*cur = PyList_New(0)) == NULL)
        return -1;
    Py_ssize_t n = fl_ids_sort_unique(rids);
    for (Py_ssize_t i = 0; i < n; i++)
        if (fl_append_taken(*cur, pair_of(s, line - batch * size, rids->v[i])) < 0)
            return -1;
    rids->n = 0;
    (*lines)++;
    return 0;
}

static PyObject *
sink_take(PyObject *self, PyObject *args)
{
    HitSink *s = (HitSink *)self;
    Py_buffer buf;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*n:take", &buf, &size))
        return NULL;
    PyObject *out = NULL, *cur = NULL;
    Py_ssize_t n = s->n, line = 0, cur_line = -1, lines = 0;
    unsigned long long pos = 0;
    fl_ids rids = {0};
    s->n = 0; /* taken, whatever happens below */
    if (size < 1) {
        PyErr_SetString(PyExc_ValueError, "take() size must be positive");
        goto fail;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        if (cmp_match(&s->m[i - 1], &s->m[i]) > 0) {
            qsort(s->m, (size_t)n, sizeof(sink_match), cmp_match);
            break;
        }
    }
    if ((out = PyList_New(0)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long to = s->m[i].to;
        if (to > (unsigned long long)buf.len) {
            PyErr_SetString(PyExc_ValueError, "take() match end outside the block");
            goto fail;
        }
        line += fl_newline_count((const char *)buf.buf + pos, (Py_ssize_t)(to - pos));
        pos = to;
        if (line != cur_line) {
            if (rids.n > 0 && emit(s, out, &cur, &lines, cur_line, size, &rids) < 0)
                goto fail;
            cur_line = line;
        }
        if (fl_ids_push(&rids, s->m[i].id) < 0)
            goto fail;
    }
    if (rids.n > 0) {
        if (emit(s, out, &cur, &lines, cur_line, size, &rids) < 0)
            goto fail;
        if (close_batches(out, &cur, &lines, cur_line / size + 1) < 0)
            goto fail;
    }
    fl_ids_free(&rids);
    PyBuffer_Release(&buf);
    return out;
fail:
    fl_ids_free(&rids);
    Py_XDECREF(cur);
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

static PyObject *
sink_clear(PyObject *self, PyObject *unused)
{
    ((HitSink *)self)->n = 0;
    Py_RETURN_NONE;
}

static PyObject *
sink_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0)) {
        PyErr_SetString(PyExc_TypeError, "HitSink() takes no arguments");
        return NULL;
    }
    HitSink *s = (HitSink *)type->tp_alloc(type, 0);
    if (s != NULL) {
        s->m = NULL;
        s->n = s->cap = 0;
        s->rows = NULL;
        s->nrows = 0;
    }
    return (PyObject *)s;
}

static PyMethodDef sink_methods[] = {
    {"take", sink_take, METH_VARARGS, "The recorded matches of a block as per-batch (line, rule) pairs (see hitsink.c)."},
    {"clear", sink_clear, METH_NOARGS, "Forget the recorded matches."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot sink_slots[] = {
    {Py_tp_new, sink_new},
    {Py_tp_dealloc, sink_dealloc},
    {Py_tp_call, sink_call},
    {Py_tp_methods, sink_methods},
    {Py_tp_doc, "A Hyperscan match handler recording (end, rule) in C (see rlhealth/_native/hitsink.c)."},
    {0, NULL},
};

static PyType_Spec sink_spec = {
    "rlhealth._fastlines.HitSink", sizeof(HitSink), 0, Py_TPFLAGS_DEFAULT, sink_slots,
};

int
fl_add_hitsink(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&sink_spec);
    if (type == NULL)
        return -1;
    return PyModule_AddObject(module, "HitSink", type) < 0 ? (Py_DECREF(type), -1) : 0;
}
