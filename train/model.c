/* model.c — the built-in byte-level language model, forward and backward.
 *
 * A Bengio-style MLP: each of the previous C bytes is looked up in a 256×E
 * embedding table, the C vectors are concatenated, passed through L hidden
 * layers of H units with GELU, and a final linear layer gives 256 logits;
 * the loss is softmax cross-entropy in nats per byte.  It is small enough to
 * train to well under 3 nats/byte in seconds on two cores, and it is a real
 * model: the demo's falling loss means the distributed machinery moved real
 * gradients.
 *
 * Everything is float32, row-major, one sample per row, and every matrix
 * product goes through cblas_sgemm over a whole micro-batch.  Parameters and
 * gradients each live in ONE contiguous array described by a tensor table,
 * so the trainer serializes, digests and allreduces them as single buffers.
 * Gradients are SUMS over samples (dlogits = softmax − onehot, not divided by
 * the batch): ranks add their sums and the trainer divides by the global
 * batch once, which is what makes the result independent of world size.
 *
 * GELU uses the tanh approximation (as GPT-2): smooth, so finite differences
 * check it well, and cheap next to the matrix products.
 */
#include "ea_train.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct ea_model {
  ea_model_dims d;
  uint32_t max_rows;
  uint32_t in0; /* C·E */
  size_t nparams;
  float *params; /* nparams */
  float *grads;  /* nparams + 1 (loss-sum slot) */
  ea_tensor t[3 + 2 * EA_MODEL_MAX_LAYERS];
  size_t ntensors;
  /* tensor indices */
  size_t ti_embed, ti_w[EA_MODEL_MAX_LAYERS], ti_b[EA_MODEL_MAX_LAYERS], ti_ow, ti_ob;
  /* activations for one micro-batch, saved for backward */
  float *x0;                       /* rows × C·E */
  float *pre[EA_MODEL_MAX_LAYERS]; /* rows × H, before GELU */
  float *act[EA_MODEL_MAX_LAYERS]; /* rows × H, after GELU */
  float *tnh[EA_MODEL_MAX_LAYERS]; /* rows × H, tanh(u) of GELU, for backward */
  float *logits;                   /* rows × 256, then dlogits */
  float *s0, *s1;                  /* rows × max(H, C·E) backward scratch */
  float *ones;                     /* rows of 1: column sums for bias grads */
};

static size_t add_tensor(ea_model *m, const char *name, uint64_t rows, uint64_t cols, uint32_t ndim,
                         bool decay) {
  size_t i = m->ntensors++;
  ea_tensor *t = &m->t[i];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shape[0] = rows;
  t->shape[1] = cols;
  t->offset = m->nparams;
  t->count = (size_t)(rows * cols);
  t->decay = decay;
  m->nparams += t->count;
  return i;
}

static int check_dims(const ea_model_dims *d, uint32_t max_rows, char *err, size_t errlen) {
  if (d->context < 1 || d->context > EA_MODEL_MAX_CONTEXT) {
    ea_seterr(err, errlen, "train.context: %u not in [1, %u]", d->context, EA_MODEL_MAX_CONTEXT);
    return -EINVAL;
  }
  if (d->embed_dim < 1 || d->embed_dim > EA_MODEL_MAX_WIDTH) {
    ea_seterr(err, errlen, "train.embed_dim: %u not in [1, %u]", d->embed_dim, EA_MODEL_MAX_WIDTH);
    return -EINVAL;
  }
  if (d->hidden < 1 || d->hidden > EA_MODEL_MAX_WIDTH) {
    ea_seterr(err, errlen, "train.hidden: %u not in [1, %u]", d->hidden, EA_MODEL_MAX_WIDTH);
    return -EINVAL;
  }
  if (d->layers < 1 || d->layers > EA_MODEL_MAX_LAYERS) {
    ea_seterr(err, errlen, "train.layers: %u not in [1, %u]", d->layers, EA_MODEL_MAX_LAYERS);
    return -EINVAL;
  }
  /* cblas takes int dimensions */
  if ((uint64_t)d->context * d->embed_dim > (1u << 24)) {
    ea_seterr(err, errlen, "train.context × train.embed_dim: %llu exceeds %u",
              (unsigned long long)d->context * d->embed_dim, 1u << 24);
    return -EINVAL;
  }
  if (max_rows < 1 || max_rows > (1u << 20)) {
    ea_seterr(err, errlen, "distributed.micro_batch: %u not in [1, %u]", max_rows, 1u << 20);
    return -EINVAL;
  }
  return 0;
}

