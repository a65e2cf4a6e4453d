/* state.c — the training state (model, AdamW moments, step) and its flat,
 * self-describing byte layout.
 *
 * The trainer object lives here because "the state" is what it is: params,
 * optimizer m and v, and the step, which with the fixed global batch is also
 * the data cursor.  compute() fills a rank's summed gradient for the current
 * step; apply() takes the allreduced sum, divides by B and updates.
 *
 * The serialized form is one flat buffer — a 128-byte header and then the
 * params, m and v arrays — because a checkpoint shard is simply a byte range
 * of it and state sync broadcasts it whole.  The header carries magic,
 * version, the model dims, batch, seed and data fingerprint (so a state can
 * only be loaded into a trainer that would continue the same trajectory),
 * a digest of the payload and a digest of itself, and reserved bytes for a
 * later version.  Its layout is written by explicit little-endian stores at
 * fixed offsets, locked below with static_assert, so it does not depend on
 * the compiler's struct padding.
 *
 * The live checkpoint flow adds three things at the end: the layout from
 * the model dims alone (the controller writes a manifest without a
 * trainer), staging a shard range with its hash in one pass, and resuming
 * from a checkpoint directory: ckpt/'s resume search (ea_ckpt_search_resume)
 * picks the candidates (sizes checked) and falls back past damaged ones,
 * this file says whether one loads, and ea_ckpt_load_verified reads it,
 * every byte hashed as it arrives (one pass).
 */
#include "ea_train.h"

#include "ea_ckpt.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxh_x86dispatch.h>

struct ea_trainer {
  ea_train_config c;
  const ea_data *data;
  ea_model *model;
  ea_sampler *sampler;
  float *opt;    /* 2·P: adam m, then adam v — one array, one state */
  uint64_t step; /* next step to compute; = updates applied */
  uint8_t *ctx;  /* micro_batch × context */
  uint8_t *tgt;  /* micro_batch */
};

int ea_trainer_new(const ea_train_config *c, const ea_data *data, ea_trainer **out, char *err,
                   size_t errlen) {
  *out = NULL;
  int rc = ea_train_config_validate(c, err, errlen);
  if (rc) return rc;
  ea_trainer *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  t->c = *c;
  t->data = data;
  rc = ea_model_new(&c->model, c->micro_batch, &t->model, err, errlen);
  if (rc == 0) rc = ea_sampler_new(data, c->seed, &t->sampler);
  if (rc == 0) {
    size_t p = ea_model_nparams(t->model);
    t->opt = calloc(2 * p, sizeof(float));
    t->ctx = malloc((size_t)c->micro_batch * c->model.context);
    t->tgt = malloc(c->micro_batch);
    if (!t->opt || !t->ctx || !t->tgt) rc = -ENOMEM;
  }
  if (rc) {
    ea_trainer_free(t);
    return rc;
  }
  ea_model_init(t->model, c->seed);
  *out = t;
  return 0;
}

void ea_trainer_free(ea_trainer *t) {
  if (!t) return;
  ea_model_free(t->model);
  ea_sampler_free(t->sampler);
  free(t->opt);
  free(t->ctx);
  free(t->tgt);
  free(t);
}

const ea_train_config *ea_trainer_config(const ea_trainer *t) {
  return &t->c;
}
ea_model *ea_trainer_model(ea_trainer *t) {
  return t->model;
}
uint64_t ea_trainer_step(const ea_trainer *t) {
  return t->step;
}

float *ea_trainer_grad_buffer(ea_trainer *t, size_t *count) {
  if (count) *count = ea_model_nparams(t->model) + 1;
  return ea_model_grads(t->model);
}

int ea_trainer_compute(ea_trainer *t, uint32_t rank, uint32_t world) {
  if (world == 0 || rank >= world) return -EINVAL;
  const uint32_t C = t->c.model.context;
  uint64_t begin, end;
  ea_train_rank_range(t->step, t->c.global_batch, rank, world, &begin, &end);
  uint32_t mb = t->c.micro_batch;
  if (t->c.accum_steps) { /* accum_steps equal passes (fewer when the share is smaller) */
    uint64_t per = (end - begin + t->c.accum_steps - 1) / t->c.accum_steps;
    mb = per == 0 ? 1 : per < mb ? (uint32_t)per : mb;
  }
  ea_model_zero_grads(t->model);
  double loss = 0;
  /* Gradient accumulation: ⌈(end − begin) / micro_batch⌉ micro-batches, all
   * adding sums into the same buffer. */
  for (uint64_t g = begin; g < end;) {
    uint32_t rows = end - g < mb ? (uint32_t)(end - g) : mb;
    for (uint32_t i = 0; i < rows; i++)
      ea_data_sample(t->data, ea_sampler_position(t->sampler, g + i), C, t->ctx + (size_t)i * C,
                     t->tgt + i);
    int rc = ea_model_forward_backward(t->model, t->ctx, t->tgt, rows, &loss);
    if (rc) return rc;
    g += rows;
  }
  ea_model_grads(t->model)[ea_model_nparams(t->model)] = (float)loss;
  return 0;
}

