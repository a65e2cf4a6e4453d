/* ea_train.h — the built-in trainer: a byte-level MLP language model, AdamW,
 * the elastic data order, and the flat training-state layout.
 *
 * These are the pure parts of a worker: no sockets, no clock, no threads of
 * their own (OpenBLAS may run its own pool; see ea_train_blas_threads).  The
 * worker process drives them and the communicator moves their buffers:
 *
 *     ea_data_open(cfg.data, &data, err, sizeof err);
 *     ea_trainer_new(&tc, data, &t);                 // seeded, deterministic init
 *     for (;;) {
 *       ea_trainer_compute(t, rank, world);          // SUM of this rank's gradients
 *       float *g = ea_trainer_grad_buffer(t, &n);    // n = nparams + 1 (loss sum last)
 *       comm_allreduce(g, n, f32, sum);              // any rank order, all ranks equal
 *       ea_trainer_apply(t, &stats);                 // ÷B, clip, AdamW, step++
 *     }
 *
 * Elastic semantics (DESIGN.md): the global batch B is fixed; at step s with
 * world size W rank r takes global sample indices
 *     [s·B + ⌊r·B/W⌋, s·B + ⌊(r+1)·B/W⌋)
 * of an infinite stream made of seeded per-epoch permutations of the data
 * positions.  The data cursor is therefore the step number, and the
 * trajectory does not depend on W (only the floating-point summation order
 * does).  Ranks that applied the same allreduced gradient hold bit-identical
 * state, which ea_trainer_params_digest lets callers verify.
 *
 * Ownership: every *_new/_open returns a heap object the caller frees with
 * the matching *_free/_close.  Pointers returned by accessors (params, grads,
 * tensor tables, data bytes) are owned by the object and valid until it is
 * freed.  An ea_trainer borrows its ea_data: the data must outlive it.
 * None of these objects is thread-safe; one thread uses one object.
 *
 * Errors: 0 or a negative errno.  Functions with an err buffer also write a
 * one-line reason there naming the file, field or dimension that was wrong.
 */
#ifndef EA_TRAIN_H
#define EA_TRAIN_H

#include "ea_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ea_base.h"

/* The PRNG (ea_rng: parameter init, the per-epoch permutations) is base's,
 * in ea_base.h, domains EA_RNG_INIT and EA_RNG_EPOCH. */

/* ---------------------------------------------------------------------------
 * Data: bytes of a file, or of every regular file under a directory.
 */
typedef struct ea_data ea_data;

/* The largest corpus ea_data_open accepts: sample positions and permutation
 * entries are uint32, and the permutation costs 4 bytes per data byte, so
 * 1 GiB of text already costs 5 GiB of memory.  The built-in model is a demo;
 * larger corpora belong to a user's worker_command. */
#define EA_DATA_MAX_BYTES (1ull << 30)

/* Load path into memory.  A regular file is loaded as is.  A directory is
 * walked recursively following symlinks; every regular file found is loaded
 * in byte-wise order of its path (as reached by the walk), and a file or
 * directory whose (st_dev, st_ino) was already seen is skipped, so symlink
 * aliases do not repeat data and symlink loops end.  Other file types
 * (fifos, devices, sockets) and dangling links are skipped.  Walk depth is
 * capped at 64 directories.  Returns 0, -ENODATA if there are no bytes,
 * -EFBIG above EA_DATA_MAX_BYTES, or the errno of a failed open/read; err
 * names the path. */
int ea_data_open(const char *path, ea_data **out, char *err, size_t errlen);
/* Make a data set from a copy of len bytes (tests, generated corpora). */
int ea_data_from_memory(const void *bytes, size_t len, ea_data **out);
void ea_data_close(ea_data *d);
size_t ea_data_size(const ea_data *d); /* bytes = samples per epoch */
const uint8_t *ea_data_bytes(const ea_data *d);
uint64_t ea_data_hash(const ea_data *d);   /* XXH3-64 of the bytes */
size_t ea_data_nfiles(const ea_data *d);   /* files loaded */
size_t ea_data_nskipped(const ea_data *d); /* duplicate targets skipped */

/* Global sample range [*begin, *end) of rank r at step s (formula above).
 * Requires world ≥ 1 and rank < world; the ranges of ranks 0..W-1 tile
 * [s·B, (s+1)·B) in order, and their sizes differ by at most one. */
void ea_train_rank_range(uint64_t step, uint32_t global_batch, uint32_t rank, uint32_t world,
                         uint64_t *begin, uint64_t *end);

