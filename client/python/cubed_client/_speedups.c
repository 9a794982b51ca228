/* cubed_client._speedups: a builtin launch's Commands (its output's empty, its execute)
 * assembled and handed to the native client core in C (Note [Compiled launch] in _native.py says
 * why and when it is used).
 *
 * Built against CPython's stable ABI (Py_LIMITED_API 3.10: METH_FASTCALL is in it from 3.10; 3.11
 * where the building Python is 3.11 or later, for read_into's buffer protocol), so one build loads
 * on every later CPython: the wheel built on Debian 12's Python 3.11 runs on the GPU machine's
 * 3.12. Optional: setup.py builds it when a compiler and Python's headers are there;
 * without it the SDK runs the same launch in Python (_native.py, _wire.py).
 *
 * It knows protobuf's wire format for the fields it writes (Note [Hand-encoded commands] in
 * _wire.py: Command.execute = 6 and its bindings = 3, Command.empty = 4 and its id and size; the
 * rest comes encoded; memo_launch's scalars: Bindings.scalars = 3, ScalarGroup's fields) and the
 * C ABI's cubed_client_send, cubed_client_send_launch,
 * cubed_client_read_into, cubed_error_clear and cubed_client_next_id
 * (client/c_api/cubed_client_c.h), whose addresses the caller passes: the extension links against
 * neither libprotobuf nor the library.
 */

#ifndef Py_LIMITED_API /* setup.py defines it; the same value for a build by hand. */
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The C ABI's types, as client/c_api/cubed_client_c.h declares them. */
typedef struct {
  int32_t code;
  char* message;
} cubed_error;
typedef int32_t (*cubed_send_fn)(void* client, const void* command, size_t size, void* reply,
                                 cubed_error* error);
typedef void (*cubed_error_clear_fn)(cubed_error* error);
typedef int32_t (*cubed_next_id_fn)(void* client, uint64_t* id, cubed_error* error);
typedef int32_t (*cubed_send_launch_fn)(void* client, const void* launch, const uint64_t* buffers,
                                        size_t count, const void* scalars, size_t scalars_size,
                                        cubed_error* error);
typedef int32_t (*cubed_read_into_fn)(void* client, uint64_t id, uint64_t offset_start,
                                      uint64_t offset_end, void* out, uint64_t capacity,
                                      uint64_t* size, int64_t timeout_ms, cubed_error* error);

enum {
  kEmptyTag = 0x22,     /* Command.empty = 4, length-delimited. */
  kIdTag = 0x08,        /* Command.Empty.id = 1, varint. */
  kSizeTag = 0x10,      /* Command.Empty.size = 2, varint. */
  kExecuteTag = 0x32,   /* Command.execute = 6, length-delimited. */
  kBindingsTag = 0x1a,  /* Command.Execute.bindings = 3, length-delimited. */
  kBufferTag = 0x0a,    /* Bindings.buffers = 1, length-delimited. */
  kHandleTag = 0x08,    /* Binding.handle = 1, varint. */
  kOffsetTag = 0x10,    /* Binding.offset_start = 2, varint. */
  kOffsetEndTag = 0x18, /* Binding.offset_end = 3, varint. */
  kStackBytes = 1024,   /* Commands up to this size are assembled without malloc. */
};

/* Writes the varint of n at p; returns its length (at most 10). */
static size_t put_varint(uint8_t* p, uint64_t n) {
  size_t i = 0;
  while (n >= 0x80) {
    p[i++] = (uint8_t)(n | 0x80);
    n >>= 7;
  }
  p[i++] = (uint8_t)n;
  return i;
}

static size_t varint_size(uint64_t n) {
  size_t i = 1;
  while (n >= 0x80) {
    n >>= 7;
    ++i;
  }
  return i;
}

/* The bytes of a bytes object, or NULL with TypeError naming `what`. */
static const char* bytes_of(PyObject* o, Py_ssize_t* size, const char* what) {
  char* data = NULL;
  if (!PyBytes_Check(o)) {
    PyErr_Format(PyExc_TypeError, "execute: %s must be bytes", what);
    return NULL;
  }
  if (PyBytes_AsStringAndSize(o, &data, size) < 0) return NULL;
  return data;
}

/* The C ABI's functions and client of a target tuple (send, error_clear, client, next_id), all
 * nonzero addresses; 0 with TypeError (or OverflowError) otherwise. */
typedef struct {
  cubed_send_fn send;
  cubed_error_clear_fn clear;
  void* client;
  cubed_next_id_fn next_id;
} Target;

/* The last target parsed and its parse: a transport passes the same tuple with every call, so one
 * identity check replaces four conversions. Held, so that no other tuple can take its address
 * while it is remembered; a tuple's parse never changes (its ints are immutable). Touched only
 * with the GIL held. */
