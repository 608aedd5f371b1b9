/* Record batches (magic 2) of a Fetch response decoded straight into Apache Arrow column buffers.
 *
 * One pass over the records, no Python object per record: a Decoder owns growing buffers (validity
 * bitmaps, int32 offsets, data) for the columns offset, timestamp, timestampType, key, value and
 * headers, fills them from the record sets it is fed, and hands them over as bytearrays that Python
 * wraps with pyarrow.Array.from_buffers without a copy (gregor/client/arrow_columns.py). The batch walk
 * checks each batch's CRC32C (hardware instruction where the CPU has it), skips control batches,
 * keeps only offsets in [start, end), and under read_committed drops the batches of aborted
 * transactions from the Fetch response's aborted list, as Kafka's consumer does. Compressed batches
 * are handed to a Python callable that decompresses them into a reused buffer: per batch, not per
 * record. The record walk of a batch runs without the GIL (buffers live outside Python's allocator).
 *
 * gregor/client/pydecoder.py is the same Decoder in pure Python, for installs without a compiler.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
#endif

/* ---- CRC32C (Castagnoli) -------------------------------------------------------------------- */

static uint32_t crc_table[8][256];

static void crc_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c_table(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* the table below assumes little-endian words */
        w ^= c;
        c = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
            crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
            crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

#ifdef HAVE_SSE42_PATH
/* Three interleaved streams hide the crc32 instruction's latency (about 3x one stream). The streams'
 * CRCs are joined by "shifting" a CRC over the bytes that follow it: a linear map over GF(2), tabulated
 * once per stream length (the method of Mark Adler's crc32c.c). */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_long[4][256], crc_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends `len` zero bytes (a power of two) to a CRC, tabulated by byte. */
static void crc_zeros(uint32_t zeros[4][256], size_t len) {
    uint32_t odd[32], even[32], row = 1;
    odd[0] = 0x82F63B78u;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    uint32_t *op = odd;
    size_t bits = len * 8 / 4; /* odd now appends 4 bits: square until it appends len*8 */
    while (bits > 1) {
        gf2_square(op == odd ? even : odd, op);
        op = op == odd ? even : odd;
        bits >>= 1;
    }
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, size_t n) {
    uint64_t c0 = 0xFFFFFFFFu, c1, c2, w0, w1, w2;
    while (n >= 3 * CRC_LONG) {
        c1 = c2 = 0;
        const uint8_t *end = p + CRC_LONG;
        do {
            memcpy(&w0, p, 8);
            memcpy(&w1, p + CRC_LONG, 8);
            memcpy(&w2, p + 2 * CRC_LONG, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_long, (uint32_t)c0) ^ c1;
        c0 = crc_shift(crc_long, (uint32_t)c0) ^ c2;
        p += 2 * CRC_LONG;
        n -= 3 * CRC_LONG;
    }
    while (n >= 3 * CRC_SHORT) {
        c1 = c2 = 0;
        const uint8_t *end = p + CRC_SHORT;
        do {
            memcpy(&w0, p, 8);
            memcpy(&w1, p + CRC_SHORT, 8);
            memcpy(&w2, p + 2 * CRC_SHORT, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_short, (uint32_t)c0) ^ c1;
        c0 = crc_shift(crc_short, (uint32_t)c0) ^ c2;
        p += 2 * CRC_SHORT;
        n -= 3 * CRC_SHORT;
    }
    while (n >= 8) {
        memcpy(&w0, p, 8);
        c0 = _mm_crc32_u64(c0, w0);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)c0;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c ^ 0xFFFFFFFFu;
}
#endif

static int crc_hw = 0;
static int little_endian = 1;

static uint32_t crc32c(const uint8_t *p, size_t n) {
#ifdef HAVE_SSE42_PATH
    if (crc_hw) return crc32c_hw(p, n);
#endif
    if (little_endian) return crc32c_table(p, n);
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

/* ---- big-endian fields and varints ---------------------------------------------------------- */

static inline int64_t be64(const uint8_t *p) {
    return (int64_t)(((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
                     ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7]);
}
static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]); }

/* A zigzag varint (Kafka's varint and varlong) at *pp, below end. Returns 0, or -1 if truncated or too long. */
static inline int read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        uint64_t v = *p;
        *pp = p + 1;
        *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        return 0;
    }
    uint64_t v = 0;
    int shift = 0;
    while (p < end) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
        shift += 7;
        if (shift > 63) return -1;
    }
    return -1;
}

/* ---- growing buffers ------------------------------------------------------------------------ */

/* Column buffers live outside Python's allocator. A large one (from 128 KiB) is an anonymous mapping
 * that grows with mremap, moving pages rather than bytes. Writing a table of hundreds of MB into fresh
 * memory costs a page fault per 4 KiB: before this, faults were most of the reader's time. So a freed
 * mapping goes to a pool (up to `pool_max_bytes`, process-wide) and the next buffer reuses it:
 * a reader that reads again and again (a Spark executor, a polling service, a benchmark) writes into
 * memory already mapped. Pooled mappings are marked MADV_FREE, as jemalloc does with freed memory:
 * the kernel takes their pages back whenever it needs them, so the pool never holds memory the
 * system wants. Smaller buffers come from malloc. None of this needs the GIL. */
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define HAVE_MREMAP 1
#endif
#define MAP_MIN_BYTES ((Py_ssize_t)128 << 10)
#define MAP_UNIT_BYTES ((Py_ssize_t)64 << 10)

typedef struct {
    char *p;
    Py_ssize_t len; /* bytes used */
    Py_ssize_t cap; /* bytes allocated */
    int mapped;     /* p is a mapping of cap bytes, else malloc'ed */
} Buf;

static Py_ssize_t round_up(Py_ssize_t n, Py_ssize_t unit) { return (n + unit - 1) / unit * unit; }

