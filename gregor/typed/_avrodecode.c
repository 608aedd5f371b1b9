/* Avro binary records decoded straight into Apache Arrow column buffers, driven by a program.
 *
 * The program is a flat list of nodes compiled in Python (gregor/typed/avro_plan.py) from a schema
 * that fastavro has parsed: one node per Arrow array to build (a record, an array's items, a map's keys
 * and values, a leaf), each with its children's indexes. Decoding a payload walks the program; each node
 * appends to its own growing buffers (validity bitmap, int32 offsets, data), which Python wraps with
 * pyarrow.Array.from_buffers. No Python object is made per record or per value.
 *
 * A payload that fails (truncated, a bad union branch or enum index, an int out of range, bytes left
 * over) leaves no trace: every node's buffers are rolled back to where they stood before the payload,
 * the row is appended as a null record, and its position and reason are reported. Logical types that
 * only reinterpret a number (dates, timestamps) and UTF-8 checks are left to Arrow in Python; decimals
 * are widened to Arrow's 16-byte little-endian integers here.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    K_NULL = 0, K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_FIXED, K_ENUM, K_DEC_BYTES, K_DEC_FIXED,
    K_RECORD, K_ARRAY, K_MAP, K_UNION
};

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

typedef struct {
    int kind;
    int64_t arg;     /* FIXED/DEC_FIXED: size; ENUM: symbols; UNION: 1 = struct of members, 0 = nullable child */
    int nchild;
    int *child;      /* node indexes */
    int nbranch;     /* UNION: writer branches */
    int *branch;     /* UNION: branch -> child slot, -1 for null */
    int min_size;    /* fewest bytes one value takes (0 for null, empty records): bounds block counts */
    Buf valid, offs, data;
    int valid_on;    /* the validity bitmap is written only from a node's first null on */
    int64_t length, nulls;
    /* state before the payload being decoded, for rolling back */
    int64_t s_length, s_nulls;
    size_t s_data;
} Node;

typedef struct {
    PyObject_HEAD
    int n;
    Node *nodes;
    const char *err;
} Decoder;

#define MAX_DEPTH 256