int ea_trainer_apply(ea_trainer *t, ea_train_stats *stats) {
  const size_t P = ea_model_nparams(t->model);
  const float *g = ea_model_grads(t->model);
  const double B = t->c.global_batch;
  const double loss = g[P] / B;
  /* Norm of the mean gradient, summed in index order in double: the same
   * sequence on every rank, so every rank clips identically. */
  double ss = 0;
  for (size_t i = 0; i < P; i++) ss += (double)g[i] * g[i];
  const double norm = sqrt(ss) / B;
  if (!isfinite(loss) || !isfinite(norm)) return -EDOM;

  double scale = 1.0 / B;
  if (t->c.grad_clip > 0 && norm > t->c.grad_clip) scale *= t->c.grad_clip / norm;
  const double lr = ea_train_lr(&t->c, t->step);
  ea_adamw_args a = {
      .lr = (float)lr,
      .beta1 = (float)t->c.beta1,
      .beta2 = (float)t->c.beta2,
      .eps = (float)t->c.eps,
      .grad_scale = (float)scale,
      .t = t->step + 1,
  };
  float *p = ea_model_params(t->model), *m = t->opt, *v = t->opt + P;
  for (size_t i = 0; i < ea_model_ntensors(t->model); i++) {
    const ea_tensor *ti = ea_model_tensor(t->model, i);
    a.weight_decay = ti->decay ? (float)t->c.weight_decay : 0.0f;
    size_t o = ti->offset;
    ea_adamw_update(p + o, g + o, m + o, v + o, ti->count, &a);
  }
  if (stats) *stats = (ea_train_stats){.step = t->step, .loss = loss, .grad_norm = norm, .lr = lr};
  t->step++;
  return 0;
}

int ea_trainer_step_local(ea_trainer *t, ea_train_stats *stats) {
  int rc = ea_trainer_compute(t, 0, 1);
  return rc ? rc : ea_trainer_apply(t, stats);
}

int ea_trainer_eval(ea_trainer *t, uint32_t pos, uint32_t count, double *mean_loss) {
  const size_t n = ea_data_size(t->data);
  if (count == 0 || pos >= n || count > n - pos) return -ERANGE;
  const uint32_t C = t->c.model.context, mb = t->c.micro_batch;
  double loss = 0;
  for (uint32_t k = 0; k < count;) {
    uint32_t rows = count - k < mb ? count - k : mb;
    for (uint32_t i = 0; i < rows; i++)
      ea_data_sample(t->data, pos + k + i, C, t->ctx + (size_t)i * C, t->tgt + i);
    int rc = ea_model_forward(t->model, t->ctx, t->tgt, rows, &loss);
    if (rc) return rc;
    k += rows;
  }
  *mean_loss = loss / count;
  return 0;
}

uint64_t ea_trainer_params_digest(const ea_trainer *t) {
  return XXH3_64bits_dispatch(ea_model_params(t->model),
                              ea_model_nparams(t->model) * sizeof(float));
}

/* ---- serialized layout -------------------------------------------------- */

/* Field offsets of the 128-byte header (see ea_train.h for the diagram). */
enum {
  H_MAGIC = 0,
  H_VERSION = 8,
  H_HEADER_BYTES = 12,
  H_VOCAB = 16,
  H_CONTEXT = 20,
  H_EMBED = 24,
  H_HIDDEN = 28,
  H_LAYERS = 32,
  H_BATCH = 36,
  H_NPARAMS = 40,
  H_STEP = 48,
  H_SEED = 56,
  H_DATA_BYTES = 64,
  H_DATA_HASH = 72,
  H_PAYLOAD_DIGEST = 80,
  H_RESERVED = 88,
  H_RESERVED_BYTES = 32,
  H_HEADER_DIGEST = 120,
};

