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

#endif
