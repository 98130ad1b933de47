/* The quoted "'key': number" pairs of trainer metric dicts (fold_trainer._METRIC_PAIR_RE.findall): HF Trainer's
 * `{'loss': 1.23, 'grad_norm': 0.5, ...}` and W&B mirror JSON, one line per logging step. sre spent ~19k
 * instructions a HF line trying the pattern at every position (BENCHMARKS.md, session 9).
 *
 *   quoted_pairs(text: str) -> list[tuple[str, str]]
 *       fold_trainer._METRIC_PAIR_RE.findall(text). The pattern has no backtracking that could change a match:
 *       the key's characters exclude the quotes that must follow it, \s* is followed by ':' or a value (neither
 *       a space), and the value, last in the pattern, is its greedy parse. Twin: the regex (tests/test_bytescan.py
 *       holds the two equal on generated lines).
 */
#include "utext.h"

static inline int
is_quote(Py_UCS4 c)
{
    return c == '\'' || c == '"';
}

static Py_ssize_t
spaces_end(const utext *u, Py_ssize_t k)
{
    while (k < u->n && Py_UNICODE_ISSPACE(ch(u, k)))
        k++;
    return k;
}

/* -?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity) at v, greedy: its end, or -1 */
static Py_ssize_t
value_end(const utext *u, Py_ssize_t v)
{
    Py_ssize_t k = v;
    if (k < u->n && ch(u, k) == '-')
        k++;
    if (is_dec_fast(u, k)) {
        while (is_dec_fast(u, k))
            k++;
        if (k < u->n && ch(u, k) == '.')
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
    if (k < u->n && ch(u, k) == '.' && is_dec_fast(u, k + 1)) {
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

/* The match starting at the quote q: its end (key and value spans in ks/ke/vs/ve), or -1 */
static Py_ssize_t
quoted_at(const utext *u, Py_ssize_t q, Py_ssize_t *ks, Py_ssize_t *ke, Py_ssize_t *vs, Py_ssize_t *ve)
{
    Py_ssize_t k = q + 1;
    for (Py_UCS4 c; k < u->n && (is_word_ch(c = ch(u, k)) || c == '/' || c == '.' || c == '-');)
        k++;
    if (k == q + 1 || k >= u->n || !is_quote(ch(u, k)))
        return -1;
    Py_ssize_t colon = spaces_end(u, k + 1);
    if (colon >= u->n || ch(u, colon) != ':')
        return -1;
    Py_ssize_t v = spaces_end(u, colon + 1), e = value_end(u, v);
    if (e < 0)
        return -1;
    *ks = q + 1, *ke = k, *vs = v, *ve = e;
    return e;
}

PyObject *
fl_quoted_pairs(PyObject *self, PyObject *arg)
{
    if (!fl_str_arg(arg, "quoted_pairs") || PyUnicode_READY(arg) < 0)
        return NULL;
    utext u = utext_of(arg);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0, ks, ke, vs, ve, end;
    while (pos < u.n) {
        if (!is_quote(ch(&u, pos)) || (end = quoted_at(&u, pos, &ks, &ke, &vs, &ve)) < 0) {
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
