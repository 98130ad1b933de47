/* The fields dict of a matched line from its regex groups, for one line and for every line a rule matched.
 * In C because it runs once per matched line, and the Python loop it replaces costs ~1 us a line. Twins:
 * bytescan.fields_of_py and bytescan.fields_batch_py. vllm_v1.c runs the batch loop here with its own scanner
 * in front of the regexes; a scanner gives the groups' places in the line (fields_from_spans makes the same dict
 * as fields_from_values would of their strs, converting ASCII numbers without making the str).
 *
 *   fields_of(values: tuple, plan: tuple, convert, convert_size, defaults: dict | None) -> dict
 *       The fields dict of one matched line from its regex groups (`values`: extract's groups, then
 *       extract_before's). `plan` holds (name, index, how) per field in the rule's order; a field
 *       whose value is None (or whose index is past the end) is left out; how 0 keeps the str,
 *       1 calls convert_size(name, value), 2 converts: an ASCII all-digit value -> int(value), an
 *       ASCII value of digits and exactly one '.' -> float(value), anything else -> convert(value).
 *       Then every (key, value) of `defaults` that is missing is added, in order.
 *
 *   fields_batch(texts: list, search, before, before_chars: int, plan, convert, convert_size,
 *                defaults: dict | None, empty: dict) -> list[dict]
 *       The fields of each of `texts` (the lines one rule matched): m = search(text); None gives a
 *       copy of `empty`; else values = m.groups(), plus, when `before` is not None and
 *       b = before(text, max(0, m.start() - before_chars), m.start()) is not None, b.groups(); then
 *       fields_of(values, ...).
 */
#include "fastlines.h"

/* 1: ASCII digits only (int), 2: ASCII digits with exactly one '.' and at least one digit (float), 0: other */
static int
number_shape(PyObject *v)
{
    if (!PyUnicode_Check(v) || !PyUnicode_IS_READY(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(v);
    Py_ssize_t n = PyUnicode_GET_LENGTH(v), dots = 0;
    if (n == 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '.') {
            if (++dots > 1)
                return 0;
        } else if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
    }
    if (dots == 0)
        return 1;
    return n >= 2 ? 2 : 0;
}

/* Every (key, value) of `defaults` (a dict, or None) missing from out, added in order: 0, or -1 on error */
static int
add_defaults(PyObject *out, PyObject *defaults)
{
    if (defaults == Py_None)
        return 0;
    if (!PyDict_Check(defaults)) {
        PyErr_SetString(PyExc_TypeError, "fields_of() defaults must be a dict or None");
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(defaults, &pos, &key, &value)) {
        if (PyDict_SetDefault(out, key, value) == NULL)
            return -1;
    }
    return 0;
}

/* out with add_defaults done, or NULL (out released) on error */
static PyObject *
with_defaults(PyObject *out, PyObject *defaults)
{
    if (add_defaults(out, defaults) < 0)
        Py_CLEAR(out);
    return out;
}

/* Plan item k's (name, index, how), the name borrowed: 0, or -1 with an exception */
static int
plan_step(PyObject *plan, Py_ssize_t k, PyObject **name, Py_ssize_t *idx, long *how)
{
    PyObject *step = PyTuple_GET_ITEM(plan, k);
    if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3) {
        PyErr_SetString(PyExc_TypeError, "fields_of() plan items must be (name, index, how)");
        return -1;
    }
    *name = PyTuple_GET_ITEM(step, 0);
    *idx = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 1));
    *how = PyLong_AsLong(PyTuple_GET_ITEM(step, 2));
    return (*idx == -1 || *how == -1) && PyErr_Occurred() ? -1 : 0;
}

/* A str value converted as its field's `how` says (see fields_of above), a new reference or NULL */
static PyObject *
convert_str(PyObject *v, PyObject *name, long how, PyObject *convert, PyObject *convert_size)
{
    if (how == 0)
        return Py_NewRef(v);
    if (how == 1)
        return PyObject_CallFunctionObjArgs(convert_size, name, v, NULL);
    int shape = number_shape(v);
    if (shape == 1 || shape == 2)
        return fl_number_from_ascii(v, shape); /* int(v) / float(v), short ones without a copy (numconv.c) */
    return PyObject_CallOneArg(convert, v);
}

