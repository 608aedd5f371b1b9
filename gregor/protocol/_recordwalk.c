/*
 * gregor.protocol._recordwalk: the framing walk over the records of one (decompressed) batch body.
 *
 * walk(body, count, strict, last_offset_delta) -> (status, index, min_ts_delta, max_ts_delta,
 *                                                  keyless_count, first_keyless)
 *
 * The exact rules (and the status codes) are those of gregor.protocol.validator._walk_py, the
 * pure-Python fallback; tests check that both agree on generated and mutated batches. No Python
 * object is touched per record, and the GIL is released during long walks, so a validation
 * thread runs beside the event loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define RELEASE_GIL_BYTES (4 << 20) /* bodies this large are only walked on the validation pool */

enum {
    WALK_OK = 0,
    WALK_TRUNCATED = 1,
    WALK_RECORD_LENGTH = 2,
    WALK_VARINT_TOO_LONG = 3,
    WALK_BAD_LENGTH = 4,
    WALK_BAD_HEADER_COUNT = 5,
    WALK_NULL_HEADER_KEY = 6,
    WALK_SIZE_MISMATCH = 7,
    WALK_OFFSET_DELTA = 8,
    WALK_TRAILING_BYTES = 9,
};

/* Unsigned LEB128 of at most max_bytes bytes ending before `end`. Returns a WALK_ status. */
static inline __attribute__((always_inline)) int read_uvar(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, uint64_t *out) {
    if (*pos < end && buf[*pos] < 0x80) { /* the common case: one byte */
        *out = buf[(*pos)++];
        return WALK_OK;
    }
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end)
            return WALK_TRUNCATED;
        uint8_t b = buf[(*pos)++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = v;
            return WALK_OK;
        }
        shift += 7;
    }
    return WALK_VARINT_TOO_LONG;
}

static inline int read_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t raw;
    int st = read_uvar(buf, pos, end, 5, &raw);
    if (st)
        return st;
    uint32_t u = (uint32_t)(raw & 0xFFFFFFFFu);
    *out = (int64_t)(int32_t)((u >> 1) ^ (0u - (u & 1u)));
    return WALK_OK;
}

static inline int read_varlong(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t u;
    int st = read_uvar(buf, pos, end, 10, &u);
    if (st)
        return st;
    *out = (int64_t)((u >> 1) ^ (0ull - (u & 1ull)));
    return WALK_OK;
}

typedef struct {
    int status;
    int64_t index;
    int64_t min_ts;
    int64_t max_ts;
    int64_t keyless;
    int64_t first_keyless;
} walk_result;

#define CHECK(expr) do { int st_ = (expr); if (st_) { r->status = st_; r->index = i; return; } } while (0)
#define FAIL(code) do { r->status = (code); r->index = i; return; } while (0)

static void walk_records(const uint8_t *buf, Py_ssize_t n, int64_t count, int strict, int64_t last_delta,
                         walk_result *r) {
    Py_ssize_t pos = 0;
    int64_t prev_delta = -1;
    int64_t i;
    r->status = WALK_OK;
    r->index = 0;
    r->min_ts = INT64_MAX;
    r->max_ts = INT64_MIN;
    r->keyless = 0;
    r->first_keyless = -1;
    for (i = 0; i < count; i++) {
        int64_t length, ts, od, kl, vl, hc;
        CHECK(read_varint(buf, &pos, n, &length));
        if (length < 0 || length > n - pos)
            FAIL(WALK_RECORD_LENGTH);
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (pos >= end)
            FAIL(WALK_TRUNCATED);
        pos++; /* attributes */
        CHECK(read_varlong(buf, &pos, end, &ts));
        CHECK(read_varint(buf, &pos, end, &od));
        if (strict ? od != i : (od <= prev_delta || od > last_delta))
            FAIL(WALK_OFFSET_DELTA);
        prev_delta = od;
        CHECK(read_varint(buf, &pos, end, &kl));
        if (kl < -1)
            FAIL(WALK_BAD_LENGTH);
        if (kl >= 0) {
            if (kl > end - pos)
                FAIL(WALK_TRUNCATED);
            pos += (Py_ssize_t)kl;
        }
        CHECK(read_varint(buf, &pos, end, &vl));
        if (vl < -1)
            FAIL(WALK_BAD_LENGTH);
        if (vl >= 0) {
            if (vl > end - pos)
                FAIL(WALK_TRUNCATED);
            pos += (Py_ssize_t)vl;
        }
        CHECK(read_varint(buf, &pos, end, &hc));
        if (hc < 0)
            FAIL(WALK_BAD_HEADER_COUNT);
        for (int64_t j = 0; j < hc; j++) {
            int64_t hk, hv;
            CHECK(read_varint(buf, &pos, end, &hk));
            if (hk < 0)
                FAIL(WALK_NULL_HEADER_KEY);
            if (hk > end - pos)
                FAIL(WALK_TRUNCATED);
            pos += (Py_ssize_t)hk;
            CHECK(read_varint(buf, &pos, end, &hv));
            if (hv < -1)
                FAIL(WALK_BAD_LENGTH);
            if (hv >= 0) {
                if (hv > end - pos)
                    FAIL(WALK_TRUNCATED);
                pos += (Py_ssize_t)hv;
            }
        }
        if (pos != end)
            FAIL(WALK_SIZE_MISMATCH);
        if (ts < r->min_ts)
            r->min_ts = ts;
        if (ts > r->max_ts)
            r->max_ts = ts;
        if (kl < 0) {
            if (r->keyless == 0)
                r->first_keyless = i;
            r->keyless++;
        }
    }
    if (pos != n)
        FAIL(WALK_TRAILING_BYTES);
}

static PyObject *py_walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long count, last_delta;
    int strict;
    if (!PyArg_ParseTuple(args, "y*LpL", &view, &count, &strict, &last_delta))
        return NULL;
    walk_result r;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        walk_records(buf, n, (int64_t)count, strict, (int64_t)last_delta, &r);
        Py_END_ALLOW_THREADS
    } else {
        /* Short walks (< 0.3 ms) keep the GIL: releasing it on the event loop would let another
         * thread take it for up to the interpreter's switch interval (5 ms). */
        walk_records(buf, n, (int64_t)count, strict, (int64_t)last_delta, &r);
    }
    PyBuffer_Release(&view);
    if (r.status != WALK_OK || count <= 0) {
        /* Only the status and index mean anything after a failure; fixed values keep C and Python equal. */
        r.min_ts = 0;
        r.max_ts = 0;
        if (r.status != WALK_OK) {
            r.keyless = 0;
            r.first_keyless = -1;
        }
    }
    return Py_BuildValue("(iLLLLL)", r.status, (long long)r.index, (long long)r.min_ts, (long long)r.max_ts,
                         (long long)r.keyless, (long long)r.first_keyless);
}

static PyMethodDef methods[] = {
    {"walk", py_walk, METH_VARARGS,
     "walk(body, count, strict, last_offset_delta) -> (status, index, min_ts_delta, max_ts_delta, "
     "keyless_count, first_keyless)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordwalk", "Record framing walk (see validator.py)",
                                    -1, methods};

PyMODINIT_FUNC PyInit__recordwalk(void) { return PyModule_Create(&module); }