static PyObject* last_target = NULL;
static Target last_parsed;

static int parse_target(PyObject* target, Target* out) {
  if (target == last_target) {
    *out = last_parsed;
    return 1;
  }
  if (!PyTuple_Check(target) || PyTuple_Size(target) != 4) {
    PyErr_SetString(PyExc_TypeError, "target must be (send, error_clear, client, next_id)");
    return 0;
  }
  void* addresses[4];
  for (Py_ssize_t i = 0; i < 4; ++i) {
    addresses[i] = PyLong_AsVoidPtr(PyTuple_GetItem(target, i));
    if (addresses[i] == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "target holds a null address");
      return 0;
    }
  }
  out->send = (cubed_send_fn)addresses[0];
  out->clear = (cubed_error_clear_fn)addresses[1];
  out->client = addresses[2];
  out->next_id = (cubed_next_id_fn)addresses[3];
  PyObject* old = last_target;
  Py_INCREF(target);
  last_target = target;
  last_parsed = *out;
  Py_XDECREF(old); /* After the state is whole again. */
  return 1;
}

/* The address an int holds (a function of the library, a prepared launch); NULL with an
 * exception when it is not an int or is 0 (TypeError naming `fn`, the function it was passed to).
 */
static void* address_of(PyObject* o, const char* fn) {
  void* address = PyLong_AsVoidPtr(o);
  if (address == NULL && !PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "%s: a null address", fn);
  }
  return address;
}

/* (code, message) of a failed library call, its message freed through cubed_error_clear. */
static PyObject* failure(const Target* target, int32_t code, cubed_error* error) {
  const char* message = error->message != NULL ? error->message : "";
  PyObject* text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  target->clear(error);
  if (text == NULL) return NULL;
  return Py_BuildValue("(iN)", (int)code, text);
}

/* execute(target, head, views, tail, mode) -> None or (code, message)
 *
 * Sends Command{execute: head + bindings{views' encoded Bindings.buffers entries, tail} + mode}:
 * `target` is (the addresses of cubed_client_send and cubed_error_clear, the cubed_client*, the
 * address of cubed_client_next_id), `head` the Execute's encoded kernel and count fields, `views` a
 * list or tuple of (layout, encoded binding) pairs (Tensor._launch_view()), `tail` the encoded
 * metadata and scalars fields of Bindings, `mode` the encoded mode field. Returns None once the
 * command is queued, or the library's (code, message) when it refused it (nothing was sent); raises
 * TypeError for arguments of the wrong shape and MemoryError. The GIL is released around the send,
 * as ctypes does: it may wait for room in the command ring while the daemon catches up. */
static PyObject* execute(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "execute: takes (target, head, views, tail, mode)");
    return NULL;
  }
  Target target;
  if (!parse_target(args[0], &target)) return NULL;

  Py_ssize_t head_size, tail_size, mode_size;
  const char* head = bytes_of(args[1], &head_size, "head");
  if (head == NULL) return NULL;
  const char* tail = bytes_of(args[3], &tail_size, "tail");
  if (tail == NULL) return NULL;
  const char* mode = bytes_of(args[4], &mode_size, "mode");
  if (mode == NULL) return NULL;

  PyObject* views = args[2];
  const int is_list = PyList_Check(views);
  if (!is_list && !PyTuple_Check(views)) {
    PyErr_SetString(PyExc_TypeError, "execute: views must be a list or tuple");
    return NULL;
  }
  /* The views are borrowed: nothing below runs Python code that could change the list. */
  const Py_ssize_t count = is_list ? PyList_Size(views) : PyTuple_Size(views);

  /* Sizes first, their sum checked: one bytes object may stand in many views. */
  size_t bindings_size = (size_t)tail_size;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* view = is_list ? PyList_GetItem(views, i) : PyTuple_GetItem(views, i);
    if (!PyTuple_Check(view) || PyTuple_Size(view) != 2 ||
        !PyBytes_Check(PyTuple_GetItem(view, 1))) {
      PyErr_Format(PyExc_TypeError, "execute: views[%zd] must be (layout, bytes)", i);
      return NULL;
    }
    const size_t size = (size_t)PyBytes_Size(PyTuple_GetItem(view, 1));
    if (size > (size_t)PY_SSIZE_T_MAX - bindings_size) {
      PyErr_SetString(PyExc_OverflowError, "execute: the views' bytes add up past PY_SSIZE_T_MAX");
      return NULL;
    }
    bindings_size += size;
  }
  const size_t execute_size =
      (size_t)head_size + 1 + varint_size(bindings_size) + bindings_size + (size_t)mode_size;
  const size_t total = 1 + varint_size(execute_size) + execute_size;

  uint8_t stack[kStackBytes];
  uint8_t* message = total <= sizeof stack ? stack : (uint8_t*)malloc(total);
  if (message == NULL) return PyErr_NoMemory();
  size_t n = 0;
  message[n++] = kExecuteTag;
  n += put_varint(message + n, execute_size);
  memcpy(message + n, head, (size_t)head_size);
  n += (size_t)head_size;
  message[n++] = kBindingsTag;
  n += put_varint(message + n, bindings_size);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* view = is_list ? PyList_GetItem(views, i) : PyTuple_GetItem(views, i);
    PyObject* binding = PyTuple_GetItem(view, 1);
    const size_t size = (size_t)PyBytes_Size(binding);
    memcpy(message + n, PyBytes_AsString(binding), size);
    n += size;
  }
  memcpy(message + n, tail, (size_t)tail_size);
  n += (size_t)tail_size;
  memcpy(message + n, mode, (size_t)mode_size);
  n += (size_t)mode_size;

  cubed_error error = {0, NULL};
  PyThreadState* gil = PyEval_SaveThread(); /* The send may wait for room in the ring. */
  const int32_t code = target.send(target.client, message, n, NULL, &error);
  PyEval_RestoreThread(gil);
  if (message != stack) free(message);
  if (code == 0) Py_RETURN_NONE;
  return failure(&target, code, &error);
}