/* out[name] = conv, the reference to conv taken (NULL: the error that made it): 0, or -1 */
static int
set_taken(PyObject *out, PyObject *name, PyObject *conv)
{
    if (conv == NULL)
        return -1;
    int rc = PyDict_SetItem(out, name, conv);
    Py_DECREF(conv);
    return rc;
}

/* An empty dict with room for one key per plan item: PyDict_New's 8 slots take 5 keys, and a stats line's 6-8 fields
 * made it grow (a new table and every key moved) once per line. Only the table's size differs, not the dict. */
static PyObject *
new_fields_dict(PyObject *plan)
{
    return _PyDict_NewPresized(PyTuple_GET_SIZE(plan));
}

/* fields_of's work, for a `values` tuple and a checked `plan` tuple (a new dict, or NULL with an exception). */
static PyObject *
fields_from_values(PyObject *values, PyObject *plan, PyObject *convert, PyObject *convert_size, PyObject *defaults)
{
    PyObject *out = new_fields_dict(plan);
    if (out == NULL)
        return NULL;
    Py_ssize_t nvalues = PyTuple_GET_SIZE(values), nplan = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t k = 0; k < nplan; k++) {
        PyObject *name;
        Py_ssize_t idx;
        long how;
        if (plan_step(plan, k, &name, &idx, &how) < 0)
            goto fail;
        if (idx < 0 || idx >= nvalues || PyTuple_GET_ITEM(values, idx) == Py_None)
            continue;
        if (set_taken(out, name, convert_str(PyTuple_GET_ITEM(values, idx), name, how, convert, convert_size)) < 0)
            goto fail;
    }
    return with_defaults(out, defaults);
fail:
    Py_DECREF(out);
    return NULL;
}

/* A number field's value (how 2) converted from its characters text[a:a+n] when they are ASCII digits and dots,
 * without making the str: a new reference, NULL with an exception, or NULL without one when it cannot tell */
static PyObject *
number_from_span(int kind, const void *data, Py_ssize_t a, Py_ssize_t n)
{
    if (n <= 0 || n > 64)
        return NULL;
    unsigned char buf[64];
    Py_ssize_t dots = 0, i = 0;
    for (; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, a + i);
        if (c == '.')
            dots++;
        else if (c < '0' || c > '9')
            return NULL;
        buf[i] = (unsigned char)c;
    }
    int shape = dots == 0 ? 1 : (dots == 1 && n >= 2) ? 2 : 0; /* number_shape's */
    if (shape == 0)
        return NULL;
    PyObject *conv = fl_number_from_bytes(buf, n, shape);
    if (conv == Py_NotImplemented)
        Py_CLEAR(conv); /* the slow path: from the str */
    return conv;
}

/* fields_from_values for the groups a scanner found: group g is text[start[g]:end[g]] (absent when start[g] < 0).
 * A value of how 2 made of ASCII digits and dots is converted from its characters, without the str. */
static PyObject *
fields_from_spans(PyObject *text, const Py_ssize_t *start, const Py_ssize_t *end, Py_ssize_t ngroups, PyObject *plan,
                  PyObject *convert, PyObject *convert_size, PyObject *defaults)
{
    PyObject *out = new_fields_dict(plan);
    if (out == NULL)
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t nplan = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t k = 0; k < nplan; k++) {
        PyObject *name;
        Py_ssize_t idx;
        long how;
        if (plan_step(plan, k, &name, &idx, &how) < 0)
            goto fail;
        if (idx < 0 || idx >= ngroups || start[idx] < 0)
            continue;
        Py_ssize_t a = start[idx], n = end[idx] - start[idx];
        PyObject *conv = how != 0 && how != 1 ? number_from_span(kind, data, a, n) : NULL;
        if (conv == NULL) {
            if (PyErr_Occurred())
                goto fail;
            PyObject *v = PyUnicode_Substring(text, a, a + n);
            if (v == NULL)
                goto fail;
            conv = convert_str(v, name, how, convert, convert_size);
            Py_DECREF(v);
        }
        if (set_taken(out, name, conv) < 0)
            goto fail;
    }
    return with_defaults(out, defaults);
