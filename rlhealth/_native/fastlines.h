/* What crosses the files of rlhealth._fastlines (one extension module built from every .c file in rlhealth/_native/).
 *
 * Each .c file is one concept and defines the Python-visible functions named fl_<python name> that
 * fastlines.c's method table lists; the few helpers one file lends another carry an fl_ prefix too. All of them
 * are hidden from the shared object's symbol table (as the static functions of a one-file module were): the
 * module exports PyInit__fastlines only.
 */
#ifndef RLHEALTH_FASTLINES_H
#define RLHEALTH_FASTLINES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define FL_HIDDEN __attribute__((visibility("hidden")))
#else
#define FL_HIDDEN
#endif

/* ---- small helpers of more than one file: static inline, so a hot loop keeps them inlined as in one file ---- */

static inline Py_ssize_t
fl_newline_count(const char *src, Py_ssize_t n)
{
    Py_ssize_t count = 0;
    for (const char *p = memchr(src, '\n', (size_t)n); p != NULL;
         p = memchr(p + 1, '\n', (size_t)(n - (p + 1 - src))))
        count++;
    return count;
}

/* The METH_O functions take bytes only (no copy of another buffer type). */
static inline int
fl_bytes_arg(PyObject *arg, const char *fname)
{
    if (PyBytes_Check(arg))
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() argument must be bytes", fname);
    return 0;
}

/* ... and str only, where they read text. */
static inline int
fl_str_arg(PyObject *arg, const char *fname)
{
    if (PyUnicode_Check(arg))
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() argument must be str", fname);
    return 0;
}

/* list.append(item) taking the reference to item (NULL: the error that made it): 0, or -1 */
static inline int
fl_append_taken(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The rule ids one line matched, as hyperscan reports them (repeats, any order): hits.c and hitsink.c collect
 * them per line, then emit them sorted without repeats. Zeroed to start; fl_ids_free when done. */
typedef struct {
    unsigned long *v;
    Py_ssize_t n, cap;
} fl_ids;

static inline int
fl_ids_push(fl_ids *ids, unsigned long id)
{
    if (ids->n == ids->cap) {
        Py_ssize_t cap = ids->cap ? ids->cap * 2 : 16;
        unsigned long *grown = PyMem_Realloc(ids->v, (size_t)cap * sizeof(unsigned long));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ids->v = grown;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

static inline int
fl_cmp_ulong(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
    return (x > y) - (x < y);
}

/* Sort the ids and drop repeats in place; how many are left */
static inline Py_ssize_t
fl_ids_sort_unique(fl_ids *ids)
{
    if (ids->n < 2)
        return ids->n;
    qsort(ids->v, (size_t)ids->n, sizeof(unsigned long), fl_cmp_ulong);
    Py_ssize_t kept = 1;
    for (Py_ssize_t i = 1; i < ids->n; i++)
        if (ids->v[i] != ids->v[kept - 1])
            ids->v[kept++] = ids->v[i];
    return ids->n = kept;
}

static inline void
fl_ids_free(fl_ids *ids)
{
    PyMem_Free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

/* ---- helpers one file lends another ---------------------------------------------------------------------- */

/* ansi.c: the ANSI strip of a str whose characters are all below U+0100, a new reference; Py_NotImplemented
 * for wider strs (used by keep_hits) */
FL_HIDDEN PyObject *fl_strip_ansi_1byte(PyObject *s);

/* fields.c: a rule-specific scanner: where the groups of a line are (extract's, then extract_before's when it
 * matched): *ngroups groups (at most FL_MAX_SPANS), group g text[start[g]:end[g]] or absent (start[g] < 0).
 * 1 when it could tell, 0 when not (the regexes then do that line), -1 on error */
#define FL_MAX_SPANS 32
typedef int (*fl_spans_scanner)(PyObject *text, Py_ssize_t before_chars, Py_ssize_t *start, Py_ssize_t *end,
                                Py_ssize_t *ngroups);

/* fields.c: fields_batch's argument parsing and loop, `scan` (or NULL) tried on each line before the regexes */
FL_HIDDEN PyObject *fl_fields_batch_run(PyObject *args, const char *fmt, fl_spans_scanner scan);

/* numconv.c: int(v) (shape 1: ASCII digits) or float(v) (shape 2: ASCII digits with exactly one '.', two or more
 * characters) of a str of that shape (fields.c's number_shape), a new reference; short ones without the copy
 * PyLong_FromUnicodeObject / PyFloat_FromString make (used by fields_of) */
FL_HIDDEN PyObject *fl_number_from_ascii(PyObject *v, int shape);

/* numconv.c: the same of n ASCII bytes s of that shape; NotImplemented where it would take the slow path (the
 * caller then converts a str of them with fl_number_from_ascii) */
FL_HIDDEN PyObject *fl_number_from_bytes(const unsigned char *s, Py_ssize_t n, int shape);

/* ---- the Python-visible functions, by file (fastlines.c's method table) ------------------------------------ */

/* blocks.c */
FL_HIDDEN PyObject *fl_line_starts(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_utf8_valid(PyObject *self, PyObject *arg);
FL_HIDDEN PyObject *fl_count_newlines(PyObject *self, PyObject *arg);

/* ansi.c */
FL_HIDDEN PyObject *fl_strip_ansi(PyObject *self, PyObject *arg);
FL_HIDDEN PyObject *fl_strip_ansi_latin1(PyObject *self, PyObject *arg);

/* fields.c */
FL_HIDDEN PyObject *fl_fields_of(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_fields_batch(PyObject *self, PyObject *args);

/* vllm_v1.c */
FL_HIDDEN PyObject *fl_fields_batch_vllm_v1(PyObject *self, PyObject *args);

/* peel_stamp.c */
FL_HIDDEN PyObject *fl_peel_stamp_batch(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_stamp_span(PyObject *self, PyObject *args);

/* hits.c */
FL_HIDDEN PyObject *fl_hit_lines(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_keep_hits(PyObject *self, PyObject *args);

/* hitsink.c: adds the HitSink type to the module (0, or -1 with an exception set) */
FL_HIDDEN int fl_add_hitsink(PyObject *module);

/* bare_pairs.c */
FL_HIDDEN PyObject *fl_bare_pairs(PyObject *self, PyObject *arg);

/* quoted_pairs.c */
FL_HIDDEN PyObject *fl_quoted_pairs(PyObject *self, PyObject *arg);

/* foldbatch.c */
FL_HIDDEN PyObject *fl_engine_fold(PyObject *self, PyObject *args);

/* numconv.c */
FL_HIDDEN PyObject *fl_number_of(PyObject *self, PyObject *arg);

#endif