static int buf_grow(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_grow(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int bit_put(Buf *b, int64_t i, int v) {
    size_t byte = (size_t)(i >> 3);
    if (byte >= b->len) {
        if (buf_grow(b, byte + 1 - b->len)) return -1;
        memset(b->p + b->len, 0, byte + 1 - b->len);
        b->len = byte + 1;
    }
    if (v) b->p[byte] |= (uint8_t)(1u << (i & 7));
    else b->p[byte] &= (uint8_t)~(1u << (i & 7));
    return 0;
}

/* The next entry of an offsets buffer: the current size of `of` (data bytes or child values). */
static inline int offs_put(Node *nd, int64_t end) {
    if (end > INT32_MAX) return -1;
    int32_t v = (int32_t)end;
    return buf_put(&nd->offs, &v, 4);
}

static const char *E_NOMEM = "out of memory";
static const char *E_EOF = "truncated payload";
static const char *E_VARINT = "varint longer than 10 bytes";

#define FAIL(msg) do { d->err = (msg); return -1; } while (0)
#define CHECK(x) do { if (x) FAIL(E_NOMEM); } while (0)

static inline int read_long(Decoder *d, const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (p >= end) FAIL(E_EOF);
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (shift > 63) FAIL(E_VARINT);
    }
    *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
    *pp = p;
    return 0;
}

static int append_null(Decoder *d, Node *nd);

/* Values appended so far under node nd (a nullable union has no array of its own: its child's). */
static inline int64_t values_of(Decoder *d, Node *nd) {
    while (nd->kind == K_UNION && !nd->arg) nd = &d->nodes[nd->child[0]];
    return nd->length;
}

static int leaf_null(Decoder *d, Node *nd) {
    static const uint8_t zero[16] = {0};
    switch (nd->kind) {
    case K_BOOL: CHECK(bit_put(&nd->data, nd->length, 0)); break;
    case K_INT: case K_ENUM: case K_FLOAT: CHECK(buf_put(&nd->data, zero, 4)); break;
    case K_LONG: case K_DOUBLE: CHECK(buf_put(&nd->data, zero, 8)); break;
    case K_DEC_BYTES: case K_DEC_FIXED: CHECK(buf_put(&nd->data, zero, 16)); break;
    case K_BYTES: case K_FIXED: CHECK(offs_put(nd, (int64_t)nd->data.len)); break;
    default: break;
    }
    return 0;
}

/* A valid value at nd->length: nothing to write while the node has had no null. */
static inline int valid_put(Node *nd) {
    return nd->valid_on ? bit_put(&nd->valid, nd->length, 1) : 0;
}

static int append_null(Decoder *d, Node *nd) {
    if (nd->kind == K_UNION && !nd->arg) return append_null(d, &d->nodes[nd->child[0]]);
    if (!nd->valid_on) { /* the first null: every value before it is valid */
        size_t bytes = (size_t)(nd->length + 8) / 8;
        nd->valid.len = 0;
        CHECK(buf_grow(&nd->valid, bytes));
        memset(nd->valid.p, 0xff, bytes);
        nd->valid.len = bytes;
        nd->valid_on = 1;
    }
    CHECK(bit_put(&nd->valid, nd->length, 0));
    if (nd->kind == K_RECORD || nd->kind == K_UNION) {
        for (int i = 0; i < nd->nchild; i++)
            if (append_null(d, &d->nodes[nd->child[i]])) return -1;
    } else if (nd->kind == K_ARRAY || nd->kind == K_MAP) {
        CHECK(offs_put(nd, values_of(d, &d->nodes[nd->child[0]])));
    } else if (leaf_null(d, nd)) {
        return -1;
    }
    nd->length++;
    nd->nulls++;
    return 0;
}

/* An Avro decimal (big-endian two's complement) as Arrow's 16-byte little-endian integer. */
static int put_decimal(Decoder *d, Node *nd, const uint8_t *p, int64_t n) {
    uint8_t out[16];
    if (n > 16) FAIL("decimal wider than 16 bytes");
    uint8_t fill = (n > 0 && (p[0] & 0x80)) ? 0xff : 0x00;
    memset(out, fill, 16);
    for (int64_t i = 0; i < n; i++) out[i] = p[n - 1 - i];
    CHECK(buf_put(&nd->data, out, 16));
    return 0;
}

static int decode(Decoder *d, int idx, const uint8_t **pp, const uint8_t *end, int depth) {
    Node *nd = &d->nodes[idx];
    const uint8_t *p = *pp;
    int64_t v;
    if (depth > MAX_DEPTH) FAIL("values nest too deeply");
    switch (nd->kind) {
    case K_NULL:
        break;
    case K_BOOL:
        if (p >= end) FAIL(E_EOF);
        if (*p > 1) FAIL("boolean byte is neither 0 nor 1");
        CHECK(bit_put(&nd->data, nd->length, *p++));
        break;
    case K_INT: {
        if (read_long(d, &p, end, &v)) return -1;
        if (v < INT32_MIN || v > INT32_MAX) FAIL("int out of range");
        int32_t i = (int32_t)v;
        CHECK(buf_put(&nd->data, &i, 4));
        break;
    }
    case K_LONG:
        if (read_long(d, &p, end, &v)) return -1;
        CHECK(buf_put(&nd->data, &v, 8));
        break;
    case K_FLOAT:
        if (end - p < 4) FAIL(E_EOF);
        CHECK(buf_put(&nd->data, p, 4));
        p += 4;
        break;
    case K_DOUBLE:
        if (end - p < 8) FAIL(E_EOF);
        CHECK(buf_put(&nd->data, p, 8));
        p += 8;
        break;
    case K_BYTES:
    case K_DEC_BYTES:
        if (read_long(d, &p, end, &v)) return -1;
        if (v < 0) FAIL("negative length");
        if (v > end - p) FAIL(E_EOF);
        if (nd->kind == K_DEC_BYTES) {
            if (put_decimal(d, nd, p, v)) return -1;
        } else {
            CHECK(buf_put(&nd->data, p, (size_t)v));
            CHECK(offs_put(nd, (int64_t)nd->data.len));
        }
        p += v;
        break;
    case K_FIXED:
    case K_DEC_FIXED:
        if (end - p < nd->arg) FAIL(E_EOF);
        if (nd->kind == K_DEC_FIXED) {
            if (put_decimal(d, nd, p, nd->arg)) return -1;
        } else {
            CHECK(buf_put(&nd->data, p, (size_t)nd->arg));
            CHECK(offs_put(nd, (int64_t)nd->data.len));
        }
        p += nd->arg;
        break;
    case K_ENUM: {
        if (read_long(d, &p, end, &v)) return -1;
        if (v < 0 || v >= nd->arg) FAIL("enum index out of range");
        int32_t i = (int32_t)v;
        CHECK(buf_put(&nd->data, &i, 4));
        break;
    }
    case K_RECORD:
        for (int i = 0; i < nd->nchild; i++)
            if (decode(d, nd->child[i], &p, end, depth + 1)) return -1;
        break;
    case K_ARRAY:
    case K_MAP: {
        Node *items = &d->nodes[nd->child[nd->kind == K_MAP ? 1 : 0]];
        Node *keys = nd->kind == K_MAP ? &d->nodes[nd->child[0]] : NULL;
        for (;;) {
            int64_t count;
            if (read_long(d, &p, end, &count)) return -1;
            if (count == 0) break;
            if (count < 0) {
                int64_t size;
                if (count == INT64_MIN) FAIL("bad block count");
                count = -count;
                if (read_long(d, &p, end, &size)) return -1;
                if (size < 0 || size > end - p) FAIL("bad block size");
            }
            int64_t min = (keys ? 1 : 0) + items->min_size;  /* a union's min_size is 1 (its branch) */
            /* values of no bytes (nulls, empty records): at most 64 per byte of payload, so a small payload
             * cannot make a huge array */
            if ((min > 0 && count > (end - p) / min) || (min == 0 && count > (end - p + 1) * 64))
                FAIL("block count larger than the payload");
            for (int64_t i = 0; i < count; i++) {
                if (keys && decode(d, nd->child[0], &p, end, depth + 1)) return -1;
                if (decode(d, nd->child[keys ? 1 : 0], &p, end, depth + 1)) return -1;
            }
        }
        CHECK(offs_put(nd, values_of(d, items)));
        break;
    }
    case K_UNION: {
        if (read_long(d, &p, end, &v)) return -1;
        if (v < 0 || v >= nd->nbranch) FAIL("union branch out of range");
        int slot = nd->branch[v];
        if (!nd->arg) {
            *pp = p;
            if (slot < 0) return append_null(d, &d->nodes[nd->child[0]]);
            return decode(d, nd->child[slot], pp, end, depth + 1);
        }
        if (slot < 0) {
            *pp = p;
            return append_null(d, nd);
        }
        for (int i = 0; i < nd->nchild; i++) {
            if (i == slot) {
                if (decode(d, nd->child[i], &p, end, depth + 1)) return -1;
            } else if (append_null(d, &d->nodes[nd->child[i]])) {
                return -1;
            }
        }
        break;
    }
    default:
        FAIL("bad program");
    }
    CHECK(valid_put(nd));
    nd->length++;
    *pp = p;
    return 0;
}

static void node_free(Node *nd) {
    free(nd->child);
    free(nd->branch);
    free(nd->valid.p);
    free(nd->offs.p);
    free(nd->data.p);
    memset(nd, 0, sizeof(*nd));
}

static int node_reset(Node *nd) {
    nd->valid.len = nd->offs.len = nd->data.len = 0;
    nd->valid_on = 0;
    nd->length = nd->nulls = 0;
    if (nd->kind == K_BYTES || nd->kind == K_FIXED || nd->kind == K_ARRAY || nd->kind == K_MAP) {
        int32_t zero = 0;
        return buf_put(&nd->offs, &zero, 4);
    }
    return 0;
}

static void Decoder_dealloc(Decoder *self) {
    for (int i = 0; i < self->n; i++) node_free(&self->nodes[i]);
    free(self->nodes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int int_list(PyObject *seq, int **out, int *n, int lo, int hi) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *n = (int)len;
    *out = calloc(len ? (size_t)len : 1, sizeof(int));
    if (!*out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
        if (v < lo || v >= hi) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "program refers to a node that does not exist");
            return -1;
        }
        (*out)[i] = (int)v;
    }
    Py_DECREF(fast);
    return 0;
}

