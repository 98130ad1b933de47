/* The passes over a whole block of bytes that the log readers make before any line is a str: where the lines
 * start, whether the block is UTF-8, how many newlines it holds. CPython has no one-call form of the first two
 * (a split or a decode builds objects per line), so they are C; the twins are in rlhealth.agents.bytescan
 * (line_starts_py, utf8_valid_py, count_newlines_py), compared with these in tests/test_bytescan.py.
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
 */
#include "fastlines.h"

PyObject *
fl_line_starts(PyObject *self, PyObject *args)
{
    PyObject *data;
    long long base;
    if (!PyArg_ParseTuple(args, "SL:line_starts", &data, &base))
        return NULL;
    const char *src = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    Py_ssize_t lines = fl_newline_count(src, n) + 1;
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

PyObject *
fl_utf8_valid(PyObject *self, PyObject *arg)
{
    if (!fl_bytes_arg(arg, "utf8_valid"))
        return NULL;
    int ok;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    Py_BEGIN_ALLOW_THREADS
    ok = utf8_ok(s, n);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}

PyObject *
fl_count_newlines(PyObject *self, PyObject *arg)
{
    if (!fl_bytes_arg(arg, "count_newlines"))
        return NULL;
    return PyLong_FromSsize_t(fl_newline_count(PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
}