/* The on-disk header as a struct, only to lock the layout: the offsets
 * above must be what a C compiler would give these natural-aligned fields,
 * so tools in other languages can read it as a plain record. */
struct ea_state_header_layout {
  char magic[8];
  uint32_t version, header_bytes;
  uint32_t vocab, context, embed_dim, hidden, layers, global_batch;
  uint64_t nparams, step, seed, data_bytes, data_hash, payload_digest;
  uint8_t reserved[32];
  uint64_t header_digest;
};
static_assert(sizeof(struct ea_state_header_layout) == EA_STATE_HEADER_BYTES,
              "header is 128 bytes");
static_assert(offsetof(struct ea_state_header_layout, version) == H_VERSION, "version");
static_assert(offsetof(struct ea_state_header_layout, vocab) == H_VOCAB, "vocab");
static_assert(offsetof(struct ea_state_header_layout, global_batch) == H_BATCH, "global_batch");
static_assert(offsetof(struct ea_state_header_layout, nparams) == H_NPARAMS, "nparams");
static_assert(offsetof(struct ea_state_header_layout, data_hash) == H_DATA_HASH, "data_hash");
static_assert(offsetof(struct ea_state_header_layout, payload_digest) == H_PAYLOAD_DIGEST,
              "payload");
static_assert(offsetof(struct ea_state_header_layout, reserved) == H_RESERVED, "reserved");
static_assert(offsetof(struct ea_state_header_layout, header_digest) == H_HEADER_DIGEST, "digest");
static_assert(sizeof(EA_STATE_MAGIC) == 8, "magic is 8 bytes with its NUL");

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* The float arrays are copied as host floats; this layout is little-endian,
 * which is every machine this agent targets. */
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "state layout is little-endian");

uint64_t ea_trainer_state_size(const ea_trainer *t) {
  return EA_STATE_HEADER_BYTES + 3ull * ea_model_nparams(t->model) * sizeof(float);
}

/* Payload in memory: params (model), then m and v (one array). */
static uint64_t payload_digest(const ea_trainer *t) {
  const size_t P = ea_model_nparams(t->model);
  XXH3_state_t st;
  memset(&st, 0, sizeof st); /* XXH3_INITSTATE-equivalent for a stack state */
  XXH3_64bits_reset(&st);
  XXH3_64bits_update_dispatch(&st, ea_model_params(t->model), P * sizeof(float));
  XXH3_64bits_update_dispatch(&st, t->opt, 2 * P * sizeof(float));
  return XXH3_64bits_digest(&st);
}

static void build_header(const ea_trainer *t, uint8_t h[EA_STATE_HEADER_BYTES]) {
  memset(h, 0, EA_STATE_HEADER_BYTES);
  memcpy(h + H_MAGIC, EA_STATE_MAGIC, 8);
  put32(h + H_VERSION, EA_STATE_VERSION);
  put32(h + H_HEADER_BYTES, EA_STATE_HEADER_BYTES);
  put32(h + H_VOCAB, EA_VOCAB);
  put32(h + H_CONTEXT, t->c.model.context);
  put32(h + H_EMBED, t->c.model.embed_dim);
  put32(h + H_HIDDEN, t->c.model.hidden);
  put32(h + H_LAYERS, t->c.model.layers);
  put32(h + H_BATCH, t->c.global_batch);
  put64(h + H_NPARAMS, ea_model_nparams(t->model));
  put64(h + H_STEP, t->step);
  put64(h + H_SEED, t->c.seed);
  put64(h + H_DATA_BYTES, ea_data_size(t->data));
  put64(h + H_DATA_HASH, ea_data_hash(t->data));
  put64(h + H_PAYLOAD_DIGEST, payload_digest(t));
  put64(h + H_HEADER_DIGEST, XXH3_64bits_dispatch(h, H_HEADER_DIGEST));
}

