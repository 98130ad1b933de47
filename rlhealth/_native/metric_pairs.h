/* What the two metric-pair matchers (bare_pairs.c: verl/Megatron `key: number`, quoted_pairs.c: HF/W&B
 * `'key': number`) share: their key characters, spaces, the number grammar of fold_trainer's pair regexes, and
 * findall's (key, value) append.
 */
#ifndef RLHEALTH_METRIC_PAIRS_H
#define RLHEALTH_METRIC_PAIRS_H

#include "utext.h"

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


/* [\w/.\-]* from k: its end */
static inline Py_ssize_t
key_tail(const utext *u, Py_ssize_t k)
{
    for (Py_UCS4 c; k < u->n && (is_word_ch(c = ch(u, k)) || c == '/' || c == '.' || c == '-');)
        k++;
    return k;
}

static inline Py_ssize_t
skip_space(const utext *u, Py_ssize_t k)
{
    while (k < u->n && Py_UNICODE_ISSPACE(ch(u, k)))
        k++;
    return k;
}

/* The value (both regexes' group 2) -?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity) at v, greedy: its end or -1. A
 * shorter parse would leave a digit, '.', 'e', 'E' or a sign next, where the lookahead never holds. */
static inline Py_ssize_t
metric_value_end(const utext *u, Py_ssize_t v)
{
    Py_ssize_t k = v;
    if (ch(u, k) == '-')
        k++;
    if (is_dec_fast(u, k)) {
        while (is_dec_fast(u, k))
            k++;
        if (ch(u, k) == '.' && k < u->n)
            k++;
        while (is_dec_fast(u, k))
            k++;
        Py_UCS4 e = ch(u, k);
        if (e == 'e' || e == 'E') {
            Py_ssize_t x = k + 1;
            if (ch(u, x) == '+' || ch(u, x) == '-')
                x++;
            if (is_dec_fast(u, x)) {
                while (is_dec_fast(u, x))
                    x++;
                k = x;
            }
        }
        return k;
    }
    if (ch(u, k) == '.' && is_dec_fast(u, k + 1)) {
        k++;
        while (is_dec_fast(u, k))
            k++;
        return k;
    }
    Py_ssize_t e;
    if ((e = lit(u, k, "nan")) >= 0 || (e = lit(u, k, "NaN")) >= 0 || (e = lit(u, k, "inf")) >= 0
            || (e = lit(u, k, "Infinity")) >= 0)
        return e;
    return -1;
}

/* a matcher of one pattern tried at pos: the match's end (key and value spans in ks/ke/vs/ve), or -1 */
typedef Py_ssize_t (*pair_matcher)(const utext *u, Py_ssize_t pos, Py_ssize_t *ks, Py_ssize_t *ke, Py_ssize_t *vs,
                                   Py_ssize_t *ve);

/* findall of a two-group pattern: tried at each position, resumed at a match's end (none is empty) */
static inline PyObject *
findall_pairs(PyObject *arg, const char *name, pair_matcher match)
{
    if (!fl_str_arg(arg, name) || PyUnicode_READY(arg) < 0)
        return NULL;
    utext u = utext_of(arg);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0, ks, ke, vs, ve, end;
    while (pos < u.n) {
        if ((end = match(&u, pos, &ks, &ke, &vs, &ve)) < 0) {
            pos++;
            continue;
        }
        if (append_pair(out, arg, ks, ke, vs, ve) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        pos = end;
    }
    return out;
}
#endif