/* Decoder(program): program is a list of (kind, arg, children, branches, min_size); node 0 is the root. */
static int Decoder_init(Decoder *self, PyObject *args, PyObject *kw) {
    PyObject *prog;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &prog)) return -1;
    Py_ssize_t n = PyList_GET_SIZE(prog);
    if (n < 1 || n > 100000) {
        PyErr_SetString(PyExc_ValueError, "a program has 1 to 100000 nodes");
        return -1;
    }
    self->nodes = calloc((size_t)n, sizeof(Node));
    if (!self->nodes) { PyErr_NoMemory(); return -1; }
    self->n = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Node *nd = &self->nodes[i];
        PyObject *children, *branches;
        long long arg;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(prog, i), "iLOOi", &nd->kind, &arg, &children, &branches, &nd->min_size))
            return -1;
        nd->arg = arg;
        if (nd->kind < K_NULL || nd->kind > K_UNION || arg < 0) {
            PyErr_SetString(PyExc_ValueError, "bad node");
            return -1;
        }
        if (int_list(children, &nd->child, &nd->nchild, (int)i + 1, (int)n)) return -1;
        if (int_list(branches, &nd->branch, &nd->nbranch, -1, nd->nchild)) return -1;
        if ((nd->kind == K_ARRAY && nd->nchild != 1) || (nd->kind == K_MAP && nd->nchild != 2) ||
            (nd->kind == K_UNION && (nd->nbranch < 1 || (!arg && nd->nchild != 1)))) {
            PyErr_SetString(PyExc_ValueError, "bad node");
            return -1;
        }
        if (node_reset(nd)) { PyErr_NoMemory(); return -1; }
    }
    return 0;
}

