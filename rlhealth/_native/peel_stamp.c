/* The prefix peel and start-of-line stamp of a batch of matched lines (normalize.peel_and_stamp) in one pass:
 * the Ray "(...) ", "[pod/..]" and "[rankN]:" prefixes, then which branch of normalize._TS_START_RE matches
 * and where it ends, each branch matched by hand (each is deterministic as written, so trying them in the
 * regex's order gives its match). In C because it runs on every matched line: per line in Python it was
 * 684,730 calls and 5.7 s cum on the dense capture, the batch 1.0-1.4 s (BENCHMARKS.md, session 7).
 *
 *   peel_stamp_batch(texts: list, paren_memo: dict, paren_fn, paren_max: int, name_memo: dict, prefix_cls,
 *                    stamp_memos: tuple, stamp_fn, slow, ref, tz) -> list[tuple]
 *       normalize.peel_and_stamp(text, ref, tz) for each of `texts` (ANSI-stripped matched lines; a text that
 *       is the very object before it gets the same result object). The prefix loop of _peel_uncached: "("
 *       prefixes through paren_memo / paren_fn(candidate) (normalize._paren_hit), "[pod/..]" and "[rankN]:"
 *       names through name_memo / prefix_cls(name); the start-of-line stamp's branch and extent found here
 *       (the branches of normalize._TS_START_RE, tried in its order), its value memoised per branch in
 *       stamp_memos[branch] by matched text (the caller keeps them for one ref and tz), else computed here
 *       (vLLM, Ray and zone-less ISO stamps when ref's tzinfo and tz are datetime.UTC: normalize._yearless and
 *       _aware's arithmetic; 61k Python conversions on the dense capture, one per second of log) or stamp_fn(rest)
 *       (normalize._stamp_of_rest); no start stamp and nothing _TS_ANY_ISO_RE finds in rest: None. Any other shape (a
 *       kubectl/CRI stamp, a "(" the memoised flat regex does not take) is slow(text). Twin:
 *       normalize.peel_and_stamp_batch_py.
 *
 *   stamp_span(text: str, pos: int) -> tuple[int, int] | None
 *       The branch (0 vLLM, 1 c10, 2 glog, 3 Ray, 4 ISO, 5 dmesg, 6 syslog) and end of
 *       normalize._TS_START_RE.match(text, pos), or None; what peel_stamp_batch finds (tested against the
 *       regex).
 */
#include "utext.h"
#include <datetime.h>

/* Match a fixed shape at i: 'd' is \d, 'U' [A-Z], 'l' [a-z], anything else itself. The end, or -1. */
static Py_ssize_t
shape(const utext *u, Py_ssize_t i, const char *s)
{
    for (; *s; s++, i++) {
        if (i >= u->n)
            return -1;
        Py_UCS4 c = ch(u, i);
        if (*s == 'd') {
            if (!Py_UNICODE_ISDECIMAL(c))
                return -1;
        } else if (*s == 'U') {
            if (c < 'A' || c > 'Z')
                return -1;
        } else if (*s == 'l') {
            if (c < 'a' || c > 'z')
                return -1;
        } else if (c != (Py_UCS4)(unsigned char)*s) {
            return -1;
        }
    }
    return i;
}

static inline int
one_of(Py_UCS4 c, const char *set)
{
    return c != 0 && c < 128 && strchr(set, (int)c) != NULL;
}

/* \d{lo,hi} followed by the literal `next` (greedy; a shorter run would put `next` on a digit, so no
 * backtracking can succeed where this fails). The end (after `next`), or -1. */
static Py_ssize_t
digits_then(const utext *u, Py_ssize_t i, int lo, int hi, Py_UCS4 next)
{
    int k = 0;
    while (k < hi && is_dec(u, i + k))
        k++;
    if (k < lo || ch(u, i + k) != next || i + k >= u->n)
        return -1;
    return i + k + 1;
}