/* Maps a global sample index g to a data position: epoch e = g / n,
 * position perm_e[g % n], where perm_e is a Fisher–Yates shuffle of 0..n-1
 * driven by ea_rng_seed(seed, EA_RNG_EPOCH, e) (i from n-1 down to 1, swap
 * i with ea_rng_below(i+1)).  Caches the current epoch's permutation. */
typedef struct ea_sampler ea_sampler;
int ea_sampler_new(const ea_data *d, uint64_t seed, ea_sampler **out);
void ea_sampler_free(ea_sampler *s);
uint32_t ea_sampler_position(ea_sampler *s, uint64_t g);
/* Context of position pos: ctx[j] = data[pos - context + j], 0 before the
 * start of the data; *target = data[pos]. */
void ea_data_sample(const ea_data *d, uint32_t pos, uint32_t context, uint8_t *ctx,
                    uint8_t *target);

/* ---------------------------------------------------------------------------
 * Model: embedding 256×E → concat C·E → L × (linear H, GELU) → linear 256 →
 * softmax cross-entropy in nats.  float32, row-major, one sample per row;
 * matrix products through cblas_sgemm.
 */
#define EA_VOCAB 256
#define EA_MODEL_MAX_LAYERS                                                 \
  16                              /* tensor table is a fixed array; 16 deep \
                                     is far beyond what this demo model uses */
#define EA_MODEL_MAX_CONTEXT 4096 /* bounds C·E buffers against typos */
#define EA_MODEL_MAX_WIDTH 65536  /* embed_dim and hidden */

typedef struct {
  uint32_t context;   /* C: bytes of context */
  uint32_t embed_dim; /* E */
  uint32_t hidden;    /* H */
  uint32_t layers;    /* L ≥ 1 hidden layers */
} ea_model_dims;

typedef struct {
  char name[16];     /* "embed", "h0.w", "h0.b", …, "out.w", "out.b" */
  uint32_t ndim;     /* 1 or 2 */
  uint64_t shape[2]; /* rows, cols (row-major); shape[1] = 1 when ndim = 1 */
  size_t offset;     /* first element in the params/grads arrays */
  size_t count;      /* elements */
  bool decay;        /* AdamW weight decay applies (matrices, not biases) */
} ea_tensor;

typedef struct ea_model ea_model;

/* 0, or -EINVAL with err naming the bad dimension, or -ENOMEM.  max_rows is
 * the largest micro-batch forward_backward will be given. */
int ea_model_new(const ea_model_dims *d, uint32_t max_rows, ea_model **out, char *err,
                 size_t errlen);
void ea_model_free(ea_model *m);
/* Deterministic init from seed: scaled uniform (no libm, so bit-identical on
 * every machine).  embed std 1; hidden W std sqrt(2/fan_in); out.w std
 * 0.1/sqrt(H) so the first loss is ≈ ln 256; biases 0. */
void ea_model_init(ea_model *m, uint64_t seed);
size_t ea_model_nparams(const ea_model *m);
const ea_model_dims *ea_model_get_dims(const ea_model *m);
/* nparams floats, laid out by the tensor table. */
float *ea_model_params(ea_model *m);
/* nparams + 1 floats: the gradients in the params layout, then one spare
 * slot the trainer uses for the loss sum so one allreduce carries both. */
float *ea_model_grads(ea_model *m);
void ea_model_zero_grads(ea_model *m); /* all nparams + 1 */
size_t ea_model_ntensors(const ea_model *m);
const ea_tensor *ea_model_tensor(const ea_model *m, size_t i); /* NULL past the end */
/* Forward + backward over rows samples (ctx: rows×C bytes, targets: rows):
 * adds the SUM over rows of per-sample gradients to grads and the sum of
 * per-sample losses to *loss_sum.  -EINVAL if rows > max_rows. */
int ea_model_forward_backward(ea_model *m, const uint8_t *ctx, const uint8_t *targets,
                              uint32_t rows, double *loss_sum);
/* Forward only: adds the loss sum; grads untouched. */
int ea_model_forward(ea_model *m, const uint8_t *ctx, const uint8_t *targets, uint32_t rows,
                     double *loss_sum);

/* OpenBLAS thread count for this process (openblas_set_num_threads).  A
 * worker per accelerator on a many-core node wants a few; tests want 1. */