#ifdef HAVE_MREMAP
#define POOL_SLOTS 4096 /* a read of GBs frees thousands of buffers: all may come back */
static struct {
    char *p;
    Py_ssize_t cap;  /* bytes mapped */
    Py_ssize_t used; /* bytes written, at most: what the mapping holds in memory */
} pool[POOL_SLOTS]; /* oldest first */
static int pool_n;
static Py_ssize_t pool_bytes, pool_max_bytes; /* bytes written into pooled mappings, and the cap on them */
static PyThread_type_lock pool_lock;

/* Give a mapping to the pool (`used` of its `cap` bytes written), evicting the oldest ones past the cap
 * on pooled memory; unmap it if it does not fit. It is marked MADV_FREE before anyone can take it
 * from the pool (after, it would drop what they wrote). */
static void pool_put(char *p, Py_ssize_t cap, Py_ssize_t used) {
    used = round_up(used, 4096);
    if (used > cap) used = cap;
    if (pool_max_bytes == 0 || used > pool_max_bytes) {
        munmap(p, (size_t)cap);
        return;
    }
#ifdef MADV_FREE
    if (used > 0) madvise(p, (size_t)used, MADV_FREE);
#endif
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    while (pool_n > 0 && (pool_n == POOL_SLOTS || pool_bytes + used > pool_max_bytes)) {
        munmap(pool[0].p, (size_t)pool[0].cap); /* eviction is rare: a read larger than the pool */
        pool_bytes -= pool[0].used;
        memmove(&pool[0], &pool[1], sizeof(pool[0]) * (size_t)(--pool_n));
    }
    pool[pool_n].p = p;
    pool[pool_n].cap = cap;
    pool[pool_n].used = used;
    pool_n++;
    pool_bytes += used;
    PyThread_release_lock(pool_lock);
}

/* A pooled mapping of at least `want` bytes: the smallest that fits (a builder asks for the size its
 * kind of buffer had last time, so like gets like), else the largest, grown with mremap; or NULL when
 * the pool is empty. */