int ea_trainer_state_read(const ea_trainer *t, uint64_t offset, void *dst, size_t len) {
  const uint64_t size = ea_trainer_state_size(t);
  if (offset > size || len > size - offset) return -ERANGE;
  uint8_t *out = dst;
  if (offset < EA_STATE_HEADER_BYTES && len > 0) {
    uint8_t h[EA_STATE_HEADER_BYTES];
    build_header(t, h);
    size_t n = EA_STATE_HEADER_BYTES - offset < len ? EA_STATE_HEADER_BYTES - (size_t)offset : len;
    memcpy(out, h + offset, n);
    out += n;
    offset += n;
    len -= n;
  }
  const size_t pbytes = ea_model_nparams(t->model) * sizeof(float);
  /* params come from the model, m and v from t->opt, which follows them */
  while (len > 0) {
    uint64_t rel = offset - EA_STATE_HEADER_BYTES;
    const uint8_t *src;
    size_t avail;
    if (rel < pbytes) {
      src = (const uint8_t *)ea_model_params(t->model) + rel;
      avail = pbytes - (size_t)rel;
    } else {
      src = (const uint8_t *)t->opt + (rel - pbytes);
      avail = 2 * pbytes - (size_t)(rel - pbytes);
    }
    size_t n = avail < len ? avail : len;
    memcpy(out, src, n);
    out += n;
    offset += n;
    len -= n;
  }
  return 0;
}

int ea_trainer_state_serialize(const ea_trainer *t, void *buf, size_t cap) {
  uint64_t size = ea_trainer_state_size(t);
  if (cap < size) return -ENOSPC;
  return ea_trainer_state_read(t, 0, buf, (size_t)size);
}

int ea_state_parse(const void *buf, size_t len, bool check_payload, ea_state_info *out, char *err,
                   size_t errlen) {
  const uint8_t *h = buf;
  if (len < EA_STATE_HEADER_BYTES) {
    ea_seterr(err, errlen, "state: length: %zu bytes, shorter than the %u-byte header", len,
              EA_STATE_HEADER_BYTES);
    return -EMSGSIZE;
  }
  if (memcmp(h + H_MAGIC, EA_STATE_MAGIC, 8) != 0) {
    ea_seterr(err, errlen, "state: magic: not \"EATRAIN\" (not a training state)");
    return -EBADMSG;
  }
  uint32_t version = get32(h + H_VERSION);
  if (version != EA_STATE_VERSION) {
    ea_seterr(err, errlen, "state: version: %u, this build reads version %u", version,
              EA_STATE_VERSION);
    return -EPROTONOSUPPORT;
  }
  uint32_t hb = get32(h + H_HEADER_BYTES);
  if (hb != EA_STATE_HEADER_BYTES) {
    ea_seterr(err, errlen, "state: header_bytes: %u, expected %u", hb, EA_STATE_HEADER_BYTES);
    return -EBADMSG;
  }
  uint64_t hd = XXH3_64bits_dispatch(h, H_HEADER_DIGEST);
  if (hd != get64(h + H_HEADER_DIGEST)) {
    ea_seterr(err, errlen, "state: header_digest: mismatch (header corrupted)");
    return -EBADMSG;
  }
  for (int i = 0; i < H_RESERVED_BYTES; i++)
    if (h[H_RESERVED + i] != 0) {
      ea_seterr(err, errlen, "state: reserved: byte %d is not zero", i);
      return -EBADMSG;
    }
  ea_state_info in = {
      .version = version,
      .dims = {get32(h + H_CONTEXT), get32(h + H_EMBED), get32(h + H_HIDDEN), get32(h + H_LAYERS)},
      .global_batch = get32(h + H_BATCH),
      .nparams = get64(h + H_NPARAMS),
      .step = get64(h + H_STEP),
      .seed = get64(h + H_SEED),
      .data_bytes = get64(h + H_DATA_BYTES),
      .data_hash = get64(h + H_DATA_HASH),
      .payload_digest = get64(h + H_PAYLOAD_DIGEST),
  };
  uint32_t vocab = get32(h + H_VOCAB);
  if (vocab != EA_VOCAB) {
    ea_seterr(err, errlen, "state: vocab: %u, expected %u", vocab, EA_VOCAB);
    return -EBADMSG;
  }
  /* nparams must be what the dims imply: recompute it as the model does. */
  const ea_model_dims *d = &in.dims;
  if (d->context < 1 || d->context > EA_MODEL_MAX_CONTEXT || d->embed_dim < 1 ||
      d->embed_dim > EA_MODEL_MAX_WIDTH || d->hidden < 1 || d->hidden > EA_MODEL_MAX_WIDTH ||
      d->layers < 1 || d->layers > EA_MODEL_MAX_LAYERS) {
    ea_seterr(err, errlen, "state: dims: context %u embed_dim %u hidden %u layers %u out of range",
              d->context, d->embed_dim, d->hidden, d->layers);
    return -EBADMSG;
  }
  uint64_t want = (uint64_t)EA_VOCAB * d->embed_dim +
                  (uint64_t)d->context * d->embed_dim * d->hidden + d->hidden +
                  (uint64_t)(d->layers - 1) * ((uint64_t)d->hidden * d->hidden + d->hidden) +
                  (uint64_t)d->hidden * EA_VOCAB + EA_VOCAB;
  if (in.nparams != want) {
    ea_seterr(err, errlen, "state: nparams: %llu, dims imply %llu", (unsigned long long)in.nparams,
              (unsigned long long)want);
    return -EBADMSG;
  }
  in.total_bytes = EA_STATE_HEADER_BYTES + 12 * in.nparams;
  if (check_payload) {
    if (len != in.total_bytes) {
      ea_seterr(err, errlen, "state: length: %zu bytes, header implies %llu", len,
                (unsigned long long)in.total_bytes);
      return -EMSGSIZE;
    }
    uint64_t pd = XXH3_64bits_dispatch(h + EA_STATE_HEADER_BYTES, len - EA_STATE_HEADER_BYTES);
    if (pd != in.payload_digest) {
      ea_seterr(err, errlen,
                "state: payload_digest: mismatch (params or optimizer state corrupted)");
      return -EBADMSG;
    }
  }
  if (out) *out = in;
  return 0;
}