int ea_model_new(const ea_model_dims *d, uint32_t max_rows, ea_model **out, char *err,
                 size_t errlen) {
  *out = NULL;
  int rc = check_dims(d, max_rows, err, errlen);
  if (rc) return rc;
  ea_model *m = calloc(1, sizeof *m);
  if (!m) return -ENOMEM;
  m->d = *d;
  m->max_rows = max_rows;
  m->in0 = d->context * d->embed_dim;

  m->ti_embed = add_tensor(m, "embed", EA_VOCAB, d->embed_dim, 2, true);
  uint32_t in = m->in0;
  for (uint32_t l = 0; l < d->layers; l++) {
    char name[16];
    snprintf(name, sizeof name, "h%u.w", l);
    m->ti_w[l] = add_tensor(m, name, in, d->hidden, 2, true);
    snprintf(name, sizeof name, "h%u.b", l);
    m->ti_b[l] = add_tensor(m, name, d->hidden, 1, 1, false);
    in = d->hidden;
  }
  m->ti_ow = add_tensor(m, "out.w", d->hidden, EA_VOCAB, 2, true);
  m->ti_ob = add_tensor(m, "out.b", EA_VOCAB, 1, 1, false);

  size_t rows = max_rows;
  size_t wide = m->in0 > d->hidden ? m->in0 : d->hidden;
  int ok = (m->params = calloc(m->nparams, sizeof(float))) != NULL;
  ok = ok && (m->grads = calloc(m->nparams + 1, sizeof(float))) != NULL;
  ok = ok && (m->x0 = malloc(rows * m->in0 * sizeof(float))) != NULL;
  for (uint32_t l = 0; ok && l < d->layers; l++) {
    ok = (m->pre[l] = malloc(rows * d->hidden * sizeof(float))) != NULL;
    ok = ok && (m->act[l] = malloc(rows * d->hidden * sizeof(float))) != NULL;
    ok = ok && (m->tnh[l] = malloc(rows * d->hidden * sizeof(float))) != NULL;
  }
  ok = ok && (m->logits = malloc(rows * EA_VOCAB * sizeof(float))) != NULL;
  ok = ok && (m->s0 = malloc(rows * wide * sizeof(float))) != NULL;
  ok = ok && (m->s1 = malloc(rows * wide * sizeof(float))) != NULL;
  ok = ok && (m->ones = malloc(rows * sizeof(float))) != NULL;
  if (!ok) {
    ea_model_free(m);
    return -ENOMEM;
  }
  for (size_t i = 0; i < rows; i++) m->ones[i] = 1.0f;
  *out = m;
  return 0;
}

void ea_model_free(ea_model *m) {
  if (!m) return;
  free(m->params);
  free(m->grads);
  free(m->x0);
  for (uint32_t l = 0; l < m->d.layers; l++) {
    free(m->pre[l]);
    free(m->act[l]);
    free(m->tnh[l]);
  }
  free(m->logits);
  free(m->s0);
  free(m->s1);
  free(m->ones);
  free(m);
}

static void init_uniform(ea_rng *r, float *p, size_t n, float std) {
  /* U(−a, a) has std a/√3.  Scaled uniform, not Box–Muller, because it needs
   * no libm: every machine produces the same bits from the same seed. */
  float a = std * 1.7320508f;
  for (size_t i = 0; i < n; i++) p[i] = (2.0f * ea_rng_unit(r) - 1.0f) * a;
}

void ea_model_init(ea_model *m, uint64_t seed) {
  ea_rng r;
  ea_rng_seed(&r, seed, EA_RNG_INIT, 0);
  memset(m->params, 0, m->nparams * sizeof(float)); /* biases start at 0 */
  for (size_t i = 0; i < m->ntensors; i++) {
    const ea_tensor *t = &m->t[i];
    float *p = m->params + t->offset;
    float std;
    if (i == m->ti_embed)
      std = 1.0f; /* unit-variance inputs to the first layer */
    else if (i == m->ti_ow)
      std = 0.1f / sqrtf((float)m->d.hidden); /* near-uniform first softmax: loss ≈ ln 256 */
    else if (t->ndim == 2)
      std = sqrtf(2.0f / (float)t->shape[0]); /* Kaiming (He) for a ReLU-like GELU */
    else
      continue;
    init_uniform(&r, p, t->count, std);
  }
  ea_model_zero_grads(m);
}