/* Reads the varint at *p (before end) into *out and advances *p; 0 when it is cut short or
 * longer than 10 bytes. */
static int get_varint(const uint8_t** p, const uint8_t* end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && *p < end; shift += 7) {
    const uint8_t byte = *(*p)++;
    v |= (uint64_t)(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *out = v;
      return 1;
    }
  }
  return 0;
}

/* The handle, offset_start and offset_end of an encoded Bindings.buffers entry (binding()'s, or
 * _wire.binding's bytes); 0 when it is not exactly one such entry of varint fields 1-3. */
static int decode_buffer(const uint8_t* p, size_t size, uint64_t out[3]) {
  const uint8_t* end = p + size;
  out[0] = out[1] = out[2] = 0;
  if (size < 2 || p[0] != kBufferTag || p[1] != size - 2) return 0;
  p += 2;
  while (p < end) {
    const uint8_t tag = *p++;
    if (tag != kHandleTag && tag != kOffsetTag && tag != kOffsetEndTag) return 0;
    if (!get_varint(&p, end, &out[(tag >> 3) - 1])) return 0;
  }
  return 1;
}

/* launch(target, send_launch, prepared, views, scalars) -> None or (code, message)
 *
 * execute()'s launch through a prepared launch (Note [Prepared C ABI launches] in
 * client/c_api/cubed_client_c_launch.cc): `send_launch` is the address of
 * cubed_client_send_launch, `prepared` a cubed_launch* of the launch's head, metadata and mode,
 * `views` as execute's (each binding's encoded bytes are decoded back to its handle and offsets),
 * `scalars` the encoded scalars field of Bindings (may be empty). Returns None once queued, or the
 * library's (code, message) when it refused it; TypeError for arguments of the wrong shape
 * (nothing sent). The GIL is released around the send. */
static PyObject* launch(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError,
                    "launch: takes (target, send_launch, prepared, views, scalars)");
    return NULL;
  }
  Target target;
  if (!parse_target(args[0], &target)) return NULL;
  const cubed_send_launch_fn send = (cubed_send_launch_fn)address_of(args[1], "launch");
  if (send == NULL) return NULL;
  const void* prepared = address_of(args[2], "launch");
  if (prepared == NULL) return NULL;
  Py_ssize_t scalars_size;
  const char* scalars = bytes_of(args[4], &scalars_size, "scalars");
  if (scalars == NULL) return NULL;
  PyObject* views = args[3];
  const int is_list = PyList_Check(views);
  if (!is_list && !PyTuple_Check(views)) {
    PyErr_SetString(PyExc_TypeError, "launch: views must be a list or tuple");
    return NULL;
  }
  const Py_ssize_t count = is_list ? PyList_Size(views) : PyTuple_Size(views);
  uint64_t stack[3 * 16];
  uint64_t* buffers = count <= 16 ? stack : (uint64_t*)malloc(sizeof(uint64_t) * 3 * (size_t)count);
  if (buffers == NULL) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* view = is_list ? PyList_GetItem(views, i) : PyTuple_GetItem(views, i);
    PyObject* binding =
        PyTuple_Check(view) && PyTuple_Size(view) == 2 ? PyTuple_GetItem(view, 1) : NULL;
    if (binding == NULL || !PyBytes_Check(binding) ||
        !decode_buffer((const uint8_t*)PyBytes_AsString(binding), (size_t)PyBytes_Size(binding),
                       buffers + 3 * i)) {
      if (buffers != stack) free(buffers);
      PyErr_Format(PyExc_TypeError, "launch: views[%zd] must be (layout, an encoded binding)", i);
      return NULL;
    }
  }
  cubed_error error = {0, NULL};
  PyThreadState* gil = PyEval_SaveThread(); /* The send may wait for room in the ring. */
  const int32_t code =
      send(target.client, prepared, buffers, (size_t)count, scalars, (size_t)scalars_size, &error);
  PyEval_RestoreThread(gil);
  if (buffers != stack) free(buffers);
  if (code == 0) Py_RETURN_NONE;
  return failure(&target, code, &error);
}

