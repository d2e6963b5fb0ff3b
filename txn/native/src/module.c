/* txn.native._core: the compiled engine of the transaction server (docs/txn.md, "The native
 * engine"). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "codec.h"
#include "lock.h"
#include "log.h"
#include "machine.h"
#include "server.h"

static PyObject *crc32c_py(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc = crc32c(0, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef functions[] = {
    {"crc32c", crc32c_py, METH_O, "The CRC32C (Castagnoli) of a bytes-like object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "txn.native._core",
    .m_doc = "The compiled engine of the transaction server (see txn.native).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__core(void) {
    crc32c_init();
    if (PyType_Ready(&MachineType) < 0 || PyType_Ready(&LogType) < 0 ||
        PyType_Ready(&ServerType) < 0 || PyType_Ready(&StateLockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Machine", (PyObject *)&MachineType) < 0 ||
        PyModule_AddObjectRef(m, "Log", (PyObject *)&LogType) < 0 ||
        PyModule_AddObjectRef(m, "Server", (PyObject *)&ServerType) < 0 ||
        PyModule_AddObjectRef(m, "StateLock", (PyObject *)&StateLockType) < 0 ||
        PyModule_AddFunctions(m, functions) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