size_t ea_model_nparams(const ea_model *m) {
  return m->nparams;
}
const ea_model_dims *ea_model_get_dims(const ea_model *m) {
  return &m->d;
}
float *ea_model_params(ea_model *m) {
  return m->params;
}
float *ea_model_grads(ea_model *m) {
  return m->grads;
}
void ea_model_zero_grads(ea_model *m) {
  memset(m->grads, 0, (m->nparams + 1) * sizeof(float));
}
size_t ea_model_ntensors(const ea_model *m) {
  return m->ntensors;
}
const ea_tensor *ea_model_tensor(const ea_model *m, size_t i) {
  return i < m->ntensors ? &m->t[i] : NULL;
}

void ea_train_blas_threads(int n) {
  openblas_set_num_threads(n);
}

/* OpenBLAS 0.3.21 (Debian 12) does not know CPUs newer than its release,
 * e.g. family 6 model 207, and falls back to its Prescott (SSE3) kernels:
 * measured 6× slower per training step than SkylakeX on such a machine.
 * The kernel set is chosen when the library loads, so the fix is an
 * environment variable for the next process. */
const char *ea_train_blas_coretype_hint(void) {
  static const char *const generic[] = {"prescott",  "core2",  "penryn", "dunnington",
                                        "nehalem",   "atom",   "katmai", "coppermine",
                                        "northwood", "banias", "unknown"};
  const char *core = openblas_get_corename();
  bool is_generic = core == NULL;
  for (size_t i = 0; core && i < sizeof generic / sizeof *generic; i++)
    if (strcasecmp(core, generic[i]) == 0) is_generic = true;
  if (!is_generic) return NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
  return NULL;
}

/* GELU, tanh approximation (Hendrycks & Gimpel 2016, as in GPT-2):
 *     gelu(x) = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
 * tanh is taken as 1 − 2/(e^{2u} + 1) through expf: glibc's tanhf goes
 * through expm1f and measured 4× slower, a third of a step's time.  The
 * absolute error (≈1e-7) is what matters inside ½·x·(1 + t).  e^{2u}
 * overflows to inf for large u, giving t = 1 exactly, as it should.
 * Forward keeps t (in the act buffer's twin, pre → t) for backward. */
#define GELU_K 0.7978845608f /* sqrt(2/π) */
#define GELU_C 0.044715f

