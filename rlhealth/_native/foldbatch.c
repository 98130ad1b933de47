/* Per-batch folds of matched lines into the job's state, for rlhealth._fastlines (the method table is in
 * fastlines.c). Each function has a Python twin next to its caller; RLHEALTH_NATIVE=0 selects the twins.
 *
 *   engine_fold(engs: list, tss: list, fields: list, start: int, gen_bucket: int | None, gen_bucket_s: int,
 *               engine_bucket_s: float, max_samples: int) -> int
 *       The engine stats rows start, start + 1, ... (row i: the EngineState engs[i], the line's time tss[i],
 *       its fields dict fields[i]) folded as fold_engines.engine_sample(eng, ts, finite_or_zero(gen),
 *       finite_or_zero(prompt), finite_or_zero(running), finite_or_zero(waiting), kv) (its last_gen, last_running
 *       and last_prompt too) with kv the finite float kv_cache_pct, else fold_engines.kv_pct(fields), up to the
 *       first row this pass leaves to Python;
 *       returns that row's index (len(tss) when none). A row is left to Python, untouched, when the row's
 *       5-minute generation bucket may differ from gen_bucket (gen_bucket None, the bucket later, or ts
 *       within 1e-6 bucket of a boundary, where float division might round across it: Python rolls the
 *       bucket), or when any value is not of a plain type (a field neither None, an exact float nor an
 *       exact int; kv_cache_pct an int or str; a sample that is not a 7-tuple of numbers; last_ts not a
 *       float). Twin: fold_engines.engine_fold_py (which leaves only the rolls); tests/test_engine_fold.py
 *       holds fold_engines.fold_engine_rows equal with either on generated rows.
 */
#include "fastlines.h"

#include <math.h>

/* The running means must round as Python's float arithmetic does, one rounding per operation: no fused
 * multiply-add (GCC contracts a * b + c across statements by default when the target has FMA). */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static PyObject *s_last_ts, *s_samples, *s_last_gen, *s_last_running, *s_last_prompt;
static PyObject *k_gen, *k_prompt, *k_running, *k_waiting, *k_kv_pct, *k_kv_frac;

static int
intern_names(void)
{
    if (s_last_ts != NULL)
        return 0;
    s_last_ts = PyUnicode_InternFromString("last_ts");
    s_samples = PyUnicode_InternFromString("samples");
    s_last_gen = PyUnicode_InternFromString("last_gen");
    s_last_running = PyUnicode_InternFromString("last_running");
    s_last_prompt = PyUnicode_InternFromString("last_prompt");
    k_gen = PyUnicode_InternFromString("generation_tokens_per_s");
    k_prompt = PyUnicode_InternFromString("prompt_tokens_per_s");
    k_running = PyUnicode_InternFromString("running");
    k_waiting = PyUnicode_InternFromString("waiting");
    k_kv_pct = PyUnicode_InternFromString("kv_cache_pct");
    k_kv_frac = PyUnicode_InternFromString("kv_cache_frac");
    if (!s_last_ts || !s_samples || !s_last_gen || !s_last_running || !s_last_prompt || !k_gen || !k_prompt || !k_running
        || !k_waiting || !k_kv_pct || !k_kv_frac)
        return -1;
    return 0;
}

/* finite_or_zero(fields.get(key)): 1 with *out set, 0 for a value of another type (left to Python),
 * -1 on error. */
static int
finite_or_zero_of(PyObject *fields, PyObject *key, double *out)
{
    PyObject *v = PyDict_GetItemWithError(fields, key);
    if (v == NULL && PyErr_Occurred())
        return -1;
    if (v == NULL || v == Py_None) {
        *out = 0.0; /* to_float(None) is None */
        return 1;
    }
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        *out = (isfinite(d) && d != 0.0) ? d : 0.0; /* "v or 0.0" turns -0.0 into 0.0 */
        return 1;
    }
    if (PyLong_CheckExact(v)) {
        double d = PyLong_AsDouble(v); /* what float(v) gives, or OverflowError */
        if (d == -1.0 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return -1;
            PyErr_Clear();
            d = 0.0;
        }
        *out = d != 0.0 ? d : 0.0;
        return 1;
    }
    return 0;
}

/* The row's KV-cache percent as the fast path takes it: 1, 0 (left to Python) or -1. */
static int
kv_of(PyObject *fields, double *out)
{
    PyObject *pct = PyDict_GetItemWithError(fields, k_kv_pct);
    if (pct == NULL && PyErr_Occurred())
        return -1;
    if (pct != NULL && PyFloat_CheckExact(pct) && isfinite(PyFloat_AS_DOUBLE(pct))) {
        *out = PyFloat_AS_DOUBLE(pct);
        return 1;
    }
    /* kv_pct(fields): to_float(pct) is None only for None or a non-finite float; other types to Python */
    if (!(pct == NULL || pct == Py_None || PyFloat_CheckExact(pct)))
        return 0;
    PyObject *frac = PyDict_GetItemWithError(fields, k_kv_frac);
    if (frac == NULL && PyErr_Occurred())
        return -1;
    if (frac == NULL || frac == Py_None) {
        *out = 0.0;
        return 1;
    }
    if (PyFloat_CheckExact(frac)) {
        double d = PyFloat_AS_DOUBLE(frac);
        *out = isfinite(d) ? d * 100.0 : 0.0;
        return 1;
    }
    return 0;
}

