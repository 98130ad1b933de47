/* rlhealth._fastlines: the per-byte passes of log reading that CPython cannot do fast.
 *
 * Optional: rlhealth.agents.bytescan holds a pure-Python twin of each function (strip_ansi_bytes_py,
 * line_starts_py, utf8_valid_py, count_newlines_py) with identical results; tests/test_bytescan.py
 * compares them on fuzzed input.
 *
 *   strip_ansi(data: bytes) -> bytes
 *       Remove ANSI escape sequences, exactly as the regex
 *       \x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])
 *       applied left to right (re.sub). Returns `data` itself when it holds no ESC.
 *       Never removes a newline.
 *
 *   line_starts(data: bytes, base: int) -> tuple[bytes, int]
 *       For the lines of `data` split on \n (count("\n") + 1 lines; `data` carries no final
 *       newline), the native-endian int64 array of base + each line's start offset, and the
 *       length in bytes of the longest line.
 *
 *   utf8_valid(data: bytes) -> bool
 *       Whether data.decode("utf-8") would succeed (the well-formed byte sequences of Unicode
 *       Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF), without building a str.
 *
 *   count_newlines(data: bytes) -> int
 *       data.count(b"\n"), with memchr.
 *
 *   fields_of(values: tuple, plan: tuple, convert, convert_size, defaults: dict | None) -> dict
 *       The fields dict of one matched line from its regex groups (`values`: extract's groups, then
 *       extract_before's). `plan` holds (name, index, how) per field in the rule's order; a field
 *       whose value is None (or whose index is past the end) is left out; how 0 keeps the str,
 *       1 calls convert_size(name, value), 2 converts: an ASCII all-digit value -> int(value), an
 *       ASCII value of digits and exactly one '.' -> float(value), anything else -> convert(value).
 *       Then every (key, value) of `defaults` that is missing is added, in order. Twin:
 *       bytescan.fields_of_py.
 *   fields_batch(texts: list, search, before, before_chars: int, plan, convert, convert_size,
 *                defaults: dict | None, empty: dict) -> list[dict]
 *       The fields of each of `texts` (the lines one rule matched): m = search(text); None gives a
 *       copy of `empty`; else values = m.groups(), plus, when `before` is not None and
 *       b = before(text, max(0, m.start() - before_chars), m.start()) is not None, b.groups(); then
 *       fields_of(values, ...). The Python loop it replaces costs ~1 us a line. Twin:
 *       bytescan.fields_batch_py.
 *   fields_batch_vllm_v1(...same arguments...) -> list[dict]
 *       fields_batch for a rule whose extract and extract_before are bytescan.VLLM_V1_EXTRACT and
 *       VLLM_V1_BEFORE (vLLM V1 stats lines, most matched lines of a busy inference log): a line is scanned
 *       by hand (the same groups as the two searches: ~0.3 us against ~2 us), a line the scanner cannot
 *       tell goes through `search` and `before` as in fields_batch. Twin: bytescan.fields_batch_py.
 *
 *   peel_stamp_batch(texts: list, paren_memo: dict, paren_fn, paren_max: int, name_memo: dict, prefix_cls,
 *                    stamp_memos: tuple, stamp_fn, slow) -> list[tuple]
 *       normalize.peel_and_stamp(text, ref, tz) for each of `texts` (ANSI-stripped matched lines; a text that
 *       is the very object before it gets the same result object). The prefix loop of _peel_uncached: "("
 *       prefixes through paren_memo / paren_fn(candidate) (normalize._paren_hit), "[pod/..]" and "[rankN]:"
 *       names through name_memo / prefix_cls(name); the start-of-line stamp's branch and extent found here
 *       (the branches of normalize._TS_START_RE, tried in its order), its value memoised per branch in
 *       stamp_memos[branch] by matched text (the caller keeps them for one ref and tz), else stamp_fn(rest)
 *       (normalize._stamp_of_rest); no start stamp and no 'T' or '-' in rest: None. Any other shape (a
 *       kubectl/CRI stamp, a "(" the memoised flat regex does not take) is slow(text). Twin:
 *       normalize.peel_and_stamp_batch_py.
 *   hit_lines(raw: list, block: bytes) -> list[tuple[int, int]]
 *       sorted({(block.count(b"\n", 0, end), rule) for end, rule in raw}) for `raw` sorted by end (hyperscan's
 *       matches of a block of lines; each end within the block): one memchr walk, the rules of a line sorted
 *       there. Twin: bytescan.hit_lines_py.
 *   keep_hits(hits: list, lines, benign: bytes, fault: bytes, strip) -> tuple[list, list, list, dict]
 *       Classifier.scan's grouping of its sorted (line, rule) hits: a line's hits are kept except its fault
 *       rules when one of its rules is benign (benign[rule], fault[rule] nonzero); for the kept, in order, their
 *       lines, their rules, their texts (strip(lines[line]); the line itself when it holds no ESC, the
 *       strip_ansi_latin1 pass when all its characters are below U+0100), and the
 *       kept positions by rule (a dict in first-seen order). Twin: signatures.keep_hits_py.
 *   strip_ansi_latin1(s: str) -> str | None
 *       normalize.strip_ansi(s) (the regex above on a str) when every character of s is below U+0100 (the
 *       byte pass on its one-byte-per-character data), else None.
 *   bare_pairs(text: str) -> list[tuple[str, str]]
 *       fold_trainer._BARE_PAIR_RE.findall(text) (the unquoted "key: number" pairs of verl and Megatron metric
 *       lines), the regex's backtracking written out: its key words and number are greedy and no shorter
 *       parse can meet its lookahead. Twin: the regex (tested against it on generated lines).
 *   stamp_span(text: str, pos: int) -> tuple[int, int] | None
 *       The branch (0 vLLM, 1 c10, 2 glog, 3 Ray, 4 ISO, 5 dmesg, 6 syslog) and end of
 *       normalize._TS_START_RE.match(text, pos), or None; what peel_stamp_batch finds (tested against the
 *       regex).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "foldbatch.h" /* per-batch folds of matched lines (foldbatch.c) */
#include "numconv.h"   /* the number conversion of extracted fields (numconv.c) */