static char *pool_get(Py_ssize_t want, Py_ssize_t *cap) {
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    int best = -1, largest = -1;
    for (int i = 0; i < pool_n; i++) {
        if (pool[i].cap >= want && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
        if (largest < 0 || pool[i].cap > pool[largest].cap) largest = i;
    }
    int k = best >= 0 ? best : largest;
    char *p = NULL;
    Py_ssize_t c = 0;
    if (k >= 0) {
        p = pool[k].p;
        c = pool[k].cap;
        pool_bytes -= pool[k].used;
        memmove(&pool[k], &pool[k + 1], sizeof(pool[0]) * (size_t)(pool_n - k - 1));
        pool_n--;
    }
    PyThread_release_lock(pool_lock);
    if (p != NULL && c < want) {
        char *q = mremap(p, (size_t)c, (size_t)want, MREMAP_MAYMOVE);
        if (q == MAP_FAILED) {
            munmap(p, (size_t)c);
            return NULL;
        }
        p = q;
        c = want;
    }
    *cap = c;
    return p;
}

static void pool_trim(Py_ssize_t max_bytes) {
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    pool_max_bytes = max_bytes;
    while (pool_n > 0 && pool_bytes > pool_max_bytes) {
        munmap(pool[0].p, (size_t)pool[0].cap);
        pool_bytes -= pool[0].used;
        memmove(&pool[0], &pool[1], sizeof(pool[0]) * (size_t)(--pool_n));
    }
    PyThread_release_lock(pool_lock);
}
#endif

static void buf_free(Buf *b) {
#ifdef HAVE_MREMAP
    if (b->mapped) {
        if (b->p != NULL && b->cap > 0) pool_put(b->p, b->cap, b->len);
        return;
    }
#endif
    PyMem_RawFree(b->p);
}

/* Make room for `extra` more bytes; a fresh buffer gets at least `hint` (the size it is expected to
 * reach: reserved, not touched, so it costs no memory until written, and it does not have to move
 * to grow). Returns 0, or -1 when out of memory (no Python error set: the caller may not hold the GIL). */
static int buf_grow(Buf *b, Py_ssize_t extra, Py_ssize_t hint) {
    Py_ssize_t need = b->len + extra;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < need) cap = need;
    if (b->p == NULL && cap < hint) cap = hint;
    if (cap < 4096) cap = 4096;
#ifdef HAVE_MREMAP
    if (cap >= MAP_MIN_BYTES) {
        cap = round_up(cap, MAP_UNIT_BYTES);
        char *q;
        if (b->mapped) {
            q = mremap(b->p, (size_t)b->cap, (size_t)cap, MREMAP_MAYMOVE);
            if (q == MAP_FAILED) return -1;
        } else {
            Py_ssize_t got = 0;
            q = pool_get(cap, &got);
            if (q != NULL) {
                cap = got;
            } else {
                q = mmap(NULL, (size_t)cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (q == MAP_FAILED) return -1;
            }
            if (b->len > 0) memcpy(q, b->p, (size_t)b->len);
            PyMem_RawFree(b->p);
            b->mapped = 1;
        }
        b->p = q;
        b->cap = cap;
        return 0;
    }
#endif
    char *q = PyMem_RawRealloc(b->p, (size_t)cap);
    if (q == NULL) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

static void buf_clear(Buf *b) {
    buf_free(b);
    b->p = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
}

/* Memory handed to Python: a column buffer (read-only bytes pyarrow wraps without a copy, freed when
 * the last Arrow array using it goes) or, from allocate(), a writable receive buffer. */
typedef struct {
    PyObject_HEAD
    Buf b;
    int writable;
} ColumnBuffer;

static int ColumnBuffer_getbuffer(ColumnBuffer *self, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->b.p ? self->b.p : empty, self->b.len, !self->writable,
                             flags);
}

static void ColumnBuffer_dealloc(ColumnBuffer *self) {
    buf_clear(&self->b);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t ColumnBuffer_len(ColumnBuffer *self) { return self->b.len; }

static PyBufferProcs ColumnBuffer_as_buffer = {(getbufferproc)ColumnBuffer_getbuffer, NULL};
static PySequenceMethods ColumnBuffer_as_sequence = {.sq_length = (lenfunc)ColumnBuffer_len};

static PyTypeObject ColumnBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gregor.client._arrowbatch.ColumnBuffer",
    .tp_basicsize = sizeof(ColumnBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of one Arrow buffer built by a Decoder (read-only), or from allocate() (writable).",
    .tp_dealloc = (destructor)ColumnBuffer_dealloc,
    .tp_as_buffer = &ColumnBuffer_as_buffer,
    .tp_as_sequence = &ColumnBuffer_as_sequence,
};

/* The buffer as a ColumnBuffer (a new reference), leaving the Buf empty. Its capacity past `len` stays
 * reserved but costs nothing: pages never written are never faulted in. */
static PyObject *buf_take(Buf *b) {
    ColumnBuffer *o = PyObject_New(ColumnBuffer, &ColumnBufferType);
    if (o == NULL) return NULL;
    o->b = *b;
    o->writable = 0;
    b->p = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
    return (PyObject *)o;
}

/* ---- the decoder ---------------------------------------------------------------------------- */

enum { ST_EXHAUSTED = 0, ST_FULL = 1, ST_DONE = 2 };

enum {
    B_OFFSET, B_TS, B_TSTYPE,
    B_KVALID, B_KOFFS, B_KDATA,
    B_VVALID, B_VOFFS, B_VDATA,
    B_HVALID, B_HOFFS,              /* the list<struct> column: validity (null = no headers), list offsets */
    B_HKOFFS, B_HKDATA,             /* header keys (string) */
    B_HVVALID, B_HVOFFS, B_HVDATA,  /* header values (binary) */
    NBUFS
};

typedef struct {
    PyObject_HEAD
    int64_t ts_scale;
    int want_key, want_value, want_headers, check_crcs, read_committed;
    int64_t start, end;
    Buf b[NBUFS];
    int64_t rows, key_nulls, value_nulls, header_list_nulls, headers, header_value_nulls;
    int bad_utf8; /* a header key is not valid UTF-8 (the Python side repairs that column) */
    int64_t next_offset;
    /* read_committed: the response's aborted transactions (sorted by first offset) and the producers
     * whose aborted transaction the walk is inside. */
    int64_t *ab_pid, *ab_first;
    Py_ssize_t n_ab, ab_idx;
    int64_t *active;
    Py_ssize_t n_active, cap_active;
    /* counters for tests and metrics */
    int64_t batches, control_batches, aborted_batches, compressed_batches, records_seen;
    int busy; /* a feed is running (its record walk without the GIL): other threads must keep off */
    Py_ssize_t hint_rows, hint_bytes; /* what a builder is expected to reach (feed's max_rows, max_bytes) */
} Decoder;

static PyObject *CorruptRecordError;

static int grow(Decoder *d, int which, Py_ssize_t extra) {
    Buf *b = &d->b[which];
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t rows = d->hint_rows + 1, hint;
    switch (which) {
        case B_OFFSET: case B_TS: hint = rows * 8; break;
        case B_TSTYPE: case B_KOFFS: case B_VOFFS: case B_HOFFS: hint = rows * 4; break;
        case B_KVALID: case B_VVALID: case B_HVALID: hint = rows / 8 + 1; break;
        case B_VDATA: hint = d->hint_bytes; break;
        case B_KDATA: hint = d->hint_bytes / 8; break;
        default: hint = 0; /* headers: rare, they grow as they come */
    }
    return buf_grow(b, extra, hint);
}

static void decoder_reset_builders(Decoder *d) {
    for (int i = 0; i < NBUFS; i++) buf_clear(&d->b[i]);
    d->rows = d->key_nulls = d->value_nulls = d->header_list_nulls = d->headers = d->header_value_nulls = 0;
    d->bad_utf8 = 0;
}

static void Decoder_dealloc(Decoder *d) {
    decoder_reset_builders(d);
    PyMem_Free(d->ab_pid);
    PyMem_Free(d->ab_first);
    PyMem_Free(d->active);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static int Decoder_init(Decoder *d, PyObject *args, PyObject *kw) {
    static char *names[] = {"timestamp_scale", "key", "value", "headers", "check_crcs", "read_committed", NULL};
    long long scale = 1;
    int key = 1, value = 1, headers = 1, crcs = 1, committed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Lppppp", names, &scale, &key, &value, &headers, &crcs, &committed))
        return -1;
    if (scale < 1) {
        PyErr_SetString(PyExc_ValueError, "timestamp_scale must be >= 1");
        return -1;
    }
    decoder_reset_builders(d);
    d->ts_scale = scale;
    d->want_key = key;
    d->want_value = value;
    d->want_headers = headers;
    d->check_crcs = crcs;
    d->read_committed = committed;
    d->start = INT64_MIN;
    d->end = INT64_MAX;
    d->next_offset = -1;
    return 0;
}

static int check_idle(Decoder *d) {
    if (d->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the Decoder is in use by another thread");
        return -1;
    }
    return 0;
}

static PyObject *Decoder_set_range(Decoder *d, PyObject *args) {
    long long start, end;
    if (!PyArg_ParseTuple(args, "LL", &start, &end)) return NULL;
    if (check_idle(d) < 0) return NULL;
    d->start = start;
    d->end = end;
    if (d->next_offset < start) d->next_offset = start;
    Py_RETURN_NONE;
}

/* The aborted transactions of one Fetch response: a sequence of (producer_id, first_offset) sorted
 * by first offset, or None. The walk's set of aborted producers starts empty with each response, as
 * Kafka's consumer keeps it per completed fetch. */
static PyObject *Decoder_set_aborted(Decoder *d, PyObject *arg) {
    if (check_idle(d) < 0) return NULL;
    d->n_ab = d->ab_idx = d->n_active = 0;
    if (arg == Py_None) Py_RETURN_NONE;
    PyObject *seq = PySequence_Fast(arg, "aborted transactions must be a sequence of (producer_id, first_offset)");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t *pid = PyMem_Realloc(d->ab_pid, sizeof(int64_t) * (n ? n : 1));
    if (pid == NULL) goto nomem;
    d->ab_pid = pid;
    int64_t *first = PyMem_Realloc(d->ab_first, sizeof(int64_t) * (n ? n : 1));
    if (first == NULL) goto nomem;
    d->ab_first = first;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long p, f;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "LL", &p, &f)) {
            Py_DECREF(seq);
            return NULL;
        }
        if (i > 0 && f < d->ab_first[i - 1]) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "aborted transactions must be sorted by first offset");
            return NULL;
        }
        d->ab_pid[i] = p;
        d->ab_first[i] = f;
    }
    d->n_ab = n;
    Py_DECREF(seq);
    Py_RETURN_NONE;