/* empty(target, size) -> the new handle id, or (code, message)
 *
 * Takes a fresh client id (cubed_client_next_id) and sends Command{empty: {id, size}}, as
 * _wire.empty encodes it; `target` as execute's, `size` 0 .. 2^64 - 1 (the daemon refuses 0:
 * the handle is then poisoned, as any refused command's). Returns the id once the command is
 * queued, or the library's (code, message) when it failed (then nothing was sent); raises
 * TypeError / OverflowError for bad arguments. */
static PyObject* empty(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "empty: takes (target, size)");
    return NULL;
  }
  Target target;
  if (!parse_target(args[0], &target)) return NULL;
  const unsigned long long size = PyLong_AsUnsignedLongLong(args[1]);
  if (PyErr_Occurred()) return NULL;

  cubed_error error = {0, NULL};
  uint64_t id = 0;
  int32_t code = target.next_id(target.client, &id, &error);
  if (code != 0) return failure(&target, code, &error);
  uint8_t message[2 + 1 + 10 + 1 + 10];
  size_t n = 2; /* The tag and the length, written last (the payload is at most 22 bytes). */
  message[n++] = kIdTag;
  n += put_varint(message + n, id);
  message[n++] = kSizeTag;
  n += put_varint(message + n, size);
  message[0] = kEmptyTag;
  message[1] = (uint8_t)(n - 2);
  PyThreadState* gil = PyEval_SaveThread();
  code = target.send(target.client, message, n, NULL, &error);
  PyEval_RestoreThread(gil);
  if (code != 0) return failure(&target, code, &error);
  return PyLong_FromUnsignedLongLong(id);
}

/* binding(handle, offset_start) -> bytes
 *
 * _wire.binding's bytes: a Bindings.buffers entry (tag 0x0a, its length) holding a Binding of
 * `handle` (field 1) from `offset_start` (field 2), each omitted when 0 as protobuf does; both
 * 0 .. 2^64 - 1 (OverflowError / TypeError otherwise). */
static PyObject* binding(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "binding: takes (handle, offset_start)");
    return NULL;
  }
  const unsigned long long handle = PyLong_AsUnsignedLongLong(args[0]);
  if (PyErr_Occurred()) return NULL;
  const unsigned long long offset = PyLong_AsUnsignedLongLong(args[1]);
  if (PyErr_Occurred()) return NULL;
  uint8_t out[2 + 1 + 10 + 1 + 10];
  size_t n = 2; /* The tag and the length, written last (the payload is at most 22 bytes). */
  if (handle != 0) {
    out[n++] = kHandleTag;
    n += put_varint(out + n, handle);
  }
  if (offset != 0) {
    out[n++] = kOffsetTag;
    n += put_varint(out + n, offset);
  }
  out[0] = kBufferTag;
  out[1] = (uint8_t)(n - 2);
  return PyBytes_FromStringAndSize((const char*)out, (Py_ssize_t)n);
}

/* The launch memo: Client._launch in one C call (Note [Launch memo] in _native.py). */

static PyObject* kWireAttr;       /* "_wire" */
static PyObject* kDtypeAttr;      /* "_dtype" */
static PyObject* kLaunchViewAttr; /* "_launch_view" */
static PyObject* kValuesAttr;     /* "values" */
static PyObject* kGroupDtypeAttr; /* "dtype" */

enum {
  kMemoTensors = 16,  /* Launches of more tensors take the Python path. */
  kMemoGroups = 8,    /* Likewise scalar groups. */
  kScalarBytes = 512, /* Likewise an encoded scalars field longer than this. */
  kGroupTag = 0x1a,   /* Bindings.scalars = 3, length-delimited. */
  kElemTag = 0x08,    /* ScalarGroup.elem = 1, varint. */
  kFloatsTag = 0x12,  /* ScalarGroup.floats = 2, packed doubles. */
  kIntsTag = 0x1a,    /* ScalarGroup.ints = 3, packed varints (two's complement). */
  kUintsTag = 0x22,   /* ScalarGroup.uints = 4, packed varints. */
  kKindFloat = 0,     /* How a group's values are encoded (memo entry's groups bytes). */
  kKindUint = 1,
  kKindBool = 2,
  kKindInt = 3,
};

