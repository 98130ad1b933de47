/* The ANSI escape strip, of bytes (a block before it is decoded) and of a str below U+0100 (a matched line
 * Classifier.scan keeps). In C because it runs over every byte read: a memchr to each ESC and a memcpy of the
 * runs between them (0.27 s/GB against ~2 s/GB for the regex split-join, BENCHMARKS.md).
 *
 *   strip_ansi(data: bytes) -> bytes
 *       Remove ANSI escape sequences, exactly as the regex
 *       \x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])
 *       applied left to right (re.sub). Returns `data` itself when it holds no ESC.
 *       Never removes a newline. Twin: bytescan.strip_ansi_bytes_py.
 *
 *   strip_ansi_latin1(s: str) -> str | None
 *       normalize.strip_ansi(s) (the regex above on a str) when every character of s is below U+0100 (the
 *       byte pass on its one-byte-per-character data), else None.
 */
#include "fastlines.h"

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
PyObject *
fl_strip_ansi_1byte(PyObject *s)
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

PyObject *
fl_strip_ansi_latin1(PyObject *self, PyObject *arg)
{
    if (!fl_str_arg(arg, "strip_ansi_latin1"))
        return NULL;
    PyObject *r = fl_strip_ansi_1byte(arg);
    if (r == Py_NotImplemented) {
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    return r;
}

PyObject *
fl_strip_ansi(PyObject *self, PyObject *arg)
{
    if (!fl_bytes_arg(arg, "strip_ansi"))
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