static Py_ssize_t
newline_count(const char *src, Py_ssize_t n)
{
    Py_ssize_t count = 0;
    for (const char *p = memchr(src, '\n', (size_t)n); p != NULL;
         p = memchr(p + 1, '\n', (size_t)(n - (p + 1 - src))))
        count++;
    return count;
}

/* The METH_O functions take bytes only (no copy of another buffer type). */
static int
bytes_arg(PyObject *arg, const char *fname)
{
    if (PyBytes_Check(arg))
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() argument must be bytes", fname);
    return 0;
}

/* Length of the escape sequence starting at p[0] == ESC, or 0 when the regex does not match there. */
static Py_ssize_t
escape_len(const unsigned char *p, Py_ssize_t avail)
{
    if (avail < 2)
        return 0;
    unsigned char c = p[1];
    if (c == '[') {
        /* CSI: parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, one final byte 0x40-0x7E.
         * The three classes are disjoint, so greedy matching never needs to back off. */
        Py_ssize_t k = 2;
        while (k < avail && p[k] >= 0x30 && p[k] <= 0x3F)
            k++;
        while (k < avail && p[k] >= 0x20 && p[k] <= 0x2F)
            k++;
        if (k < avail && p[k] >= 0x40 && p[k] <= 0x7E)
            return k + 1;
        return 0; /* '[' (0x5B) is not in the single-byte class below */
    }
    if (c == ']') {
        /* OSC: up to the first BEL, ESC or LF; must end in BEL or ESC '\'. */
        Py_ssize_t k = 2;
        while (k < avail && p[k] != 0x07 && p[k] != 0x1B && p[k] != '\n')
            k++;
        if (k < avail && p[k] == 0x07)
            return k + 1;
        if (k + 1 < avail && p[k] == 0x1B && p[k + 1] == '\\')
            return k + 2;
        return 2; /* ']' (0x5D) is in the single-byte class [\\-_] */
    }
    if ((c >= 0x40 && c <= 0x5A) || (c >= 0x5C && c <= 0x5F))
        return 2;
    return 0;
}

/* The bytes of src[0:n] without its escape sequences into dst (n bytes of room), `esc` its first ESC: the
 * length written. */
static Py_ssize_t
strip_into(const unsigned char *src, Py_ssize_t n, const unsigned char *esc, unsigned char *dst)
{
    Py_ssize_t w = 0, i = 0;
    while (esc != NULL) {
        Py_ssize_t e = esc - src;
        memcpy(dst + w, src + i, (size_t)(e - i));
        w += e - i;
        Py_ssize_t len = escape_len(src + e, n - e);
        if (len == 0) {
            dst[w++] = 0x1B; /* not a sequence: keep the ESC, go on after it */
            i = e + 1;
        } else {
            i = e + len;
        }
        esc = i < n ? memchr(src + i, 0x1B, (size_t)(n - i)) : NULL;
    }
    memcpy(dst + w, src + i, (size_t)(n - i));
    return w + (n - i);
}

/* The same strip of a str whose characters are all below U+0100 (one byte each: the pattern's classes treat
 * U+0080-U+00FF as the bytes 0x80-0xFF), a new reference; Py_NotImplemented for wider strs. */
static PyObject *
strip_ansi_latin1(PyObject *s)
{
    if (PyUnicode_READY(s) < 0)
        return NULL;
    if (PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND)
        Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *src = PyUnicode_1BYTE_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const unsigned char *esc = memchr(src, 0x1B, (size_t)n);
    if (esc == NULL)
        return Py_NewRef(s);
    unsigned char *dst = PyMem_Malloc(n > 0 ? (size_t)n : 1);
    if (dst == NULL)
        return PyErr_NoMemory();
    Py_ssize_t w = strip_into(src, n, esc, dst);
    PyObject *out = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, dst, w);
    PyMem_Free(dst);
    return out;
}

static PyObject *
fl_strip_ansi_latin1(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "strip_ansi_latin1() argument must be str");
        return NULL;
    }
    PyObject *r = strip_ansi_latin1(arg);
    if (r == Py_NotImplemented) {
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    return r;
}

static PyObject *
fl_strip_ansi(PyObject *self, PyObject *arg)
{
    if (!bytes_arg(arg, "strip_ansi"))
        return NULL;
    const unsigned char *src = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    const unsigned char *esc = memchr(src, 0x1B, (size_t)n);
    if (esc == NULL) {
        Py_INCREF(arg);
        return arg;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t w;
    Py_BEGIN_ALLOW_THREADS
    w = strip_into(src, n, esc, dst);
    Py_END_ALLOW_THREADS
    if (_PyBytes_Resize(&out, w) < 0)
        return NULL;
    return out;
}

static PyObject *
fl_line_starts(PyObject *self, PyObject *args)
{
    PyObject *data;
    long long base;
    if (!PyArg_ParseTuple(args, "SL:line_starts", &data, &base))
        return NULL;
    const char *src = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    Py_ssize_t lines = newline_count(src, n) + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, lines * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL)
        return NULL;
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(out);
    Py_ssize_t longest = 0, k = 0, start = 0;
    Py_BEGIN_ALLOW_THREADS
    starts[k++] = base;
    for (const char *p = memchr(src, '\n', (size_t)n); p != NULL;
         p = memchr(p + 1, '\n', (size_t)(n - (p + 1 - src)))) {
        Py_ssize_t end = p - src;
        if (end - start > longest)
            longest = end - start;
        start = end + 1;
        starts[k++] = base + start;
    }
    if (n - start > longest)
        longest = n - start;
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Nn)", out, longest);
}

static int
utf8_ok(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) { /* ASCII runs, 8 bytes at a time */
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
            if (i + 2 >= n || s[i + 1] < lo || s[i + 1] > hi || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
            if (i + 3 >= n || s[i + 1] < lo || s[i + 1] > hi || (s[i + 2] & 0xC0) != 0x80
                || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            i += 4;
        } else {
            return 0; /* continuation byte without a lead, C0, C1, F5-FF */
        }
    }
    return 1;
}

static PyObject *
fl_utf8_valid(PyObject *self, PyObject *arg)
{
    if (!bytes_arg(arg, "utf8_valid"))
        return NULL;
    int ok;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    Py_BEGIN_ALLOW_THREADS
    ok = utf8_ok(s, n);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}