/* The branch of normalize._TS_START_RE that matches at p (0 v, 1 c10, 2 glog, 3 ray, 4 iso, 5 dmesg, 6 syslog),
 * its end in *end; -1 when none does. Each branch is deterministic as written (greedy runs end where the next
 * literal must stand), so trying them in the regex's order gives its match. */
static int
stamp_branch(const utext *u, Py_ssize_t p, Py_ssize_t *end)
{
    static const char *levels[] = {"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"};
    Py_ssize_t q, e;
    Py_UCS4 c0 = ch(u, p);
    /* v: "(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) dd-dd dd:dd:dd" */
    for (int k = 0; k < 6; k++) {
        e = lit(u, p, levels[k]);
        if (e >= 0 && (e = shape(u, e, " dd-dd dd:dd:dd")) >= 0) {
            *end = e;
            return 0;
        }
    }
    /* c: "\[?[FEWIV]\d{3,4} dd:dd:dd\.\d{9}(?: |$)" */
    q = c0 == '[' ? p + 1 : p;
    if (one_of(ch(u, q), "FEWIV") && (e = digits_then(u, q + 1, 3, 4, ' ')) >= 0
            && (e = shape(u, e, "dd:dd:dd.ddddddddd")) >= 0) {
        if (ch(u, e) == ' ' && e < u->n) {
            *end = e + 1;
            return 1;
        }
        if (at_end(u, e)) {
            *end = e;
            return 1;
        }
    }
    /* g: "[FEWIV]\d{3,4} dd:dd:dd\.\d{6} \d+ " */
    if (one_of(c0, "FEWIV") && (e = digits_then(u, p + 1, 3, 4, ' ')) >= 0
            && (e = shape(u, e, "dd:dd:dd.dddddd ")) >= 0 && (e = digits_then(u, e, 1, 1 << 30, ' ')) >= 0) {
        *end = e;
        return 2;
    }
    /* r: "\[dddd-dd-dd dd:dd:dd,ddd [DIWEC] " */
    if ((e = shape(u, p, "[dddd-dd-dd dd:dd:dd,ddd ")) >= 0 && one_of(ch(u, e), "DIWEC") && ch(u, e + 1) == ' ') {
        *end = e + 2;
        return 3;
    }
    /* i: "\[?dddd-dd-dd[T ]dd:dd:dd(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)?" */
    q = c0 == '[' ? p + 1 : p;
    if ((e = shape(u, q, "dddd-dd-dd")) >= 0 && one_of(ch(u, e), "T ") && (e = shape(u, e + 1, "dd:dd:dd")) >= 0) {
        if (one_of(ch(u, e), ".,") && is_dec(u, e + 1)) {
            int k = 1;
            while (k < 9 && is_dec(u, e + 1 + k))
                k++;
            e += 1 + k;
        }
        Py_UCS4 z = ch(u, e);
        if (z == 'Z') {
            e += 1;
        } else if (one_of(z, "+-") && is_dec(u, e + 1) && is_dec(u, e + 2)) {
            if (ch(u, e + 3) == ':' && is_dec(u, e + 4) && is_dec(u, e + 5))
                e += 6;
            else if (is_dec(u, e + 3) && is_dec(u, e + 4))
                e += 5;
        }
        *end = e;
        return 4;
    }
    /* dm: "\[[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} dd:dd:dd dddd\]" */
    if ((e = shape(u, p, "[Ull Ull ")) >= 0) {
        while (ch(u, e) == ' ')
            e++;
        if ((e = digits_then(u, e, 1, 2, ' ')) >= 0 && (e = shape(u, e, "dd:dd:dd dddd]")) >= 0) {
            *end = e;
            return 5;
        }
    }
    /* sy: "[A-Z][a-z]{2} +\d{1,2} dd:dd:dd " */
    if ((e = shape(u, p, "Ull ")) >= 0) {
        while (ch(u, e) == ' ')
            e++;
        if ((e = digits_then(u, e, 1, 2, ' ')) >= 0 && (e = shape(u, e, "dd:dd:dd ")) >= 0) {
            *end = e;
            return 6;
        }
    }
    return -1;
}

