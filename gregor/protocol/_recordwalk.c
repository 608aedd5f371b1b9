/*
 * gregor.protocol._recordwalk: the framing walk over the records of one (decompressed) batch body.
 *
 * walk(body, count, strict, last_offset_delta) -> (status, index, min_ts_delta, max_ts_delta,
 *                                                  keyless_count, first_keyless)
 * walk_ids(body, count, strict, last_offset_delta, fields) -> the same six, then
 *          (id_status, id_index, id_field, id_detail, key_ids, value_ids)
 *
 * walk_ids also reads the Confluent wire-format prefix (magic byte 0, big-endian 4-byte schema id) of
 * each non-null key (fields & 1) and value (fields & 2) during the same pass (the id unsigned, as the
 * registry's ids are never negative): it returns the distinct
 * ids in order of first appearance (at most MAX_DISTINCT_IDS per field), or the first record whose
 * prefix is wrong, so that a schema-checked topic costs the event loop a few dictionary lookups per
 * batch and no Python work per record.
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

/* --- schema ids (walk_ids) ------------------------------------------------------------------- */

#define MAX_DISTINCT_IDS 64 /* distinct ids per field and batch; more: ID_TOO_MANY (Python walks again) */
#define FIELD_KEY 1
#define FIELD_VALUE 2

enum {
    ID_OK = 0,
    ID_BAD_MAGIC = 1,    /* detail: the first byte, or -1 for an empty field */
    ID_NO_SCHEMA_ID = 2, /* magic byte 0 but fewer than 5 bytes; detail: the length */
    ID_TOO_MANY = 3,     /* more than MAX_DISTINCT_IDS distinct ids in one field */
};

typedef struct {
    uint32_t ids[MAX_DISTINCT_IDS];
    int n;
} id_set;

typedef struct {
    int fields;
    int status;
    int64_t index;
    int field; /* 0 key, 1 value */
    int detail;
    id_set sets[2];
} id_scan;

/* One non-null key or value of record i. Collection stops at the first failure. */
static inline void scan_id(id_scan *s, int field, const uint8_t *p, int64_t len, int64_t i) {
    if (s->status)
        return;
    if (len == 0 || p[0] != 0) {
        s->status = ID_BAD_MAGIC;
        s->detail = len == 0 ? -1 : (int)p[0];
    } else if (len < 5) {
        s->status = ID_NO_SCHEMA_ID;
        s->detail = (int)len;
    } else {
        uint32_t id = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) | (uint32_t)p[4];
        id_set *set = &s->sets[field];
        if (set->n > 0 && set->ids[set->n - 1] == id) /* the common case: the same id as the last new one */
            return;
        for (int k = 0; k < set->n; k++)
            if (set->ids[k] == id)
                return;
        if (set->n == MAX_DISTINCT_IDS) {
            s->status = ID_TOO_MANY;
            s->detail = 0;
        } else {
            set->ids[set->n++] = id;
            return;
        }
    }
    s->index = i;
    s->field = field;
}

#define CHECK(expr) do { int st_ = (expr); if (st_) { r->status = st_; r->index = i; return; } } while (0)
#define FAIL(code) do { r->status = (code); r->index = i; return; } while (0)