nomem:
    Py_DECREF(seq);
    return PyErr_NoMemory();
}

static int active_has(Decoder *d, int64_t pid) {
    for (Py_ssize_t i = 0; i < d->n_active; i++)
        if (d->active[i] == pid) return 1;
    return 0;
}

static int active_add(Decoder *d, int64_t pid) {
    if (active_has(d, pid)) return 0;
    if (d->n_active == d->cap_active) {
        Py_ssize_t cap = d->cap_active ? d->cap_active * 2 : 16;
        int64_t *a = PyMem_Realloc(d->active, sizeof(int64_t) * cap);
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        d->active = a;
        d->cap_active = cap;
    }
    d->active[d->n_active++] = pid;
    return 0;
}

static void active_remove(Decoder *d, int64_t pid) {
    for (Py_ssize_t i = 0; i < d->n_active; i++)
        if (d->active[i] == pid) {
            d->active[i] = d->active[--d->n_active];
            return;
        }
}

/* UTF-8 validity (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF). */
static int utf8_valid(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        int len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

typedef struct {
    int64_t base_offset, base_ts, max_ts;
    int32_t records;
    int log_append;
} BatchInfo;

/* Errors found without the GIL: a message, raised as CorruptRecordError once it is held again. */
typedef struct {
    char msg[200];
} WalkError;


static inline void bit_append(Buf *b, int64_t i, int valid) {
    uint8_t *bits = (uint8_t *)b->p;
    if ((i & 7) == 0) {
        bits[i >> 3] = 0;
        b->len = (i >> 3) + 1;
    }
    if (valid) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static inline void i32_append(Buf *b, int32_t v) {
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
}

/* Start an int32 offsets buffer with its leading 0. */
static int offsets_begin(Decoder *d, int which) {
    if (d->b[which].len == 0) {
        if (grow(d, which, 4) < 0) return -1;
        i32_append(&d->b[which], 0);
    }
    return 0;
}

/* Reserve what a batch of `records` records in `body_len` bytes can need, with the GIL held, so the
 * walk seldom has to take it again: fixed-width columns and bitmaps by record count, key and value
 * data by the body's length (an upper bound). Header buffers grow as headers appear. */
static int reserve_batch(Decoder *d, int64_t records, Py_ssize_t body_len) {
    Py_ssize_t bits = (Py_ssize_t)((d->rows + records + 7) / 8) - d->b[B_KVALID].len + 1;
    if (grow(d, B_OFFSET, records * 8) < 0 || grow(d, B_TS, records * 8) < 0 || grow(d, B_TSTYPE, records * 4) < 0)
        return -1;
    if (d->want_key && (offsets_begin(d, B_KOFFS) < 0 || grow(d, B_KVALID, bits) < 0 ||
                        grow(d, B_KOFFS, records * 4) < 0 || grow(d, B_KDATA, body_len) < 0))
        return -1;
    if (d->want_value) {
        bits = (Py_ssize_t)((d->rows + records + 7) / 8) - d->b[B_VVALID].len + 1;
        if (offsets_begin(d, B_VOFFS) < 0 || grow(d, B_VVALID, bits) < 0 || grow(d, B_VOFFS, records * 4) < 0 ||
            grow(d, B_VDATA, body_len) < 0)
            return -1;
    }
    if (d->want_headers) {
        bits = (Py_ssize_t)((d->rows + records + 7) / 8) - d->b[B_HVALID].len + 1;
        if (offsets_begin(d, B_HOFFS) < 0 || grow(d, B_HVALID, bits) < 0 || grow(d, B_HOFFS, records * 4) < 0 ||
            offsets_begin(d, B_HKOFFS) < 0 || offsets_begin(d, B_HVOFFS) < 0)
            return -1;
    }
    return 0;
}

static inline int append_var(Decoder *d, int valid_buf, int offs_buf, int data_buf, int64_t row,
                             const uint8_t *src, int64_t n, int64_t *nulls) {
    Buf *data = &d->b[data_buf];
    if (n < 0) {
        bit_append(&d->b[valid_buf], row, 0);
        (*nulls)++;
    } else {
        bit_append(&d->b[valid_buf], row, 1);
        if (data->len + n > data->cap && grow(d, data_buf, n) < 0) return -1;
        memcpy(data->p + data->len, src, (size_t)n);
        data->len += n;
    }
    if (data->len > INT32_MAX) return -2;
    i32_append(&d->b[offs_buf], (int32_t)data->len);
    return 0;
}

/* The records of one batch body (uncompressed) appended to the columns, without the GIL. Returns 0,
 * -1 with `err` set (corrupt data), or -2 (out of memory).
 *
 * reserve_batch made room for the batch's rows in every row-wise buffer and for its body's length in
 * the key and value data, so this loop writes through local pointers with no capacity checks (kept in
 * registers: the compiler cannot assume that writes through the data pointers leave the Decoder's
 * fields alone) and stores the lengths back once. Headers, rare, grow their buffers as they come. */
#define FAIL(...)                                            \
    do {                                                     \
        snprintf(err->msg, sizeof(err->msg), __VA_ARGS__);   \
        rc = -1;                                             \
        goto done;                                           \
    } while (0)

static int walk_records(Decoder *d, const BatchInfo *bi, const uint8_t *p, const uint8_t *end, WalkError *err) {
    const int64_t start = d->start, stop = d->end, scale = d->ts_scale, base = bi->base_offset;
    const int want_key = d->want_key, want_value = d->want_value, want_headers = d->want_headers;
    const int log_append = bi->log_append;
    const int64_t append_ts = bi->max_ts * scale;
    int64_t row = d->rows, key_nulls = d->key_nulls, value_nulls = d->value_nulls, list_nulls = d->header_list_nulls;
    int64_t *off_out = (int64_t *)d->b[B_OFFSET].p, *ts_out = (int64_t *)d->b[B_TS].p;
    int32_t *tstype_out = (int32_t *)d->b[B_TSTYPE].p;
    uint8_t *kbits = (uint8_t *)d->b[B_KVALID].p, *vbits = (uint8_t *)d->b[B_VVALID].p;
    uint8_t *hbits = (uint8_t *)d->b[B_HVALID].p;
    /* offsets[row + 1] is where row ends: point past the leading 0 */
    int32_t *koffs = want_key ? (int32_t *)d->b[B_KOFFS].p + 1 : NULL;
    int32_t *voffs = want_value ? (int32_t *)d->b[B_VOFFS].p + 1 : NULL;
    int32_t *hoffs = want_headers ? (int32_t *)d->b[B_HOFFS].p + 1 : NULL;
    char *kdata = d->b[B_KDATA].p, *vdata = d->b[B_VDATA].p;
    Py_ssize_t kend = d->b[B_KDATA].len, vend = d->b[B_VDATA].len;
    int64_t seen = 0;
    int rc = 0;
    for (int32_t i = 0; i < bi->records; i++) {
        int64_t len, ts_delta, off_delta, klen, vlen, nh;
        if (read_varlong(&p, end, &len) < 0 || len < 1 || len > end - p)
            FAIL("record %d of the batch at offset %lld: bad record length", i, (long long)base);
        const uint8_t *rend = p + len;
        p++; /* attributes: unused */
        if (read_varlong(&p, rend, &ts_delta) < 0 || read_varlong(&p, rend, &off_delta) < 0 ||
            read_varlong(&p, rend, &klen) < 0 || klen > rend - p || klen < -1)
            FAIL("record %d of the batch at offset %lld: bad header fields or key length", i, (long long)base);
        const uint8_t *key = p;
        if (klen > 0) p += klen;
        if (read_varlong(&p, rend, &vlen) < 0 || vlen > rend - p || vlen < -1)
            FAIL("record %d of the batch at offset %lld: bad value length", i, (long long)base);
        const uint8_t *value = p;
        if (vlen > 0) p += vlen;
        if (read_varlong(&p, rend, &nh) < 0 || nh < 0 || nh > rend - p)
            FAIL("record %d of the batch at offset %lld: bad header count", i, (long long)base);
        int64_t offset = base + off_delta;
        int keep = offset >= start && offset < stop;
        seen++;
        if (keep) {
            const uint8_t bit = (uint8_t)(1u << (row & 7));
            const int64_t byte = row >> 3;
            off_out[row] = offset;
            ts_out[row] = log_append ? append_ts : (bi->base_ts + ts_delta) * scale;
            tstype_out[row] = log_append;
            if (want_key) {
                if (bit == 1) kbits[byte] = 0;
                if (klen >= 0) {
                    kbits[byte] |= bit;
                    memcpy(kdata + kend, key, (size_t)klen);
                    kend += klen;
                } else {
                    key_nulls++;
                }
                koffs[row] = (int32_t)kend;
            }
            if (want_value) {
                if (bit == 1) vbits[byte] = 0;
                if (vlen >= 0) {
                    vbits[byte] |= bit;
                    memcpy(vdata + vend, value, (size_t)vlen);
                    vend += vlen;
                } else {
                    value_nulls++;
                }
                voffs[row] = (int32_t)vend;
            }
            if (kend > INT32_MAX || vend > INT32_MAX)
                FAIL("more than 2 GiB of keys or values in one Arrow batch: lower arrow.batch.max.bytes");
            if (want_headers) {
                if (bit == 1) hbits[byte] = 0;
                if (nh > 0)
                    hbits[byte] |= bit;
                else
                    list_nulls++;
            }
            row++;
        }
        for (int64_t h = 0; h < nh; h++) {
            int64_t hklen, hvlen;
            if (read_varlong(&p, rend, &hklen) < 0 || hklen < 0 || hklen > rend - p)
                FAIL("record %d of the batch at offset %lld: bad header key length", i, (long long)base);
            const uint8_t *hkey = p;
            p += hklen;
            if (read_varlong(&p, rend, &hvlen) < 0 || hvlen < -1 || hvlen > rend - p)
                FAIL("record %d of the batch at offset %lld: bad header value length", i, (long long)base);
            const uint8_t *hval = p;
            if (hvlen > 0) p += hvlen;
            if (keep && want_headers) {
                Buf *kd = &d->b[B_HKDATA];
                if (grow(d, B_HKOFFS, 4) < 0 || grow(d, B_HVOFFS, 4) < 0 || grow(d, B_HKDATA, hklen) < 0 ||
                    grow(d, B_HVVALID, 1) < 0) {
                    rc = -2;
                    goto done;
                }
                if (!d->bad_utf8 && !utf8_valid(hkey, hklen)) d->bad_utf8 = 1;
                memcpy(kd->p + kd->len, hkey, (size_t)hklen);
                kd->len += hklen;
                if (kd->len > INT32_MAX) FAIL("more than 2 GiB of header keys in one Arrow batch");
                i32_append(&d->b[B_HKOFFS], (int32_t)kd->len);
                int r2 = append_var(d, B_HVVALID, B_HVOFFS, B_HVDATA, d->headers, hval, hvlen, &d->header_value_nulls);
                if (r2 == -1) {
                    rc = -2;
                    goto done;
                }
                if (r2 == -2) FAIL("more than 2 GiB of header values in one Arrow batch");
                d->headers++;
            }
        }
        if (p != rend)
            FAIL("record %d of the batch at offset %lld: its length does not match its fields", i, (long long)base);
        if (keep && want_headers) {
            if (d->headers > INT32_MAX) FAIL("more than 2^31 headers in one Arrow batch");
            hoffs[row - 1] = (int32_t)d->headers;
        }
    }
    if (p != end) FAIL("the batch at offset %lld has bytes after its last record", (long long)base);
done:
    d->rows = row;
    d->records_seen += seen;
    d->key_nulls = key_nulls;
    d->value_nulls = value_nulls;
    d->header_list_nulls = list_nulls;
    d->b[B_OFFSET].len = d->b[B_TS].len = row * 8;
    d->b[B_TSTYPE].len = row * 4;
    if (want_key) {
        d->b[B_KVALID].len = (row + 7) / 8;
        d->b[B_KOFFS].len = (row + 1) * 4;
        d->b[B_KDATA].len = kend;
    }
    if (want_value) {
        d->b[B_VVALID].len = (row + 7) / 8;
        d->b[B_VOFFS].len = (row + 1) * 4;
        d->b[B_VDATA].len = vend;
    }
    if (want_headers) {
        d->b[B_HVALID].len = (row + 7) / 8;
        d->b[B_HOFFS].len = (row + 1) * 4;
    }
    return rc;
}
#undef FAIL

/* The control type of a control batch's record (0 abort, 1 commit), or -1 when its key is not one. */
static int control_type(const uint8_t *p, const uint8_t *end) {
    int64_t len, skip, klen;
    if (read_varlong(&p, end, &len) < 0 || len <= 0 || len > end - p) return -1;
    const uint8_t *rend = p + len;
    p++;
    if (read_varlong(&p, rend, &skip) < 0 || read_varlong(&p, rend, &skip) < 0 || read_varlong(&p, rend, &klen) < 0)
        return -1;
    if (klen < 4 || klen > rend - p) return -1;
    return be16(p + 2);
}

#define HEADER_SIZE 61

/* feed(record_set, pos, decompress, max_rows, max_bytes) -> (pos, status) */
static PyObject *Decoder_feed(Decoder *d, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *decompress;
    long long max_rows, max_bytes;
    if (!PyArg_ParseTuple(args, "y*nOLL", &view, &pos, &decompress, &max_rows, &max_bytes)) return NULL;
    if (check_idle(d) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    d->busy = 1;
    d->hint_rows = max_rows < (1 << 26) ? (Py_ssize_t)max_rows : (1 << 26);
    d->hint_bytes = max_bytes < (1 << 30) ? (Py_ssize_t)max_bytes + (1 << 20) : (1 << 30);
    const uint8_t *base = view.buf;
    const Py_ssize_t n = view.len;
    int status = ST_EXHAUSTED;
    PyObject *result = NULL;
    WalkError err;
    err.msg[0] = 0;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "position outside the record set");
        goto out;
    }
    while (1) {
        if (n - pos < HEADER_SIZE) break; /* a partial batch at the end of a fetch: read it next time */
        const uint8_t *h = base + pos;
        int64_t base_offset = be64(h);
        int32_t length = be32(h + 8);
        int8_t magic = (int8_t)h[16];
        if (length < HEADER_SIZE - 12) {
            PyErr_Format(CorruptRecordError, "record batch at offset %lld has length %d", (long long)base_offset,
                         length);
            goto out;
        }
        Py_ssize_t size = (Py_ssize_t)length + 12;
        if (size > n - pos) break;
        if (magic != 2) {
            PyErr_Format(CorruptRecordError,
                         "record batch at offset %lld uses message format v%d: only v2 (Kafka 0.11 and later) is read",
                         (long long)base_offset, (int)magic);
            goto out;
        }
        uint32_t crc = (uint32_t)be32(h + 17);
        int16_t attrs = be16(h + 21);
        int32_t last_delta = be32(h + 23);
        int64_t base_ts = be64(h + 27), max_ts = be64(h + 35), producer_id = be64(h + 43);
        int32_t records = be32(h + 57);
        int64_t last_offset = base_offset + last_delta;
        if (base_offset >= d->end) {
            status = ST_DONE;
            break;
        }
        if (last_offset < d->start) { /* the batch holding `start` may begin before it; whole earlier batches go */
            pos += size;
            if (last_offset + 1 > d->next_offset) d->next_offset = last_offset + 1;
            continue;
        }
        if (d->rows > 0 && (d->rows >= max_rows || d->b[B_KDATA].len + d->b[B_VDATA].len + d->b[B_HKDATA].len +
                                                           d->b[B_HVDATA].len >= max_bytes)) {
            status = ST_FULL;
            break;
        }
        if (d->check_crcs && crc32c(h + 21, (size_t)(size - 21)) != crc) {
            PyErr_Format(CorruptRecordError, "record batch at offset %lld fails its CRC32C check (check.crcs)",
                         (long long)base_offset);
            goto out;
        }
        if (records < 0 || last_delta < 0) {
            PyErr_Format(CorruptRecordError, "record batch at offset %lld has %d records, last offset delta %d",
                         (long long)base_offset, records, last_delta);
            goto out;
        }
        int control = (attrs & 0x20) != 0, transactional = (attrs & 0x10) != 0, codec = attrs & 0x07;
        d->batches++;
        const uint8_t *body = h + HEADER_SIZE, *body_end = h + size;
        Py_buffer plain;
        int have_plain = 0;
        int skip = 0;
        if (codec != 0 && (!control || d->read_committed)) {
            if (codec > 4) {
                PyErr_Format(CorruptRecordError, "record batch at offset %lld uses unknown compression codec %d",
                             (long long)base_offset, codec);
                goto out;
            }
            PyObject *mv = PyMemoryView_FromMemory((char *)body, body_end - body, PyBUF_READ);
            if (mv == NULL) goto out;
            PyObject *res = PyObject_CallFunction(decompress, "iO", codec, mv);
            Py_DECREF(mv);
            if (res == NULL) goto out;
            int g = PyObject_GetBuffer(res, &plain, PyBUF_SIMPLE);
            Py_DECREF(res); /* the callable keeps its buffer alive until its next call */
            if (g < 0) goto out;
            have_plain = 1;
            body = plain.buf;
            body_end = body + plain.len;
            d->compressed_batches++;
        }
        if (d->read_committed && producer_id >= 0) {
            while (d->ab_idx < d->n_ab && d->ab_first[d->ab_idx] <= last_offset) {
                if (active_add(d, d->ab_pid[d->ab_idx]) < 0) {
                    if (have_plain) PyBuffer_Release(&plain);
                    goto out;
                }
                d->ab_idx++;
            }
            if (control) {
                if (control_type(body, body_end) == 0) active_remove(d, producer_id);
            } else if (transactional && active_has(d, producer_id)) {
                skip = 1;
                d->aborted_batches++;
            }
        }
        if (control) {
            skip = 1;
            d->control_batches++;
        }
        if (!skip && records > 0) {
            if (records > (body_end - body) / 7) { /* a record takes at least 7 bytes */
                if (have_plain) PyBuffer_Release(&plain);
                PyErr_Format(CorruptRecordError, "record batch at offset %lld claims %d records in %zd bytes",
                             (long long)base_offset, records, (Py_ssize_t)(body_end - body));
                goto out;
            }
            if (reserve_batch(d, records, body_end - body) < 0) {
                if (have_plain) PyBuffer_Release(&plain);
                PyErr_NoMemory();
                goto out;
            }
            BatchInfo bi = {base_offset, base_ts, max_ts, records, (attrs & 0x08) != 0};
            int r;
            if (records >= 64) { /* worth letting other threads run (e.g. the one receiving the next fetch) */
                Py_BEGIN_ALLOW_THREADS
                r = walk_records(d, &bi, body, body_end, &err);
                Py_END_ALLOW_THREADS
            } else {
                r = walk_records(d, &bi, body, body_end, &err);
            }
            if (have_plain) PyBuffer_Release(&plain);
            if (r == -1) {
                PyErr_SetString(CorruptRecordError, err.msg);
                goto out;
            }
            if (r == -2) {
                PyErr_NoMemory();
                goto out;
            }
        } else if (have_plain) {
            PyBuffer_Release(&plain);
        }
        pos += size;
        if (last_offset + 1 > d->next_offset) d->next_offset = last_offset + 1;
        if (d->next_offset >= d->end) {
            status = ST_DONE;
            break;
        }
    }
    result = Py_BuildValue("ni", pos, status);
out:
    d->busy = 0;
    PyBuffer_Release(&view);
    return result;
}

/* take() -> None, or a tuple: (rows, offset, timestamp, timestampType, key_nulls, key_validity,
 * key_offsets, key_data, value_nulls, value_validity, value_offsets, value_data, header_list_nulls,
 * headers_validity, headers_offsets, header_count, header_key_offsets, header_key_data,
 * header_value_nulls, header_value_validity, header_value_offsets, header_value_data, bad_utf8).
 * Buffers of columns not asked for are None; the Decoder starts empty again. */
static PyObject *Decoder_take(Decoder *d, PyObject *unused) {
    if (check_idle(d) < 0) return NULL;
    if (d->rows == 0) {
        decoder_reset_builders(d);
        Py_RETURN_NONE;
    }
    PyObject *bufs[NBUFS];
    for (int i = 0; i < NBUFS; i++) bufs[i] = NULL;
    int wanted[NBUFS] = {1, 1, 1, d->want_key, d->want_key, d->want_key, d->want_value, d->want_value, d->want_value,
                         d->want_headers, d->want_headers, d->want_headers, d->want_headers, d->want_headers,
                         d->want_headers, d->want_headers};
    for (int i = 0; i < NBUFS; i++) {
        if (!wanted[i]) {
            bufs[i] = Py_NewRef(Py_None);
            continue;
        }
        bufs[i] = buf_take(&d->b[i]);
        if (bufs[i] == NULL) {
            for (int k = 0; k < i; k++) Py_XDECREF(bufs[k]);
            return NULL;
        }
    }
    PyObject *t = Py_BuildValue("(LNNNLNNNLNNNLNNLNNLNNNi)", (long long)d->rows, bufs[B_OFFSET], bufs[B_TS],
                                bufs[B_TSTYPE], (long long)d->key_nulls, bufs[B_KVALID], bufs[B_KOFFS], bufs[B_KDATA],
                                (long long)d->value_nulls, bufs[B_VVALID], bufs[B_VOFFS], bufs[B_VDATA],
                                (long long)d->header_list_nulls, bufs[B_HVALID], bufs[B_HOFFS], (long long)d->headers,
                                bufs[B_HKOFFS], bufs[B_HKDATA], (long long)d->header_value_nulls, bufs[B_HVVALID],
                                bufs[B_HVOFFS], bufs[B_HVDATA], d->bad_utf8);
    decoder_reset_builders(d);
    return t;
}

static PyObject *Decoder_get_rows(Decoder *d, void *c) { return PyLong_FromLongLong(d->rows); }
static PyObject *Decoder_get_data_bytes(Decoder *d, void *c) {
    return PyLong_FromSsize_t(d->b[B_KDATA].len + d->b[B_VDATA].len + d->b[B_HKDATA].len + d->b[B_HVDATA].len);
}
static PyObject *Decoder_get_next_offset(Decoder *d, void *c) { return PyLong_FromLongLong(d->next_offset); }
static int Decoder_set_next_offset(Decoder *d, PyObject *v, void *c) {
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete next_offset");
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    d->next_offset = x;
    return 0;
}
static PyObject *Decoder_get_stats(Decoder *d, void *c) {
    return Py_BuildValue("{sLsLsLsLsL}", "batches", (long long)d->batches, "control_batches",
                         (long long)d->control_batches, "aborted_batches", (long long)d->aborted_batches,
                         "compressed_batches", (long long)d->compressed_batches, "records_seen",
                         (long long)d->records_seen);
}

static PyMethodDef Decoder_methods[] = {
    {"set_range", (PyCFunction)Decoder_set_range, METH_VARARGS,
     "set_range(start, end): keep only records with start <= offset < end."},
    {"set_aborted", (PyCFunction)Decoder_set_aborted, METH_O,
     "set_aborted(list of (producer_id, first_offset) sorted by first offset, or None): a new Fetch response's "
     "aborted transactions (read_committed)."},
    {"feed", (PyCFunction)Decoder_feed, METH_VARARGS,
     "feed(record_set, pos, decompress, max_rows, max_bytes) -> (pos, status): decode the batches from pos "
     "on. status 0: the record set is used up (a partial batch may remain at pos); 1: the builder holds "
     "max_rows or max_bytes (take() it, then feed on from pos); 2: the range's end was reached."},
    {"take", (PyCFunction)Decoder_take, METH_NOARGS, "take() -> the column buffers built so far, or None."},
    {NULL}};

static PyGetSetDef Decoder_getset[] = {
    {"rows", (getter)Decoder_get_rows, NULL, "rows built since the last take()", NULL},
    {"data_bytes", (getter)Decoder_get_data_bytes, NULL, "key, value and header bytes built since the last take()",
     NULL},
    {"next_offset", (getter)Decoder_get_next_offset, (setter)Decoder_set_next_offset,
     "the offset after the last batch walked (where the next fetch starts)", NULL},
    {"stats", (getter)Decoder_get_stats, NULL, "batch and record counters", NULL},
    {NULL}};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gregor.client._arrowbatch.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Record batches (magic 2) into Arrow column buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_methods = Decoder_methods,
    .tp_getset = Decoder_getset,
};