/* A number of a sample tuple as Python's float arithmetic takes it: 1, 0 (not an exact float or a
 * small exact int: left to Python) or -1. */
static int
sample_number(PyObject *v, double *out)
{
    if (PyFloat_CheckExact(v)) {
        *out = PyFloat_AS_DOUBLE(v);
        return 1;
    }
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (overflow || x > (1LL << 52) || x < -(1LL << 52))
            return 0;
        *out = (double)x;
        return 1;
    }
    return 0;
}

/* The sample tuple (t0, d1, d2, d3, d4, a5, a6), stealing t0, a5 and a6 (any may be NULL: then NULL, all released).
 * Built in place: Py_BuildValue parsed its format string for every row, a quarter of this fold's cost. */
static PyObject *
sample_tuple(PyObject *t0, double d1, double d2, double d3, double d4, PyObject *a5, PyObject *a6)
{
    PyObject *items[7] = {t0, PyFloat_FromDouble(d1), PyFloat_FromDouble(d2), PyFloat_FromDouble(d3),
                          PyFloat_FromDouble(d4), a5, a6};
    PyObject *t = NULL;
    int ok = 1;
    for (int j = 0; j < 7; j++)
        ok &= items[j] != NULL;
    if (ok && (t = PyTuple_New(7)) != NULL) {
        for (int j = 0; j < 7; j++)
            PyTuple_SET_ITEM(t, j, items[j]);
        return t;
    }
    for (int j = 0; j < 7; j++)
        Py_XDECREF(items[j]);
    return NULL;
}

/* Fold one row; 1 done, 0 left to Python (nothing changed), -1 error. */
static int
fold_row(PyObject *eng, PyObject *ts_obj, PyObject *fields, double engine_bucket_s, Py_ssize_t max_samples)
{
    double ts = PyFloat_AS_DOUBLE(ts_obj);
    double gen, prompt, running, waiting, kv;
    int r;
    if ((r = finite_or_zero_of(fields, k_gen, &gen)) != 1 || (r = finite_or_zero_of(fields, k_prompt, &prompt)) != 1
        || (r = finite_or_zero_of(fields, k_running, &running)) != 1
        || (r = finite_or_zero_of(fields, k_waiting, &waiting)) != 1 || (r = kv_of(fields, &kv)) != 1)
        return r;
    PyObject *last_ts = PyObject_GetAttr(eng, s_last_ts);
    if (last_ts == NULL)
        return -1;
    PyObject *samples = PyObject_GetAttr(eng, s_samples);
    if (samples == NULL) {
        Py_DECREF(last_ts);
        return -1;
    }
    PyObject *new_sample = NULL, *new_last_ts;
    int merge = 0, result = 0;
    Py_ssize_t ns;
    if (!(last_ts == Py_None || PyFloat_CheckExact(last_ts)) || !PyList_CheckExact(samples))
        goto done;
    ns = PyList_GET_SIZE(samples);
    if (ns > 0) {
        PyObject *last = PyList_GET_ITEM(samples, ns - 1);
        double t0, v[5];
        if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 7)
            goto done;
        if ((result = sample_number(PyTuple_GET_ITEM(last, 0), &t0)) != 1)
            goto done;
        result = 0;
        double d = ts - t0;
        merge = 0 <= d && d < engine_bucket_s;
        if (merge) {
            PyObject *nobj = PyTuple_GET_ITEM(last, 6);
            for (int j = 0; j < 5; j++) {
                if (!PyFloat_CheckExact(PyTuple_GET_ITEM(last, j + 1)))
                    goto done;
                v[j] = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(last, j + 1));
            }
            if (!PyLong_CheckExact(nobj))
                goto done;
            int overflow = 0;
            long long n = PyLong_AsLongLongAndOverflow(nobj, &overflow);
            if (n == -1 && PyErr_Occurred()) {
                result = -1;
                goto done;
            }
            if (overflow || n < 0 || n > (1LL << 52))
                goto done;
            /* (last[1] * n + gen) / k ... as Python's float arithmetic does it, one rounding per operation */
            double dn = (double)n, dk = (double)(n + 1);
            double m1 = v[0] * dn, m2 = v[1] * dn, m3 = v[2] * dn, m4 = v[3] * dn;
            PyObject *kvobj;
            if (kv > v[4])
                kvobj = PyFloat_FromDouble(kv);
            else {
                kvobj = PyTuple_GET_ITEM(last, 5);
                Py_INCREF(kvobj);
            }
            PyObject *t0obj = PyTuple_GET_ITEM(last, 0);
            Py_INCREF(t0obj);
            new_sample = sample_tuple(t0obj, (m1 + gen) / dk, (m2 + prompt) / dk, (m3 + running) / dk,
                                      (m4 + waiting) / dk, kvobj, PyLong_FromLongLong(n + 1));
            if (new_sample == NULL) {
                result = -1;
                goto done;
            }
        }
    }
    if (!merge) {
        PyObject *rounded = PyLong_FromDouble(rint(ts)); /* round(ts): half to even, as rint in the default mode */
        if (rounded == NULL) {
            result = -1;
            goto done;
        }
        new_sample = sample_tuple(rounded, gen, prompt, running, waiting, PyFloat_FromDouble(kv), PyLong_FromLong(1));
        if (new_sample == NULL) {
            result = -1;
            goto done;
        }
    }
    /* every check passed: change the engine */
    new_last_ts = (last_ts == Py_None || ts > PyFloat_AS_DOUBLE(last_ts)) ? ts_obj : last_ts;
    if (PyObject_SetAttr(eng, s_last_ts, new_last_ts) < 0)
        goto fail;
    if (merge) {
        PyObject *old = PyList_GET_ITEM(samples, ns - 1);
        PyList_SET_ITEM(samples, ns - 1, new_sample); /* the list takes the new sample's reference */
        new_sample = NULL;
        Py_DECREF(old);
    } else {
        if (PyList_Append(samples, new_sample) < 0)
            goto fail;
        Py_ssize_t len = PyList_GET_SIZE(samples);
        if (len > max_samples && PyList_SetSlice(samples, 0, len - max_samples, NULL) < 0)
            goto fail;
    }
    PyObject *g = PyFloat_FromDouble(gen), *run = PyFloat_FromDouble(running), *pr = PyFloat_FromDouble(prompt);
    if (g == NULL || run == NULL || pr == NULL || PyObject_SetAttr(eng, s_last_gen, g) < 0
        || PyObject_SetAttr(eng, s_last_running, run) < 0 || PyObject_SetAttr(eng, s_last_prompt, pr) < 0) {
        Py_XDECREF(g);
        Py_XDECREF(run);
        Py_XDECREF(pr);
        goto fail;
    }
    Py_DECREF(g);
    Py_DECREF(run);
    Py_DECREF(pr);
    result = 1;
    goto done;