/* The items of a list or tuple (borrowed; the caller holds the sequence) and their number, or -1
 * when `o` is neither. */
static Py_ssize_t items_of(PyObject* o, PyObject* items[], Py_ssize_t capacity) {
  const int is_list = PyList_Check(o);
  if (!is_list && !PyTuple_Check(o)) return -1;
  const Py_ssize_t n = is_list ? PyList_Size(o) : PyTuple_Size(o);
  if (n > capacity) return -1;
  for (Py_ssize_t i = 0; i < n; ++i)
    items[i] = is_list ? PyList_GetItem(o, i) : PyTuple_GetItem(o, i);
  return n;
}

/* One value of a scalar group as its packed field holds it: the double's bits, or the varint's
 * number. 0 when the value needs Python's conversion (the Python path then encodes the group, and
 * raises what it raises); no exception is left set. */
static int scalar_value(PyObject* v, int kind, uint64_t* out) {
  /* Exact types only: a subclass may override __float__ / __int__, which to_proto calls. */
  if (kind == kKindFloat) {
    double d;
    if (PyFloat_CheckExact(v)) {
      d = PyFloat_AsDouble(v);
    } else if (PyLong_CheckExact(v)) {
      d = PyLong_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
      }
    } else {
      return 0;
    }
    memcpy(out, &d, sizeof d);
    return 1;
  }
  if (kind == kKindBool) {
    if (v != Py_True && v != Py_False && !PyLong_CheckExact(v)) return 0;
    const int truth = PyObject_IsTrue(v);
    if (truth < 0) {
      PyErr_Clear();
      return 0;
    }
    *out = (uint64_t)truth;
    return 1;
  }
  if (!PyLong_CheckExact(v) && !PyBool_Check(v)) return 0;
  if (kind == kKindUint) {
    *out = (uint64_t)PyLong_AsUnsignedLongLong(v);
  } else {
    *out = (uint64_t)PyLong_AsLongLong(v);
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return 1;
}

/* Appends the Bindings.scalars entries of `groups` (their values attributes) encoded as
 * `kinds` (elem, kind per group) say to out[*n ...], at most kScalarBytes in all. 0 when a value
 * needs the Python path or the field would be longer; -1 with an exception. */
static int encode_scalars(PyObject* const groups[], Py_ssize_t count, const uint8_t* kinds,
                          uint8_t* out, size_t* n) {
  for (Py_ssize_t g = 0; g < count; ++g) {
    PyObject* values = PyObject_GetAttr(groups[g], kValuesAttr);
    if (values == NULL) return -1;
    /* Borrowed from `values`, which this holds: scalar_value runs no Python code. */
    PyObject* items[64];
    const Py_ssize_t k = items_of(values, items, 64);
    const int elem = kinds[2 * g], kind = kinds[2 * g + 1];
    uint8_t packed[kScalarBytes];
    size_t p = 0;
    int ok = k >= 0;
    for (Py_ssize_t i = 0; ok && i < k; ++i) {
      uint64_t bits;
      ok = scalar_value(items[i], kind, &bits) && p + 10 <= sizeof packed;
      if (!ok) break;
      if (kind == kKindFloat) {
        for (int b = 0; b < 8; ++b) packed[p++] = (uint8_t)(bits >> (8 * b));
      } else {
        p += put_varint(packed + p, bits);
      }
    }
    Py_DECREF(values);
    if (!ok) return 0;
    /* ScalarGroup: elem (omitted when 0, as protobuf does), then the packed values (omitted when
     * none). */
    const size_t field = p == 0 ? 0 : 1 + varint_size(p) + p;
    const size_t group = (elem != 0 ? 1 + varint_size((uint64_t)elem) : 0) + field;
    if (*n + 1 + varint_size(group) + group > kScalarBytes) return 0;
    out[(*n)++] = kGroupTag;
    *n += put_varint(out + *n, group);
    if (elem != 0) {
      out[(*n)++] = kElemTag;
      *n += put_varint(out + *n, (uint64_t)elem);
    }
    if (p != 0) {
      out[(*n)++] = kind == kKindFloat ? kFloatsTag : kind == kKindInt ? kIntsTag : kUintsTag;
      *n += put_varint(out + *n, p);
      memcpy(out + *n, packed, p);
      *n += p;
    }
  }
  return 1;
}

/* What memo_launch gathered of one launch: its key, its buffers, the objects the key names. */
typedef struct {
  uint64_t key[6 + kMemoTensors + kMemoGroups];
  size_t key_words;
  uint64_t buffers[3 * kMemoTensors];
  Py_ssize_t count;                               /* Tensors: the inputs, then the output. */
  PyObject* held[2 + kMemoTensors + kMemoGroups]; /* New references: dtypes, views. */
  Py_ssize_t held_count;
} MemoLaunch;

