/* Declarations shared between fastlines.c and numconv.c (the number conversion of extracted fields). */
#ifndef RLHEALTH_NUMCONV_H
#define RLHEALTH_NUMCONV_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* int(v) (shape 1: ASCII digits) or float(v) (shape 2: ASCII digits with exactly one '.', two or more
 * characters) of a str of that number_shape; a new reference, or NULL with an exception. */
PyObject *number_from_ascii(PyObject *v, int shape);

PyObject *fl_number_of(PyObject *self, PyObject *arg);

#define NUMCONV_METHODS \
    {"number_of", fl_number_of, METH_O, \
     "int(s) of ASCII digits, float(s) of ASCII digits with one '.', else None (see numconv.c)."},

#endif
