/* pyembed: a C program embedding libpython3.11, for
 * tests/integration/test_languages.py:
 *
 *   cc $(python3.11-config --embed --cflags) -o pyembed pyembed.c \
 *      $(python3.11-config --embed --ldflags)
 *
 * Its Python code calls a C function of the program (embed.call), which
 * calls Python back, which burns CPU forever:
 *   main -> PyRun_SimpleString: <module> -> outer -> embed_call (C) -> inner
 * so that the stack holds a native frame of the program between Python
 * frames, and the interpreter is libpython3.11.so, not the executable.
 * Prints "pid P", "hot T" (its main thread) and "ready", and exits after
 * 120 s. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <unistd.h>

/* embed.call(fn): calls fn with no arguments. */
__attribute__((noinline))
static PyObject *embed_call(PyObject *self, PyObject *args)
{
	PyObject *fn, *r;

	(void)self;
	if (!PyArg_ParseTuple(args, "O", &fn))
		return NULL;
	r = PyObject_CallNoArgs(fn);
	__asm__ volatile("");          /* no tail call: this frame stays */
	return r;
}

static PyMethodDef methods[] = {
	{ "call", embed_call, METH_VARARGS, "call(fn): fn()" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = { PyModuleDef_HEAD_INIT, "embed", NULL, -1, methods,
                                     NULL, NULL, NULL, NULL };

static PyObject *init_embed(void)
{
	return PyModule_Create(&module);
}

static const char code[] =
	"import embed, os, threading\n"
	"def inner():\n"
	"    x = 0\n"
	"    while True:\n"
	"        x = (x * 31 + 7) % 1000003\n"
	"def outer():\n"
	"    embed.call(inner)\n"
	"print(f'pid {os.getpid()}\\nhot {threading.get_native_id()}\\nready', flush=True)\n"
	"outer()\n";

int main(void)
{
	alarm(120);
	if (PyImport_AppendInittab("embed", init_embed) < 0)
		return 1;
	Py_Initialize();
	int r = PyRun_SimpleString(code);
	Py_Finalize();
	return r == 0 ? 0 : 1;
}
