/* The reward model's forward pass for CPU scoring, in one call per chunk (orchrm.native).
 *
 * The encoder is a BERT-family stack (embeddings + LayerNorm, L layers of self-attention and a
 * feed-forward block, post-LayerNorm), then mean pooling over each action's pooled tokens and
 * the reward head (Linear, GELU, Linear). Tokens stay packed, as orchrm.encoders.encode_packed
 * keeps them. Attention runs per block of queries that see the same keys: at most two
 * contiguous key ranges (shared_prompt: a prompt's tokens see their prompt; an action's tokens
 * see their prompt, then themselves; joint: a row sees itself), so no score of a key a query
 * may not see is ever computed.
 *
 * The linear layers go through one of the two matrix kernels PyTorch carries (their exported
 * symbols, resolved from libtorch_cpu when this library is loaded), chosen per model (orm_new's
 * gemm; orm_time_gemm times both): MKL, the weights packed once with cblas_sgemm_pack (the
 * layout MKL's kernels read), or oneDNN's brgemm micro-kernel, the weights transposed once into
 * panels of PANEL columns, each contiguous. MKL runs its AVX2 code on AMD CPUs, where oneDNN's
 * kernel runs their AVX-512 units. Attention runs in tiles of 16-float vectors here, and so does
 * everything else, one pass each. Single precision throughout, like the model.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 16 floats, one AVX-512 register (two AVX ones): GCC's vector extension, which compiles to the
 * widest vectors the target has. Loads and stores through it need no alignment. */
typedef float vec __attribute__((vector_size(64), aligned(4)));
typedef int ivec __attribute__((vector_size(64))); /* a shuffle's indices */
#define KEYS 16                                            /* floats in a vec */

/* MKL, as libtorch_cpu exports it */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, PACKED = 151, B_MATRIX = 162 };
size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k);
void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n, int k, float alpha,
                      const float *src, int ld, float *dest);
void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n, int k, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);
void sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);
void vsTanh(int n, const float *a, float *r);
/* oneDNN's brgemm micro-kernel for float, as libtorch_cpu exports it: at::native::cpublas::brgemm
 * (C (M, N) = A (M, K) . B (K, N), row-major with leading dimensions; C += when add_C), the
 * kernel compiled for each shape on its first call in each thread and kept. Where the CPU has no
 * AVX2, or torch.backends.mkldnn.enabled is False, it runs MKL's plain sgemm instead. Weak: a
 * PyTorch without it leaves it NULL (then MKL only). */
void _ZN2at6native7cpublas6brgemmEllllllbPKfS3_Pfb(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                                   int64_t ldc, _Bool add_c, const float *a, const float *b,
                                                   float *c, _Bool vnni) __attribute__((weak));
#define onednn_brgemm _ZN2at6native7cpublas6brgemmEllllllbPKfS3_Pfb
int MKL_Set_Num_Threads_Local(int nt); /* the C interface; the lower-case name is Fortran's */

enum { ACT_GELU = 0, ACT_GELU_TANH = 1, ACT_RELU = 2 };
enum { GEMM_MKL = 0, GEMM_ONEDNN = 1 };
/* the phases orm_profile reports, in its order */
enum { PH_EMBED, PH_LINEAR, PH_KEYS, PH_ATTEND, PH_NORM, PH_ACT, PH_HEAD, PHASES };
enum { OK = 0, ERR_MEMORY = 1, ERR_TOKEN = 2, ERR_POSITION = 3, ERR_SEGMENT = 4, ERR_BLOCK = 5,
       ERR_POOL = 6, ERR_INCOMPLETE = 7, ERR_GEMM = 8, ERR_SIZE = 9 };

/* erf(x) within a few float ulps: Eigen's rational approximation (odd degree 13 over even degree
 * 8, exact to float precision beyond |x| = 4); plain arithmetic, so the loops that call it vectorize */
static inline float erf_approx(float x) {
    x = x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x; /* not fminf/fmaxf: those do not vectorize */
    const float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return x * p / q;
}

/* exp(x) for x <= 0 (a softmax's scores less their row's maximum), within about one float ulp:
 * 2^n exp(r), |r| <= ln(2)/2, Cephes' polynomial. Below -87 (where exp leaves the normal floats)
 * it returns exp(-87) ~ 1.6e-38: nothing beside the row's largest weight of 1, and never a
 * denormal, whose arithmetic takes the CPU's slow path. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding and subtracting it rounds to an integer */
    float n = (x * 1.44269504088896341f + magic) - magic;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { float f; int32_t i; } scale = {.i = ((int32_t)n + 127) << 23};
    return p * scale.f;
}

static inline float gelu(float x) { return 0.5f * x * (1.0f + erf_approx(x * 0.70710678118654752f)); }

typedef struct {
    int n, k, gemm; /* out, in, the kernel */
    float *packed;  /* the (n, k) weight, read as its transpose (x W^T), in the kernel's layout */
    float *bias;    /* (n,) */
} linear_t;

typedef struct {
    float *gamma, *beta;
    float eps;
} norm_t;

typedef struct {
    linear_t qkv, out, inter, ffn;
    norm_t ln1, ln2;
} layer_t;

typedef struct {
    int width, heads, layers, inter, head_hidden, act, gemm;
    int vocab, positions, types;
    float *word, *pos, *type; /* (vocab, W), (positions, W), (types, W) */
    norm_t emb_ln;
    layer_t *layer;
    float *head_w1, *head_b1, *head_w2, head_b2; /* (Hh, W), (Hh,), (Hh,), scalar */
    int embeddings_set, head_set, layers_set;    /* what orm_set_* has filled in: layers_set counts */
    int profiling;                               /* time the phases of each call into spent[] */
    double spent[PHASES + 1];                    /* seconds by phase, summed over calls; then the calls */
} model_t;

