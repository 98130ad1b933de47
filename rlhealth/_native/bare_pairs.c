/* The unquoted "key: number" pairs of verl and Megatron metric lines (fold_trainer._BARE_PAIR_RE.findall),
 * the regex's backtracking written out. In C because it runs on every trainer metric line: 5.5 -> 1.7 us a
 * verl line, 10.6 -> 2.6 us a Megatron line against the regex (BENCHMARKS.md, session 7).
 *
 *   bare_pairs(text: str) -> list[tuple[str, str]]
 *       fold_trainer._BARE_PAIR_RE.findall(text): its key words and number are greedy and no shorter parse
 *       can meet its lookahead. Twin: the regex (tested against it on generated lines).
 */
#include "metric_pairs.h"

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
    Py_ssize_t v = skip_space(u, colon + 1), e = metric_value_end(u, v);
    if (e < 0 || !pair_end_ok(u, e))
        return -1;
    *ks = q, *ke = key_end, *vs = v, *ve = e;
    return e;
}

/* the match findall tries at pos: (?:^|[\s|{,]) then the pair; ^ only at 0 (tried first), else one separator
 * character */
static Py_ssize_t
bare_from(const utext *u, Py_ssize_t pos, Py_ssize_t *ks, Py_ssize_t *ke, Py_ssize_t *vs, Py_ssize_t *ve)
{
    Py_ssize_t end = pos == 0 ? pair_at(u, 0, ks, ke, vs, ve) : -1;
    if (end < 0) {
        Py_UCS4 c = ch(u, pos);
        if (c == '|' || c == '{' || c == ',' || Py_UNICODE_ISSPACE(c))
            end = pair_at(u, pos + 1, ks, ke, vs, ve);
    }
    return end;
}

PyObject *
fl_bare_pairs(PyObject *self, PyObject *arg)
{
    return findall_pairs(arg, "bare_pairs", bare_from);
}