static PyObject *
fl_count_newlines(PyObject *self, PyObject *arg)
{
    if (!bytes_arg(arg, "count_newlines"))
        return NULL;
    return PyLong_FromSsize_t(newline_count(PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
}

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

/* fields_of's work, for a `values` tuple and a checked `plan` tuple (a new dict, or NULL with an exception). */
static PyObject *
fields_from_values(PyObject *values, PyObject *plan, PyObject *convert, PyObject *convert_size, PyObject *defaults)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t nvalues = PyTuple_GET_SIZE(values), nplan = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t k = 0; k < nplan; k++) {
        PyObject *step = PyTuple_GET_ITEM(plan, k);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3) {
            PyErr_SetString(PyExc_TypeError, "fields_of() plan items must be (name, index, how)");
            goto fail;
        }
        PyObject *name = PyTuple_GET_ITEM(step, 0);
        Py_ssize_t idx = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 1));
        long how = PyLong_AsLong(PyTuple_GET_ITEM(step, 2));
        if ((idx == -1 || how == -1) && PyErr_Occurred())
            goto fail;
        if (idx < 0 || idx >= nvalues)
            continue;
        PyObject *v = PyTuple_GET_ITEM(values, idx);
        if (v == Py_None)
            continue;
        PyObject *conv;
        if (how == 0) {
            Py_INCREF(v);
            conv = v;
        } else if (how == 1) {
            conv = PyObject_CallFunctionObjArgs(convert_size, name, v, NULL);
        } else {
            int shape = number_shape(v);
            if (shape == 1 || shape == 2)
                conv = number_from_ascii(v, shape); /* int(v) / float(v), short ones without a copy (numconv.c) */
            else
                conv = PyObject_CallOneArg(convert, v);
        }
        if (conv == NULL)
            goto fail;
        int rc = PyDict_SetItem(out, name, conv);
        Py_DECREF(conv);
        if (rc < 0)
            goto fail;
    }
    if (defaults != Py_None) {
        if (!PyDict_Check(defaults)) {
            PyErr_SetString(PyExc_TypeError, "fields_of() defaults must be a dict or None");
            goto fail;
        }
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(defaults, &pos, &key, &value)) {
            PyObject *got = PyDict_SetDefault(out, key, value);
            if (got == NULL)
                goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
fl_fields_of(PyObject *self, PyObject *args)
{
    PyObject *values, *plan, *convert, *convert_size, *defaults;
    if (!PyArg_ParseTuple(args, "O!O!OOO:fields_of", &PyTuple_Type, &values, &PyTuple_Type, &plan, &convert,
                          &convert_size, &defaults))
        return NULL;
    return fields_from_values(values, plan, convert, convert_size, defaults);
}

/* m.<name>() */
static PyObject *
call_method0(PyObject *obj, const char *name)
{
    return PyObject_CallMethod(obj, name, NULL);
}

/* A rule-specific scanner: the values tuple (extract's groups, then extract_before's when it matched) of a
 * line, NotImplemented when it cannot tell (the regexes then do that line), NULL on error. */
typedef PyObject *(*values_scanner)(PyObject *text, Py_ssize_t before_chars);

static PyObject *vllm_v1_values(PyObject *text, Py_ssize_t before_chars);

static PyObject *
fields_batch_run(PyObject *args, const char *fmt, values_scanner scan)
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
            PyObject *values = scan(text, before_chars);
            if (values == NULL)
                goto fail;
            if (values != Py_NotImplemented) {
                fields = fields_from_values(values, plan, convert, convert_size, defaults);
                Py_DECREF(values);
                if (fields == NULL)
                    goto fail;
                PyList_SET_ITEM(out, i, fields);
                continue;
            }
            Py_DECREF(values);
        }
        PyObject *m = PyObject_CallOneArg(search, text);
        if (m == NULL)
            goto fail;
        if (m == Py_None) {
            Py_DECREF(m);
            fields = PyDict_Copy(empty);
        } else {
            PyObject *values = call_method0(m, "groups");
            if (values != NULL && before != Py_None) {
                PyObject *startobj = call_method0(m, "start");
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
                        PyObject *bvalues = call_method0(b, "groups");
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

static PyObject *
fl_fields_batch(PyObject *self, PyObject *args)
{
    return fields_batch_run(args, "O!OOnO!OOOO!:fields_batch", NULL);
}

/* ---- peel_stamp_batch: normalize.peel_and_stamp for a batch of matched lines ------------------------------
 * A text reader over a str: ch() is 0 past the end (no test below accepts a NUL: ends are tested by index). */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} utext;

static inline Py_UCS4
ch(const utext *u, Py_ssize_t i)
{
    return i < u->n ? PyUnicode_READ(u->kind, u->data, i) : 0;
}

/* the regex module's \d and \s on str patterns (sre: Py_UNICODE_ISDECIMAL, Py_UNICODE_ISSPACE) */
static inline int
is_dec(const utext *u, Py_ssize_t i)
{
    return i < u->n && Py_UNICODE_ISDECIMAL(ch(u, i));
}

/* sre's $ without MULTILINE: the end, or just before a final newline */
static inline int
at_end(const utext *u, Py_ssize_t i)
{
    return i == u->n || (i == u->n - 1 && ch(u, i) == '\n');
}

/* Match a fixed shape at i: 'd' is \d, 'U' [A-Z], 'l' [a-z], anything else itself. The end, or -1. */
static Py_ssize_t
shape(const utext *u, Py_ssize_t i, const char *s)
{
    for (; *s; s++, i++) {
        if (i >= u->n)
            return -1;
        Py_UCS4 c = ch(u, i);
        if (*s == 'd') {
            if (!Py_UNICODE_ISDECIMAL(c))
                return -1;
        } else if (*s == 'U') {
            if (c < 'A' || c > 'Z')
                return -1;
        } else if (*s == 'l') {
            if (c < 'a' || c > 'z')
                return -1;
        } else if (c != (Py_UCS4)(unsigned char)*s) {
            return -1;
        }
    }
    return i;
}

/* the ASCII literal s at i: its end, or -1 */
static Py_ssize_t
lit(const utext *u, Py_ssize_t i, const char *s)
{
    for (; *s; s++, i++)
        if (i >= u->n || ch(u, i) != (Py_UCS4)(unsigned char)*s)
            return -1;
    return i;
}

static inline int
one_of(Py_UCS4 c, const char *set)
{
    return c != 0 && c < 128 && strchr(set, (int)c) != NULL;
}

/* \d{lo,hi} followed by the literal `next` (greedy; a shorter run would put `next` on a digit, so no
 * backtracking can succeed where this fails). The end (after `next`), or -1. */
static Py_ssize_t
digits_then(const utext *u, Py_ssize_t i, int lo, int hi, Py_UCS4 next)
{
    int k = 0;
    while (k < hi && is_dec(u, i + k))
        k++;
    if (k < lo || ch(u, i + k) != next || i + k >= u->n)
        return -1;
    return i + k + 1;
}

/* The branch of normalize._TS_START_RE that matches at p (0 v, 1 c10, 2 glog, 3 ray, 4 iso, 5 dmesg, 6 syslog),
 * its end in *end; -1 when none does. Each branch is deterministic as written (greedy runs end where the next
 * literal must stand), so trying them in the regex's order gives its match. */
static int
stamp_branch(const utext *u, Py_ssize_t p, Py_ssize_t *end)
{
    static const char *levels[] = {"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"};
    Py_ssize_t q, e;
    Py_UCS4 c0 = ch(u, p);
    /* v: "(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) dd-dd dd:dd:dd" */
    for (int k = 0; k < 6; k++) {
        e = lit(u, p, levels[k]);
        if (e >= 0 && (e = shape(u, e, " dd-dd dd:dd:dd")) >= 0) {
            *end = e;
            return 0;
        }
    }
    /* c: "\[?[FEWIV]\d{3,4} dd:dd:dd\.\d{9}(?: |$)" */
    q = c0 == '[' ? p + 1 : p;
    if (one_of(ch(u, q), "FEWIV") && (e = digits_then(u, q + 1, 3, 4, ' ')) >= 0
            && (e = shape(u, e, "dd:dd:dd.ddddddddd")) >= 0) {
        if (ch(u, e) == ' ' && e < u->n) {
            *end = e + 1;
            return 1;
        }
        if (at_end(u, e)) {
            *end = e;
            return 1;
        }
    }
    /* g: "[FEWIV]\d{3,4} dd:dd:dd\.\d{6} \d+ " */
    if (one_of(c0, "FEWIV") && (e = digits_then(u, p + 1, 3, 4, ' ')) >= 0
            && (e = shape(u, e, "dd:dd:dd.dddddd ")) >= 0 && (e = digits_then(u, e, 1, 1 << 30, ' ')) >= 0) {
        *end = e;
        return 2;
    }
    /* r: "\[dddd-dd-dd dd:dd:dd,ddd [DIWEC] " */
    if ((e = shape(u, p, "[dddd-dd-dd dd:dd:dd,ddd ")) >= 0 && one_of(ch(u, e), "DIWEC") && ch(u, e + 1) == ' ') {
        *end = e + 2;
        return 3;
    }
    /* i: "\[?dddd-dd-dd[T ]dd:dd:dd(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)?" */
    q = c0 == '[' ? p + 1 : p;
    if ((e = shape(u, q, "dddd-dd-dd")) >= 0 && one_of(ch(u, e), "T ") && (e = shape(u, e + 1, "dd:dd:dd")) >= 0) {
        if (one_of(ch(u, e), ".,") && is_dec(u, e + 1)) {
            int k = 1;
            while (k < 9 && is_dec(u, e + 1 + k))
                k++;
            e += 1 + k;
        }
        Py_UCS4 z = ch(u, e);
        if (z == 'Z') {
            e += 1;
        } else if (one_of(z, "+-") && is_dec(u, e + 1) && is_dec(u, e + 2)) {
            if (ch(u, e + 3) == ':' && is_dec(u, e + 4) && is_dec(u, e + 5))
                e += 6;
            else if (is_dec(u, e + 3) && is_dec(u, e + 4))
                e += 5;
        }
        *end = e;
        return 4;
    }
    /* dm: "\[[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} dd:dd:dd dddd\]" */
    if ((e = shape(u, p, "[Ull Ull ")) >= 0) {
        while (ch(u, e) == ' ')
            e++;
        if ((e = digits_then(u, e, 1, 2, ' ')) >= 0 && (e = shape(u, e, "dd:dd:dd dddd]")) >= 0) {
            *end = e;
            return 5;
        }
    }
    /* sy: "[A-Z][a-z]{2} +\d{1,2} dd:dd:dd " */
    if ((e = shape(u, p, "Ull ")) >= 0) {
        while (ch(u, e) == ' ')
            e++;
        if ((e = digits_then(u, e, 1, 2, ' ')) >= 0 && (e = shape(u, e, "dd:dd:dd ")) >= 0) {
            *end = e;
            return 6;
        }
    }
    return -1;
}

/* normalize._TS_START_RE.match(text, pos): (branch, end) or None (the test of stamp_branch against the regex) */
static PyObject *
fl_stamp_span(PyObject *self, PyObject *args)
{
    PyObject *text;
    Py_ssize_t pos, end = 0;
    if (!PyArg_ParseTuple(args, "Un:stamp_span", &text, &pos))
        return NULL;
    if (PyUnicode_READY(text) < 0)
        return NULL;
    utext u = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    if (pos < 0 || pos > u.n) {
        PyErr_SetString(PyExc_ValueError, "stamp_span() pos out of range");
        return NULL;
    }
    int b = stamp_branch(&u, pos, &end);
    if (b < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(in)", b, end);
}

typedef struct {
    PyObject *paren_memo, *paren_fn, *name_memo, *prefix_cls, *stamp_memos, *stamp_fn, *slow;
    Py_ssize_t paren_max;
} peel_ctx;

#define MAX_PEELED 16

/* A memo's value for key, else fn(key) stored under key (new reference; NULL on error). */
static PyObject *
memo_get(PyObject *memo, PyObject *key, PyObject *fn, PyObject *arg, int store)
{
    PyObject *v = PyDict_GetItemWithError(memo, key);
    if (v != NULL) {
        Py_INCREF(v);
        return v;
    }
    if (PyErr_Occurred())
        return NULL;
    v = PyObject_CallOneArg(fn, arg);
    if (v != NULL && store && PyDict_SetItem(memo, key, v) < 0)
        Py_CLEAR(v);
    return v;
}

/* (peel_stripped(text), its stamp) as normalize.peel_and_stamp gives them; ctx->slow(text) for the shapes
 * not done here (a kubectl/CRI stamp, a "(" prefix the flat regex does not take, too many prefixes). */
static PyObject *
peel_one(PyObject *text, const peel_ctx *ctx)
{
    if (PyUnicode_READY(text) < 0)
        return NULL;
    utext u = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    PyObject *pre[MAX_PEELED];
    int np = 0;
    Py_ssize_t s = 0;
    PyObject *out = NULL;
    while (s < u.n) {
        Py_UCS4 c = ch(&u, s);
        PyObject *name = NULL;
        Py_ssize_t e = -1;
        if (np == MAX_PEELED)
            goto slow;
        if (c == '(') {
            /* s.find(") ") at k, 0 < k < paren_max: the memoised flat-regex answer for s[:k + 2] */
            Py_ssize_t k = 1;
            while (k < ctx->paren_max && s + k + 1 < u.n && !(ch(&u, s + k) == ')' && ch(&u, s + k + 1) == ' '))
                k++;
            if (k >= ctx->paren_max || s + k + 1 >= u.n)
                goto slow;
            PyObject *cand = PyUnicode_Substring(text, s, s + k + 2);
            if (cand == NULL)
                goto fail;
            PyObject *hit = memo_get(ctx->paren_memo, cand, ctx->paren_fn, cand, 0);
            Py_DECREF(cand);
            if (hit == NULL)
                goto fail;
            if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2 || PyTuple_GET_ITEM(hit, 0) == Py_None) {
                Py_DECREF(hit);
                goto slow;
            }
            Py_ssize_t adv = PyLong_AsSsize_t(PyTuple_GET_ITEM(hit, 1));
            if (adv <= 0) {
                Py_DECREF(hit);
                if (PyErr_Occurred())
                    goto fail;
                goto slow;
            }
            pre[np++] = Py_NewRef(PyTuple_GET_ITEM(hit, 0));
            Py_DECREF(hit);
            s += adv;
            continue;
        }
        if (c == '[') {
            Py_ssize_t j;
            if ((j = lit(&u, s, "[pod/")) >= 0) {
                /* \[(pod/[^\]\s]+)\] ? */
                Py_ssize_t k = j;
                while (k < u.n && ch(&u, k) != ']' && !Py_UNICODE_ISSPACE(ch(&u, k)))
                    k++;
                if (k > j && k < u.n && ch(&u, k) == ']') {
                    e = k + 1;
                    if (ch(&u, e) == ' ')
                        e++;
                    name = PyUnicode_Substring(text, s + 1, k);
                }
            } else if ((j = lit(&u, s, "[rank")) >= 0 || (j = lit(&u, s, "[default")) >= 0) {
                /* \[(rank\d+|default\d+)\]:(?: |(?=\[)|$) */
                Py_ssize_t k = j;
                while (is_dec(&u, k))
                    k++;
                if (k > j && (e = lit(&u, k, "]:")) >= 0) {
                    if (ch(&u, e) == ' ')
                        e++;
                    else if (!(ch(&u, e) == '[' || at_end(&u, e)))
                        e = -1;
                    if (e >= 0)
                        name = PyUnicode_Substring(text, s + 1, k);
                }
            }
            if (e < 0)
                break;
            if (name == NULL)
                goto fail;
            PyObject *prefix = memo_get(ctx->name_memo, name, ctx->prefix_cls, name, 1);
            Py_DECREF(name);
            if (prefix == NULL)
                goto fail;
            pre[np++] = prefix;
            s = e;
            continue;
        }
        if (c >= '0' && c <= '9') {
            if (ch(&u, s + 10) == 'T')
                goto slow; /* perhaps a kubectl/CRI stamp (its 'T' stands there) */
            break;
        }
        break;
    }
    {
        PyObject *prefixes = PyTuple_New(np);
        if (prefixes == NULL)
            goto fail;
        for (int i = 0; i < np; i++)
            PyTuple_SET_ITEM(prefixes, i, pre[i]);
        np = 0;
        PyObject *rest = PyUnicode_Substring(text, s, u.n);
        PyObject *pk = rest != NULL ? PyTuple_Pack(3, prefixes, rest, Py_None) : NULL;
        Py_DECREF(prefixes);
        if (pk == NULL) {
            Py_XDECREF(rest);
            return NULL;
        }
        /* _stamp_of_rest(rest): the start pattern at 0, else after leading whitespace when rest starts with " " */
        Py_ssize_t e = 0, p = s;
        int b = stamp_branch(&u, p, &e);
        if (b < 0 && ch(&u, s) == ' ') {
            while (p < u.n && Py_UNICODE_ISSPACE(ch(&u, p)))
                p++;
            b = stamp_branch(&u, p, &e);
        }
        PyObject *dt = NULL;
        if (b >= 0) {
            /* the stamp is a function of the branch and the text it matched: one conversion per second */
            PyObject *key = PyUnicode_Substring(text, p, e);
            if (key != NULL)
                dt = memo_get(PyTuple_GET_ITEM(ctx->stamp_memos, b), key, ctx->stamp_fn, rest, 1);
            Py_XDECREF(key);
        } else if (PyUnicode_FindChar(text, 'T', s, u.n, 1) >= 0 && PyUnicode_FindChar(text, '-', s, u.n, 1) >= 0) {
            dt = PyObject_CallOneArg(ctx->stamp_fn, rest); /* the any-ISO search */
        } else {
            dt = Py_NewRef(Py_None);
        }
        Py_DECREF(rest);
        if (dt != NULL)
            out = PyTuple_Pack(2, pk, dt);
        Py_DECREF(pk);
        Py_XDECREF(dt);
        return out;
    }
slow:
    for (int i = 0; i < np; i++)
        Py_DECREF(pre[i]);
    return PyObject_CallOneArg(ctx->slow, text);
fail:
    for (int i = 0; i < np; i++)
        Py_DECREF(pre[i]);
    return NULL;
}

static PyObject *
fl_peel_stamp_batch(PyObject *self, PyObject *args)
{
    PyObject *texts;
    peel_ctx ctx;
    if (!PyArg_ParseTuple(args, "O!O!OnO!OO!OO:peel_stamp_batch", &PyList_Type, &texts, &PyDict_Type,
                          &ctx.paren_memo, &ctx.paren_fn, &ctx.paren_max, &PyDict_Type, &ctx.name_memo,
                          &ctx.prefix_cls, &PyTuple_Type, &ctx.stamp_memos, &ctx.stamp_fn, &ctx.slow))
        return NULL;
    if (PyTuple_GET_SIZE(ctx.stamp_memos) != 7) {
        PyErr_SetString(PyExc_ValueError, "peel_stamp_batch() needs 7 stamp memos");
        return NULL;
    }
    for (Py_ssize_t b = 0; b < 7; b++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(ctx.stamp_memos, b))) {
            PyErr_SetString(PyExc_TypeError, "peel_stamp_batch() stamp memos must be dicts");
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(texts);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    PyObject *prev = NULL, *prev_out = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i);
        PyObject *r;
        if (text == prev) {
            r = Py_NewRef(prev_out); /* the same line matched another rule */
        } else if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "peel_stamp_batch() texts must be str");
            goto fail;
        } else {
            r = peel_one(text, &ctx);
            if (r == NULL)
                goto fail;
        }
        PyList_SET_ITEM(out, i, r);
        prev = text;
        prev_out = r;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- the vLLM V1 stats line (rules/packs/vllm.toml, vllm.v1_stats) without its two regex searches ---------- */