static inline float gelu_tanh(float x) {
  float u = GELU_K * (x + GELU_C * x * x * x);
  return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

static inline float gelu_grad(float x, float t) {
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

/* Y[rows×out] = X[rows×in]·W[in×out] + b (bias copied into each row, then
 * the product accumulated onto it with beta = 1). */
static void linear(const float *X, const float *W, const float *b, float *Y, int rows, int in,
                   int out) {
  for (int r = 0; r < rows; r++) memcpy(Y + (size_t)r * out, b, (size_t)out * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, out, in, 1.0f, X, in, W, out, 1.0f,
              Y, out);
}

static double forward(ea_model *m, const uint8_t *ctx, const uint8_t *targets, int rows,
                      bool for_backward) {
  const ea_model_dims *d = &m->d;
  const int E = (int)d->embed_dim, H = (int)d->hidden, in0 = (int)m->in0;
  const float *emb = m->params + m->t[m->ti_embed].offset;

  for (int r = 0; r < rows; r++)
    for (uint32_t c = 0; c < d->context; c++)
      memcpy(m->x0 + (size_t)r * in0 + (size_t)c * E,
             emb + (size_t)ctx[(size_t)r * d->context + c] * E, (size_t)E * sizeof(float));

  const float *x = m->x0;
  int in = in0;
  for (uint32_t l = 0; l < d->layers; l++) {
    const float *W = m->params + m->t[m->ti_w[l]].offset;
    const float *b = m->params + m->t[m->ti_b[l]].offset;
    linear(x, W, b, m->pre[l], rows, in, H);
    const float *pre = m->pre[l];
    float *act = m->act[l], *tnh = m->tnh[l];
    for (size_t i = 0; i < (size_t)rows * H; i++) {
      float t = gelu_tanh(pre[i]);
      tnh[i] = t;
      act[i] = 0.5f * pre[i] * (1.0f + t);
    }
    x = act;
    in = H;
  }
  linear(x, m->params + m->t[m->ti_ow].offset, m->params + m->t[m->ti_ob].offset, m->logits, rows,
         H, EA_VOCAB);

  /* Log-softmax with the max subtracted; on the way, turn logits into
   * dlogits = softmax − onehot (the SUM convention: no 1/rows).  Terms more
   * than 80 nats below the max are taken as 0: their probability (< 2e-35)
   * changes nothing, and expf's subnormal results there cost microcode
   * assists in every later product (measured ~15% of a step). */
  double loss = 0;
  for (int r = 0; r < rows; r++) {
    float *z = m->logits + (size_t)r * EA_VOCAB;
    float mx = z[0];
    for (int k = 1; k < EA_VOCAB; k++) mx = z[k] > mx ? z[k] : mx;
    const float zt = z[targets[r]] - mx;
    float sum = 0;
    for (int k = 0; k < EA_VOCAB; k++) {
      float dz = z[k] - mx;
      z[k] = dz < -80.0f ? 0.0f : expf(dz);
      sum += z[k];
    }
    loss += (double)(logf(sum) - zt);
    if (for_backward) {
      float inv = 1.0f / sum;
      for (int k = 0; k < EA_VOCAB; k++) z[k] *= inv;
      z[targets[r]] -= 1.0f;
    }
  }
  return loss;
}

static void backward(ea_model *m, const uint8_t *ctx, int rows) {
  const ea_model_dims *d = &m->d;
  const int E = (int)d->embed_dim, H = (int)d->hidden, in0 = (int)m->in0;
  const int L = (int)d->layers;
  float *g = m->grads;

  /* output layer: dWo += A^T·dZ, dbo += 1^T·dZ, dA = dZ·Wo^T */
  const float *A = m->act[L - 1];
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, EA_VOCAB, rows, 1.0f, A, H, m->logits,
              EA_VOCAB, 1.0f, g + m->t[m->ti_ow].offset, EA_VOCAB);
  cblas_sgemv(CblasRowMajor, CblasTrans, rows, EA_VOCAB, 1.0f, m->logits, EA_VOCAB, m->ones, 1,
              1.0f, g + m->t[m->ti_ob].offset, 1);
  float *dA = m->s0, *dX = m->s1;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, H, EA_VOCAB, 1.0f, m->logits, EA_VOCAB,
              m->params + m->t[m->ti_ow].offset, EA_VOCAB, 0.0f, dA, H);

  for (int l = L - 1; l >= 0; l--) {
    const float *pre = m->pre[l], *tnh = m->tnh[l];
    for (size_t i = 0; i < (size_t)rows * H; i++) dA[i] *= gelu_grad(pre[i], tnh[i]); /* now dPre */
    const float *X = l == 0 ? m->x0 : m->act[l - 1];
    const int in = l == 0 ? in0 : H;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, H, rows, 1.0f, X, in, dA, H, 1.0f,
                g + m->t[m->ti_w[l]].offset, H);
    cblas_sgemv(CblasRowMajor, CblasTrans, rows, H, 1.0f, dA, H, m->ones, 1, 1.0f,
                g + m->t[m->ti_b[l]].offset, 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, in, H, 1.0f, dA, H,
                m->params + m->t[m->ti_w[l]].offset, H, 0.0f, dX, in);
    float *t = dA;
    dA = dX;
    dX = t;
  }

  /* dA holds dx0 (rows × C·E): scatter-add into the embedding rows used. */
  float *gemb = g + m->t[m->ti_embed].offset;
  for (int r = 0; r < rows; r++)
    for (uint32_t c = 0; c < d->context; c++) {
      float *dst = gemb + (size_t)ctx[(size_t)r * d->context + c] * E;
      const float *src = dA + (size_t)r * in0 + (size_t)c * E;
      for (int k = 0; k < E; k++) dst[k] += src[k];
    }
}

int ea_model_forward_backward(ea_model *m, const uint8_t *ctx, const uint8_t *targets,
                              uint32_t rows, double *loss_sum) {
  if (rows > m->max_rows) return -EINVAL;
  if (rows == 0) return 0;
  *loss_sum += forward(m, ctx, targets, (int)rows, true);
  backward(m, ctx, (int)rows);
  return 0;
}

int ea_model_forward(ea_model *m, const uint8_t *ctx, const uint8_t *targets, uint32_t rows,
                     double *loss_sum) {
  if (rows > m->max_rows) return -EINVAL;
  if (rows == 0) return 0;
  *loss_sum += forward(m, ctx, targets, (int)rows, false);
  return 0;
}