static float *copy_of(const float *src, size_t n) {
    float *dst = malloc(n * sizeof(float));
    if (dst) memcpy(dst, src, n * sizeof(float));
    return dst;
}

#define PACK_ROWS 512 /* the row count MKL packs for: a chunk's most tokens by default */
#define PANEL 64      /* oneDNN: the weight's columns per panel (x W^T's output columns per call) */
#define ROW_BLOCK 64  /* oneDNN: rows per call, so at most ROW_BLOCK row counts need a kernel */

static void set_linear_shape(linear_t *lin, int n, int k, int gemm) {
    lin->n = n;
    lin->k = k;
    lin->gemm = gemm;
}

/* the (n, k) weight w into lin->packed, in the layout of lin->gemm's kernel */
static int pack_weight(linear_t *lin, const float *w) {
    const int n = lin->n, k = lin->k;
    if (lin->gemm == GEMM_MKL) {
        /* packed for products with PACK_ROWS tokens: any count reads it, but MKL lays it out for
         * the kernels of the count it is told (packed for 2 rows, 162-row products ran 11% slower) */
        lin->packed = malloc(cblas_sgemm_pack_get_size(B_MATRIX, PACK_ROWS, n, k));
        if (!lin->packed) return ERR_MEMORY;
        cblas_sgemm_pack(ROW_MAJOR, B_MATRIX, TRANS, PACK_ROWS, n, k, 1.0f, w, k, lin->packed);
        return OK;
    }
    /* W^T (k, n) as panels of PANEL columns (the last one narrower), each (k, cols) contiguous:
     * a call's weights are one stream, with no stride of n floats (a multiple of 4 KB at n = 1024,
     * where the same products ran slower) */
    float *p = lin->packed = malloc((size_t)n * k * sizeof(float));
    if (!p) return ERR_MEMORY;
    for (int j = 0; j < n; j += PANEL) {
        const int cols = n - j < PANEL ? n - j : PANEL;
        for (int kk = 0; kk < k; kk++)
            for (int c = 0; c < cols; c++) *p++ = w[(size_t)(j + c) * k + kk];
    }
    return OK;
}

static int set_linear(linear_t *lin, const float *w, const float *b, int n, int k, int gemm) {
    set_linear_shape(lin, n, k, gemm);
    lin->bias = copy_of(b, n);
    if (!lin->bias) return ERR_MEMORY;
    return pack_weight(lin, w);
}

static int set_norm(norm_t *ln, const float *g, const float *b, float eps, int width) {
    ln->gamma = copy_of(g, width);
    ln->beta = copy_of(b, width);
    ln->eps = eps;
    return ln->gamma && ln->beta ? OK : ERR_MEMORY;
}

/* whether this PyTorch carries the kernel gemm names */
int orm_gemm_available(int gemm) { return gemm == GEMM_MKL || (gemm == GEMM_ONEDNN && onednn_brgemm != NULL); }

void *orm_new(int width, int heads, int layers, int inter, int head_hidden, int act, int gemm) {
    if (width < 1 || heads < 1 || width % heads || layers < 1 || inter < 1 || head_hidden < 1 ||
        act < ACT_GELU || act > ACT_RELU || !orm_gemm_available(gemm))
        return NULL;
    model_t *m = calloc(1, sizeof(model_t));
    if (!m) return NULL;
    m->layer = calloc(layers, sizeof(layer_t));
    if (!m->layer) {
        free(m);
        return NULL;
    }
    m->width = width;
    m->heads = heads;
    m->layers = layers;
    m->inter = inter;
    m->head_hidden = head_hidden;
    m->act = act;
    m->gemm = gemm;
    return m;
}

static void free_linear(linear_t *l) {
    free(l->packed);
    free(l->bias);
}

static void free_norm(norm_t *n) {
    free(n->gamma);
    free(n->beta);
}

void orm_free(void *handle) {
    model_t *m = handle;
    if (!m) return;
    free(m->word);
    free(m->pos);
    free(m->type);
    free_norm(&m->emb_ln);
    for (int i = 0; i < m->layers; i++) {
        layer_t *l = &m->layer[i];
        free_linear(&l->qkv);
        free_linear(&l->out);
        free_linear(&l->inter);
        free_linear(&l->ffn);
        free_norm(&l->ln1);
        free_norm(&l->ln2);
    }
    free(m->layer);
    free(m->head_w1);
    free(m->head_b1);
    free(m->head_w2);
    free(m);
}

int orm_set_embeddings(void *handle, const float *word, int vocab, const float *pos, int positions,
                       const float *type, int types, const float *gamma, const float *beta, float eps) {
    model_t *m = handle;
    size_t w = m->width;
    m->vocab = vocab;
    m->positions = positions;
    m->types = types;
    m->word = copy_of(word, vocab * w);
    m->pos = copy_of(pos, positions * w);
    m->type = copy_of(type, types * w);
    if (!m->word || !m->pos || !m->type) return ERR_MEMORY;
    int rc = set_norm(&m->emb_ln, gamma, beta, eps, m->width);
    if (rc == OK) m->embeddings_set = 1;
    return rc;
}