/* Holds `o` (a new reference, or NULL with an exception) in m; 0 when it is NULL. */
static int hold(MemoLaunch* m, PyObject* o) {
  if (o == NULL) return 0;
  m->held[m->held_count++] = o;
  return 1;
}

/* Fills m's key and buffers from the launch's objects (memo_launch's arguments); 0 with an
 * exception. */
static int gather(MemoLaunch* m, PyObject* name, PyObject* dtype, long long axis,
                  PyObject* index_dtype, int tf32, PyObject* const tensors[], Py_ssize_t count,
                  PyObject* const groups[], Py_ssize_t group_count) {
  PyObject* out_dtype = PyObject_GetAttr(tensors[count - 1], kDtypeAttr);
  if (!hold(m, out_dtype)) return 0;
  if (dtype == Py_None) {
    dtype = count > 1 ? PyObject_GetAttr(tensors[0], kDtypeAttr) : out_dtype;
    if (count == 1) Py_INCREF(dtype);
  } else {
    Py_INCREF(dtype);
  }
  if (!hold(m, dtype)) return 0;
  uint64_t* key = m->key;
  key[0] = (uint64_t)(uintptr_t)name;
  key[1] = (uint64_t)(uintptr_t)dtype;
  key[2] = (uint64_t)(uintptr_t)out_dtype;
  key[3] = (uint64_t)(uintptr_t)index_dtype;
  key[4] = (uint64_t)axis;
  key[5] = ((uint64_t)count << 32) | ((uint64_t)group_count << 8) | (uint64_t)tf32;
  m->key_words = 6;
  m->count = count;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* view = PyObject_GetAttr(tensors[i], kWireAttr);
    if (view == Py_None) {
      Py_DECREF(view);
      view = PyObject_CallMethodObjArgs(tensors[i], kLaunchViewAttr, NULL);
    }
    if (!hold(m, view)) return 0;
    PyObject* layout =
        PyTuple_Check(view) && PyTuple_Size(view) == 2 ? PyTuple_GetItem(view, 0) : NULL;
    PyObject* encoded = layout != NULL ? PyTuple_GetItem(view, 1) : NULL;
    if (encoded == NULL || !PyBytes_Check(encoded) ||
        !decode_buffer((const uint8_t*)PyBytes_AsString(encoded), (size_t)PyBytes_Size(encoded),
                       m->buffers + 3 * i)) {
      PyErr_Format(PyExc_TypeError, "memo_launch: tensor %zd's view is not (layout, binding)", i);
      return 0;
    }
    key[m->key_words++] = (uint64_t)(uintptr_t)layout;
  }
  for (Py_ssize_t g = 0; g < group_count; ++g) {
    PyObject* group_dtype = PyObject_GetAttr(groups[g], kGroupDtypeAttr);
    if (!hold(m, group_dtype)) return 0;
    key[m->key_words++] = (uint64_t)(uintptr_t)group_dtype;
  }
  return 1;
}

/* [key, keep] of a miss: keep holds name, index_dtype and m's objects, every address in the key. */
static PyObject* miss(const MemoLaunch* m, PyObject* key, PyObject* name, PyObject* index_dtype) {
  PyObject* keep = PyTuple_New(m->held_count + 2);
  if (keep == NULL) {
    Py_DECREF(key);
    return NULL;
  }
  Py_INCREF(name);
  PyTuple_SetItem(keep, 0, name);
  Py_INCREF(index_dtype);
  PyTuple_SetItem(keep, 1, index_dtype);
  for (Py_ssize_t i = 0; i < m->held_count; ++i) {
    Py_INCREF(m->held[i]);
    PyTuple_SetItem(keep, i + 2, m->held[i]);
  }
  return Py_BuildValue("[NN]", key, keep);
}

/* Sends m's launch through `entry` (a memo entry, held by the caller): None, (code, message),
 * False (a scalar value for the Python path) or NULL with an exception. */
static PyObject* send_entry(const MemoLaunch* m, PyObject* entry, const Target* target,
                            cubed_send_launch_fn send, PyObject* const groups[],
                            Py_ssize_t group_count) {
  PyObject* address =
      PyTuple_Check(entry) && PyTuple_Size(entry) == 3 ? PyTuple_GetItem(entry, 0) : NULL;
  PyObject* kinds = address != NULL ? PyTuple_GetItem(entry, 1) : NULL;
  const void* prepared = address != NULL ? PyLong_AsVoidPtr(address) : NULL;
  if (prepared == NULL || kinds == NULL || !PyBytes_Check(kinds) ||
      PyBytes_Size(kinds) != 2 * group_count) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "memo_launch: a malformed entry");
    return NULL;
  }
  uint8_t scalars[kScalarBytes];
  size_t scalars_size = 0;
  const int encoded = encode_scalars(groups, group_count, (const uint8_t*)PyBytes_AsString(kinds),
                                     scalars, &scalars_size);
  if (encoded < 0) return NULL;
  if (encoded == 0) Py_RETURN_FALSE;
  cubed_error error = {0, NULL};
  /* The send may wait for room in the ring or the queue, without bound while the daemon is
   * behind: without the GIL, so that other threads run (and may cancel the stream). ~0.07 us of
   * a launch on the 2-core VM; a send that tries first with the GIL held is the way to save it. */
  PyThreadState* gil = PyEval_SaveThread();
  const int32_t code =
      send(target->client, prepared, m->buffers, (size_t)m->count, scalars, scalars_size, &error);
  PyEval_RestoreThread(gil);
  if (code == 0) Py_RETURN_NONE;
  return failure(target, code, &error);
}