#define MISMATCH(field, a, b)                                                      \
  do {                                                                             \
    if ((a) != (b)) {                                                              \
      ea_seterr(err, errlen, "state: %s: state has %llu, trainer has %llu", field, \
                (unsigned long long)(a), (unsigned long long)(b));                 \
      return -EINVAL;                                                              \
    }                                                                              \
  } while (0)

int ea_trainer_state_load(ea_trainer *t, const void *buf, size_t len, char *err, size_t errlen) {
  ea_state_info in;
  int rc = ea_state_parse(buf, len, true, &in, err, errlen);
  if (rc) return rc;
  MISMATCH("context", in.dims.context, t->c.model.context);
  MISMATCH("embed_dim", in.dims.embed_dim, t->c.model.embed_dim);
  MISMATCH("hidden", in.dims.hidden, t->c.model.hidden);
  MISMATCH("layers", in.dims.layers, t->c.model.layers);
  MISMATCH("global_batch", in.global_batch, t->c.global_batch);
  MISMATCH("seed", in.seed, t->c.seed);
  MISMATCH("data_bytes", in.data_bytes, (uint64_t)ea_data_size(t->data));
  MISMATCH("data_hash", in.data_hash, ea_data_hash(t->data));
  const size_t P = ea_model_nparams(t->model);
  MISMATCH("nparams", in.nparams, (uint64_t)P);
  const uint8_t *src = (const uint8_t *)buf + EA_STATE_HEADER_BYTES;
  memcpy(ea_model_params(t->model), src, P * sizeof(float));
  memcpy(t->opt, src + P * sizeof(float), 2 * P * sizeof(float));
  t->step = in.step;
  ea_model_zero_grads(t->model);
  return 0;
}

size_t ea_trainer_state_ntensors(const ea_trainer *t) {
  return 1 + 3 * ea_model_ntensors(t->model);
}

int ea_trainer_state_tensor(const ea_trainer *t, size_t i, ea_state_tensor *out) {
  const size_t nt = ea_model_ntensors(t->model);
  if (i >= 1 + 3 * nt) return -ERANGE;
  memset(out, 0, sizeof *out);
  if (i == 0) {
    snprintf(out->name, sizeof out->name, "header");
    out->dtype = "u64";
    out->ndim = 1;
    out->shape[0] = EA_STATE_HEADER_BYTES / 8;
    out->shape[1] = 1;
    out->offset = 0;
    out->bytes = EA_STATE_HEADER_BYTES;
    return 0;
  }
  static const char *const part[3] = {"params", "adam.m", "adam.v"};
  size_t k = (i - 1) / nt, j = (i - 1) % nt;
  const ea_tensor *ti = ea_model_tensor(t->model, j);
  snprintf(out->name, sizeof out->name, "%s/%s", part[k], ti->name);
  out->dtype = "f32";
  out->ndim = ti->ndim;
  out->shape[0] = ti->shape[0];
  out->shape[1] = ti->shape[1];
  out->offset =
      EA_STATE_HEADER_BYTES + (k * ea_model_nparams(t->model) + ti->offset) * sizeof(float);
  out->bytes = ti->count * sizeof(float);
  return 0;
}