void ea_train_blas_threads(int n);
/* When the loaded OpenBLAS fell back to generic kernels on a CPU it does not
 * recognise (Debian 12's 0.3.21 on recent Xeons: ~6× slower), the value to
 * put in OPENBLAS_CORETYPE for processes started from now on ("SkylakeX",
 * "Haswell", "Sandybridge"); NULL when the choice is already fine.  The
 * agent sets it in the environment before it starts workers. */
const char *ea_train_blas_coretype_hint(void);

/* ---------------------------------------------------------------------------
 * Optimizer: AdamW (decoupled weight decay, bias correction), as PyTorch's
 *     p ← p·(1 − lr·wd)
 *     m ← β1·m + (1−β1)·g          v ← β2·v + (1−β2)·g²
 *     p ← p − (lr / (1−β1^t)) · m / (sqrt(v) / sqrt(1−β2^t) + eps)
 * with g = grad·grad_scale.  t is the 1-based update count.  β^t is computed
 * by repeated squaring, not pow(), so every machine gets the same bits.
 */
typedef struct {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  uint64_t t;
} ea_adamw_args;
void ea_adamw_update(float *restrict p, const float *restrict g, float *restrict m,
                     float *restrict v, size_t n, const ea_adamw_args *a);

/* ---------------------------------------------------------------------------
 * Trainer: model + sampler + optimizer state + step.
 */
typedef struct {
  ea_model_dims model;
  uint32_t global_batch; /* B: samples per step, all ranks together */
  uint32_t micro_batch;  /* rows per forward/backward within a rank (at most) */
  uint32_t accum_steps;  /* 0: passes of micro_batch rows; else the rank's share of a step
                            in this many equal passes (distributed.gradient_accumulation_steps),
                            micro_batch then being their largest size, ⌈global_batch/accum⌉ */
  uint64_t steps;        /* schedule length (cosine reaches its floor here) */
  uint32_t warmup_steps;
  double lr;           /* peak learning rate */
  double min_lr_ratio; /* cosine floor as a fraction of lr */
  double weight_decay;
  double beta1, beta2, eps;
  double grad_clip; /* global L2 norm of the mean gradient; 0 = off */
  uint64_t seed;    /* init and data order */
} ea_train_config;

/* Defaults (docs/trainer.md says where each comes from). */
void ea_train_config_default(ea_train_config *c);
/* Fill from the job file: train.*, distributed.global_batch/micro_batch,
 * experiment.seed; optimizer constants keep their defaults.  Validates. */
int ea_train_config_from(ea_train_config *c, const ea_config *cfg, char *err, size_t errlen);
int ea_train_config_validate(const ea_train_config *c, char *err, size_t errlen);
/* Learning rate used by the update that finishes step `step` (0-based):
 * linear warmup lr·(step+1)/warmup for step < warmup, then cosine from lr to
 * lr·min_lr_ratio at step = steps, constant after. */
double ea_train_lr(const ea_train_config *c, uint64_t step);

typedef struct ea_trainer ea_trainer;

typedef struct {
  uint64_t step;    /* the step just finished (0-based) */
  double loss;      /* mean loss over the global batch, nats/byte */
  double grad_norm; /* L2 norm of the mean gradient before clipping */
  double lr;
} ea_train_stats;

/* Validates c (err names the field), builds the model, initialises it from
 * c->seed, step 0.  data is borrowed. */
int ea_trainer_new(const ea_train_config *c, const ea_data *data, ea_trainer **out, char *err,
                   size_t errlen);
void ea_trainer_free(ea_trainer *t);
const ea_train_config *ea_trainer_config(const ea_trainer *t);
ea_model *ea_trainer_model(ea_trainer *t);
uint64_t ea_trainer_step(const ea_trainer *t); /* next step to compute */
/* Zero the gradient buffer and fill it with this rank's SUM of per-sample
 * gradients for the current step (rank's range, in micro-batches), and the
 * sum of its per-sample losses in the last slot.  -EINVAL on bad rank/world.
 * A rank whose range is empty (W > B) contributes zeros. */
int ea_trainer_compute(ea_trainer *t, uint32_t rank, uint32_t world);
/* The buffer compute fills and apply reads: *count = nparams + 1 floats. */
float *ea_trainer_grad_buffer(ea_trainer *t, size_t *count);
/* Take the (allreduced) summed gradient and loss in the buffer, divide by B,
 * clip to grad_clip, apply AdamW with the scheduled lr, advance the step.
 * -EDOM when the loss or gradient is not finite: then nothing changes (the
 * caller alerts and decides).  stats may be NULL. */