/* qkv_w: (3W, W), the query rows already scaled by 1/sqrt(head size), like qkv_b */
int orm_set_layer(void *handle, int i, const float *qkv_w, const float *qkv_b, const float *out_w,
                  const float *out_b, const float *ln1_g, const float *ln1_b, float ln1_eps,
                  const float *inter_w, const float *inter_b, const float *ffn_w, const float *ffn_b,
                  const float *ln2_g, const float *ln2_b, float ln2_eps) {
    model_t *m = handle;
    if (i < 0 || i >= m->layers || m->layer[i].qkv.packed) return ERR_INCOMPLETE; /* each layer once */
    layer_t *l = &m->layer[i];
    int w = m->width, rc;
    if ((rc = set_linear(&l->qkv, qkv_w, qkv_b, 3 * w, w, m->gemm)) ||
        (rc = set_linear(&l->out, out_w, out_b, w, w, m->gemm)) ||
        (rc = set_linear(&l->inter, inter_w, inter_b, m->inter, w, m->gemm)) ||
        (rc = set_linear(&l->ffn, ffn_w, ffn_b, w, m->inter, m->gemm)) ||
        (rc = set_norm(&l->ln1, ln1_g, ln1_b, ln1_eps, w)) ||
        (rc = set_norm(&l->ln2, ln2_g, ln2_b, ln2_eps, w)))
        return rc;
    m->layers_set++;
    return OK;
}

int orm_set_head(void *handle, const float *w1, const float *b1, const float *w2, float b2) {
    model_t *m = handle;
    m->head_w1 = copy_of(w1, (size_t)m->head_hidden * m->width);
    m->head_b1 = copy_of(b1, m->head_hidden);
    m->head_w2 = copy_of(w2, m->head_hidden);
    m->head_b2 = b2;
    if (!m->head_w1 || !m->head_b1 || !m->head_w2) return ERR_MEMORY;
    m->head_set = 1;
    return OK;
}

/* Phase timing (orm_profile): while profiling, tick(m, &t, PHASE) adds the time since t to the
 * phase and restarts t; otherwise it does nothing. */
static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static inline void tick(model_t *m, double *since, int phase) {
    if (!m->profiling) return;
    const double now = seconds();
    m->spent[phase] += now - *since;
    *since = now;
}

/* on: 1 starts profiling (the counters from zero, also when it was on), 0 stops it; out (PHASES + 1 doubles, may be
 * NULL): the seconds spent in each phase over the calls so far, then the number of calls. Not
 * for scorers that several threads call at once. */
void orm_profile(void *handle, int on, double *out) {
    model_t *m = handle;
    if (out) memcpy(out, m->spent, sizeof m->spent);
    if (on) memset(m->spent, 0, sizeof m->spent);
    m->profiling = on;
}

/* y (t, n) = x (t, k) . W^T (the bias is the next pass's); MKL's threads are set by the caller,
 * oneDNN's kernel runs on threads of OpenMP's, which share the panels out */
static void linear(const linear_t *lin, const float *x, int t, float *y, int threads) {
    const int n = lin->n, k = lin->k;
    if (lin->gemm == GEMM_MKL) {
        cblas_sgemm_compute(ROW_MAJOR, NO_TRANS, PACKED, t, n, k, x, k, lin->packed, k, 0.0f, y, n);
        return;
    }
#pragma omp parallel for num_threads(threads > 1 ? threads : 1) schedule(static) if (threads > 1)
    for (int j = 0; j < n; j += PANEL) { /* a panel's weights stay in cache over the row blocks */
        const int cols = n - j < PANEL ? n - j : PANEL;
        const float *panel = lin->packed + (size_t)j * k;
        for (int i = 0; i < t; i += ROW_BLOCK)
            onednn_brgemm(t - i < ROW_BLOCK ? t - i : ROW_BLOCK, cols, k, k, cols, n, 0, x + (size_t)i * k, panel,
                          y + (size_t)i * n + j, 0);
    }
}

/* row <- LayerNorm(row): mean, then variance about it, then scale and shift */
static void norm(float *restrict row, const norm_t *ln, int w) {
    float mean = 0.0f, var = 0.0f;
#pragma omp simd reduction(+ : mean)
    for (int j = 0; j < w; j++) mean += row[j];
    mean /= w;
#pragma omp simd reduction(+ : var)
    for (int j = 0; j < w; j++) var += (row[j] - mean) * (row[j] - mean);
    const float inv = 1.0f / sqrtf(var / w + ln->eps);
    const float *restrict g = ln->gamma, *restrict b = ln->beta;
#pragma omp simd
    for (int j = 0; j < w; j++) row[j] = (row[j] - mean) * inv * g[j] + b[j];
}

/* skip <- LayerNorm(skip + x + bias): the residual connection and its norm */
static void add_norm(float *restrict skip, const float *restrict x, const float *restrict bias, const norm_t *ln, int w) {
#pragma omp simd
    for (int j = 0; j < w; j++) skip[j] += x[j] + bias[j];
    norm(skip, ln, w);
}

/* skip <- LayerNorm(skip + x + bias) for each of t rows of w, the rows shared out over threads */
static void add_norm_rows(float *skip, const float *x, const float *bias, const norm_t *ln, int t, int w, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int i = 0; i < t; i++) add_norm(skip + (size_t)i * w, x + (size_t)i * w, bias, ln, w);
}

/* x <- act(x + bias) over t rows of n, the rows shared out over threads; tmp (t * n floats):
 * scratch for the tanh form */
static void activate(float *restrict x, const float *restrict bias, int t, int n, int act, float *restrict tmp,
                     int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int i = 0; i < t; i++) {
        float *restrict row = x + (size_t)i * n, *restrict u = tmp + (size_t)i * n;
        if (act == ACT_GELU) {
#pragma omp simd
            for (int j = 0; j < n; j++) row[j] = gelu(row[j] + bias[j]);
        } else if (act == ACT_RELU) {
#pragma omp simd
            for (int j = 0; j < n; j++) {
                const float z = row[j] + bias[j];
                row[j] = z > 0.0f ? z : 0.0f;
            }
        } else {
#pragma omp simd
            for (int j = 0; j < n; j++) {
                row[j] += bias[j];
                u[j] = 0.7978845608028654f * (row[j] + 0.044715f * row[j] * row[j] * row[j]); /* sqrt(2 / pi) */
            }
            vsTanh(n, u, u);
#pragma omp simd
            for (int j = 0; j < n; j++) row[j] = 0.5f * row[j] * (1.0f + u[j]);
        }
    }
}