/* ---- the layout from dims alone ------------------------------------------ */

/* The model's tensor table as train/model.c builds it (embed, then per
 * layer hL.w and hL.b, then out.w and out.b), recomputed without allocating
 * a model; test_ckpt_flow checks the two agree for several shapes. */
static int model_tensor_from_dims(const ea_model_dims *d, size_t i, ea_tensor *out) {
  const size_t n = 3 + 2 * (size_t)d->layers;
  if (i >= n) return -ERANGE;
  memset(out, 0, sizeof *out);
  size_t off = 0;
  const uint64_t in0 = (uint64_t)d->context * d->embed_dim;
  for (size_t k = 0; k <= i; k++) {
    uint64_t rows, cols;
    uint32_t ndim;
    bool decay;
    char name[16];
    if (k == 0) {
      snprintf(name, sizeof name, "embed");
      rows = EA_VOCAB, cols = d->embed_dim, ndim = 2, decay = true;
    } else if (k < n - 2) {
      uint32_t l = (uint32_t)((k - 1) / 2);
      if ((k - 1) % 2 == 0) {
        snprintf(name, sizeof name, "h%u.w", l);
        rows = l == 0 ? in0 : d->hidden, cols = d->hidden, ndim = 2, decay = true;
      } else {
        snprintf(name, sizeof name, "h%u.b", l);
        rows = d->hidden, cols = 1, ndim = 1, decay = false;
      }
    } else if (k == n - 2) {
      snprintf(name, sizeof name, "out.w");
      rows = d->hidden, cols = EA_VOCAB, ndim = 2, decay = true;
    } else {
      snprintf(name, sizeof name, "out.b");
      rows = EA_VOCAB, cols = 1, ndim = 1, decay = false;
    }
    if (k == i) {
      memcpy(out->name, name, sizeof out->name);
      out->ndim = ndim;
      out->shape[0] = rows;
      out->shape[1] = cols;
      out->offset = off;
      out->count = (size_t)(rows * cols);
      out->decay = decay;
    }
    off += (size_t)(rows * cols);
  }
  return 0;
}

static bool dims_ok(const ea_model_dims *d) {
  return d->context >= 1 && d->context <= EA_MODEL_MAX_CONTEXT && d->embed_dim >= 1 &&
         d->embed_dim <= EA_MODEL_MAX_WIDTH && d->hidden >= 1 && d->hidden <= EA_MODEL_MAX_WIDTH &&
         d->layers >= 1 && d->layers <= EA_MODEL_MAX_LAYERS;
}

static uint64_t nparams_from_dims(const ea_model_dims *d) {
  ea_tensor last;
  model_tensor_from_dims(d, 2 + 2 * (size_t)d->layers, &last);
  return last.offset + last.count;
}

int ea_state_layout(const ea_model_dims *d, uint64_t *total_bytes, size_t *ntensors) {
  if (!dims_ok(d)) return -EINVAL;
  if (total_bytes) *total_bytes = EA_STATE_HEADER_BYTES + 12 * nparams_from_dims(d);
  if (ntensors) *ntensors = 1 + 3 * (3 + 2 * (size_t)d->layers);
  return 0;
}

int ea_state_layout_tensor(const ea_model_dims *d, size_t i, ea_state_tensor *out) {
  if (!dims_ok(d)) return -EINVAL;
  const size_t nt = 3 + 2 * (size_t)d->layers;
  if (i >= 1 + 3 * nt) return -ERANGE;
  memset(out, 0, sizeof *out);
  if (i == 0) {
    snprintf(out->name, sizeof out->name, "header");
    out->dtype = "u64";
    out->ndim = 1;
    out->shape[0] = EA_STATE_HEADER_BYTES / 8;
    out->shape[1] = 1;
    out->bytes = EA_STATE_HEADER_BYTES;
    return 0;
  }
  static const char *const part[3] = {"params", "adam.m", "adam.v"};
  size_t k = (i - 1) / nt, j = (i - 1) % nt;
  ea_tensor ti;
  model_tensor_from_dims(d, j, &ti);
  snprintf(out->name, sizeof out->name, "%s/%s", part[k], ti.name);
  out->dtype = "f32";
  out->ndim = ti.ndim;
  out->shape[0] = ti.shape[0];
  out->shape[1] = ti.shape[1];
  out->offset = EA_STATE_HEADER_BYTES + (k * nparams_from_dims(d) + ti.offset) * sizeof(float);
  out->bytes = ti.count * sizeof(float);
  return 0;
}