fail:
    result = -1;
done:
    Py_XDECREF(new_sample);
    Py_DECREF(last_ts);
    Py_DECREF(samples);
    return result;
}

PyObject *
fl_engine_fold(PyObject *self, PyObject *args)
{
    PyObject *engs, *tss, *fields, *gen_bucket;
    Py_ssize_t start, gen_bucket_s, max_samples;
    double engine_bucket_s;
    if (!PyArg_ParseTuple(args, "O!O!O!nOndn:engine_fold", &PyList_Type, &engs, &PyList_Type, &tss, &PyList_Type,
                          &fields, &start, &gen_bucket, &gen_bucket_s, &engine_bucket_s, &max_samples))
        return NULL;
    if (intern_names() < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(tss);
    if (PyList_GET_SIZE(engs) != n || PyList_GET_SIZE(fields) != n || start < 0 || gen_bucket_s <= 0
        || max_samples < 1) {
        PyErr_SetString(PyExc_ValueError, "engine_fold() rows of unequal length or bad arguments");
        return NULL;
    }
    if (gen_bucket == Py_None || !PyLong_CheckExact(gen_bucket))
        return PyLong_FromSsize_t(start < n ? start : n);
    int overflow = 0;
    long long gb = PyLong_AsLongLongAndOverflow(gen_bucket, &overflow);
    if (gb == -1 && PyErr_Occurred())
        return NULL;
    if (overflow)
        return PyLong_FromSsize_t(start < n ? start : n);
    Py_ssize_t i = start;
    for (; i < n; i++) {
        PyObject *ts_obj = PyList_GET_ITEM(tss, i), *f = PyList_GET_ITEM(fields, i);
        if (!PyFloat_CheckExact(ts_obj) || !PyDict_CheckExact(f))
            break;
        double ts = PyFloat_AS_DOUBLE(ts_obj);
        double q = ts / (double)gen_bucket_s, fl = floor(q);
        if (!isfinite(q) || fabs(fl) > 1e12 || q - fl < 1e-6 || q - fl > 1.0 - 1e-6)
            break; /* near a bucket boundary (or absurd): Python's int(ts // s) decides */
        if ((long long)fl * (long long)gen_bucket_s > gb)
            break; /* a new bucket: Python rolls it */
        int r = fold_row(PyList_GET_ITEM(engs, i), ts_obj, f, engine_bucket_s, max_samples);
        if (r < 0)
            return NULL;
        if (r == 0)
            break;
    }
    return PyLong_FromSsize_t(i);
}
