/* rlhealth._fastlines: the per-byte and per-matched-line passes of log reading that CPython cannot do fast.
 *
 * Optional: every function has a pure-Python twin with identical results (RLHEALTH_NATIVE=0 selects them;
 * rlhealth.agents.bytescan loads this module and falls back when it is absent), and tests/test_bytescan.py
 * holds each pair equal on generated input. One extension module built from every .c file here, one
 * concept a file, each file's opening comment documenting its functions:
 *
 *   blocks.c      line_starts, utf8_valid, count_newlines: passes over a whole block of bytes
 *   ansi.c        strip_ansi, strip_ansi_latin1: the ANSI escape strip of bytes and of a one-byte str
 *   fields.c      fields_of, fields_batch: the fields dict of matched lines from their regex groups
 *   vllm_v1.c     fields_batch_vllm_v1: the vLLM V1 stats line's groups without the regexes
 *   peel_stamp.c  peel_stamp_batch, stamp_span: prefix peel and start-of-line stamp of matched lines
 *   hits.c        hit_lines, keep_hits: Hyperscan's matches to Classifier.scan's kept lines
 *   hitsink.c     HitSink: a Hyperscan match handler in C, its matches as per-batch (line, rule) pairs
 *   bare_pairs.c  bare_pairs: the "key: number" pairs of trainer metric lines
 *   quoted_pairs.c quoted_pairs: the "'key': number" pairs of trainer metric dicts
 *   foldbatch.c   engine_fold: a batch's engine stats rows folded into their engines
 *   numconv.c     number_of (and fl_number_from_ascii for fields.c): int()/float() of short ASCII fields
 *   fastlines.h   what crosses files; utext.h: the reader over a str the hand-written matchers share;
 *                 metric_pairs.h: what bare_pairs.c and quoted_pairs.c share
 *
 * This file is the module: its method table (one entry a line, grouped by file) and PyInit (which adds the one
 * type, hitsink.c's HitSink).
 */
#include "fastlines.h"

static PyMethodDef fl_methods[] = {
    /* blocks.c */
    {"line_starts", fl_line_starts, METH_VARARGS, "(int64 array of line start offsets + base, longest line)."},
    {"utf8_valid", fl_utf8_valid, METH_O, "Whether bytes are well-formed UTF-8 (as Python's strict decoder)."},
    {"count_newlines", fl_count_newlines, METH_O, "data.count(b'\\n'), with memchr."},
    /* ansi.c */
    {"strip_ansi", fl_strip_ansi, METH_O, "Remove ANSI escape sequences from bytes (see the module doc)."},
    {"strip_ansi_latin1", fl_strip_ansi_latin1, METH_O, "strip_ansi of a str below U+0100, else None (see the module doc)."},
    /* fields.c */
    {"fields_of", fl_fields_of, METH_VARARGS, "The fields dict of a matched line from its groups (see the module doc)."},
    {"fields_batch", fl_fields_batch, METH_VARARGS, "fields_of for every line a rule matched (see the module doc)."},
    /* vllm_v1.c */
    {"fields_batch_vllm_v1", fl_fields_batch_vllm_v1, METH_VARARGS, "fields_batch for the vLLM V1 stats rule, its lines scanned without the regexes (see the module doc)."},
    /* peel_stamp.c */
    {"peel_stamp_batch", fl_peel_stamp_batch, METH_VARARGS, "normalize.peel_and_stamp for a batch (see the module doc)."},
    {"stamp_span", fl_stamp_span, METH_VARARGS, "The branch and end of normalize's start-of-line stamp at pos, or None."},
    /* hits.c */
    {"hit_lines", fl_hit_lines, METH_VARARGS, "Sorted unique (line, rule) pairs of (end offset, rule) pairs (see the module doc)."},
    {"keep_hits", fl_keep_hits, METH_VARARGS, "Classifier.scan's kept (line, rule, text) of sorted hits (see the module doc)."},
    /* bare_pairs.c */
    {"bare_pairs", fl_bare_pairs, METH_O, "fold_trainer._BARE_PAIR_RE.findall(text) (see the module doc)."},
    /* quoted_pairs.c */
    {"quoted_pairs", fl_quoted_pairs, METH_O, "fold_trainer._METRIC_PAIR_RE.findall(text) (see quoted_pairs.c)."},
    /* foldbatch.c */
    {"engine_fold", fl_engine_fold, METH_VARARGS, "fold_engines.engine_fold_py: engine stats rows folded into their engines (see foldbatch.c)."},
    /* numconv.c */
    {"number_of", fl_number_of, METH_O, "int(s) of ASCII digits, float(s) of ASCII digits with one '.', else None (see numconv.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fl_module = {
    PyModuleDef_HEAD_INIT, "rlhealth._fastlines",
    "Native helpers for log reading (optional; pure-Python equivalents exist).", -1, fl_methods,
};

PyMODINIT_FUNC
PyInit__fastlines(void)
{
    PyObject *m = PyModule_Create(&fl_module);
    if (m != NULL && fl_add_hitsink(m) < 0)
        Py_CLEAR(m);
    return m;
}