/* ---- staging ----------------------------------------------------------- */

/* Copy-then-hash granule: 256 KiB fits the L2 of every x86 core this runs
 * on (≥ 256 KiB), so the hash reads what the copy just wrote from cache;
 * it is also the piece size the ckpt writer hashes in (ckpt/writer.c). */
#define STAGE_PIECE (256u << 10)

int ea_trainer_state_stage(const ea_trainer *t, uint64_t offset, void *dst, size_t len,
                           uint64_t *hash) {
  const uint64_t size = ea_trainer_state_size(t);
  if (offset > size || len > size - offset) return -ERANGE;
  XXH3_state_t st;
  memset(&st, 0, sizeof st);
  XXH3_64bits_reset(&st);
  uint8_t *out = dst;
  /* The header piece is produced once: a range that starts inside it pays
   * the payload digest (one pass over 12·P bytes) a single time. */
  size_t first = len;
  if (offset < EA_STATE_HEADER_BYTES) {
    first = EA_STATE_HEADER_BYTES - (size_t)offset;
    if (first > len) first = len;
  } else if (first > STAGE_PIECE) {
    first = STAGE_PIECE;
  }
  size_t done = 0;
  while (done < len) {
    size_t n = done == 0 ? first : (len - done < STAGE_PIECE ? len - done : STAGE_PIECE);
    int rc = ea_trainer_state_read(t, offset + done, out + done, n);
    if (rc) return rc;
    XXH3_64bits_update_dispatch(&st, out + done, n);
    done += n;
  }
  *hash = XXH3_64bits_digest(&st);
  return 0;
}

/* ---- resume ------------------------------------------------------------- */

_Static_assert(EA_TRAIN_CKPT_NAME_MAX == EA_CKPT_NAME_MAX, "resume info name size");

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Read the whole state of the checkpoint at path and load it into t.
 * verify: every byte hashed against the manifest while it is read (one
 * pass: ea_ckpt_load_verified); else the reader, with the sizes checked by
 * the caller.  -EINVAL: it does not fit this trainer; anything else: it is
 * damaged or unreadable. */
static int load_one(ea_trainer *t, const char *path, const ea_ckpt_manifest *m, bool verify,
                    char *err, size_t errlen) {
  const uint64_t size = ea_trainer_state_size(t);
  if (m->total_bytes != size) {
    ea_seterr(err, errlen,
              "state size: checkpoint holds %llu bytes, this trainer's state is %llu "
              "(model dims differ)",
              (unsigned long long)m->total_bytes, (unsigned long long)size);
    return -EINVAL;
  }
  uint8_t *buf = malloc(size);
  if (!buf) return -ENOMEM;
  int rc;
  if (verify) {
    ea_ckpt_verify_report rep;
    rc = ea_ckpt_load_verified(path, m, buf, size, 0, &rep);
    if (rc) ea_seterr(err, errlen, "%s", rep.msg[0] ? rep.msg : strerror(-rc));
  } else {
    ea_ckpt_reader *r = NULL;
    char e2[256] = "";
    rc = ea_ckpt_reader_open(&r, path, 0, e2, sizeof e2);
    if (rc == 0) rc = ea_ckpt_reader_read(r, 0, buf, size, e2, sizeof e2);
    if (rc) ea_seterr(err, errlen, "read: %s", e2[0] ? e2 : strerror(-rc));
    ea_ckpt_reader_free(r);
  }
  /* A damaged read is no misfit: -EINVAL from it would stop the search. */
  if (rc == -EINVAL) rc = -EIO;
  if (rc == 0) {
    rc = ea_trainer_state_load(t, buf, size, err, errlen);
    /* A state that parses but is of another model is a misfit (-EINVAL); a
     * version this build cannot read is also no reason to try older ones
     * (they are no newer a format); digests that do not match are damage. */
    if (rc == -EPROTONOSUPPORT) rc = -EINVAL;
  }
  free(buf);
  return rc;
}

static void fill_info(ea_trainer_resume_info *info, const char *name, const ea_ckpt_manifest *m) {
  if (!info) return;
  snprintf(info->name, sizeof info->name, "%s", name);
  info->step = m->step;
  info->generation = m->generation;
  info->world_size = m->world_size;
}