/* [0-9.]+ (ASCII) from i: its end, or -1 when empty */
static Py_ssize_t
num_dot(const utext *u, Py_ssize_t i)
{
    Py_ssize_t k = i;
    for (Py_UCS4 c; k < u->n && (((c = ch(u, k)) >= '0' && c <= '9') || c == '.');)
        k++;
    return k > i ? k : -1;
}

/* \d+ from i (any decimal digit, as sre): its end, or -1 when empty (or i < 0) */
static Py_ssize_t
decs(const utext *u, Py_ssize_t i)
{
    if (i < 0)
        return -1;
    Py_ssize_t k = i;
    while (is_dec(u, k))
        k++;
    return k > i ? k : -1;
}

/* lit() that passes a failure (-1) on */
static inline Py_ssize_t
lit_at(const utext *u, Py_ssize_t i, const char *s)
{
    return i < 0 ? -1 : lit(u, i, s);
}

#define VLLM_V1_GROUPS 12

/* extract.search(text).groups() + (extract_before.search(text, max(0, start - before_chars), start).groups() when
 * that matches) for the patterns bytescan.VLLM_V1_EXTRACT / VLLM_V1_BEFORE. The match starts at an occurrence of
 * the literal "Avg prompt throughput: ": when the first occurrence carries the required part, it is the search's
 * match (leftmost), and each optional part that follows is taken exactly when it matches there (nothing after
 * it can fail). Any other case (no occurrence, or the first does not parse) is NotImplemented. */