fail:
    Py_DECREF(out);
    return NULL;
}

PyObject *
fl_fields_of(PyObject *self, PyObject *args)
{
    PyObject *values, *plan, *convert, *convert_size, *defaults;
    if (!PyArg_ParseTuple(args, "O!O!OOO:fields_of", &PyTuple_Type, &values, &PyTuple_Type, &plan, &convert,
                          &convert_size, &defaults))
        return NULL;
    return fields_from_values(values, plan, convert, convert_size, defaults);
}

/* m.<name>() of a name made a str once in *slot (PyObject_CallMethod made the str from the C string and parsed a
 * format, per call: two or three calls a matched line of a regex-extracted rule) */
static PyObject *
call_method0(PyObject *obj, PyObject **slot, const char *name)
{
    if (*slot == NULL && (*slot = PyUnicode_InternFromString(name)) == NULL)
        return NULL;
    return PyObject_CallMethodNoArgs(obj, *slot);
}

static PyObject *s_groups, *s_start;

PyObject *
fl_fields_batch_run(PyObject *args, const char *fmt, fl_spans_scanner scan)
{
    PyObject *texts, *search, *before, *plan, *convert, *convert_size, *defaults, *empty;
    Py_ssize_t before_chars;
    if (!PyArg_ParseTuple(args, fmt, &PyList_Type, &texts, &search, &before, &before_chars,
                          &PyTuple_Type, &plan, &convert, &convert_size, &defaults, &PyDict_Type, &empty))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i);
        PyObject *fields = NULL;
        if (scan != NULL && PyUnicode_Check(text)) {
            Py_ssize_t start[FL_MAX_SPANS], end[FL_MAX_SPANS], ngroups = 0;
            int found = scan(text, before_chars, start, end, &ngroups);
            if (found < 0)
                goto fail;
            if (found > 0) {
                fields = fields_from_spans(text, start, end, ngroups, plan, convert, convert_size, defaults);
                if (fields == NULL)
                    goto fail;
                PyList_SET_ITEM(out, i, fields);
                continue;
            }
        }
        PyObject *m = PyObject_CallOneArg(search, text);
        if (m == NULL)
            goto fail;
        if (m == Py_None) {
            Py_DECREF(m);
            fields = PyDict_Copy(empty);
        } else {
            PyObject *values = call_method0(m, &s_groups, "groups");
            if (values != NULL && before != Py_None) {
                PyObject *startobj = call_method0(m, &s_start, "start");
                Py_ssize_t start = startobj != NULL ? PyLong_AsSsize_t(startobj) : -1;
                Py_XDECREF(startobj);
                if (start == -1 && PyErr_Occurred()) {
                    Py_CLEAR(values);
                } else {
                    Py_ssize_t lo = start - before_chars > 0 ? start - before_chars : 0;
                    PyObject *b = PyObject_CallFunction(before, "Onn", text, lo, start);
                    if (b == NULL) {
                        Py_CLEAR(values);
                    } else if (b != Py_None) {
                        PyObject *bvalues = call_method0(b, &s_groups, "groups");
                        PyObject *joined = bvalues != NULL ? PySequence_Concat(values, bvalues) : NULL;
                        Py_XDECREF(bvalues);
                        Py_SETREF(values, joined);
                    }
                    Py_XDECREF(b);
                }
            }
            Py_DECREF(m);
            if (values == NULL)
                goto fail;
            if (!PyTuple_Check(values)) {
                Py_DECREF(values);
                PyErr_SetString(PyExc_TypeError, "fields_batch() groups() must give a tuple");
                goto fail;
            }
            fields = fields_from_values(values, plan, convert, convert_size, defaults);
            Py_DECREF(values);
        }
        if (fields == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, fields);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyObject *
fl_fields_batch(PyObject *self, PyObject *args)
{
    return fl_fields_batch_run(args, "O!OOnO!OOOO!:fields_batch", NULL);
}
