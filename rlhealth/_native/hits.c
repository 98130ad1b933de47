/* Hyperscan's matches of a block turned into what Classifier.scan keeps: the (line, rule) pairs of the
 * matches' end offsets, then the grouping of those pairs by line with benign suppression. In C because both
 * run per match (1.5 M bisect calls on the dense capture before hit_lines; scan's grouping 1.5-1.7 s -> 1.0-1.2
 * s on 300k lines with keep_hits, BENCHMARKS.md session 7).
 *
 *   hit_lines(raw: list, block: bytes) -> list[tuple[int, int]]
 *       sorted({(block.count(b"\n", 0, end), rule) for end, rule in raw}) for `raw` sorted by end (hyperscan's
 *       matches of a block of lines; each end within the block): one memchr walk, the rules of a line sorted
 *       there; rules are non-negative ints (hyperscan ids). Twin: bytescan.hit_lines_py.
 *
 *   keep_hits(hits: list, lines, benign: bytes, fault: bytes, strip) -> tuple[list, list, list, dict]
 *       Classifier.scan's grouping of its sorted (line, rule) hits: a line's hits are kept except its fault
 *       rules when one of its rules is benign (benign[rule], fault[rule] nonzero); for the kept, in order, their
 *       lines, their rules, their texts (strip(lines[line]); the line itself when it holds no ESC, the
 *       strip_ansi_latin1 pass of ansi.c when all its characters are below U+0100), and the
 *       kept positions by rule (a dict in first-seen order). Twin: signatures.keep_hits_py.
 */
#include "fastlines.h"

/* ---- hit_lines: hyperscan's (end offset, rule) pairs of a block as sorted (line, rule) pairs ---------------- */

/* Append (line, rid) for each of a line's rule ids, sorted without repeats */
static int
emit_line(PyObject *out, Py_ssize_t line, fl_ids *rids)
{
    Py_ssize_t n = fl_ids_sort_unique(rids);
    for (Py_ssize_t i = 0; i < n; i++)
        if (fl_append_taken(out, Py_BuildValue("(nk)", line, rids->v[i])) < 0)
            return -1;
    rids->n = 0;
    return 0;
}

PyObject *
fl_hit_lines(PyObject *self, PyObject *args)
{
    PyObject *raw;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "O!y*:hit_lines", &PyList_Type, &raw, &buf))
        return NULL;
    const char *data = buf.buf;
    Py_ssize_t size = buf.len, n = PyList_GET_SIZE(raw), pos = 0, line = 0, cur = -1;
    int unsorted = 0;
    fl_ids rids = {0};
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(raw, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "hit_lines() raw items must be (end, rule) pairs");
            goto fail;
        }
        Py_ssize_t to = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
        unsigned long rid = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(item, 1)); /* hyperscan's ids: unsigned */
        if (PyErr_Occurred())
            goto fail;
        if (to < 0 || to > size) {
            PyErr_SetString(PyExc_ValueError, "hit_lines() end offset outside the block");
            goto fail;
        }
        if (to < pos) { /* not sorted: count again from the start */
            pos = 0;
            line = 0;
        }
        line += fl_newline_count(data + pos, to - pos);
        pos = to;
        if (line != cur) {
            if (rids.n > 0 && emit_line(out, cur, &rids) < 0)
                goto fail;
            if (line < cur)
                unsorted = 1; /* raw was not sorted by end: sort and dedupe the whole output at the end */
            cur = line;
        }
        if (fl_ids_push(&rids, rid) < 0)
            goto fail;
    }
    if (rids.n > 0 && emit_line(out, cur, &rids) < 0)
        goto fail;
    if (unsorted) {
        PyObject *set = PySet_New(out);
        Py_SETREF(out, set != NULL ? PySequence_List(set) : NULL);
        Py_XDECREF(set);
        if (out == NULL || PyList_Sort(out) < 0)
            goto fail;
    }
    fl_ids_free(&rids);
    PyBuffer_Release(&buf);
    return out;
fail:
    fl_ids_free(&rids);
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ---- keep_hits: Classifier.scan's grouping of (line, rule) pairs ------------------------------------------- */