static PyObject *
vllm_v1_values(PyObject *text, Py_ssize_t before_chars)
{
    static PyObject *needle = NULL;
    if (needle == NULL && (needle = PyUnicode_InternFromString("Avg prompt throughput: ")) == NULL)
        return NULL;
    if (PyUnicode_READY(text) < 0)
        return NULL;
    utext u = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    Py_ssize_t start = PyUnicode_Find(text, needle, 0, u.n, 1);
    if (start == -2)
        return NULL;
    if (start < 0)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t a[VLLM_V1_GROUPS + 1], b[VLLM_V1_GROUPS + 1];
    for (int g = 0; g <= VLLM_V1_GROUPS; g++)
        a[g] = b[g] = -1;
    Py_ssize_t i = start + 23, e, j, k;
    /* the required part */
    if ((e = num_dot(&u, i)) < 0)
        Py_RETURN_NOTIMPLEMENTED;
    a[0] = i, b[0] = e;
    if ((i = lit(&u, e, " tokens/s, Avg generation throughput: ")) < 0 || (e = num_dot(&u, i)) < 0)
        Py_RETURN_NOTIMPLEMENTED;
    a[1] = i, b[1] = e;
    if ((i = lit(&u, e, " tokens/s, Running: ")) < 0 || (e = decs(&u, i)) < 0)
        Py_RETURN_NOTIMPLEMENTED;
    a[2] = i, b[2] = e;
    if ((i = lit(&u, e, " reqs, Waiting: ")) < 0 || (e = decs(&u, i)) < 0)
        Py_RETURN_NOTIMPLEMENTED;
    a[3] = i, b[3] = e;
    if ((i = lit(&u, e, " reqs")) < 0)
        Py_RETURN_NOTIMPLEMENTED;
    /* (?:, Deferred: (\d+) reqs)? */
    j = lit(&u, i, ", Deferred: ");
    if ((e = decs(&u, j)) >= 0 && (k = lit(&u, e, " reqs")) >= 0)
        a[4] = j, b[4] = e, i = k;
    /* (?:, KV fetch: (\d+) waiting to start, (\d+) in progress, (\d+) completed waiting)? */
    j = lit(&u, i, ", KV fetch: ");
    Py_ssize_t e1 = decs(&u, j), j2 = lit_at(&u, e1, " waiting to start, "), e2 = decs(&u, j2);
    Py_ssize_t j3 = lit_at(&u, e2, " in progress, "), e3 = decs(&u, j3), k3 = lit_at(&u, e3, " completed waiting");
    if (k3 >= 0)
        a[5] = j, b[5] = e1, a[6] = j2, b[6] = e2, a[7] = j3, b[7] = e3, i = k3;
    /* (?:, Preemptions: (\d+))? */
    j = lit(&u, i, ", Preemptions: ");
    if ((e = decs(&u, j)) >= 0)
        a[8] = j, b[8] = e, i = e;
    /* (?:, ([A-Z]+) KV cache usage: ([0-9.]+)%)? */
    if ((j = lit(&u, i, ", ")) >= 0) {
        e = j;
        for (Py_UCS4 c; e < u.n && (c = ch(&u, e)) >= 'A' && c <= 'Z';)
            e++;
        if (e > j && (k = lit(&u, e, " KV cache usage: ")) >= 0 && (e2 = num_dot(&u, k)) >= 0 && ch(&u, e2) == '%')
            a[9] = j, b[9] = e, a[10] = k, b[10] = e2, i = e2 + 1;
    }
    /* (?:, Prefix cache hit rate: ([0-9.]+)%)? */
    j = lit(&u, i, ", Prefix cache hit rate: ");
    if (j >= 0 && (e = num_dot(&u, j)) >= 0 && ch(&u, e) == '%')
        a[11] = j, b[11] = e;
    /* extract_before, (?:(?P<engine>Engine \d+|\d+ Engines Aggregated): )\Z in text[lo:start]: the leftmost start */
    Py_ssize_t lo = start - before_chars > 0 ? start - before_chars : 0;
    int ngroups = VLLM_V1_GROUPS;
    if (start - 2 >= lo && lit(&u, start - 2, ": ") == start) {
        Py_ssize_t rs = start - 2;
        while (rs > 0 && is_dec(&u, rs - 1))
            rs--;
        if (rs < start - 2 && rs - 7 >= lo && lit(&u, rs - 7, "Engine ") == rs) {
            a[12] = rs - 7, b[12] = start - 2, ngroups++;
        } else if (start - 21 >= lo && lit(&u, start - 21, " Engines Aggregated: ") == start) {
            rs = start - 21;
            while (rs > 0 && is_dec(&u, rs - 1))
                rs--;
            Py_ssize_t p = rs > lo ? rs : lo;
            if (p < start - 21)
                a[12] = p, b[12] = start - 2, ngroups++;
        }
    }
    PyObject *values = PyTuple_New(ngroups);
    if (values == NULL)
        return NULL;
    for (int g = 0; g < ngroups; g++) {
        PyObject *v = a[g] >= 0 ? PyUnicode_Substring(text, a[g], b[g]) : Py_NewRef(Py_None);
        if (v == NULL) {
            Py_DECREF(values);
            return NULL;
        }
        PyTuple_SET_ITEM(values, g, v);
    }
    return values;
}