/* memo_launch(memo, target, send_launch, name, dtype, axis, index_dtype, allow_tf32, inputs, out,
 *             scalars) -> None, (code, message), [key, keep] or False
 *
 * Client._launch's launch through the memo (Note [Launch memo]): `memo` a dict of key bytes ->
 * (prepared launch address, groups bytes: each scalar group's elem and kind, keep), `target` and
 * `send_launch` as launch()'s, the rest _launch's arguments (`inputs` a list or tuple of Tensors,
 * `scalars` a list or tuple of Scalars). A tensor without its view gets it from _launch_view().
 * Returns None once sent, the library's (code, message) when it refused the launch, [key, keep] on
 * a miss (keep: the objects whose addresses the key holds, for the entry to hold: (name,
 * index_dtype, out's dtype, the launch's dtype, each tensor's view, each group's dtype), whose
 * dtype and views the caller's Python path uses, so that what it remembers is what was keyed), and
 * False for a launch the memo does not take (a None target: the transport's compiled launches are
 * off; more than 16 tensors or 8 scalar groups, an axis or allow_tf32 that are not an int and a
 * bool, a scalar value that needs Python's conversion).
 * Exceptions of the tensors' attributes propagate. The GIL is released around the send. */
static PyObject* memo_launch(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 11 || !PyDict_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "memo_launch: takes (memo, target, send_launch, name, dtype, axis, "
                    "index_dtype, allow_tf32, inputs, out, scalars)");
    return NULL;
  }
  if (args[1] == Py_None) Py_RETURN_FALSE; /* The transport's compiled launches are off. */
  Target target;
  if (!parse_target(args[1], &target)) return NULL;
  const cubed_send_launch_fn send = (cubed_send_launch_fn)address_of(args[2], "memo_launch");
  if (send == NULL) return NULL;
  PyObject* tensors[kMemoTensors];
  const Py_ssize_t inputs = items_of(args[8], tensors, kMemoTensors - 1);
  PyObject* groups[kMemoGroups];
  const Py_ssize_t group_count = items_of(args[10], groups, kMemoGroups);
  if (inputs < 0 || group_count < 0 || !PyLong_CheckExact(args[5]) ||
      (args[7] != Py_True && args[7] != Py_False)) {
    Py_RETURN_FALSE;
  }
  const long long axis = PyLong_AsLongLong(args[5]);
  if (axis == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  tensors[inputs] = args[9];
  /* Held, not borrowed: _launch_view() and the attributes may run Python code. */
  for (Py_ssize_t i = 0; i <= inputs; ++i) Py_INCREF(tensors[i]);
  for (Py_ssize_t g = 0; g < group_count; ++g) Py_INCREF(groups[g]);

  MemoLaunch m;
  m.held_count = 0;
  PyObject* result = NULL;
  if (gather(&m, args[3], args[4], axis, args[6], args[7] == Py_True, tensors, inputs + 1, groups,
             group_count)) {
    PyObject* key =
        PyBytes_FromStringAndSize((const char*)m.key, (Py_ssize_t)(m.key_words * sizeof m.key[0]));
    PyObject* entry = key != NULL ? PyDict_GetItemWithError(args[0], key) : NULL; /* Borrowed. */
    if (entry != NULL) {
      Py_DECREF(key);
      Py_INCREF(entry); /* Held across the send: another thread may drop it from the memo. */
      result = send_entry(&m, entry, &target, send, groups, group_count);
      Py_DECREF(entry);
    } else if (key != NULL && !PyErr_Occurred()) {
      result = miss(&m, key, args[3], args[6]);
    } else {
      Py_XDECREF(key);
    }
  }
  for (Py_ssize_t i = 0; i < m.held_count; ++i) Py_DECREF(m.held[i]);
  for (Py_ssize_t i = 0; i <= inputs; ++i) Py_DECREF(tensors[i]);
  for (Py_ssize_t g = 0; g < group_count; ++g) Py_DECREF(groups[g]);
  return result;
}

