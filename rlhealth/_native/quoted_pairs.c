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
#include "metric_pairs.h"

static inline int
is_quote(Py_UCS4 c)
{
    return c == '\'' || c == '"';
}

/* The match starting at the quote q: its end (key and value spans in ks/ke/vs/ve), or -1 */
static Py_ssize_t
quoted_at(const utext *u, Py_ssize_t q, Py_ssize_t *ks, Py_ssize_t *ke, Py_ssize_t *vs, Py_ssize_t *ve)
{
    Py_ssize_t k = key_tail(u, q + 1);
    if (k == q + 1 || k >= u->n || !is_quote(ch(u, k)))
        return -1;
    Py_ssize_t colon = skip_space(u, k + 1);
    if (colon >= u->n || ch(u, colon) != ':')
        return -1;
    Py_ssize_t v = skip_space(u, colon + 1), e = metric_value_end(u, v);
    if (e < 0)
        return -1;
    *ks = q + 1, *ke = k, *vs = v, *ve = e;
    return e;
}

/* the match findall tries at pos: at a quote only */
static Py_ssize_t
quoted_from(const utext *u, Py_ssize_t pos, Py_ssize_t *ks, Py_ssize_t *ke, Py_ssize_t *vs, Py_ssize_t *ve)
{
    return is_quote(ch(u, pos)) ? quoted_at(u, pos, ks, ke, vs, ve) : -1;
}

PyObject *
fl_quoted_pairs(PyObject *self, PyObject *arg)
{
    return findall_pairs(arg, "quoted_pairs", quoted_from);
}