/* The trainer's part in the ckpt/ resume search: a checkpoint must also
 * load into this trainer. */
typedef struct {
  ea_trainer *t;
  bool verify; /* hash every byte while loading (verify_full) */
  ea_trainer_resume_info *info;
  uint32_t fallbacks;            /* counted even when info is NULL */
  char misfit[EA_CKPT_NAME_MAX]; /* the checkpoint that does not fit */
  char misfit_why[512];
} resume_ctx;

static int accept_loads(void *arg, const ea_ckpt_candidate *c, char *why, size_t whylen) {
  resume_ctx *x = arg;
  int r = load_one(x->t, c->path, c->manifest, x->verify, why, whylen);
  if (r == 0) return 0;
  if (r == -EINVAL) { /* no fallback: an older one would not fit either */
    snprintf(x->misfit, sizeof x->misfit, "%s", c->name);
    snprintf(x->misfit_why, sizeof x->misfit_why, "%s", why);
    return -EINVAL;
  }
  return 1; /* damaged: try an older one */
}

static void note_fallback(void *arg, const char *name, const char *why, bool superseded) {
  resume_ctx *x = arg;
  if (superseded) return; /* an abandoned timeline, not damage */
  x->fallbacks++;
  if (!x->info) return;
  /* Bounded precision: the reason is cut to what the field holds. */
  if (x->info->fallbacks++ == 0)
    snprintf(x->info->why, sizeof x->info->why, "%.63s: %.440s", name, why);
}

int ea_trainer_resume(ea_trainer *t, const char *dir, const char *spec, bool verify_full,
                      ea_trainer_resume_info *info, char *err, size_t errlen) {
  const double t0 = mono_s();
  if (info) memset(info, 0, sizeof *info);
  /* The search and the resolve check sizes only: with verify_full the load
   * itself hashes every byte as it reads it (one pass, not a verify pass
   * and then a read pass), and a checkpoint it finds damaged is passed over
   * as a damaged one found by verification would be. */
  const ea_ckpt_verify_mode mode = EA_CKPT_VERIFY_SIZE;
  ea_ckpt_resume *res = malloc(sizeof *res); /* ~20 KiB of reasons: off the stack */
  if (!res) return -ENOMEM;
  char e2[512];
  int rc;

  if (spec && *spec && strcmp(spec, "latest") != 0) {
    /* An explicitly named checkpoint: it or nothing. */
    rc = ea_ckpt_resolve(dir, spec, mode, res);
    if (rc) {
      ea_seterr(err, errlen, "resume from %s in %s: %s", spec, dir,
                res->n_skipped ? res->skipped[0].reason : strerror(-rc));
      ea_ckpt_resume_close(res);
      free(res);
      return rc == -ENOENT ? -ENOENT : rc;
    }
    rc = load_one(t, res->path, &res->manifest, verify_full, e2, sizeof e2);
    if (rc)
      ea_seterr(err, errlen, "resume from %s: %s", res->name, e2);
    else
      fill_info(info, res->name, &res->manifest);
    ea_ckpt_resume_close(res);
    free(res);
    if (info) info->seconds = mono_s() - t0;
    return rc;
  }

  resume_ctx x = {.t = t, .verify = verify_full, .info = info};
  const ea_ckpt_resume_hooks hooks = {.accept = accept_loads, .skipped = note_fallback, .arg = &x};
  rc = ea_ckpt_search_resume(dir, mode, &hooks, res);
  if (rc == 0) {
    fill_info(info, res->name, &res->manifest);
  } else if (!res->listed) {
    ea_seterr(err, errlen, "no checkpoint: %s: %s", dir, strerror(-rc));
  } else if (rc == -EINVAL) {
    ea_seterr(err, errlen, "resume from %s: %s", x.misfit, x.misfit_why);
  } else if (rc == -ENOENT && x.fallbacks == 0) {
    ea_seterr(err, errlen, "no checkpoint in %s", dir);
  } else if (rc == -ENOENT) {
    rc = -EBADMSG;
    ea_seterr(err, errlen, "no checkpoint in %s verifies and loads; %s", dir,
              info ? info->why : "all are damaged");
  }
  ea_ckpt_resume_close(res);
  free(res);
  if (info) info->seconds = mono_s() - t0;
  return rc;
}
