/* A reader over a str's code points, the shared vocabulary of the hand-written regex matchers (peel_stamp.c,
 * vllm_v1.c, bare_pairs.c, quoted_pairs.c). Each of them replaces a regex that runs on every matched line; reading the str's
 * own 1-, 2- or 4-byte data in place is what makes them cheaper than sre, so they are C.
 *
 * ch() is 0 past the end (no matcher accepts a NUL: ends are tested by index). The helpers are static inline:
 * each file gets its own copy, inlined into its loops as when all matchers shared one file.
 */
#ifndef RLHEALTH_UTEXT_H
#define RLHEALTH_UTEXT_H

#include "fastlines.h"

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} utext;

/* the reader of a ready str (PyUnicode_READY done) */
static inline utext
utext_of(PyObject *text)
{
    utext u = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    return u;
}

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

/* the ASCII literal s at i: its end, or -1 */
static inline Py_ssize_t
lit(const utext *u, Py_ssize_t i, const char *s)
{
    for (; *s; s++, i++)
        if (i >= u->n || ch(u, i) != (Py_UCS4)(unsigned char)*s)
            return -1;
    return i;
}

/* sre's \w and \d on str patterns, ASCII answered in place: Py_UNICODE_ISALNUM and Py_UNICODE_ISDECIMAL are
 * calls into the Unicode database per character, most of a matcher's cost on the all-ASCII lines trainers print */
static inline int
is_word_ch(Py_UCS4 c)
{
    if (c < 128)
        return c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    return Py_UNICODE_ISALNUM(c);
}

static inline int
is_dec_fast(const utext *u, Py_ssize_t i)
{
    if (i >= u->n)
        return 0;
    Py_UCS4 c = ch(u, i);
    return c < 128 ? c >= '0' && c <= '9' : Py_UNICODE_ISDECIMAL(c);
}

/* appends (text[ks:ke], text[vs:ve]) to out, as findall's pairs: 0, or -1 with an exception set */
static inline int
append_pair(PyObject *out, PyObject *text, Py_ssize_t ks, Py_ssize_t ke, Py_ssize_t vs, Py_ssize_t ve)
{
    PyObject *key = PyUnicode_Substring(text, ks, ke), *value = PyUnicode_Substring(text, vs, ve);
    PyObject *pair = key != NULL && value != NULL ? PyTuple_Pack(2, key, value) : NULL;
    Py_XDECREF(key);
    Py_XDECREF(value);
    int rc = pair == NULL ? -1 : PyList_Append(out, pair);
    Py_XDECREF(pair);
    return rc;
}

#endif
