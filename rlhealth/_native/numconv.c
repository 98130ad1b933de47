/* The number conversion of extracted fields, for rlhealth._fastlines (declared in fastlines.h, listed in fastlines.c's method table).
 *
 * fields_of turns a field of ASCII digits into int(v) and one of digits with a single '.' into float(v);
 * PyLong_FromUnicodeObject and PyFloat_FromString first copy the text into a new ASCII buffer. The short
 * values of stats lines (vLLM's "2914.5", "42") are converted here from the str's own bytes:
 *   * up to 18 digits: accumulated in a long long (below 10**18, no overflow);
 *   * digits with one '.': when at most 15 significant digits (leading zeros skipped) and at most 22 after
 *     the '.', the value is exactly M / 10**F with M < 2**53 and 10**F both exact doubles, and one IEEE
 *     division rounds that quotient correctly: the double float() gives. Longer ones take the slow path.
 *
 *   number_of(s: str) -> int | float | None
 *       What fields_of makes of s with how 2 when s is of those two shapes, else None (for the tests:
 *       twin bytescan.number_of_py).
 */
#include "fastlines.h"

static const double exact_pow10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

PyObject *
fl_number_from_ascii(PyObject *v, int shape)
{
    PyObject *r = fl_number_from_bytes(PyUnicode_1BYTE_DATA(v), PyUnicode_GET_LENGTH(v), shape);
    if (r != Py_NotImplemented)
        return r;
    Py_DECREF(r);
    return shape == 1 ? PyLong_FromUnicodeObject(v, 10) : PyFloat_FromString(v);
}

PyObject *
fl_number_from_bytes(const unsigned char *s, Py_ssize_t n, int shape)
{
    if (shape == 1) {
        if (n > 18)
            Py_RETURN_NOTIMPLEMENTED;
        long long x = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            x = x * 10 + (s[i] - '0');
        return PyLong_FromLongLong(x);
    }
    uint64_t m = 0;
    int significant = 0, after_dot = 0, seen_dot = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '.') {
            seen_dot = 1;
            continue;
        }
        if (seen_dot)
            after_dot++;
        if (m == 0 && s[i] == '0')
            continue; /* a leading zero: not a significant digit */
        if (++significant > 15 || after_dot > 22)
            Py_RETURN_NOTIMPLEMENTED;
        m = m * 10 + (uint64_t)(s[i] - '0');
    }
    if (after_dot > 22)
        Py_RETURN_NOTIMPLEMENTED;
    return PyFloat_FromDouble((double)m / exact_pow10[after_dot]);
}

PyObject *
fl_number_of(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg) || PyUnicode_READY(arg) < 0 || !PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg), dots = 0;
    const unsigned char *s = PyUnicode_1BYTE_DATA(arg);
    if (n == 0)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '.')
            dots++;
        else if (s[i] < '0' || s[i] > '9')
            Py_RETURN_NONE;
    }
    if (dots == 0)
        return fl_number_from_ascii(arg, 1);
    if (dots == 1 && n >= 2)
        return fl_number_from_ascii(arg, 2);
    Py_RETURN_NONE;
}