/* decode(data, offsets, rows, skip) -> [(position, reason), ...]
 * Decodes the payloads data[offsets[r] + skip : offsets[r + 1]] for each r in rows (an int32 buffer, or
 * None for every row), in order, appending one root value each; a failed payload is appended as null
 * and reported. */
static PyObject *Decoder_decode(Decoder *self, PyObject *args) {
    Py_buffer data, offs, rows = {0};
    PyObject *rows_obj;
    Py_ssize_t skip;
    if (!PyArg_ParseTuple(args, "y*y*On", &data, &offs, &rows_obj, &skip)) return NULL;
    if (rows_obj != Py_None && PyObject_GetBuffer(rows_obj, &rows, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&offs);
        return NULL;
    }
    PyObject *errors = PyList_New(0);
    const int32_t *off = offs.buf;
    const int32_t *row = rows.buf;
    Py_ssize_t noffs = offs.len / 4, nrows = row ? rows.len / 4 : noffs - 1;
    const uint8_t *base = data.buf;
    for (Py_ssize_t k = 0; errors && k < nrows; k++) {
        int32_t r = row ? row[k] : (int32_t)k;
        const char *reason = NULL;
        for (int i = 0; i < self->n; i++) {
            Node *nd = &self->nodes[i];
            nd->s_length = nd->length;
            nd->s_nulls = nd->nulls;
            nd->s_data = nd->data.len;
        }
        if (r < 0 || r + 1 >= noffs || off[r] < 0 || off[r + 1] > data.len || (Py_ssize_t)off[r] + skip > off[r + 1]) {
            reason = "row outside the column";
        } else {
            const uint8_t *p = base + off[r] + skip, *end = base + off[r + 1];
            self->err = NULL;
            if (decode(self, 0, &p, end, 0)) reason = self->err;
            else if (p != end) reason = "bytes left over after the record";
        }
        if (reason) {
            if (reason == E_NOMEM) {
                Py_CLEAR(errors);
                PyErr_NoMemory();
                break;
            }
            for (int i = 0; i < self->n; i++) {
                Node *nd = &self->nodes[i];
                nd->length = nd->s_length;
                nd->nulls = nd->s_nulls;
                nd->data.len = nd->s_data;
                if (nd->offs.len) nd->offs.len = (size_t)(nd->length + 1) * 4;
                if (nd->kind == K_BOOL) nd->data.len = (size_t)((nd->length + 7) / 8);
                if (nd->valid_on) nd->valid.len = (size_t)((nd->length + 7) / 8);
            }
            PyObject *item = Py_BuildValue("(ns)", k, reason);
            if (!item || PyList_Append(errors, item) || append_null(self, &self->nodes[0])) {
                Py_XDECREF(item);
                Py_CLEAR(errors);
                if (!PyErr_Occurred()) PyErr_NoMemory();
                break;
            }
            Py_DECREF(item);
        }
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    if (rows.buf) PyBuffer_Release(&rows);
    return errors;
}

/* Buffers of arrays Python has dropped, kept for the next batches: memory already mapped is written
 * without page faults, which otherwise cost more than the decoding (pool_limit() bounds it). */
#define POOL_SLOTS 64
static struct { uint8_t *p; size_t cap; } pool[POOL_SLOTS];
static int pool_n = 0;
static size_t pool_bytes = 0, pool_max_bytes = 64u << 20;

static uint8_t *pool_get(size_t want, size_t *cap) {
    int best = -1;
    for (int i = 0; i < pool_n; i++)
        if (pool[i].cap >= want && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
    if (best < 0) {
        *cap = want;
        return malloc(want);
    }
    uint8_t *p = pool[best].p;
    *cap = pool[best].cap;
    pool_bytes -= pool[best].cap;
    pool[best] = pool[--pool_n];
    return p;
}

static void pool_put(uint8_t *p, size_t cap) {
    if (!p) return;
    if (pool_n < POOL_SLOTS && pool_bytes + cap <= pool_max_bytes) {
        pool[pool_n].p = p;
        pool[pool_n].cap = cap;
        pool_n++;
        pool_bytes += cap;
    } else {
        free(p);
    }
}

/* Memory handed over to Python without a copy: read-only, back to the pool when the last Arrow array
 * using it goes. */
typedef struct {
    PyObject_HEAD
    uint8_t *p;
    Py_ssize_t len;
    size_t cap;
} Chunk;

static int Chunk_getbuffer(Chunk *self, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? (void *)self->p : empty, self->len, 1, flags);
}

static void Chunk_dealloc(Chunk *self) {
    pool_put(self->p, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Chunk_as_buffer = {(getbufferproc)Chunk_getbuffer, NULL};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gregor.typed._avrodecode.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An Arrow buffer filled by a Decoder.",
    .tp_dealloc = (destructor)Chunk_dealloc,
    .tp_as_buffer = &Chunk_as_buffer,
};

/* The buffer as a Chunk, and a fresh one in its place as large as it grew (so the next batch of the same
 * size does not reallocate on the way). */
static PyObject *buf_take(Buf *b) {
    Chunk *o = PyObject_New(Chunk, &ChunkType);
    if (o == NULL) return NULL;
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    o->cap = b->cap;
    size_t cap;
    b->p = pool_get(b->len > 256 ? b->len : 256, &cap);
    b->cap = b->p ? cap : 0;
    b->len = 0;
    return (PyObject *)o;
}

/* finish() -> [(length, nulls, validity, offsets, data), ...] per node, and a fresh start. */
static PyObject *Decoder_finish(Decoder *self, PyObject *unused) {
    PyObject *out = PyList_New(self->n);
    if (!out) return NULL;
    for (int i = 0; i < self->n; i++) {
        Node *nd = &self->nodes[i];
        PyObject *valid = nd->nulls && nd->valid_on ? buf_take(&nd->valid) : (Py_INCREF(Py_None), Py_None);
        PyObject *item = Py_BuildValue("(LLNNN)", (long long)nd->length, (long long)nd->nulls, valid,
                                       nd->offs.len ? buf_take(&nd->offs) : (Py_INCREF(Py_None), Py_None),
                                       nd->data.len ? buf_take(&nd->data) : (Py_INCREF(Py_None), Py_None));
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, item);
        if (node_reset(nd)) { Py_DECREF(out); return PyErr_NoMemory(); }
    }
    return out;
}

static PyObject *pool_limit(PyObject *mod, PyObject *args) {
    Py_ssize_t n = -1;
    if (!PyArg_ParseTuple(args, "|n", &n)) return NULL;
    if (n >= 0) {
        pool_max_bytes = (size_t)n;
        while (pool_n > 0 && pool_bytes > pool_max_bytes) {
            pool_n--;
            pool_bytes -= pool[pool_n].cap;
            free(pool[pool_n].p);
        }
    }
    return PyLong_FromSize_t(pool_max_bytes);
}

/* frames(data, offsets, validity, bit_offset, n) -> (ids, common)
 * The schema id of each of n rows of a binary column (int32 buffer): -1 for a null row, -2 for one not in
 * Confluent's frame (shorter than 5 bytes, or a magic byte other than 0). `common` is the id every row
 * has when they all have the same one, else -3. */
static PyObject *frames(PyObject *mod, PyObject *args) {
    Py_buffer data, offs, valid = {0};
    PyObject *validity;
    Py_ssize_t bit_offset, n;
    if (!PyArg_ParseTuple(args, "y*y*Onn", &data, &offs, &validity, &bit_offset, &n)) return NULL;
    PyObject *out = NULL;
    if (validity != Py_None && PyObject_GetBuffer(validity, &valid, PyBUF_SIMPLE) < 0) goto done;
    if (n < 0 || offs.len / 4 < n + 1 || (valid.buf && (valid.len * 8 < bit_offset + n))) {
        PyErr_SetString(PyExc_ValueError, "offsets or validity shorter than the column");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (!out) goto done;
    int32_t *ids = (int32_t *)PyBytes_AS_STRING(out);
    const int32_t *off = offs.buf;
    const uint8_t *d = data.buf, *vb = valid.buf;
    int64_t common = -4;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t id;
        Py_ssize_t bit = bit_offset + i;
        if (vb && !(vb[bit >> 3] & (1u << (bit & 7)))) id = -1;
        else if (off[i + 1] - off[i] < 5 || off[i] < 0 || off[i + 1] > data.len || d[off[i]] != 0) id = -2;
        else {
            const uint8_t *p = d + off[i] + 1;
            uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
            id = v > INT32_MAX ? -2 : (int32_t)v;
        }
        ids[i] = id;
        if (common == -4) common = id;
        else if (common != id) common = -3;
    }
    PyObject *ids_bytes = out;
    out = Py_BuildValue("(Nl)", ids_bytes, (long)(common == -4 ? -3 : common));
done:
    if (valid.buf) PyBuffer_Release(&valid);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    return out;
}

static PyMethodDef module_methods[] = {
    {"frames", frames, METH_VARARGS, "frames(data, offsets, validity, bit_offset, n) -> (ids, common id or -3)"},
    {"pool_limit", pool_limit, METH_VARARGS, "pool_limit([bytes]) -> the bytes of dropped buffers kept for reuse"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Decoder_methods[] = {
    {"decode", (PyCFunction)Decoder_decode, METH_VARARGS, "decode(data, offsets, rows, skip) -> errors"},
    {"finish", (PyCFunction)Decoder_finish, METH_NOARGS, "finish() -> buffers of every node"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gregor.typed._avrodecode.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Avro binary payloads into Arrow buffers, by a compiled program.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_methods = Decoder_methods,
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "gregor.typed._avrodecode", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__avrodecode(void) {
    if (PyType_Ready(&DecoderType) < 0 || PyType_Ready(&ChunkType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0) return NULL;
    return m;
}