static PyObject *
fl_fields_batch_vllm_v1(PyObject *self, PyObject *args)
{
    return fields_batch_run(args, "O!OOnO!OOOO!:fields_batch_vllm_v1", vllm_v1_values);
}

/* ---- hit_lines: hyperscan's (end offset, rule) pairs of a block as sorted (line, rule) pairs ---------------- */

static int
cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Append (line, rid) for the sorted unique rids[0:n] */
static int
emit_line(PyObject *out, Py_ssize_t line, long *rids, Py_ssize_t n)
{
    qsort(rids, (size_t)n, sizeof(long), cmp_long);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i > 0 && rids[i] == rids[i - 1])
            continue;
        PyObject *pair = Py_BuildValue("(nl)", line, rids[i]);
        if (pair == NULL)
            return -1;
        int rc = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static PyObject *
fl_hit_lines(PyObject *self, PyObject *args)
{
    PyObject *raw;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "O!y*:hit_lines", &PyList_Type, &raw, &buf))
        return NULL;
    const char *data = buf.buf;
    Py_ssize_t size = buf.len, n = PyList_GET_SIZE(raw), cap = 16, nr = 0, pos = 0, line = 0, cur = -1;
    int unsorted = 0;
    long *rids = PyMem_Malloc((size_t)cap * sizeof(long));
    PyObject *out = PyList_New(0);
    if (rids == NULL || out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(raw, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "hit_lines() raw items must be (end, rule) pairs");
            goto fail;
        }
        Py_ssize_t to = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
        long rid = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
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
        line += newline_count(data + pos, to - pos);
        pos = to;
        if (line != cur) {
            if (nr > 0 && emit_line(out, cur, rids, nr) < 0)
                goto fail;
            if (line < cur)
                unsorted = 1; /* raw was not sorted by end: sort and dedupe the whole output at the end */
            nr = 0;
            cur = line;
        }
        if (nr == cap) {
            long *grown = PyMem_Realloc(rids, (size_t)(cap *= 2) * sizeof(long));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            rids = grown;
        }
        rids[nr++] = rid;
    }
    if (nr > 0 && emit_line(out, cur, rids, nr) < 0)
        goto fail;
    if (unsorted) {
        PyObject *set = PySet_New(out);
        Py_SETREF(out, set != NULL ? PySequence_List(set) : NULL);
        Py_XDECREF(set);
        if (out == NULL || PyList_Sort(out) < 0)
            goto fail;
    }
    PyMem_Free(rids);
    PyBuffer_Release(&buf);
    return out;