static void walk_records(const uint8_t *buf, Py_ssize_t n, int64_t count, int strict, int64_t last_delta,
                         walk_result *r, id_scan *ids) {
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
            if (ids && (ids->fields & FIELD_KEY))
                scan_id(ids, 0, buf + pos, kl, i);
            pos += (Py_ssize_t)kl;
        }
        CHECK(read_varint(buf, &pos, end, &vl));
        if (vl < -1)
            FAIL(WALK_BAD_LENGTH);
        if (vl >= 0) {
            if (vl > end - pos)
                FAIL(WALK_TRUNCATED);
            if (ids && (ids->fields & FIELD_VALUE))
                scan_id(ids, 1, buf + pos, vl, i);
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

/* The walk of one body, the GIL released for long ones; fixes the fields that mean nothing after a failure. */
static void run_walk(Py_buffer *view, long long count, int strict, long long last_delta, walk_result *r, id_scan *ids) {
    const uint8_t *buf = (const uint8_t *)view->buf;
    Py_ssize_t n = view->len;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        walk_records(buf, n, (int64_t)count, strict, (int64_t)last_delta, r, ids);
        Py_END_ALLOW_THREADS
    } else {
        /* Short walks (< 0.3 ms) keep the GIL: releasing it on the event loop would let another
         * thread take it for up to the interpreter's switch interval (5 ms). */
        walk_records(buf, n, (int64_t)count, strict, (int64_t)last_delta, r, ids);
    }
    if (r->status != WALK_OK || count <= 0) {
        /* Only the status and index mean anything after a failure; fixed values keep C and Python equal. */
        r->min_ts = 0;
        r->max_ts = 0;
        if (r->status != WALK_OK) {
            r->keyless = 0;
            r->first_keyless = -1;
        }
    }
}

static PyObject *py_walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long count, last_delta;
    int strict;
    if (!PyArg_ParseTuple(args, "y*LpL", &view, &count, &strict, &last_delta))
        return NULL;
    walk_result r;
    run_walk(&view, count, strict, last_delta, &r, NULL);
    PyBuffer_Release(&view);
    return Py_BuildValue("(iLLLLL)", r.status, (long long)r.index, (long long)r.min_ts, (long long)r.max_ts,
                         (long long)r.keyless, (long long)r.first_keyless);
}

static PyObject *id_tuple(const id_set *set) {
    PyObject *t = PyTuple_New(set->n);
    if (t == NULL)
        return NULL;
    for (int k = 0; k < set->n; k++) {
        PyObject *v = PyLong_FromUnsignedLong((unsigned long)set->ids[k]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

static PyObject *py_walk_ids(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long count, last_delta;
    int strict, fields;
    if (!PyArg_ParseTuple(args, "y*LpLi", &view, &count, &strict, &last_delta, &fields))
        return NULL;
    walk_result r;
    id_scan ids;
    ids.fields = fields & (FIELD_KEY | FIELD_VALUE);
    ids.status = ID_OK;
    ids.index = -1;
    ids.field = 0;
    ids.detail = 0;
    ids.sets[0].n = 0;
    ids.sets[1].n = 0;
    run_walk(&view, count, strict, last_delta, &r, &ids);
    PyBuffer_Release(&view);
    if (r.status != WALK_OK) { /* a batch that does not frame has no ids worth reporting */
        ids.status = ID_OK;
        ids.index = -1;
        ids.field = 0;
        ids.detail = 0;
        ids.sets[0].n = 0;
        ids.sets[1].n = 0;
    }
    PyObject *keys = id_tuple(&ids.sets[0]);
    if (keys == NULL)
        return NULL;
    PyObject *values = id_tuple(&ids.sets[1]);
    if (values == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    return Py_BuildValue("(iLLLLLiLiiNN)", r.status, (long long)r.index, (long long)r.min_ts, (long long)r.max_ts,
                         (long long)r.keyless, (long long)r.first_keyless, ids.status, (long long)ids.index, ids.field,
                         ids.detail, keys, values);
}

static PyMethodDef methods[] = {
    {"walk", py_walk, METH_VARARGS,
     "walk(body, count, strict, last_offset_delta) -> (status, index, min_ts_delta, max_ts_delta, "
     "keyless_count, first_keyless)"},
    {"walk_ids", py_walk_ids, METH_VARARGS,
     "walk_ids(body, count, strict, last_offset_delta, fields) -> walk's six, then (id_status, id_index, id_field, "
     "id_detail, key_ids, value_ids)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordwalk", "Record framing walk (see validator.py)",
                                    -1, methods};

PyMODINIT_FUNC PyInit__recordwalk(void) { return PyModule_Create(&module); }
