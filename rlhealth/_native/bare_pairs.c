/* The unquoted "key: number" pairs of verl and Megatron metric lines (fold_trainer._BARE_PAIR_RE.findall),
 * the regex's backtracking written out. In C because it runs on every trainer metric line: 5.5 -> 1.7 us a
 * verl line, 10.6 -> 2.6 us a Megatron line against the regex (BENCHMARKS.md, session 7).
 *
 *   bare_pairs(text: str) -> list[tuple[str, str]]
 *       fold_trainer._BARE_PAIR_RE.findall(text): its key words and number are greedy and no shorter parse
 *       can meet its lookahead. Twin: the regex (tested against it on generated lines).
 */
#include "utext.h"

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

PyObject *
fl_bare_pairs(PyObject *self, PyObject *arg)
{
    if (!fl_str_arg(arg, "bare_pairs") || PyUnicode_READY(arg) < 0)
        return NULL;
    utext u = utext_of(arg);
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
        if (append_pair(out, arg, ks, ke, vs, ve) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        pos = end;
    }
    return out;
}