/* r[i] and r[i + b] for each i with bit b clear: swap the off-diagonal b x b blocks of every
 * 2b x 2b block (lanes 0-15 of a shuffle index the first vector, 16-31 the second); for
 * b = 8, 4, 2, 1 in turn that transposes the 16 x 16 matrix r. GCC's __builtin_shuffle takes
 * the indices as a vector, clang's __builtin_shufflevector (GCC's too, from 12) as constants. */
#if defined(__clang__)
#define SHUFFLE(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define SHUFFLE(x, y, ...) __builtin_shuffle(x, y, (ivec){__VA_ARGS__})
#endif
#define SWAP_BLOCKS(b, LO, HI)                                   \
    for (int i = 0; i < 16; i++)                                 \
        if (!(i & (b))) {                                        \
            const vec x = r[i], y = r[i + (b)];                  \
            r[i] = SHUFFLE(x, y, LO);                            \
            r[i + (b)] = SHUFFLE(x, y, HI);                      \
        }
#define LANES(...) __VA_ARGS__

/* the 16 x 16 matrix r (one row a vector) transposed in registers */
static inline __attribute__((always_inline)) void transpose16(vec r[16]) {
    SWAP_BLOCKS(8, LANES(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                LANES(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
    SWAP_BLOCKS(4, LANES(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
                LANES(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
    SWAP_BLOCKS(2, LANES(0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
                LANES(2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
    SWAP_BLOCKS(1, LANES(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
                LANES(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
}

/* qkv rows (t, 3W) += bias, and the keys transposed for the score loop: kt[c * stride + j] =
 * k_j[c], column c = h * d + c' of head h. 16 tokens x 16 columns at a time, transposed in
 * registers; a ragged edge element by element. The score loop reads 32 keys at a time: stride
 * >= t + 32, and the columns past t stay zero. */
static void bias_and_keys(float *restrict qkv, const float *restrict bias, int t, int w, int stride, float *restrict kt) {
    for (int i0 = 0; i0 < t; i0 += 16) {
        const int rows = t - i0 < 16 ? t - i0 : 16;
        for (int i = i0; i < i0 + rows; i++) {
            float *restrict row = qkv + (size_t)i * 3 * w;
#pragma omp simd
            for (int j = 0; j < 3 * w; j++) row[j] += bias[j];
        }
        for (int c0 = 0; c0 < w; c0 += 16) {
            const float *src = qkv + (size_t)i0 * 3 * w + w + c0;
            float *dst = kt + (size_t)c0 * stride + i0;
            if (rows == 16 && w - c0 >= 16) {
                vec r[16];
                for (int i = 0; i < 16; i++) r[i] = *(const vec *)(src + (size_t)i * 3 * w);
                transpose16(r);
                for (int c = 0; c < 16; c++) *(vec *)(dst + (size_t)c * stride) = r[c];
            } else {
                for (int c = 0; c < 16 && c0 + c < w; c++)
                    for (int i = 0; i < rows; i++) dst[(size_t)c * stride + i] = src[(size_t)i * 3 * w + c];
            }
        }
    }
}

#define ROWS 4 /* query rows that go through attention together, sharing each key's and value's loads */

/* scores[r][0, 32) = q_r . k_j for ROWS query rows (q[r]: d floats each) and the 32 keys from j0 on
 * (kt: this head's transposed keys, rows stride apart): eight multiply-adds in flight, six loads
 * for eight of them */
static inline __attribute__((always_inline)) void score_tile(const float *const q[ROWS], const float *restrict kt,
                                                             int stride, int j0, int d, float *const s[ROWS]) {
    vec acc[ROWS][2] = {{{0}}};
    const float *restrict col = kt + j0;
    for (int c = 0; c < d; c++) {
        const vec k0 = *(const vec *)(col + (size_t)c * stride), k1 = *(const vec *)(col + (size_t)c * stride + KEYS);
        for (int r = 0; r < ROWS; r++) {
            acc[r][0] += q[r][c] * k0;
            acc[r][1] += q[r][c] * k1;
        }
    }
    for (int r = 0; r < ROWS; r++) {
        *(vec *)s[r] = acc[r][0];
        *(vec *)(s[r] + KEYS) = acc[r][1];
    }
}

/* score_tile for the last 16 keys of a range or fewer: scores[r][0, 16); even and odd c in
 * separate sums, again eight multiply-adds in flight */
static inline __attribute__((always_inline)) void score_tile16(const float *const q[ROWS], const float *restrict kt,
                                                               int stride, int j0, int d, float *const s[ROWS]) {
    vec acc[ROWS][2] = {{{0}}};
    const float *restrict col = kt + j0;
    int c = 0;
    for (; c + 1 < d; c += 2) {
        const vec k0 = *(const vec *)(col + (size_t)c * stride), k1 = *(const vec *)(col + (size_t)(c + 1) * stride);
        for (int r = 0; r < ROWS; r++) {
            acc[r][0] += q[r][c] * k0;
            acc[r][1] += q[r][c + 1] * k1;
        }
    }
    if (c < d) {
        const vec k0 = *(const vec *)(col + (size_t)c * stride);
        for (int r = 0; r < ROWS; r++) acc[r][0] += q[r][c] * k0;
    }
    for (int r = 0; r < ROWS; r++) *(vec *)s[r] = acc[r][0] + acc[r][1];
}

/* out[r][0, d) (+)= sum over the n keys from j0 on of p[r][j] v_j, for ROWS rows (v: rows ld apart;
 * d at most 64: attend_head() runs wider heads in 64-wide slices) */
static inline __attribute__((always_inline)) void weigh_values(const float *const p[ROWS], const float *restrict v,
                                                               int ld, int j0, int n, int d, float *const out[ROWS],
                                                               int accumulate) {
    vec acc[ROWS][4];
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < d / KEYS; c++) acc[r][c] = accumulate ? *(const vec *)(out[r] + KEYS * c) : (vec){0};
    for (int j = 0; j < n; j++) {
        const float *restrict row = v + (size_t)(j0 + j) * ld;
        for (int c = 0; c < d / KEYS; c++) {
            const vec x = *(const vec *)(row + KEYS * c);
            for (int r = 0; r < ROWS; r++) acc[r][c] += p[r][j] * x;
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < d / KEYS; c++) *(vec *)(out[r] + KEYS * c) = acc[r][c];
    for (int c = d / KEYS * KEYS; c < d; c++) /* a head size that is not a multiple of 16: the rest */
        for (int r = 0; r < ROWS; r++) {
            float sum = accumulate ? out[r][c] : 0.0f;
            for (int j = 0; j < n; j++) sum += p[r][j] * v[(size_t)(j0 + j) * ld + c];
            out[r][c] = sum;
        }
}

/* s[0, n) <- softmax(s[0, n)) */
static inline void softmax(float *restrict s, int n) {
    float top = s[0], sum = 0.0f;
#pragma omp simd reduction(max : top)
    for (int j = 1; j < n; j++) top = s[j] > top ? s[j] : top;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        s[j] = exp_nonpositive(s[j] - top);
        sum += s[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) s[j] *= inv;
}

static inline int up16(int n) { return (n + KEYS - 1) / KEYS * KEYS; }

/* n floats on a 64-byte boundary (a cache line: no vector load or store of 16 there is split
 * across two), zeroed if asked; free() them */
static float *aligned_floats(size_t n, int zero) {
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p && zero) memset(p, 0, bytes);
    return p;
}

/* Query rows grouped by the first key range they see: in shared_prompt a prompt's own rows and
 * all its actions' rows see the prompt's keys, so their scores over those keys are one product
 * (no row of padding per action); each block's second range (an action's own keys) follows. */
typedef struct {
    int a0, a1;   /* the key range */
    int first, n; /* its query rows: order[first, first + n) */
} group_t;

/* The groups of n_blocks blocks (q0, q1, a0, a1, b0, b1), their rows listed in order (t ints) */
static int group_rows(const int *blocks, int n_blocks, group_t *groups, int *order) {
    int n_groups = 0, *of_block = malloc((size_t)n_blocks * sizeof(int));
    if (!of_block) return -1;
    for (int b = 0; b < n_blocks; b++) {
        const int *r = blocks + 6 * b;
        int g = 0;
        while (g < n_groups && (groups[g].a0 != r[2] || groups[g].a1 != r[3])) g++;
        if (g == n_groups) groups[n_groups++] = (group_t){r[2], r[3], 0, 0};
        groups[g].n += r[1] - r[0];
        of_block[b] = g;
    }
    for (int g = 0, first = 0; g < n_groups; first += groups[g++].n) groups[g].first = first;
    for (int g = 0; g < n_groups; g++) groups[g].n = 0; /* counted again as the rows are listed */
    for (int b = 0; b < n_blocks; b++) {
        group_t *G = &groups[of_block[b]];
        for (int i = blocks[6 * b]; i < blocks[6 * b + 1]; i++) order[G->first + G->n++] = i;
    }
    free(of_block);
    return n_groups;
}

/* One head's attention for every query row (q, k, v: this head's slices; rows ldq / ldv apart).
 * Scores go to s (row i at s + i * sw, 64-byte aligned, like every 16 floats of a row that a
 * tile writes): first each group's rows over its shared keys, 32 keys at a time for all its rows,
 * so that slice of kt stays in the L1 cache while every row reads it; then each block's rows over
 * its second range, from the next multiple of 16 after the first's (the columns between get no
 * weight); then the softmax of each row; then the values, ROWS rows at a time. Tiles past a
 * group's or block's last row repeat it: scores are written twice alike, outputs go to spare
 * (ROWS * d floats). */
static inline __attribute__((always_inline)) void attend_head(const float *restrict q, int ldq, const float *restrict kt,
                                                              int stride, const float *restrict v, int ldv,
                                                              const int *blocks, int n_blocks, const group_t *groups,
                                                              int n_groups, const int *order, int d, float *s, int sw,
                                                              float *out, int ldo, float *spare) {
    const float *qr[ROWS];
    float *sr[ROWS], *o[ROWS];
    const float *pr[ROWS];
    for (int g = 0; g < n_groups; g++) {
        const group_t *G = &groups[g];
        for (int j = 0; j < G->a1 - G->a0; j += 2 * KEYS)
            for (int i = 0; i < G->n; i += ROWS) {
                for (int r = 0; r < ROWS; r++) {
                    const int row = order[G->first + (i + r < G->n ? i + r : G->n - 1)];
                    qr[r] = q + (size_t)row * ldq;
                    sr[r] = s + (size_t)row * sw + j;
                }
                if (G->a1 - G->a0 - j > KEYS)
                    score_tile(qr, kt, stride, G->a0 + j, d, sr);
                else
                    score_tile16(qr, kt, stride, G->a0 + j, d, sr);
            }
    }
    for (int b = 0; b < n_blocks; b++) {
        const int *B = blocks + 6 * b, q0 = B[0], q1 = B[1], na = B[3] - B[2], at = up16(na);
        for (int j = 0; j < B[5] - B[4]; j += 2 * KEYS)
            for (int i = q0; i < q1; i += ROWS) {
                for (int r = 0; r < ROWS; r++) {
                    const int row = i + r < q1 ? i + r : q1 - 1;
                    qr[r] = q + (size_t)row * ldq;
                    sr[r] = s + (size_t)row * sw + at + j;
                }
                if (B[5] - B[4] - j > KEYS)
                    score_tile(qr, kt, stride, B[4] + j, d, sr);
                else
                    score_tile16(qr, kt, stride, B[4] + j, d, sr);
            }
        const int nb = B[5] - B[4];
        for (int i = q0; i < q1; i++) {
            float *row = s + (size_t)i * sw;
            if (nb)
                for (int j = na; j < at; j++) row[j] = -3.402823466e38f; /* between the two ranges: no weight */
            softmax(row, nb ? at + nb : na);
        }
    }
    for (int c = 0; c < d; c += 64) { /* 64 columns at a time: ROWS x 4 accumulators */
        const int dc = d - c < 64 ? d - c : 64;
        for (int g = 0; g < n_groups; g++) {
            const group_t *G = &groups[g];
            for (int i = 0; i < G->n; i += ROWS) {
                for (int r = 0; r < ROWS; r++) {
                    const int row = order[G->first + (i + r < G->n ? i + r : G->n - 1)];
                    pr[r] = s + (size_t)row * sw;
                    o[r] = (i + r < G->n ? out + (size_t)row * ldo : spare + (size_t)r * d) + c;
                }
                if (dc == 64)
                    weigh_values(pr, v + c, ldv, G->a0, G->a1 - G->a0, 64, o, 0);
                else
                    weigh_values(pr, v + c, ldv, G->a0, G->a1 - G->a0, dc, o, 0);
            }
        }
        for (int b = 0; b < n_blocks; b++) {
            const int *B = blocks + 6 * b, q0 = B[0], q1 = B[1], at = up16(B[3] - B[2]), nb = B[5] - B[4];
            if (!nb) continue;
            for (int i = q0; i < q1; i += ROWS) {
                for (int r = 0; r < ROWS; r++) {
                    const int row = i + r < q1 ? i + r : q1 - 1;
                    pr[r] = s + (size_t)row * sw + at;
                    o[r] = (i + r < q1 ? out + (size_t)row * ldo : spare + (size_t)r * d) + c;
                }
                if (dc == 64)
                    weigh_values(pr, v + c, ldv, B[4], nb, 64, o, 1);
                else
                    weigh_values(pr, v + c, ldv, B[4], nb, dc, o, 1);
            }
        }
    }
}

/* ctx <- attention, head by head (see attend_head), the heads shared out over threads. Scratch
 * per thread: s_size floats of s (t * sw: each row's scores), ROWS * d of spare. */
static void attend(const float *qkv, const float *kt, int stride, int w, int heads, const int *blocks, int n_blocks,
                   const group_t *groups, int n_groups, const int *order, float *scratch, size_t s_size, int sw,
                   float *spares, float *ctx, int threads) {
    const int d = w / heads, ld = 3 * w;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int h = 0; h < heads; h++) {
        const int me = omp_get_thread_num();
        const float *q = qkv + h * d, *kh = kt + (size_t)h * d * stride, *v = qkv + 2 * w + h * d;
        float *out = ctx + h * d, *s = scratch + me * s_size, *spare = spares + (size_t)me * ROWS * d;
        if (d == 64) /* the usual head sizes get loops with the size a constant the compiler unrolls */
            attend_head(q, ld, kh, stride, v, ld, blocks, n_blocks, groups, n_groups, order, 64, s, sw, out, w, spare);
        else if (d == 32)
            attend_head(q, ld, kh, stride, v, ld, blocks, n_blocks, groups, n_groups, order, 32, s, sw, out, w, spare);
        else
            attend_head(q, ld, kh, stride, v, ld, blocks, n_blocks, groups, n_groups, order, d, s, sw, out, w, spare);
    }
}

/* Rewards (actions,) of one packed chunk of t tokens.
 * blocks: n_blocks x 6 ints (q0, q1, a0, a1, b0, b1): query rows [q0, q1) see keys [a0, a1) and
 * [b0, b1) (either may be empty, not both); the blocks' query rows, in order, are [0, t) (the
 * first starts at 0, each the next where the last ended, the last ends at t).
 * pool: actions x 2 ints (lo, hi): the action's pooled tokens. threads: this call's threads: MKL's
 * (0: leave them as set), and the OpenMP team that shares out oneDNN's panels, attention's heads
 * and the element-wise rows (1 or less: the calling thread alone). Returns OK or an ERR_ code;
 * *bad: the offending index. */
int orm_score(void *handle, int t, const int64_t *ids, const int64_t *positions, const int64_t *segments,
              int n_blocks, const int *blocks, int actions, const int *pool, int threads, float *out,
              int *bad) {
    model_t *m = handle;
    const int w = m->width, stride = up16(t) + 2 * KEYS;
    if (!m->embeddings_set || !m->head_set || m->layers_set != m->layers) return ERR_INCOMPLETE;
    for (int i = 0; i < t; i++) {
        *bad = i;
        if (ids[i] < 0 || ids[i] >= m->vocab) return ERR_TOKEN;
        if (positions[i] < 0 || positions[i] >= m->positions) return ERR_POSITION;
        if (segments[i] < 0 || segments[i] >= m->types) return ERR_SEGMENT;
    }
    /* each block's ranges inside [0, t), and its query rows next to the last block's: together
     * the blocks' rows are every token once, in order */
    int widest_a = 0, widest_b = 0;
    for (int b = 0; b < n_blocks; b++) {
        const int *r = blocks + 6 * b;
        *bad = b;
        if (r[0] != (b ? r[-5] : 0) || r[1] <= r[0] || r[1] > t || r[2] < 0 || r[3] < r[2] || r[3] > t ||
            r[4] < 0 || r[5] < r[4] || r[5] > t || r[3] - r[2] + r[5] - r[4] < 1)
            return ERR_BLOCK;
        widest_a = r[3] - r[2] > widest_a ? r[3] - r[2] : widest_a;
        widest_b = r[5] - r[4] > widest_b ? r[5] - r[4] : widest_b;
    }
    *bad = n_blocks;
    if (!n_blocks || blocks[6 * n_blocks - 5] != t) return ERR_BLOCK;
    /* a score row: the first range's keys, from the next multiple of 16 the second's, and room
     * for a tile's 32 floats past either */
    const int sw = up16(widest_a) + up16(widest_b) + 2 * KEYS;
    for (int a = 0; a < actions; a++) {
        *bad = a;
        if (pool[2 * a] < 0 || pool[2 * a + 1] <= pool[2 * a] || pool[2 * a + 1] > t) return ERR_POOL;
    }
    *bad = -1;
    const int team = threads > 1 ? threads : 1; /* the threads of everything but MKL's products */
    const size_t tw = (size_t)t * w, wide = m->inter > 3 * w ? m->inter : 3 * w;
    float *h = malloc(tw * sizeof(float)), *ctx = malloc(tw * sizeof(float)),
          *big = malloc((size_t)t * wide * sizeof(float)), *tmp = malloc((size_t)t * m->inter * sizeof(float)),
          *kt = aligned_floats((size_t)w * stride, 1), *s = aligned_floats((size_t)team * t * sw, 0),
          *spare = malloc((size_t)team * ROWS * (w / m->heads) * sizeof(float)),
          *pooled = malloc((size_t)actions * w * sizeof(float)),
          *hidden = malloc((size_t)actions * m->head_hidden * sizeof(float));
    int rc = ERR_MEMORY;
    group_t *groups = malloc((size_t)n_blocks * sizeof(group_t));
    int *order = malloc((size_t)t * sizeof(int)), n_groups = 0;
    if (!h || !ctx || !big || !tmp || !kt || !s || !spare || !pooled || !hidden || !groups || !order ||
        (n_groups = group_rows(blocks, n_blocks, groups, order)) < 0)
        goto done;
    const int before = threads > 0 ? MKL_Set_Num_Threads_Local(threads) : 0;
    double since = m->profiling ? seconds() : 0.0;

    for (int i = 0; i < t; i++) { /* LayerNorm(words + positions + types) */
        float *restrict row = h + (size_t)i * w;
        const float *restrict we = m->word + ids[i] * w, *restrict pe = m->pos + positions[i] * w,
                              *restrict te = m->type + segments[i] * w;
#pragma omp simd
        for (int j = 0; j < w; j++) row[j] = we[j] + pe[j] + te[j];
        norm(row, &m->emb_ln, w);
    }
    tick(m, &since, PH_EMBED);
    for (int l = 0; l < m->layers; l++) {
        const layer_t *L = &m->layer[l];
        linear(&L->qkv, h, t, big, threads);
        tick(m, &since, PH_LINEAR);
        bias_and_keys(big, L->qkv.bias, t, w, stride, kt);
        tick(m, &since, PH_KEYS);
        attend(big, kt, stride, w, m->heads, blocks, n_blocks, groups, n_groups, order, s, (size_t)t * sw, sw, spare, ctx,
               team);
        tick(m, &since, PH_ATTEND);
        /* h <- LayerNorm(h + ctx W_o + b_o); h <- LayerNorm(h + act(h W_i + b_i) W_f + b_f) */
        linear(&L->out, ctx, t, tmp, threads);
        tick(m, &since, PH_LINEAR);
        add_norm_rows(h, tmp, L->out.bias, &L->ln1, t, w, team);
        tick(m, &since, PH_NORM);
        linear(&L->inter, h, t, big, threads);
        tick(m, &since, PH_LINEAR);
        activate(big, L->inter.bias, t, m->inter, m->act, tmp, team);
        tick(m, &since, PH_ACT);
        linear(&L->ffn, big, t, ctx, threads);
        tick(m, &since, PH_LINEAR);
        add_norm_rows(h, ctx, L->ffn.bias, &L->ln2, t, w, team);
        tick(m, &since, PH_NORM);
    }
    for (int a = 0; a < actions; a++) { /* mean over the pooled tokens */
        float *restrict p = pooled + (size_t)a * w;
        const int lo = pool[2 * a], hi = pool[2 * a + 1];
        memset(p, 0, w * sizeof(float));
        for (int i = lo; i < hi; i++) {
            const float *restrict row = h + (size_t)i * w;
#pragma omp simd
            for (int j = 0; j < w; j++) p[j] += row[j];
        }
        const float inv = 1.0f / (hi - lo);
#pragma omp simd
        for (int j = 0; j < w; j++) p[j] *= inv;
    }
    { /* the head: hidden (actions, Hh) = pooled W1^T (column-major: W1 pooled^T), then GELU and W2 */
        const float one = 1.0f, zero = 0.0f;
        const int hh = m->head_hidden;
        sgemm_("T", "N", &hh, &actions, &w, &one, m->head_w1, &w, pooled, &w, &zero, hidden, &hh);
        for (int a = 0; a < actions; a++) {
            const float *restrict z = hidden + (size_t)a * hh;
            float r = 0.0f;
#pragma omp simd reduction(+ : r)
            for (int o = 0; o < hh; o++) r += m->head_w2[o] * gelu(z[o] + m->head_b1[o]);
            out[a] = r + m->head_b2;
        }
    }
    tick(m, &since, PH_HEAD);
    if (m->profiling) m->spent[PHASES] += 1;
    rc = OK;
    if (threads > 0) MKL_Set_Num_Threads_Local(before);
done:
    free(h);
    free(ctx);
    free(big);
    free(tmp);
    free(kt);
    free(s);
    free(groups);
    free(order);
    free(spare);
    free(pooled);
    free(hidden);
    return rc;
}

/* x[0, n) <- a fixed sequence of values in [-0.5, 0.5) (no denormals, no overflow): the timers' inputs */
static void fill_random(float *x, size_t n, uint32_t state) {
    for (size_t i = 0; i < n; i++) x[i] = (state = state * 1664525u + 1013904223u) / 4294967296.0f - 0.5f;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* out[g] = the median milliseconds of one layer's four matrix products (q/k/v, attention output,
 * feed-forward in and out: a model of width and inter) on rows tokens, through kernel g (GEMM_MKL,
 * GEMM_ONEDNN; NAN where this PyTorch lacks it), over reps rounds in which the kernels take turns.
 * The weights are random: the time does not depend on them. */
int orm_time_gemm(int rows, int width, int inter, int threads, int reps, double *out) {
    if (rows < 1 || width < 1 || inter < 1 || reps < 1) return ERR_SIZE;
    const int shape[4][2] = {{3 * width, width}, {width, width}, {inter, width}, {width, inter}}; /* n, k */
    const size_t wide = inter > 3 * width ? inter : 3 * width, weights = wide * width; /* the most of any weight */
    linear_t lin[2][4] = {0};
    float *w = malloc(weights * sizeof(float)), *x = malloc((size_t)rows * wide * sizeof(float)),
          *y = malloc((size_t)rows * wide * sizeof(float));
    double *spent = malloc(2 * (size_t)reps * sizeof(double));
    int rc = ERR_MEMORY, kernels = 0;
    if (!w || !x || !y || !spent) goto done;
    fill_random(w, weights, 12345u);
    for (size_t i = 0; i < (size_t)rows * wide; i++) x[i] = w[i % weights];
    for (int g = 0; g < 2; g++) {
        out[g] = NAN;
        if (!orm_gemm_available(g)) continue;
        for (int l = 0; l < 4; l++) {
            set_linear_shape(&lin[g][l], shape[l][0], shape[l][1], g);
            if (pack_weight(&lin[g][l], w)) goto done;
        }
        kernels |= 1 << g;
    }
    const int before = threads > 0 ? MKL_Set_Num_Threads_Local(threads) : 0;
    for (int g = 0; g < 2; g++) /* a first pass each: compiles oneDNN's kernels, warms the caches */
        if (kernels >> g & 1)
            for (int l = 0; l < 4; l++) linear(&lin[g][l], x, rows, y, threads);
    for (int r = 0; r < reps; r++)
        for (int turn = 0; turn < 2; turn++) {
            const int g = (r + turn) % 2; /* who goes first alternates */
            if (!(kernels >> g & 1)) continue;
            const double t0 = seconds();
            for (int l = 0; l < 4; l++) linear(&lin[g][l], x, rows, y, threads);
            spent[g * reps + r] = 1e3 * (seconds() - t0);
        }
    if (threads > 0) MKL_Set_Num_Threads_Local(before);
    for (int g = 0; g < 2; g++)
        if (kernels >> g & 1) {
            qsort(spent + g * reps, reps, sizeof(double), cmp_double);
            out[g] = reps % 2 ? spent[g * reps + reps / 2] : 0.5 * (spent[g * reps + reps / 2 - 1] + spent[g * reps + reps / 2]);
        }
    rc = OK;
done:
    for (int g = 0; g < 2; g++)
        for (int l = 0; l < 4; l++) free(lin[g][l].packed);
    free(w);
    free(x);
    free(y);
    free(spent);
    return rc;
}

/* *best = the fewest milliseconds of reps (n, n) x (n, n) products through kernel gemm, as
 * linear() runs them (for the benchmarks' compute limit: the rate of a large matmul per kernel) */
int orm_time_matmul(int gemm, int n, int threads, int reps, double *best) {
    if (n < 1 || reps < 1) return ERR_SIZE;
    if (!orm_gemm_available(gemm)) return ERR_GEMM;
    linear_t lin = {0};
    const size_t nn = (size_t)n * n;
    float *w = malloc(nn * sizeof(float)), *x = malloc(nn * sizeof(float)), *y = malloc(nn * sizeof(float));
    int rc = ERR_MEMORY;
    if (!w || !x || !y) goto done;
    fill_random(w, nn, 54321u);
    fill_random(x, nn, 12345u);
    set_linear_shape(&lin, n, n, gemm);
    if (pack_weight(&lin, w)) goto done;
    const int before = threads > 0 ? MKL_Set_Num_Threads_Local(threads) : 0;
    linear(&lin, x, n, y, threads); /* compiles oneDNN's kernels */
    *best = INFINITY;
    for (int r = 0; r < reps; r++) {
        const double t0 = seconds();
        linear(&lin, x, n, y, threads);
        const double ms = 1e3 * (seconds() - t0);
        *best = ms < *best ? ms : *best;
    }
    if (threads > 0) MKL_Set_Num_Threads_Local(before);
    rc = OK;
done:
    free(lin.packed);
    free(w);
    free(x);
    free(y);
    return rc;
}