PyObject *
fl_keep_hits(PyObject *self, PyObject *args)
{
    PyObject *hits, *lines, *strip;
    Py_buffer benign, fault;
    if (!PyArg_ParseTuple(args, "O!Oy*y*O:keep_hits", &PyList_Type, &hits, &lines, &benign, &fault, &strip))
        return NULL;
    PyObject *kl = PyList_New(0), *kr = PyList_New(0), *kt = PyList_New(0), *by_rule = PyDict_New();
    PyObject *result = NULL, *text = NULL;
    const unsigned char *ben = benign.buf, *flt = fault.buf;
    Py_ssize_t n = PyList_GET_SIZE(hits), i = 0;
    if (kl == NULL || kr == NULL || kt == NULL || by_rule == NULL)
        goto done;
    while (i < n) {
        PyObject *first = PyList_GET_ITEM(hits, i);
        if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) != 2) {
            PyErr_SetString(PyExc_TypeError, "keep_hits() hits must be (line, rule) pairs");
            goto done;
        }
        PyObject *lineobj = PyTuple_GET_ITEM(first, 0);
        Py_ssize_t line = PyLong_AsSsize_t(lineobj);
        if (line == -1 && PyErr_Occurred())
            goto done;
        Py_ssize_t j = i;
        int has_benign = 0;
        for (; j < n; j++) {
            PyObject *h = PyList_GET_ITEM(hits, j);
            if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 2) {
                PyErr_SetString(PyExc_TypeError, "keep_hits() hits must be (line, rule) pairs");
                goto done;
            }
            Py_ssize_t l = PyLong_AsSsize_t(PyTuple_GET_ITEM(h, 0));
            if (l == -1 && PyErr_Occurred())
                goto done;
            if (l != line)
                break;
            Py_ssize_t rid = PyLong_AsSsize_t(PyTuple_GET_ITEM(h, 1));
            if (rid < 0 || rid >= benign.len || rid >= fault.len) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_IndexError, "keep_hits() rule index out of range");
                goto done;
            }
            if (ben[rid])
                has_benign = 1;
        }
        PyObject *raw = PySequence_GetItem(lines, line);
        if (raw == NULL)
            goto done;
        if (PyUnicode_Check(raw) && PyUnicode_FindChar(raw, 0x1b, 0, PyUnicode_GET_LENGTH(raw), 1) == -1) {
            text = raw; /* strip_ansi's fast path: no ESC, the line itself */
        } else if (PyUnicode_Check(raw) && PyUnicode_KIND(raw) == PyUnicode_1BYTE_KIND) {
            text = fl_strip_ansi_1byte(raw);
            Py_DECREF(raw);
            if (text == NULL)
                goto done;
        } else {
            text = PyObject_CallOneArg(strip, raw);
            Py_DECREF(raw);
            if (text == NULL)
                goto done;
        }
        for (Py_ssize_t k = i; k < j; k++) {
            PyObject *ridobj = PyTuple_GET_ITEM(PyList_GET_ITEM(hits, k), 1);
            Py_ssize_t rid = PyLong_AsSsize_t(ridobj);
            if (has_benign && flt[rid])
                continue;
            PyObject *pos = PyLong_FromSsize_t(PyList_GET_SIZE(kl));
            if (pos == NULL)
                goto done;
            PyObject *ks = PyDict_GetItemWithError(by_rule, ridobj);
            int rc;
            if (ks != NULL) {
                rc = PyList_Append(ks, pos);
            } else if (PyErr_Occurred()) {
                rc = -1;
            } else {
                PyObject *fresh = PyList_New(1);
                if (fresh == NULL) {
                    rc = -1;
                } else {
                    PyList_SET_ITEM(fresh, 0, Py_NewRef(pos));
                    rc = PyDict_SetItem(by_rule, ridobj, fresh);
                    Py_DECREF(fresh);
                }
            }
            Py_DECREF(pos);
            if (rc < 0 || PyList_Append(kl, lineobj) < 0 || PyList_Append(kr, ridobj) < 0 || PyList_Append(kt, text) < 0)
                goto done;
        }
        Py_CLEAR(text);
        i = j;
    }
    result = PyTuple_Pack(4, kl, kr, kt, by_rule);
done:
    Py_XDECREF(text);
    Py_XDECREF(kl);
    Py_XDECREF(kr);
    Py_XDECREF(kt);
    Py_XDECREF(by_rule);
    PyBuffer_Release(&benign);
    PyBuffer_Release(&fault);
    return result;
}
