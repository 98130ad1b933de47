/* The vLLM V1 stats line (rules/packs/vllm.toml, vllm.v1_stats) without its two regex searches. These lines are
 * most of the matched lines of a busy inference log; scanned by hand in C, reading the str's data in place, a
 * line gives the same groups as the two searches in ~0.3 us against ~2 us. The scanner gives the groups' places
 * (fields.c's spans), not strs: a number is converted from the line's own characters (1.25-1.59 -> 1.08-1.15 us
 * a line with the dict, BENCHMARKS.md session 9).
 *
 *   fields_batch_vllm_v1(...fields_batch's arguments...) -> list[dict]
 *       fields_batch (fields.c) for a rule whose extract and extract_before are bytescan.VLLM_V1_EXTRACT and
 *       VLLM_V1_BEFORE: a line is scanned here, a line the scanner cannot tell goes through `search` and
 *       `before` as in fields_batch. Twin: bytescan.fields_batch_py.
 */
#include "utext.h"

/* [0-9.]+ (ASCII) from i: its end, or -1 when empty */
static Py_ssize_t
num_dot(const utext *u, Py_ssize_t i)
{
    Py_ssize_t k = i;
    for (Py_UCS4 c; k < u->n && (((c = ch(u, k)) >= '0' && c <= '9') || c == '.');)
        k++;
    return k > i ? k : -1;
}

/* \d+ from i (any decimal digit, as sre): its end, or -1 when empty (or i < 0) */
static Py_ssize_t
decs(const utext *u, Py_ssize_t i)
{
    if (i < 0)
        return -1;
    Py_ssize_t k = i;
    while (is_dec(u, k))
        k++;
    return k > i ? k : -1;
}

/* lit() that passes a failure (-1) on */
static inline Py_ssize_t
lit_at(const utext *u, Py_ssize_t i, const char *s)
{
    return i < 0 ? -1 : lit(u, i, s);
}

#define VLLM_V1_GROUPS 12

/* Where extract.search(text).groups() + (extract_before.search(text, max(0, start - before_chars), start).groups()
 * when that matches) are, for the patterns bytescan.VLLM_V1_EXTRACT / VLLM_V1_BEFORE (fields.c's spans: no str
 * made for a number). The match starts at an occurrence of
 * the literal "Avg prompt throughput: ": when the first occurrence carries the required part, it is the search's
 * match (leftmost), and each optional part that follows is taken exactly when it matches there (nothing after
 * it can fail). Any other case (no occurrence, or the first does not parse) is 0 (the regexes then). */
static int
vllm_v1_spans(PyObject *text, Py_ssize_t before_chars, Py_ssize_t *a, Py_ssize_t *b, Py_ssize_t *ngroups_out)
{
    static PyObject *needle = NULL;
    if (needle == NULL && (needle = PyUnicode_InternFromString("Avg prompt throughput: ")) == NULL)
        return -1;
    if (PyUnicode_READY(text) < 0)
        return -1;
    utext u = utext_of(text);
    Py_ssize_t start = PyUnicode_Find(text, needle, 0, u.n, 1);
    if (start == -2)
        return -1;
    if (start < 0)
        return 0;
    for (int g = 0; g <= VLLM_V1_GROUPS; g++)
        a[g] = b[g] = -1;
    Py_ssize_t i = start + 23, e, j, k;
    /* the required part */
    if ((e = num_dot(&u, i)) < 0)
        return 0;
    a[0] = i, b[0] = e;
    if ((i = lit(&u, e, " tokens/s, Avg generation throughput: ")) < 0 || (e = num_dot(&u, i)) < 0)
        return 0;
    a[1] = i, b[1] = e;
    if ((i = lit(&u, e, " tokens/s, Running: ")) < 0 || (e = decs(&u, i)) < 0)
        return 0;
    a[2] = i, b[2] = e;
    if ((i = lit(&u, e, " reqs, Waiting: ")) < 0 || (e = decs(&u, i)) < 0)
        return 0;
    a[3] = i, b[3] = e;
    if ((i = lit(&u, e, " reqs")) < 0)
        return 0;
    /* (?:, Deferred: (\d+) reqs)? */
    j = lit(&u, i, ", Deferred: ");
    if ((e = decs(&u, j)) >= 0 && (k = lit(&u, e, " reqs")) >= 0)
        a[4] = j, b[4] = e, i = k;
    /* (?:, KV fetch: (\d+) waiting to start, (\d+) in progress, (\d+) completed waiting)? */
    j = lit(&u, i, ", KV fetch: ");
    Py_ssize_t e1 = decs(&u, j), j2 = lit_at(&u, e1, " waiting to start, "), e2 = decs(&u, j2);
    Py_ssize_t j3 = lit_at(&u, e2, " in progress, "), e3 = decs(&u, j3), k3 = lit_at(&u, e3, " completed waiting");
    if (k3 >= 0)
        a[5] = j, b[5] = e1, a[6] = j2, b[6] = e2, a[7] = j3, b[7] = e3, i = k3;
    /* (?:, Preemptions: (\d+))? */
    j = lit(&u, i, ", Preemptions: ");
    if ((e = decs(&u, j)) >= 0)
        a[8] = j, b[8] = e, i = e;
    /* (?:, ([A-Z]+) KV cache usage: ([0-9.]+)%)? */
    if ((j = lit(&u, i, ", ")) >= 0) {
        e = j;
        for (Py_UCS4 c; e < u.n && (c = ch(&u, e)) >= 'A' && c <= 'Z';)
            e++;
        if (e > j && (k = lit(&u, e, " KV cache usage: ")) >= 0 && (e2 = num_dot(&u, k)) >= 0 && ch(&u, e2) == '%')
            a[9] = j, b[9] = e, a[10] = k, b[10] = e2, i = e2 + 1;
    }
    /* (?:, Prefix cache hit rate: ([0-9.]+)%)? */
    j = lit(&u, i, ", Prefix cache hit rate: ");
    if (j >= 0 && (e = num_dot(&u, j)) >= 0 && ch(&u, e) == '%')
        a[11] = j, b[11] = e;
    /* extract_before, (?:(?P<engine>Engine \d+|\d+ Engines Aggregated): )\Z in text[lo:start]: the leftmost start */
    Py_ssize_t lo = start - before_chars > 0 ? start - before_chars : 0;
    int ngroups = VLLM_V1_GROUPS;
    if (start - 2 >= lo && lit(&u, start - 2, ": ") == start) {
        Py_ssize_t rs = start - 2;
        while (rs > 0 && is_dec(&u, rs - 1))
            rs--;
        if (rs < start - 2 && rs - 7 >= lo && lit(&u, rs - 7, "Engine ") == rs) {
            a[12] = rs - 7, b[12] = start - 2, ngroups++;
        } else if (start - 21 >= lo && lit(&u, start - 21, " Engines Aggregated: ") == start) {
            rs = start - 21;
            while (rs > 0 && is_dec(&u, rs - 1))
                rs--;
            Py_ssize_t p = rs > lo ? rs : lo;
            if (p < start - 21)
                a[12] = p, b[12] = start - 2, ngroups++;
        }
    }
    *ngroups_out = ngroups;
    return 1;
}

PyObject *
fl_fields_batch_vllm_v1(PyObject *self, PyObject *args)
{
    return fl_fields_batch_run(args, "O!OOnO!OOOO!:fields_batch_vllm_v1", vllm_v1_spans);
}