fail:
    PyMem_Free(rids);
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ---- keep_hits: Classifier.scan's grouping of (line, rule) pairs ------------------------------------------- */

static PyObject *
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
            text = strip_ansi_latin1(raw);
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

/* ---- bare_pairs: fold_trainer._BARE_PAIR_RE.findall, written out ------------------------------------------- */

static inline int
is_word_ch(Py_UCS4 c)
{
    return c == '_' || Py_UNICODE_ISALNUM(c);
}

/* [\w/.\-]* from k: its end */
static Py_ssize_t
key_tail(const utext *u, Py_ssize_t k)
{
    for (Py_UCS4 c; k < u->n && (is_word_ch(c = ch(u, k)) || c == '/' || c == '.' || c == '-');)
        k++;
    return k;
}

static Py_ssize_t
skip_space(const utext *u, Py_ssize_t k)
{
    while (k < u->n && Py_UNICODE_ISSPACE(ch(u, k)))
        k++;
    return k;
}

/* The value -?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity) at v, greedy: its end or -1. A
 * shorter parse would leave a digit, '.', 'e', 'E' or a sign next, where the lookahead never holds. */
static Py_ssize_t
pair_value(const utext *u, Py_ssize_t v)
{
    Py_ssize_t k = v;
    if (ch(u, k) == '-')
        k++;
    if (is_dec(u, k)) {
        while (is_dec(u, k))
            k++;
        if (ch(u, k) == '.' && k < u->n)
            k++;
        while (is_dec(u, k))
            k++;
        Py_UCS4 e = ch(u, k);
        if (e == 'e' || e == 'E') {
            Py_ssize_t x = k + 1;
            if (ch(u, x) == '+' || ch(u, x) == '-')
                x++;
            if (is_dec(u, x)) {
                while (is_dec(u, x))
                    x++;
                k = x;
            }
        }
        return k;
    }
    if (ch(u, k) == '.' && is_dec(u, k + 1)) {
        k++;
        while (is_dec(u, k))
            k++;
        return k;
    }
    Py_ssize_t e;
    if ((e = lit(u, k, "nan")) >= 0 || (e = lit(u, k, "NaN")) >= 0 || (e = lit(u, k, "inf")) >= 0
            || (e = lit(u, k, "Infinity")) >= 0)
        return e;
    return -1;
}