#if Py_LIMITED_API + 0 >= 0x030B0000 /* The buffer protocol is in the stable ABI from 3.11. */
#define CUBED_COMPILED_READ 1
/* read_into(target, read_into, handle, offset_start, offset_end, out, timeout_ms)
 *     -> None or (code, message)
 *
 * Client.read's small read (Note [Small reads] in _client.py) in one C call: reads bytes
 * [offset_start, offset_end) of `handle` through cubed_client_read_into (whose address is
 * `read_into`; `target` as execute's) into `out`, a writable C-contiguous buffer of exactly those
 * bytes (a fresh ndarray), waiting up to `timeout_ms` (< 0: without end) on this thread with the
 * GIL released. None once every byte is in; the library's (code, message) when the read failed
 * (DEADLINE_EXCEEDED: the caller's timeout passed), (13, message) when the daemon answered
 * another size. TypeError / OverflowError / BufferError for bad arguments. What it saves against
 * the same call through ctypes (~2 us a read on a GPU host): the error and size structs, the
 * byrefs and ctypes' conversion of nine arguments. */
static PyObject* read_into(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError,
                    "read_into: takes (target, read_into, handle, offset_start, offset_end, out, "
                    "timeout_ms)");
    return NULL;
  }
  Target target;
  if (!parse_target(args[0], &target)) return NULL;
  const cubed_read_into_fn read = (cubed_read_into_fn)address_of(args[1], "read_into");
  if (read == NULL) return NULL;
  uint64_t numbers[3];
  for (int i = 0; i < 3; ++i) {
    numbers[i] = PyLong_AsUnsignedLongLong(args[2 + i]);
    if (PyErr_Occurred()) return NULL;
  }
  const long long timeout_ms = PyLong_AsLongLong(args[6]);
  if (PyErr_Occurred()) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(args[5], &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
  cubed_error error = {0, NULL};
  uint64_t size = 0;
  PyThreadState* gil = PyEval_SaveThread();
  const int32_t code = read(target.client, numbers[0], numbers[1], numbers[2], view.buf,
                            (uint64_t)view.len, &size, (int64_t)timeout_ms, &error);
  PyEval_RestoreThread(gil);
  const Py_ssize_t len = view.len;
  PyBuffer_Release(&view);
  if (code != 0) return failure(&target, code, &error);
  if (size != (uint64_t)len) {
    return Py_BuildValue("(iN)", 13,
                         PyUnicode_FromFormat("read: the daemon answered %llu bytes, not %zd",
                                              (unsigned long long)size, len));
  }
  Py_RETURN_NONE;
}
#endif

static PyMethodDef kMethods[] = {
    {"execute", (PyCFunction)(void (*)(void))execute, METH_FASTCALL,
     "execute(target, head, views, tail, mode) -> None or (code, message): sends a builtin "
     "launch's Command through the native client core (cubed_client._native)."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(target, send_launch, prepared, views, scalars) -> None or (code, message): sends a "
     "builtin launch through a prepared launch of the native client core."},
    {"empty", (PyCFunction)(void (*)(void))empty, METH_FASTCALL,
     "empty(target, size) -> id or (code, message): takes a client id and sends an empty of "
     "`size` bytes through the native client core."},
    {"memo_launch", (PyCFunction)(void (*)(void))memo_launch, METH_FASTCALL,
     "memo_launch(memo, target, send_launch, name, dtype, axis, index_dtype, allow_tf32, inputs, "
     "out, scalars) -> None, (code, message), [key, keep] or False: Client._launch through the "
     "launch memo (Note [Launch memo])."},
    {"binding", (PyCFunction)(void (*)(void))binding, METH_FASTCALL,
     "binding(handle, offset_start) -> bytes: _wire.binding's encoding, in C."},
#ifdef CUBED_COMPILED_READ
    {"read_into", (PyCFunction)(void (*)(void))read_into, METH_FASTCALL,
     "read_into(target, read_into, handle, offset_start, offset_end, out, timeout_ms) -> None or "
     "(code, message): a small read into `out` through the native client core, waited for."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "cubed_client._speedups",
    "A builtin launch's Command assembled in C (Note [Compiled launch] in _native.py).",
    -1,
    kMethods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
  kWireAttr = PyUnicode_InternFromString("_wire");
  kDtypeAttr = PyUnicode_InternFromString("_dtype");
  kLaunchViewAttr = PyUnicode_InternFromString("_launch_view");
  kValuesAttr = PyUnicode_InternFromString("values");
  kGroupDtypeAttr = PyUnicode_InternFromString("dtype");
  if (kWireAttr == NULL || kDtypeAttr == NULL || kLaunchViewAttr == NULL || kValuesAttr == NULL ||
      kGroupDtypeAttr == NULL) {
    return NULL;
  }
  return PyModule_Create(&kModule);
}