/* normalize._TS_START_RE.match(text, pos): (branch, end) or None (the test of stamp_branch against the regex) */
PyObject *
fl_stamp_span(PyObject *self, PyObject *args)
{
    PyObject *text;
    Py_ssize_t pos, end = 0;
    if (!PyArg_ParseTuple(args, "Un:stamp_span", &text, &pos))
        return NULL;
    if (PyUnicode_READY(text) < 0)
        return NULL;
    utext u = utext_of(text);
    if (pos < 0 || pos > u.n) {
        PyErr_SetString(PyExc_ValueError, "stamp_span() pos out of range");
        return NULL;
    }
    int b = stamp_branch(&u, pos, &end);
    if (b < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(in)", b, end);
}

typedef struct {
    PyObject *paren_memo, *paren_fn, *name_memo, *prefix_cls, *stamp_memos, *stamp_fn, *slow;
    Py_ssize_t paren_max;
    PyObject *ref, *tz; /* the stamps' reference time and zone: converted here when both are UTC */
} peel_ctx;

/* ---- the stamp's value, for the common branches, when ref and tz are UTC --------------------------------- */

static inline int
dec_at(const utext *u, Py_ssize_t i, int n)
{
    int v = 0;
    for (int k = 0; k < n; k++)
        v = v * 10 + Py_UNICODE_TODECIMAL(ch(u, i + k)); /* \d matched these: any Unicode decimal, as int() */
    return v;
}

/* datetime(y, mo, d, h, mi, s, us, tzinfo=UTC), or Py_None where Python's constructor raises ValueError */
static PyObject *
utc_datetime(int y, int mo, int d, int h, int mi, int s, int us)
{
    PyObject *dt = PyDateTimeAPI->DateTime_FromDateAndTime(y, mo, d, h, mi, s, us, PyDateTime_TimeZone_UTC,
                                                            PyDateTimeAPI->DateTimeType);
    if (dt == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    return dt;
}

/* normalize._yearless(mo, d, h, mi, s, 0, ref, UTC) for a ref whose tzinfo is UTC */
static PyObject *
utc_yearless(PyObject *ref, int mo, int d, int h, int mi, int s)
{
    int year = PyDateTime_GET_YEAR(ref);
    for (int y = year; y >= year - 1; y--) {
        PyObject *dt = utc_datetime(y, mo, d, h, mi, s, 0);
        if (dt == NULL)
            return NULL;
        if (dt == Py_None) { /* e.g. Feb 29 in a non-leap year */
            Py_DECREF(dt);
            continue;
        }
        if (y == year) { /* more than half a year after ref: last year's */
            PyObject *ahead = PyNumber_Subtract(dt, ref);
            PyObject *half = ahead != NULL ? PyDelta_FromDSU(183, 0, 0) : NULL;
            int later = half != NULL ? PyObject_RichCompareBool(ahead, half, Py_GT) : -1;
            Py_XDECREF(ahead);
            Py_XDECREF(half);
            if (later != 0) {
                Py_DECREF(dt);
                if (later < 0)
                    return NULL;
                continue;
            }
        }
        return dt;
    }
    return Py_NewRef(Py_None);
}

/* The stamp normalize._stamp_of_match gives for branch b matched over [p, e), or NotImplemented when this
 * does not convert it (ref or tz not UTC, another branch, an ISO stamp with a zone): stamp_fn does those. */
static PyObject *
stamp_value(const utext *u, int b, Py_ssize_t p, Py_ssize_t e, const peel_ctx *ctx)
{
    if (ctx->tz != PyDateTime_TimeZone_UTC || !PyDateTime_Check(ctx->ref)
            || PyDateTime_DATE_GET_TZINFO(ctx->ref) != PyDateTime_TimeZone_UTC)
        return Py_NewRef(Py_NotImplemented);
    if (b == 0) { /* "LEVEL mm-dd HH:MM:SS": the shape ends the match */
        Py_ssize_t q = e - 14;
        return utc_yearless(ctx->ref, dec_at(u, q, 2), dec_at(u, q + 3, 2), dec_at(u, q + 6, 2),
                            dec_at(u, q + 9, 2), dec_at(u, q + 12, 2));
    }
    if (b == 3) { /* "[yyyy-mm-dd HH:MM:SS,mmm L " */
        return utc_datetime(dec_at(u, p + 1, 4), dec_at(u, p + 6, 2), dec_at(u, p + 9, 2), dec_at(u, p + 12, 2),
                            dec_at(u, p + 15, 2), dec_at(u, p + 18, 2), dec_at(u, p + 21, 3) * 1000);
    }
    if (b == 4) { /* "[?yyyy-mm-dd[T ]HH:MM:SS(?:[.,]f{1,9})?" and no zone */
        Py_ssize_t q = ch(u, p) == '[' ? p + 1 : p, f = q + 19;
        int us = 0, k = 0;
        if (f < e && one_of(ch(u, f), ".,")) {
            for (f++; f < e && is_dec(u, f); f++, k++) {
                if (k < 6)
                    us = us * 10 + Py_UNICODE_TODECIMAL(ch(u, f));
            }
            for (; k < 6; k++)
                us *= 10;
        }
        if (f != e)
            return Py_NewRef(Py_NotImplemented); /* a zone follows */
        return utc_datetime(dec_at(u, q, 4), dec_at(u, q + 5, 2), dec_at(u, q + 8, 2), dec_at(u, q + 11, 2),
                            dec_at(u, q + 14, 2), dec_at(u, q + 17, 2), us);
    }
    return Py_NewRef(Py_NotImplemented);
}

#define MAX_PEELED 16

/* A memo's value for key, else fn(key) stored under key (new reference; NULL on error). */
static PyObject *
memo_get(PyObject *memo, PyObject *key, PyObject *fn, PyObject *arg, int store)
{
    PyObject *v = PyDict_GetItemWithError(memo, key);
    if (v != NULL) {
        Py_INCREF(v);
        return v;
    }
    if (PyErr_Occurred())
        return NULL;
    v = PyObject_CallOneArg(fn, arg);
    if (v != NULL && store && PyDict_SetItem(memo, key, v) < 0)
        Py_CLEAR(v);
    return v;
}

/* Whether normalize._TS_ANY_ISO_RE.search(text[s:]) finds a match: some 'T' with "dddd-dd-dd" before it (its
 * first digit not after another digit within text[s:]) and "dd:dd:dd" after it (what follows is optional).
 * Without one _stamp_of_rest returns None: Megatron's " [2026-10-14 09:27:40] iteration ..." lines (a 'T' in
 * "TFLOP", dashes in the date) took that Python search on every line. */
static int
any_iso_in(const utext *u, Py_ssize_t s)
{
    for (Py_ssize_t t = s + 10; t + 8 < u->n; t++) {
        if (ch(u, t) != 'T' || shape(u, t - 10, "dddd-dd-ddTdd:dd:dd") < 0)
            continue;
        if (t - 10 == s || !Py_UNICODE_ISDECIMAL(ch(u, t - 11)))
            return 1;
    }
    return 0;
}

/* (peel_stripped(text), its stamp) as normalize.peel_and_stamp gives them; ctx->slow(text) for the shapes
 * not done here (a kubectl/CRI stamp, a "(" prefix the flat regex does not take, too many prefixes). */
static PyObject *
peel_one(PyObject *text, const peel_ctx *ctx)
{
    if (PyUnicode_READY(text) < 0)
        return NULL;
    utext u = utext_of(text);
    PyObject *pre[MAX_PEELED];
    int np = 0;
    Py_ssize_t s = 0;
    PyObject *out = NULL;
    while (s < u.n) {
        Py_UCS4 c = ch(&u, s);
        PyObject *name = NULL;
        Py_ssize_t e = -1;
        if (np == MAX_PEELED)
            goto slow;
        if (c == '(') {
            /* s.find(") ") at k, 0 < k < paren_max: the memoised flat-regex answer for s[:k + 2] */
            Py_ssize_t k = 1;
            while (k < ctx->paren_max && s + k + 1 < u.n && !(ch(&u, s + k) == ')' && ch(&u, s + k + 1) == ' '))
                k++;
            if (k >= ctx->paren_max || s + k + 1 >= u.n)
                goto slow;
            PyObject *cand = PyUnicode_Substring(text, s, s + k + 2);
            if (cand == NULL)
                goto fail;
            PyObject *hit = memo_get(ctx->paren_memo, cand, ctx->paren_fn, cand, 0);
            Py_DECREF(cand);
            if (hit == NULL)
                goto fail;
            if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2 || PyTuple_GET_ITEM(hit, 0) == Py_None) {
                Py_DECREF(hit);
                goto slow;
            }
            Py_ssize_t adv = PyLong_AsSsize_t(PyTuple_GET_ITEM(hit, 1));
            if (adv <= 0) {
                Py_DECREF(hit);
                if (PyErr_Occurred())
                    goto fail;
                goto slow;
            }
            pre[np++] = Py_NewRef(PyTuple_GET_ITEM(hit, 0));
            Py_DECREF(hit);
            s += adv;
            continue;
        }
        if (c == '[') {
            Py_ssize_t j;
            if ((j = lit(&u, s, "[pod/")) >= 0) {
                /* \[(pod/[^\]\s]+)\] ? */
                Py_ssize_t k = j;
                while (k < u.n && ch(&u, k) != ']' && !Py_UNICODE_ISSPACE(ch(&u, k)))
                    k++;
                if (k > j && k < u.n && ch(&u, k) == ']') {
                    e = k + 1;
                    if (ch(&u, e) == ' ')
                        e++;
                    name = PyUnicode_Substring(text, s + 1, k);
                }
            } else if ((j = lit(&u, s, "[rank")) >= 0 || (j = lit(&u, s, "[default")) >= 0) {
                /* \[(rank\d+|default\d+)\]:(?: |(?=\[)|$) */
                Py_ssize_t k = j;
                while (is_dec(&u, k))
                    k++;
                if (k > j && (e = lit(&u, k, "]:")) >= 0) {
                    if (ch(&u, e) == ' ')
                        e++;
                    else if (!(ch(&u, e) == '[' || at_end(&u, e)))
                        e = -1;
                    if (e >= 0)
                        name = PyUnicode_Substring(text, s + 1, k);
                }
            }
            if (e < 0)
                break;
            if (name == NULL)
                goto fail;
            PyObject *prefix = memo_get(ctx->name_memo, name, ctx->prefix_cls, name, 1);
            Py_DECREF(name);
            if (prefix == NULL)
                goto fail;
            pre[np++] = prefix;
            s = e;
            continue;
        }
        if (c >= '0' && c <= '9') {
            if (ch(&u, s + 10) == 'T')
                goto slow; /* perhaps a kubectl/CRI stamp (its 'T' stands there) */
            break;
        }
        break;
    }
    {
        PyObject *prefixes = PyTuple_New(np);
        if (prefixes == NULL)
            goto fail;
        for (int i = 0; i < np; i++)
            PyTuple_SET_ITEM(prefixes, i, pre[i]);
        np = 0;
        PyObject *rest = PyUnicode_Substring(text, s, u.n);
        PyObject *pk = rest != NULL ? PyTuple_Pack(3, prefixes, rest, Py_None) : NULL;
        Py_DECREF(prefixes);
        if (pk == NULL) {
            Py_XDECREF(rest);
            return NULL;
        }
        /* _stamp_of_rest(rest): the start pattern at 0, else after leading whitespace when rest starts with " " */
        Py_ssize_t e = 0, p = s;
        int b = stamp_branch(&u, p, &e);
        if (b < 0 && ch(&u, s) == ' ') {
            while (p < u.n && Py_UNICODE_ISSPACE(ch(&u, p)))
                p++;
            b = stamp_branch(&u, p, &e);
        }
        PyObject *dt = NULL;
        if (b >= 0) {
            /* the stamp is a function of the branch and the text it matched: one conversion per second */
            PyObject *key = PyUnicode_Substring(text, p, e), *memo = PyTuple_GET_ITEM(ctx->stamp_memos, b);
            if (key != NULL) {
                dt = PyDict_GetItemWithError(memo, key);
                if (dt != NULL) {
                    Py_INCREF(dt);
                } else if (!PyErr_Occurred()) {
                    dt = stamp_value(&u, b, p, e, ctx);
                    if (dt == Py_NotImplemented) {
                        Py_DECREF(dt);
                        dt = PyObject_CallOneArg(ctx->stamp_fn, rest);
                    }
                    if (dt != NULL && PyDict_SetItem(memo, key, dt) < 0)
                        Py_CLEAR(dt);
                }
            }
            Py_XDECREF(key);
        } else if (any_iso_in(&u, s)) {
            dt = PyObject_CallOneArg(ctx->stamp_fn, rest); /* the any-ISO search finds a stamp: convert it there */
        } else {
            dt = Py_NewRef(Py_None);
        }
        Py_DECREF(rest);
        if (dt != NULL)
            out = PyTuple_Pack(2, pk, dt);
        Py_DECREF(pk);
        Py_XDECREF(dt);
        return out;
    }
slow:
    for (int i = 0; i < np; i++)
        Py_DECREF(pre[i]);
    return PyObject_CallOneArg(ctx->slow, text);
fail:
    for (int i = 0; i < np; i++)
        Py_DECREF(pre[i]);
    return NULL;
}

PyObject *
fl_peel_stamp_batch(PyObject *self, PyObject *args)
{
    PyObject *texts;
    peel_ctx ctx;
    if (PyDateTimeAPI == NULL) {
        PyDateTime_IMPORT;
        if (PyDateTimeAPI == NULL)
            return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!OnO!OO!OOOO:peel_stamp_batch", &PyList_Type, &texts, &PyDict_Type,
                          &ctx.paren_memo, &ctx.paren_fn, &ctx.paren_max, &PyDict_Type, &ctx.name_memo,
                          &ctx.prefix_cls, &PyTuple_Type, &ctx.stamp_memos, &ctx.stamp_fn, &ctx.slow, &ctx.ref,
                          &ctx.tz))
        return NULL;
    if (PyTuple_GET_SIZE(ctx.stamp_memos) != 7) {
        PyErr_SetString(PyExc_ValueError, "peel_stamp_batch() needs 7 stamp memos");
        return NULL;
    }
    for (Py_ssize_t b = 0; b < 7; b++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(ctx.stamp_memos, b))) {
            PyErr_SetString(PyExc_TypeError, "peel_stamp_batch() stamp memos must be dicts");
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(texts);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    PyObject *prev = NULL, *prev_out = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i);
        PyObject *r;
        if (text == prev) {
            r = Py_NewRef(prev_out); /* the same line matched another rule */
        } else if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "peel_stamp_batch() texts must be str");
            goto fail;
        } else {
            r = peel_one(text, &ctx);
            if (r == NULL)
                goto fail;
        }
        PyList_SET_ITEM(out, i, r);
        prev = text;
        prev_out = r;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}