/* (?=\s*(?:\||-\s|,|\}|$)) at k */
static int
pair_end_ok(const utext *u, Py_ssize_t k)
{
    k = skip_space(u, k);
    if (at_end(u, k))
        return 1;
    Py_UCS4 c = ch(u, k);
    return c == '|' || c == ',' || c == '}' || (c == '-' && k + 1 < u->n && Py_UNICODE_ISSPACE(ch(u, k + 1)));
}

/* The pair whose key starts at q: its match end (key and value spans in ks/ke/vs/ve), or -1. */
static Py_ssize_t
pair_at(const utext *u, Py_ssize_t q, Py_ssize_t *ks, Py_ssize_t *ke, Py_ssize_t *vs, Py_ssize_t *ve)
{
    Py_UCS4 c = ch(u, q);
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) || q >= u->n)
        return -1;
    Py_ssize_t k1 = key_tail(u, q + 1), key_end = -1, colon = -1;
    /* (?: [a-z][\w/.\-]*)? taken when \s*: follows it; else \s*: right after the first word */
    Py_UCS4 c2 = ch(u, k1 + 1);
    if (ch(u, k1) == ' ' && c2 >= 'a' && c2 <= 'z') {
        Py_ssize_t k2 = key_tail(u, k1 + 2), sp = skip_space(u, k2);
        if (ch(u, sp) == ':' && sp < u->n)
            key_end = k2, colon = sp;
    }
    if (key_end < 0) {
        Py_ssize_t sp = skip_space(u, k1);
        if (ch(u, sp) == ':' && sp < u->n)
            key_end = k1, colon = sp;
    }
    if (key_end < 0)
        return -1;
    Py_ssize_t v = skip_space(u, colon + 1), e = pair_value(u, v);
    if (e < 0 || !pair_end_ok(u, e))
        return -1;
    *ks = q, *ke = key_end, *vs = v, *ve = e;
    return e;
}

static PyObject *
fl_bare_pairs(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bare_pairs() argument must be str");
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0)
        return NULL;
    utext u = {PyUnicode_KIND(arg), PyUnicode_DATA(arg), PyUnicode_GET_LENGTH(arg)};
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0, ks, ke, vs, ve, end;
    while (pos < u.n) {
        /* (?:^|[\s|{,]) then the pair: ^ only at 0 (tried first), else one separator character */
        end = pos == 0 ? pair_at(&u, 0, &ks, &ke, &vs, &ve) : -1;
        if (end < 0) {
            Py_UCS4 c = ch(&u, pos);
            if (c == '|' || c == '{' || c == ',' || Py_UNICODE_ISSPACE(c))
                end = pair_at(&u, pos + 1, &ks, &ke, &vs, &ve);
        }
        if (end < 0) {
            pos++;
            continue;
        }
        PyObject *key = PyUnicode_Substring(arg, ks, ke), *value = PyUnicode_Substring(arg, vs, ve);
        PyObject *pair = key != NULL && value != NULL ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
        pos = end;
    }
    return out;
}

static PyMethodDef fl_methods[] = {
    {"fields_of", fl_fields_of, METH_VARARGS, "The fields dict of a matched line from its groups (see the module doc)."},
    {"fields_batch_vllm_v1", fl_fields_batch_vllm_v1, METH_VARARGS,
     "fields_batch for the vLLM V1 stats rule, its lines scanned without the regexes (see the module doc)."},
    {"fields_batch", fl_fields_batch, METH_VARARGS, "fields_of for every line a rule matched (see the module doc)."},
    {"peel_stamp_batch", fl_peel_stamp_batch, METH_VARARGS, "normalize.peel_and_stamp for a batch (see the module doc)."},
    {"stamp_span", fl_stamp_span, METH_VARARGS, "The branch and end of normalize's start-of-line stamp at pos, or None."},
    {"hit_lines", fl_hit_lines, METH_VARARGS, "Sorted unique (line, rule) pairs of (end offset, rule) pairs (see the module doc)."},
    {"keep_hits", fl_keep_hits, METH_VARARGS, "Classifier.scan's kept (line, rule, text) of sorted hits (see the module doc)."},
    {"strip_ansi_latin1", fl_strip_ansi_latin1, METH_O, "strip_ansi of a str below U+0100, else None (see the module doc)."},
    {"bare_pairs", fl_bare_pairs, METH_O, "fold_trainer._BARE_PAIR_RE.findall(text) (see the module doc)."},
    {"strip_ansi", fl_strip_ansi, METH_O, "Remove ANSI escape sequences from bytes (see the module doc)."},
    {"utf8_valid", fl_utf8_valid, METH_O, "Whether bytes are well-formed UTF-8 (as Python's strict decoder)."},
    {"count_newlines", fl_count_newlines, METH_O, "data.count(b'\\n'), with memchr."},
    {"line_starts", fl_line_starts, METH_VARARGS, "(int64 array of line start offsets + base, longest line)."},
    FOLDBATCH_METHODS
    NUMCONV_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fl_module = {
    PyModuleDef_HEAD_INIT, "rlhealth._fastlines",
    "Native helpers for log reading (optional; pure-Python equivalents exist).", -1, fl_methods,
};

PyMODINIT_FUNC
PyInit__fastlines(void)
{
    return PyModule_Create(&fl_module);
}