/* scan(record_set) -> (next_offset or -1, bytes of complete batches): where the fetch after this one
 * starts, read from the batch headers alone so it can be sent before the records are decoded. */
static PyObject *scan(PyObject *m, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *base = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    int64_t next = -1;
    while (n - pos >= HEADER_SIZE) {
        int32_t length = be32(base + pos + 8);
        if (length < HEADER_SIZE - 12 || (Py_ssize_t)length + 12 > n - pos) break;
        int64_t last = be64(base + pos) + be32(base + pos + 23);
        if (last + 1 > next) next = last + 1;
        pos += (Py_ssize_t)length + 12;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("Ln", (long long)next, pos);
}

static PyObject *py_crc32c(PyObject *m, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/* allocate(size) -> a writable ColumnBuffer of `size` bytes, from the pool where it can (for receive
 * buffers: a reader that reads again reuses the memory of the last one). */
static PyObject *allocate(PyObject *m, PyObject *arg) {
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be >= 0");
        return NULL;
    }
    ColumnBuffer *o = PyObject_New(ColumnBuffer, &ColumnBufferType);
    if (o == NULL) return NULL;
    memset(&o->b, 0, sizeof(o->b));
    o->writable = 1;
    if (size > 0 && buf_grow(&o->b, size, size) < 0) {
        Py_DECREF(o);
        return PyErr_NoMemory();
    }
    o->b.len = size;
    return (PyObject *)o;
}

/* pool_bytes(max_bytes=None) -> (max, held): set the cap of the pool of freed mappings (0 turns it off) */
static PyObject *pool_size(PyObject *m, PyObject *args) {
    PyObject *arg = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &arg)) return NULL;