int ea_trainer_apply(ea_trainer *t, ea_train_stats *stats);
/* Compute + apply for W = 1. */
int ea_trainer_step_local(ea_trainer *t, ea_train_stats *stats);
/* Mean loss of the model on `count` consecutive data positions starting at
 * `pos` (no gradients, no state change), for held-out style reporting. */
int ea_trainer_eval(ea_trainer *t, uint32_t pos, uint32_t count, double *mean_loss);
/* XXH3-64 of the params bytes: equal on every rank that is in sync. */
uint64_t ea_trainer_params_digest(const ea_trainer *t);

/* ---------------------------------------------------------------------------
 * Replay: a data-parallel job of any world size, in one process, bit for
 * bit as W workers on the tcp backend run it: each step computes every
 * rank's gradient sum (ea_trainer_compute), adds the W sums in the tcp
 * ring's order (ea_comm_ring_reduce in ea_comm.h, the schedule the ring
 * itself runs) and applies the result (ea_trainer_apply).  The world size
 * may change from step to step, as in an elastic job.  For checking a
 * cluster's trajectory step by step (the chaos harness) and for tests.
 *
 * Up to `threads` threads (the caller's included; at most max_world) share
 * the ranks of a step, each with a trainer of its own on the same state;
 * if a helper thread cannot start, the others do its share.  data is
 * borrowed, must outlive the replay, and is only read (an ea_data does not
 * change once open, so the replay's threads share it).  One caller thread
 * drives a replay.
 */
typedef struct ea_train_replay ea_train_replay;
/* Trainers for c at step 0 (as ea_trainer_new), for steps of world size
 * 1..max_world.  err names the bad field.  0, -EINVAL, -ENOMEM. */
int ea_train_replay_new(const ea_train_config *c, const ea_data *data, uint32_t max_world,
                        unsigned threads, ea_train_replay **out, char *err, size_t errlen);
/* One step at world size `world` (1..max_world); stats as ea_trainer_apply
 * gives them (may be NULL).  -EINVAL for a bad world, else compute's or
 * apply's error (-EDOM: not finite). */
int ea_train_replay_step(ea_train_replay *r, uint32_t world, ea_train_stats *stats);
/* Load a serialized state (ea_trainer_state_load) into every trainer, to
 * replay from a checkpoint instead of from step 0. */
int ea_train_replay_load_state(ea_train_replay *r, const void *buf, size_t len, char *err,
                               size_t errlen);
/* The replayed state (step, params digest, …); owned by the replay. */
const ea_trainer *ea_train_replay_trainer(const ea_train_replay *r);
void ea_train_replay_free(ea_train_replay *r);

/* ---------------------------------------------------------------------------
 * Training state: one flat little-endian byte layout
 *
 *   offset  size
 *        0   128  header (below)
 *      128  4·P   params   f32[P]   in tensor-table order
 *   128+4P  4·P   adam.m   f32[P]
 *   128+8P  4·P   adam.v   f32[P]
 *
 *   header: 0 magic "EATRAIN\0" | 8 u32 version (1) | 12 u32 header_bytes (128)
 *   16 u32 vocab | 20 u32 context | 24 u32 embed_dim | 28 u32 hidden
 *   32 u32 layers | 36 u32 global_batch | 40 u64 nparams | 48 u64 step
 *   56 u64 seed | 64 u64 data_bytes | 72 u64 data_hash | 80 u64 payload_digest
 *   (XXH3-64 of bytes [128, end)) | 88 u8 reserved[32] (zero)
 *   120 u64 header_digest (XXH3-64 of bytes [0, 120))
 *
 * Any byte range of it is a checkpoint shard; a state is loaded from the
 * whole buffer.  Step is the data cursor; seed fixes init and data order.
 */
#define EA_STATE_MAGIC "EATRAIN" /* 8 bytes with the NUL */
#define EA_STATE_VERSION 1u
#define EA_STATE_HEADER_BYTES 128u

typedef struct {
  char name[32];     /* "header", "params/embed", "adam.m/h0.w", … */
  const char *dtype; /* "u64" (header) or "f32"; static string */
  uint32_t ndim;
  uint64_t shape[2];
  uint64_t offset; /* byte offset in the serialized state */
  uint64_t bytes;
} ea_state_tensor;

/* What a header says, for tools that inspect a checkpoint (ckpt verify). */
typedef struct {
  uint32_t version;
  ea_model_dims dims;
  uint32_t global_batch;
  uint64_t nparams, step, seed, data_bytes, data_hash, payload_digest;
  uint64_t total_bytes; /* header + 12·nparams */
} ea_state_info;

