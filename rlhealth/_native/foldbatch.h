/* Declarations shared between fastlines.c (the module and its method table) and foldbatch.c (the
 * per-batch folds of matched lines into the state). */
#ifndef RLHEALTH_FOLDBATCH_H
#define RLHEALTH_FOLDBATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *fl_engine_fold(PyObject *self, PyObject *args);

#define FOLDBATCH_METHODS \
    {"engine_fold", fl_engine_fold, METH_VARARGS, \
     "fold_engines.engine_fold_py: engine stats rows folded into their engines (see foldbatch.c)."},

#endif