#ifdef HAVE_MREMAP
    if (arg != Py_None) {
        Py_ssize_t n = PyLong_AsSsize_t(arg);
        if (n == -1 && PyErr_Occurred()) return NULL;
        if (n < 0) {
            PyErr_SetString(PyExc_ValueError, "the pool size must be >= 0");
            return NULL;
        }
        pool_trim(n);
    }
    return Py_BuildValue("nn", pool_max_bytes, pool_bytes);
#else
    return Py_BuildValue("nn", (Py_ssize_t)0, (Py_ssize_t)0);
#endif
}

static PyMethodDef module_methods[] = {
    {"allocate", allocate, METH_O, "allocate(size) -> a writable buffer of size bytes (pooled memory)"},
    {"pool_bytes", pool_size, METH_VARARGS,
     "pool_bytes(max_bytes=None) -> (max_bytes, held_bytes): the cap on freed buffer memory kept for reuse "
     "(process-wide; 0 turns the pool off)"},
    {"scan", scan, METH_O, "scan(record_set) -> (next offset after the complete batches or -1, their bytes)"},
    {"crc32c", py_crc32c, METH_O, "crc32c(data) -> CRC32C of data (the one the decoder checks batches with)"},
    {NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "gregor.client._arrowbatch",
                                       "Kafka record batches decoded into Arrow column buffers.", -1,
                                       module_methods};

PyMODINIT_FUNC PyInit__arrowbatch(void) {
    uint16_t one = 1;
    little_endian = *(uint8_t *)&one == 1;
    crc_init_tables();
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
    if (crc_hw) {
        crc_zeros(crc_long, CRC_LONG);
        crc_zeros(crc_short, CRC_SHORT);
    }
#endif
    if (PyType_Ready(&DecoderType) < 0 || PyType_Ready(&ColumnBufferType) < 0) return NULL;
#ifdef HAVE_MREMAP
    pool_lock = PyThread_allocate_lock();
    if (pool_lock == NULL) return PyErr_NoMemory();
    /* By default an eighth of the machine's memory, at most 1 GiB: enough for the last few tables a
     * process read, little next to what it has (and the kernel reclaims MADV_FREE pages under pressure). */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    pool_max_bytes = (Py_ssize_t)1 << 30;
    if (pages > 0 && page > 0 && (Py_ssize_t)pages / 8 * page < pool_max_bytes)
        pool_max_bytes = (Py_ssize_t)pages / 8 * page;
#endif
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    CorruptRecordError = PyErr_NewExceptionWithDoc("gregor.client._arrowbatch.CorruptRecordError",
                                                   "A record batch does not decode (or fails its CRC).",
                                                   PyExc_ValueError, NULL);
    if (CorruptRecordError == NULL || PyModule_AddObjectRef(m, "CorruptRecordError", CorruptRecordError) < 0 ||
        PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "EXHAUSTED", ST_EXHAUSTED);
    PyModule_AddIntConstant(m, "FULL", ST_FULL);
    PyModule_AddIntConstant(m, "DONE", ST_DONE);
    PyModule_AddIntConstant(m, "HARDWARE_CRC", crc_hw);
    return m;
}