uint64_t ea_trainer_state_size(const ea_trainer *t);
/* Copy bytes [offset, offset+len) of the serialized state into dst; any
 * range (a shard) can be produced without serializing the rest.  -ERANGE if
 * the range runs past the end.  Ranges that include the header hash the
 * payload (≈ 12·P bytes of XXH3). */
int ea_trainer_state_read(const ea_trainer *t, uint64_t offset, void *dst, size_t len);
/* The whole state into buf; -ENOSPC if cap < state size. */
int ea_trainer_state_serialize(const ea_trainer *t, void *buf, size_t cap);
/* Validate and parse the header of a serialized state (len = bytes
 * available; the whole state is needed for the payload check, so a header
 * alone passes with check_payload = false).  -EBADMSG for a wrong magic or
 * digest or a malformed field, -EPROTONOSUPPORT for another version,
 * -EMSGSIZE for a short buffer; err names the field. */
int ea_state_parse(const void *buf, size_t len, bool check_payload, ea_state_info *out, char *err,
                   size_t errlen);
/* Load a whole serialized state into t: parse (with payload check), then
 * insist that vocab, context, embed_dim, hidden, layers, global_batch, seed
 * and the data fingerprint equal t's (-EINVAL, err "hidden: state has 128,
 * trainer has 256").  On any error t is unchanged. */
int ea_trainer_state_load(ea_trainer *t, const void *buf, size_t len, char *err, size_t errlen);
/* The manifest's tensor table: header, then params/, adam.m/, adam.v/ per
 * model tensor; the entries tile [0, state size) in order. */
size_t ea_trainer_state_ntensors(const ea_trainer *t);
int ea_trainer_state_tensor(const ea_trainer *t, size_t i, ea_state_tensor *out);

/* The same layout from the model dims alone, for a process that has no
 * trainer (the controller writing a manifest): *total_bytes (may be NULL)
 * is the state size, *ntensors (may be NULL) the table's length.  Equal to
 * what a trainer of these dims reports.  -EINVAL for dims out of range. */
int ea_state_layout(const ea_model_dims *d, uint64_t *total_bytes, size_t *ntensors);
int ea_state_layout_tensor(const ea_model_dims *d, size_t i, ea_state_tensor *out);

/* Checkpoint staging: ea_trainer_state_read into dst, plus the XXH3-64 of
 * those bytes in *hash, each piece hashed right after it is copied (while
 * it is still in cache), so the copy and the hash cost about one pass. */
int ea_trainer_state_stage(const ea_trainer *t, uint64_t offset, void *dst, size_t len,
                           uint64_t *hash);

/* Resume from a checkpoint directory (ea_ckpt.h) written at any world size.
 *   spec NULL, "" or "latest": the newest complete, non-superseded
 *     checkpoint of dir that verifies (verify_full: re-hash every shard,
 *     else file sizes only) and whose state loads (its header and payload
 *     digests check out); each newer one passed over is counted in
 *     info->fallbacks and the first reason kept in info->why.
 *   anything else: that checkpoint (ea_ckpt_resolve: a step, a step
 *     directory name or a path), no fallback.
 * The whole state is read (ea_ckpt_reader) and loaded with
 * ea_trainer_state_load.  Returns 0 (t holds the checkpoint's state);
 * -ENOENT when dir holds no checkpoint at all (t unchanged: a fresh start);
 * -EINVAL when the checkpoint does not fit this trainer (model, batch, seed
 * or data differ: no fallback, an older one would not fit either);
 * -EBADMSG when checkpoints exist but none verifies and loads, or another
 * negative errno; err says why, naming the checkpoint.  info may be NULL. */
#define EA_TRAIN_CKPT_NAME_MAX 64 /* = EA_CKPT_NAME_MAX */
typedef struct {
  char name[EA_TRAIN_CKPT_NAME_MAX]; /* "step-<s>.gen-<g>" loaded */
  uint64_t step, generation;
  uint32_t world_size; /* of the job that wrote it */
  uint32_t fallbacks;  /* newer checkpoints passed over (damaged) */
  char why[512];       /* the first reason one was passed over; "" if none */
  double seconds;      /* verify + read + load */
} ea_trainer_resume_info;
int ea_trainer_resume(ea_trainer *t, const char *dir, const char *spec, bool verify_full,
                      ea_trainer_resume_info *info, char *err, size_t errlen);

#endif
