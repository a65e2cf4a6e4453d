/* test_train.c — the built-in trainer's promises: correct gradients, a
 * trajectory that does not depend on the world size, an exact partition of
 * every step's samples, a loss that falls on the default data, a state
 * that round-trips bit for bit and refuses what does not fit, and a replay
 * (any world size, in one process) that is exactly compute + the tcp
 * ring's sum + apply at every step, whatever its thread count.
 *
 * Randomised cases print their seed; EA_SEED=<n> replays one.  The default
 * corpus is /usr/share/common-licenses (EA_TRAIN_DATA overrides; the repo's
 * include/ is the fallback when neither exists).
 */
#include "ea_train.h"

#include "ea_comm.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

static uint64_t test_seed(const char *name) {
  const char *e = getenv("EA_SEED");
  uint64_t s = e ? strtoull(e, NULL, 0) : 0x5eed0000ull + (uint64_t)getpid();
  printf("%s: seed %llu (EA_SEED=%llu to replay)\n", name, (unsigned long long)s,
         (unsigned long long)s);
  fflush(stdout);
  return s;
}

static const char *default_data_path(void) {
  const char *e = getenv("EA_TRAIN_DATA");
  if (e && *e) return e;
  struct stat st;
  if (stat("/usr/share/common-licenses", &st) == 0) return "/usr/share/common-licenses";
  return "include";
}

static ea_data *open_default_data(void) {
  char err[512] = "";
  ea_data *d = NULL;
  int rc = ea_data_open(default_data_path(), &d, err, sizeof err);
  ck_assert_msg(rc == 0, "ea_data_open(%s): %d %s", default_data_path(), rc, err);
  return d;
}

/* ---- PRNG and data order ------------------------------------------------ */

START_TEST(test_rng_reference) {
  /* xoshiro256** reference outputs for state {1,2,3,4} (Blackman & Vigna's
   * xoshiro256starstar.c): the data order is specified by this generator. */
  ea_rng r = {{1, 2, 3, 4}};
  ck_assert_uint_eq(ea_rng_next(&r), 11520u);
  ck_assert_uint_eq(ea_rng_next(&r), 0u);
  ck_assert_uint_eq(ea_rng_next(&r), 1509978240u);

  ea_rng a, b, c;
  ea_rng_seed(&a, 42, EA_RNG_EPOCH, 3);
  ea_rng_seed(&b, 42, EA_RNG_EPOCH, 3);
  ea_rng_seed(&c, 42, EA_RNG_EPOCH, 4);
  int same_c = 0;
  for (int i = 0; i < 100; i++) {
    uint64_t x = ea_rng_next(&a);
    ck_assert_uint_eq(x, ea_rng_next(&b));
    same_c += x == ea_rng_next(&c);
  }
  ck_assert_int_lt(same_c, 2);

  /* below(): in range, and each of 7 buckets within 10% of its share */
  unsigned hist[7] = {0};
  for (int i = 0; i < 70000; i++) {
    uint32_t v = ea_rng_below(&a, 7);
    ck_assert_uint_lt(v, 7);
    hist[v]++;
  }
  for (int k = 0; k < 7; k++)
    ck_assert_msg(hist[k] > 9000 && hist[k] < 11000, "bucket %d: %u", k, hist[k]);
  for (int i = 0; i < 1000; i++) {
    float u = ea_rng_unit(&a);
    ck_assert(u >= 0.0f && u < 1.0f);
  }
}
END_TEST

START_TEST(test_rank_ranges_partition) {
  static const uint32_t batches[] = {1, 3, 7, 10, 64, 100, 1000, 4097};
  static const uint64_t steps[] = {0, 1, 17, 123456, 1ull << 40};
  for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++)
    for (size_t si = 0; si < sizeof steps / sizeof *steps; si++)
      for (uint32_t W = 1; W <= 8; W++) {
        uint32_t B = batches[bi];
        uint64_t s = steps[si], expect = s * B, total = 0;
        for (uint32_t r = 0; r < W; r++) {
          uint64_t b, e;
          ea_train_rank_range(s, B, r, W, &b, &e);
          ck_assert_msg(b == expect, "B=%u W=%u s=%llu rank %u starts at %llu, want %llu", B, W,
                        (unsigned long long)s, r, (unsigned long long)b,
                        (unsigned long long)expect);
          ck_assert_uint_le(b, e);
          uint64_t sz = e - b;
          ck_assert_msg(sz == B / W || sz == (B + W - 1) / W, "B=%u W=%u rank %u size %llu", B, W,
                        r, (unsigned long long)sz);
          expect = e;
          total += sz;
        }
        ck_assert_uint_eq(expect, (s + 1) * B);
        ck_assert_uint_eq(total, B);
      }
}
END_TEST

START_TEST(test_sampler_epochs_are_permutations) {
  uint64_t seed = test_seed("sampler");
  static const size_t sizes[] = {1, 2, 37, 1000};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    uint8_t *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)i;
    ea_data *d;
    ck_assert_int_eq(ea_data_from_memory(buf, n, &d), 0);
    ea_sampler *s1, *s2, *s3;
    ck_assert_int_eq(ea_sampler_new(d, seed, &s1), 0);
    ck_assert_int_eq(ea_sampler_new(d, seed, &s2), 0);
    ck_assert_int_eq(ea_sampler_new(d, seed + 1, &s3), 0);
    uint32_t *e0 = calloc(n, sizeof *e0);
    uint8_t *seen = calloc(n, 1);
    size_t differ_epoch = 0, differ_seed = 0;
    for (uint64_t e = 0; e < 4; e++) {
      memset(seen, 0, n);
      for (size_t i = 0; i < n; i++) {
        uint32_t p = ea_sampler_position(s1, e * n + i);
        ck_assert_uint_lt(p, n);
        ck_assert_msg(!seen[p], "n=%zu epoch %llu: position %u twice", n, (unsigned long long)e, p);
        seen[p] = 1;
        if (e == 0)
          e0[i] = p;
        else
          differ_epoch += e0[i] != p;
        differ_seed += p != ea_sampler_position(s3, e * n + i);
      }
    }
    if (n >= 37) {
      ck_assert_uint_gt(differ_epoch, n / 2);
      ck_assert_uint_gt(differ_seed, n);
    }
    /* Random access across epochs (the cache rebuilds) gives the same map. */
    ea_rng r;
    ea_rng_seed(&r, seed, 99, 0);
    for (int i = 0; i < 200; i++) {
      uint64_t g = ea_rng_next(&r) % (6 * n);
      ck_assert_uint_eq(ea_sampler_position(s2, g), ea_sampler_position(s1, g));
    }
    ea_sampler_free(s1);
    ea_sampler_free(s2);
    ea_sampler_free(s3);
    ea_data_close(d);
    free(e0);
    free(seen);
    free(buf);
  }
}
END_TEST

START_TEST(test_sample_context_padding) {
  ea_data *d;
  ck_assert_int_eq(ea_data_from_memory("abcdefgh", 8, &d), 0);
  uint8_t ctx[5], tgt;
  ea_data_sample(d, 0, 5, ctx, &tgt);
  ck_assert_int_eq(tgt, 'a');
  ck_assert(memcmp(ctx, "\0\0\0\0\0", 5) == 0);
  ea_data_sample(d, 2, 5, ctx, &tgt);
  ck_assert_int_eq(tgt, 'c');
  ck_assert(memcmp(ctx, "\0\0\0ab", 5) == 0);
  ea_data_sample(d, 7, 5, ctx, &tgt);
  ck_assert_int_eq(tgt, 'h');
  ck_assert(memcmp(ctx, "cdefg", 5) == 0);
  ea_data_close(d);
}
END_TEST

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(test_data_directory_walk) {
  char root[] = "/tmp/ea-train-data-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  char p[512], q[512];
#define P(rel) (snprintf(p, sizeof p, "%s/%s", root, rel), p)
  ck_assert_int_eq(mkdir(P("a"), 0755), 0);
  ck_assert_int_eq(mkdir(P("a/deeper"), 0755), 0);
  write_file(P("b.txt"), "BBB");
  write_file(P("a/y"), "Y");
  write_file(P("a/x"), "X1");
  write_file(P("a/deeper/z"), "Z");
  write_file(P("e-empty"), "");
  ck_assert_int_eq(symlink("b.txt", P("c-alias")), 0);    /* same inode as b.txt: skipped */
  ck_assert_int_eq(symlink("..", P("a/loop")), 0);        /* back to root: walked once */
  ck_assert_int_eq(symlink("a", P("d-dir-alias")), 0);    /* a again: skipped */
  ck_assert_int_eq(symlink("missing", P("dangling")), 0); /* skipped */
  ck_assert_int_eq(mkfifo(P("fifo"), 0644), 0);           /* never opened */

  char err[512] = "";
  ea_data *d = NULL;
  int rc = ea_data_open(root, &d, err, sizeof err);
  ck_assert_msg(rc == 0, "%d %s", rc, err);
  /* byte-wise path order: a/deeper/z < a/x < a/y < b.txt < e-empty */
  ck_assert_uint_eq(ea_data_size(d), 7);
  ck_assert_msg(memcmp(ea_data_bytes(d), "ZX1YBBB", 7) == 0, "got %.7s",
                (const char *)ea_data_bytes(d));
  ck_assert_uint_eq(ea_data_nfiles(d), 5);
  ck_assert_uint_ge(ea_data_nskipped(d), 3);
  uint64_t h = ea_data_hash(d);
  ea_data_close(d);

  /* Same bytes from memory: same fingerprint. */
  ck_assert_int_eq(ea_data_from_memory("ZX1YBBB", 7, &d), 0);
  ck_assert(ea_data_hash(d) == h);
  ea_data_close(d);

  /* A single file. */
  rc = ea_data_open(P("a/x"), &d, err, sizeof err);
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_eq(ea_data_size(d), 2);
  ea_data_close(d);

  /* Errors name the path. */
  rc = ea_data_open(P("nope"), &d, err, sizeof err);
  ck_assert_int_eq(rc, -ENOENT);
  ck_assert_ptr_nonnull(strstr(err, "nope"));
  snprintf(q, sizeof q, "%s/empty-dir", root);
  ck_assert_int_eq(mkdir(q, 0755), 0);
  rc = ea_data_open(q, &d, err, sizeof err);
  ck_assert_int_eq(rc, -ENODATA);
  ck_assert_ptr_nonnull(strstr(err, "empty-dir"));
  rc = ea_data_open(P("fifo"), &d, err, sizeof err);
  ck_assert_int_eq(rc, -EINVAL);

  static const char *const rm[] = {"a/deeper/z", "a/x",     "a/y",         "a/loop",   "b.txt",
                                   "e-empty",    "c-alias", "d-dir-alias", "dangling", "fifo"};
  for (size_t i = 0; i < sizeof rm / sizeof *rm; i++) unlink(P(rm[i]));
  rmdir(P("a/deeper"));
  rmdir(P("a"));
  rmdir(q);
  rmdir(root);
#undef P
}
END_TEST

/* ---- gradients ---------------------------------------------------------- */

/* An independent double-precision forward pass (naive loops, libm tanh)
 * reading the model's float params through its tensor table.  The finite
 * differences are taken on THIS function, in double with h = 1e-5, so their
 * error (~h² ≈ 1e-10 truncation, ~1e-11 rounding) is far below the float32
 * analytic gradient's own rounding: the comparison measures the backward
 * pass, not the noise of float32 central differences. */
typedef struct {
  const ea_model *m;
  const float *params;
  const double *override; /* if set, params as doubles (perturbed copy) */
} refmodel;

static double refp(const refmodel *r, size_t i) {
  return r->override ? r->override[i] : r->params[i];
}

static double ref_loss(const refmodel *r, const uint8_t *ctx, const uint8_t *tgt, int rows) {
  const ea_model_dims *d = ea_model_get_dims(r->m);
  const int C = (int)d->context, E = (int)d->embed_dim, H = (int)d->hidden, L = (int)d->layers;
  const int in0 = C * E;
  const ea_tensor *emb = ea_model_tensor(r->m, 0);
  double *x = malloc(sizeof(double) * (size_t)(in0 > H ? in0 : H));
  double *y = malloc(sizeof(double) * (size_t)(H > EA_VOCAB ? H : EA_VOCAB));
  double loss = 0;
  for (int s = 0; s < rows; s++) {
    for (int c = 0; c < C; c++)
      for (int k = 0; k < E; k++)
        x[c * E + k] = refp(r, emb->offset + (size_t)ctx[s * C + c] * E + k);
    int in = in0;
    for (int l = 0; l < L; l++) {
      const ea_tensor *w = ea_model_tensor(r->m, 1 + 2 * (size_t)l),
                      *b = ea_model_tensor(r->m, 2 + 2 * (size_t)l);
      for (int j = 0; j < H; j++) {
        double a = refp(r, b->offset + j);
        for (int i = 0; i < in; i++) a += x[i] * refp(r, w->offset + (size_t)i * H + j);
        double u = 0.7978845608028654 * (a + 0.044715 * a * a * a);
        y[j] = 0.5 * a * (1 + tanh(u));
      }
      memcpy(x, y, sizeof(double) * H);
      in = H;
    }
    const ea_tensor *ow = ea_model_tensor(r->m, 1 + 2 * (size_t)L),
                    *ob = ea_model_tensor(r->m, 2 + 2 * (size_t)L);
    double mx = -INFINITY;
    for (int k = 0; k < EA_VOCAB; k++) {
      double z = refp(r, ob->offset + k);
      for (int i = 0; i < H; i++) z += x[i] * refp(r, ow->offset + (size_t)i * EA_VOCAB + k);
      y[k] = z;
      if (z > mx) mx = z;
    }
    double sum = 0;
    for (int k = 0; k < EA_VOCAB; k++) sum += exp(y[k] - mx);
    loss += log(sum) - (y[tgt[s]] - mx);
  }
  free(x);
  free(y);
  return loss;
}

START_TEST(test_gradient_check) {
  uint64_t seed = test_seed("gradcheck");
  ea_model_dims dims = {.context = 3, .embed_dim = 4, .hidden = 6, .layers = 2};
  const int rows = 5;
  char err[256];
  ea_model *m;
  ck_assert_int_eq(ea_model_new(&dims, rows, &m, err, sizeof err), 0);
  ea_model_init(m, seed);
  ea_rng r;
  ea_rng_seed(&r, seed, 77, 0);
  /* Non-zero biases and a logit scale well away from uniform, so every
   * tensor's gradient is exercised at a generic point. */
  const size_t P = ea_model_nparams(m);
  float *params = ea_model_params(m);
  for (size_t i = 0; i < P; i++) params[i] += 0.3f * (2 * ea_rng_unit(&r) - 1);
  uint8_t ctx[5 * 3], tgt[5];
  for (int i = 0; i < rows * 3; i++)
    ctx[i] = (uint8_t)(ea_rng_below(&r, 6) * 40); /* repeats: scatter-add */
  for (int i = 0; i < rows; i++) tgt[i] = (uint8_t)ea_rng_below(&r, 256);

  ea_model_zero_grads(m);
  double loss = 0;
  ck_assert_int_eq(ea_model_forward_backward(m, ctx, tgt, rows, &loss), 0);
  const float *g = ea_model_grads(m);

  refmodel ref = {.m = m, .params = params};
  double ref0 = ref_loss(&ref, ctx, tgt, rows);
  ck_assert_msg(fabs(loss - ref0) / ref0 < 1e-5, "forward loss %.9g vs double reference %.9g", loss,
                ref0);

  double *pd = malloc(P * sizeof *pd);
  for (size_t i = 0; i < P; i++) pd[i] = params[i];
  ref.override = pd;
  const double h = 1e-5;
  for (size_t ti = 0; ti < ea_model_ntensors(m); ti++) {
    const ea_tensor *t = ea_model_tensor(m, ti);
    /* Entries to check: all of a small tensor, else 48 at random; for the
     * embedding only rows some context uses (others have zero gradient). */
    size_t idx[64], n = 0;
    if (ti == 0) {
      for (int k = 0; k < 48; k++) {
        uint8_t byte = ctx[ea_rng_below(&r, rows * 3)];
        idx[n++] = (size_t)byte * dims.embed_dim + ea_rng_below(&r, dims.embed_dim);
      }
    } else if (t->count <= 64) {
      for (size_t k = 0; k < t->count; k++) idx[n++] = k;
    } else {
      for (int k = 0; k < 48; k++) idx[n++] = ea_rng_below(&r, t->count);
    }
    double num[64], gmax = 0;
    for (size_t k = 0; k < n; k++) {
      size_t i = t->offset + idx[k];
      pd[i] = (double)params[i] + h;
      double lp = ref_loss(&ref, ctx, tgt, rows);
      pd[i] = (double)params[i] - h;
      double lm = ref_loss(&ref, ctx, tgt, rows);
      pd[i] = params[i];
      num[k] = (lp - lm) / (2 * h);
      if (fabs(num[k]) > gmax) gmax = fabs(num[k]);
    }
    ck_assert_msg(gmax > 1e-6, "%s: numeric gradient vanishes, check is vacuous", t->name);
    double worst = 0;
    size_t worst_k = 0;
    for (size_t k = 0; k < n; k++) {
      double a = g[t->offset + idx[k]];
      /* relative to the entry, floored at 1e-3 of the tensor's largest so
       * entries that are ~0 by accident do not divide by ~0 */
      double denom = fmax(fmax(fabs(a), fabs(num[k])), 1e-3 * gmax);
      double e = fabs(a - num[k]) / denom;
      if (e > worst) worst = e, worst_k = k;
    }
    printf("gradcheck %-6s %3zu entries, max rel err %.2e\n", t->name, n, worst);
    /* 2e-3, not the ~1e-2 float32 central differences would need: against
     * the double reference the worst of 40 seeds was 2.7e-4 (float32
     * rounding of the analytic sums), while a 0.1% error in dlogits already
     * shows as 2–5e-3. */
    ck_assert_msg(worst < 2e-3, "%s[%zu]: analytic %.9g numeric %.9g (rel %.3g)", t->name,
                  idx[worst_k], (double)g[t->offset + idx[worst_k]], num[worst_k], worst);
  }
  free(pd);

  /* Sums accumulate: rows [0,2) + [2,5) in two calls = [0,5) in one. */
  float *whole = malloc(P * sizeof *whole);
  memcpy(whole, g, P * sizeof *whole);
  ea_model_zero_grads(m);
  double l2 = 0;
  ck_assert_int_eq(ea_model_forward_backward(m, ctx, tgt, 2, &l2), 0);
  ck_assert_int_eq(ea_model_forward_backward(m, ctx + 2 * 3, tgt + 2, 3, &l2), 0);
  ck_assert(fabs(l2 - loss) < 1e-9 * fabs(loss) + 1e-9);
  for (size_t i = 0; i < P; i++) ck_assert(fabsf(g[i] - whole[i]) <= 1e-5f * (1 + fabsf(whole[i])));
  free(whole);

  ck_assert_int_eq(ea_model_forward_backward(m, ctx, tgt, rows + 1, &l2), -EINVAL);
  ea_model_free(m);
}
END_TEST

/* ---- optimizer ---------------------------------------------------------- */

START_TEST(test_adamw_matches_reference) {
  uint64_t seed = test_seed("adamw");
  ea_rng r;
  ea_rng_seed(&r, seed, 5, 0);
  enum { N = 11 }; /* not a multiple of 4: vector body and scalar tail */
  float p[N], g[N], m[N] = {0}, v[N] = {0};
  double rp[N], rm[N] = {0}, rv[N] = {0};
  for (int i = 0; i < N; i++) rp[i] = p[i] = 2 * ea_rng_unit(&r) - 1;
  ea_adamw_args a = {.lr = 0.01f,
                     .beta1 = 0.9f,
                     .beta2 = 0.999f,
                     .eps = 1e-8f,
                     .weight_decay = 0.1f,
                     .grad_scale = 0.5f};
  for (uint64_t t = 1; t <= 5; t++) {
    for (int i = 0; i < N; i++) g[i] = 2 * ea_rng_unit(&r) - 1;
    a.t = t;
    ea_adamw_update(p, g, m, v, N, &a);
    /* PyTorch AdamW, in double */
    for (int i = 0; i < N; i++) {
      double gi = (double)g[i] * 0.5;
      rp[i] *= 1 - 0.01 * 0.1;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.999 * rv[i] + 0.001 * gi * gi;
      double bc1 = 1 - pow(0.9, (double)t), bc2 = 1 - pow(0.999, (double)t);
      rp[i] -= 0.01 / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + 1e-8);
    }
  }
  for (int i = 0; i < N; i++)
    ck_assert_msg(fabs(p[i] - rp[i]) < 1e-5 * (1 + fabs(rp[i])), "p[%d] %.9g vs %.9g", i, p[i],
                  rp[i]);

  /* The vector lanes and the scalar tail give the same bits per element. */
  float p1[N], m1[N], v1[N], p2[N], m2[N], v2[N];
  memcpy(p1, p, sizeof p);
  memcpy(p2, p, sizeof p);
  memcpy(m1, m, sizeof m);
  memcpy(m2, m, sizeof m);
  memcpy(v1, v, sizeof v);
  memcpy(v2, v, sizeof v);
  a.t = 6;
  ea_adamw_update(p1, g, m1, v1, N, &a);
  for (int i = 0; i < N; i++) ea_adamw_update(p2 + i, g + i, m2 + i, v2 + i, 1, &a);
  ck_assert(memcmp(p1, p2, sizeof p1) == 0 && memcmp(m1, m2, sizeof m1) == 0 &&
            memcmp(v1, v2, sizeof v1) == 0);
}
END_TEST

START_TEST(test_lr_schedule) {
  ea_train_config c;
  ea_train_config_default(&c);
  c.lr = 1e-2;
  c.warmup_steps = 10;
  c.steps = 110;
  ck_assert(fabs(ea_train_lr(&c, 0) - 1e-3) < 1e-15);
  ck_assert(fabs(ea_train_lr(&c, 4) - 5e-3) < 1e-15);
  ck_assert(fabs(ea_train_lr(&c, 9) - 1e-2) < 1e-15);
  ck_assert(fabs(ea_train_lr(&c, 10) - 1e-2) < 1e-15);
  ck_assert(fabs(ea_train_lr(&c, 60) - 1e-2 * 0.55) < 1e-14); /* cos midpoint */
  ck_assert(fabs(ea_train_lr(&c, 110) - 1e-3) < 1e-15);
  ck_assert(fabs(ea_train_lr(&c, 5000) - 1e-3) < 1e-15);
  for (uint64_t s = 10; s < 110; s++) {
    double x = (double)(s - 10) / 100, want = 1e-2 * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI * x)));
    ck_assert_msg(fabs(ea_train_lr(&c, s) - want) < 1e-15, "step %llu", (unsigned long long)s);
    ck_assert(ea_train_lr(&c, s + 1) <= ea_train_lr(&c, s));
  }
  c.warmup_steps = 0;
  ck_assert(fabs(ea_train_lr(&c, 0) - 1e-2) < 1e-15);
}
END_TEST

START_TEST(test_config_from_job_file) {
  ea_config cfg;
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.train.model, sizeof cfg.train.model, "byte-mlp");
  cfg.train.context = 8;
  cfg.train.embed_dim = 12;
  cfg.train.hidden = 64;
  cfg.train.layers = 3;
  cfg.train.steps = 500;
  cfg.train.warmup_steps = 20;
  cfg.train.lr = 1e-3;
  cfg.train.weight_decay = 0.05;
  cfg.distributed.global_batch = 48;
  cfg.distributed.micro_batch = 8;
  cfg.experiment.seed = 99;
  ea_train_config c;
  char err[256] = "";
  ck_assert_int_eq(ea_train_config_from(&c, &cfg, err, sizeof err), 0);
  ck_assert_uint_eq(c.model.context, 8);
  ck_assert_uint_eq(c.model.layers, 3);
  ck_assert_uint_eq(c.global_batch, 48);
  ck_assert_uint_eq(c.micro_batch, 8);
  ck_assert_uint_eq(c.seed, 99);
  ck_assert(c.lr == 1e-3 && c.weight_decay == 0.05);
  cfg.train.layers = 0;
  ck_assert_int_eq(ea_train_config_from(&c, &cfg, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "train.layers"));
  cfg.train.layers = 2;
  snprintf(cfg.train.model, sizeof cfg.train.model, "gpt-17");
  ck_assert_int_eq(ea_train_config_from(&c, &cfg, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "train.model"));
}
END_TEST

/* ---- trainer ------------------------------------------------------------ */

static ea_trainer *make_trainer(const ea_train_config *c, const ea_data *d) {
  char err[256] = "";
  ea_trainer *t = NULL;
  int rc = ea_trainer_new(c, d, &t, err, sizeof err);
  ck_assert_msg(rc == 0, "ea_trainer_new: %d %s", rc, err);
  return t;
}

/* One step of `world` simulated ranks: each computes its sum, the sums are
 * added in rank order (what a deterministic allreduce delivers), and every
 * rank applies the same total. */
static double sim_step(ea_trainer **ranks, uint32_t world, float *acc) {
  size_t n;
  ea_trainer_grad_buffer(ranks[0], &n);
  memset(acc, 0, n * sizeof *acc);
  for (uint32_t r = 0; r < world; r++) {
    ck_assert_int_eq(ea_trainer_compute(ranks[r], r, world), 0);
    const float *g = ea_trainer_grad_buffer(ranks[r], NULL);
    for (size_t i = 0; i < n; i++) acc[i] += g[i];
  }
  double loss = 0;
  for (uint32_t r = 0; r < world; r++) {
    memcpy(ea_trainer_grad_buffer(ranks[r], NULL), acc, n * sizeof *acc);
    ea_train_stats st;
    ck_assert_int_eq(ea_trainer_apply(ranks[r], &st), 0);
    if (r == 0)
      loss = st.loss;
    else
      ck_assert(st.loss == loss);
  }
  for (uint32_t r = 1; r < world; r++)
    ck_assert_msg(ea_trainer_params_digest(ranks[r]) == ea_trainer_params_digest(ranks[0]),
                  "rank %u params differ from rank 0 after the same update", r);
  return loss;
}

/* distributed.gradient_accumulation_steps: the rank's share in that many
 * passes; the summed gradient is the one a single pass gives (up to float
 * summation order), and the buffers hold the largest pass (world 1). */
START_TEST(test_gradient_accumulation_steps) {
  ea_config cfg;
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.train.model, sizeof cfg.train.model, "byte-mlp");
  cfg.train.context = 8, cfg.train.embed_dim = 12, cfg.train.hidden = 32, cfg.train.layers = 2;
  cfg.train.steps = 10, cfg.train.lr = 1e-3;
  cfg.distributed.global_batch = 48, cfg.distributed.micro_batch = 48;
  cfg.distributed.gradient_accumulation_steps = 8;
  ea_train_config acc, one;
  char err[256] = "";
  ck_assert_int_eq(ea_train_config_from(&acc, &cfg, err, sizeof err), 0);
  ck_assert_uint_eq(acc.accum_steps, 8);
  ck_assert_uint_eq(acc.micro_batch, 6); /* ⌈48 / 8⌉ */
  cfg.distributed.gradient_accumulation_steps = 0;
  ck_assert_int_eq(ea_train_config_from(&one, &cfg, err, sizeof err), 0);
  ck_assert_uint_eq(one.accum_steps, 0);
  ea_data *d = open_default_data();
  for (uint32_t world = 1; world <= 4; world *= 2) {
    ea_trainer *a = make_trainer(&acc, d), *b = make_trainer(&one, d);
    ck_assert_int_eq(ea_trainer_compute(a, 0, world), 0);
    ck_assert_int_eq(ea_trainer_compute(b, 0, world), 0);
    size_t n;
    const float *ga = ea_trainer_grad_buffer(a, &n), *gb = ea_trainer_grad_buffer(b, NULL);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(fabsf(ga[i] - gb[i]) <= 1e-4f * (1.0f + fabsf(gb[i])),
                    "world %u [%zu]: %g vs %g", world, i, ga[i], gb[i]);
    ea_trainer_free(a);
    ea_trainer_free(b);
  }
  ea_data_close(d);
}
END_TEST

START_TEST(test_world_size_invariance) {
  ea_data *d = open_default_data();
  ea_train_config c;
  ea_train_config_default(&c);
  c.global_batch = 64;
  c.micro_batch = 64; /* W=1: one micro-batch */
  c.warmup_steps = 10;
  ea_trainer *one = make_trainer(&c, d);
  c.micro_batch = 5; /* W=3: 21/21/22 samples in micro-batches of 5 */
  ea_trainer *three[3];
  for (int r = 0; r < 3; r++) three[r] = make_trainer(&c, d);
  ck_assert(ea_trainer_params_digest(one) == ea_trainer_params_digest(three[0]));

  size_t n;
  ea_trainer_grad_buffer(one, &n);
  float *acc = malloc(n * sizeof *acc);
  double worst = 0, first = 0, last = 0;
  for (int s = 0; s < 50; s++) {
    ea_train_stats st;
    ck_assert_int_eq(ea_trainer_step_local(one, &st), 0);
    double l3 = sim_step(three, 3, acc);
    double rel = fabs(l3 - st.loss) / st.loss;
    if (rel > worst) worst = rel;
    ck_assert_msg(rel < 1e-4, "step %d: W=1 loss %.9g, W=3 loss %.9g (rel %.3g)", s, st.loss, l3,
                  rel);
    if (s == 0) first = st.loss;
    last = st.loss;
  }
  printf("W=1 vs W=3 over 50 steps: loss %.4f -> %.4f, max rel diff %.2e\n", first, last, worst);
  ck_assert_uint_eq(ea_trainer_step(one), 50);
  ck_assert_uint_eq(ea_trainer_step(three[2]), 50);
  ea_trainer_free(one);
  for (int r = 0; r < 3; r++) ea_trainer_free(three[r]);
  free(acc);
  ea_data_close(d);
}
END_TEST

START_TEST(test_more_ranks_than_samples) {
  /* W > B: some ranks own no sample and contribute zeros; the trajectory is
   * still W=1's. */
  ea_data *d = open_default_data();
  ea_train_config c;
  ea_train_config_default(&c);
  c.model = (ea_model_dims){.context = 4, .embed_dim = 4, .hidden = 16, .layers = 1};
  c.global_batch = 5;
  c.micro_batch = 2;
  ea_trainer *one = make_trainer(&c, d);
  ea_trainer *seven[7];
  for (int r = 0; r < 7; r++) seven[r] = make_trainer(&c, d);
  size_t n;
  ea_trainer_grad_buffer(one, &n);
  float *acc = malloc(n * sizeof *acc);
  for (int s = 0; s < 5; s++) {
    ea_train_stats st;
    ck_assert_int_eq(ea_trainer_step_local(one, &st), 0);
    double l7 = sim_step(seven, 7, acc);
    ck_assert_msg(fabs(l7 - st.loss) < 1e-5 * st.loss, "step %d: %.9g vs %.9g", s, l7, st.loss);
  }
  ck_assert_int_eq(ea_trainer_compute(one, 7, 7), -EINVAL);
  ck_assert_int_eq(ea_trainer_compute(one, 0, 0), -EINVAL);
  ea_trainer_free(one);
  for (int r = 0; r < 7; r++) ea_trainer_free(seven[r]);
  free(acc);
  ea_data_close(d);
}
END_TEST

START_TEST(test_replay_is_the_ring) {
  /* train/'s replay: a step at world size W is every rank's compute, the
   * tcp ring's sum (ea_comm_ring_reduce) and apply, bit for bit; threads
   * change nothing; W=1 is ea_trainer_step_local. */
  ea_data *d = open_default_data();
  ea_train_config c;
  ea_train_config_default(&c);
  c.model = (ea_model_dims){.context = 4, .embed_dim = 4, .hidden = 16, .layers = 1};
  c.global_batch = 30;
  c.micro_batch = 4;
  ea_train_replay *one, *two;
  char err[200];
  ck_assert_msg(ea_train_replay_new(&c, d, 5, 1, &one, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(ea_train_replay_new(&c, d, 5, 2, &two, err, sizeof err) == 0, "%s", err);
  ea_trainer *local = make_trainer(&c, d), *manual[5];
  for (int r = 0; r < 5; r++) manual[r] = make_trainer(&c, d);
  size_t n;
  ea_trainer_grad_buffer(local, &n);
  float *parts[5], *sum = malloc(n * sizeof *sum);
  for (int r = 0; r < 5; r++) parts[r] = malloc(n * sizeof(float));
  const uint32_t worlds[] = {1, 3, 3, 2, 5, 1, 4, 4, 2, 3};
  for (size_t s = 0; s < sizeof worlds / sizeof worlds[0]; s++) {
    const uint32_t W = worlds[s];
    ea_train_stats a, b, m;
    ck_assert_int_eq(ea_train_replay_step(one, W, &a), 0);
    ck_assert_int_eq(ea_train_replay_step(two, W, &b), 0);
    for (uint32_t r = 0; r < W; r++) {
      ck_assert_int_eq(ea_trainer_compute(manual[r], r, W), 0);
      memcpy(parts[r], ea_trainer_grad_buffer(manual[r], NULL), n * sizeof(float));
    }
    ck_assert_int_eq(
        ea_comm_ring_reduce(sum, (const void *const *)parts, W, n, EA_COMM_F32, EA_COMM_SUM), 0);
    for (int r = 0; r < 5; r++) {
      memcpy(ea_trainer_grad_buffer(manual[r], NULL), sum, n * sizeof(float));
      ck_assert_int_eq(ea_trainer_apply(manual[r], r == 0 ? &m : NULL), 0);
    }
    const uint64_t da = ea_trainer_params_digest(ea_train_replay_trainer(one));
    ck_assert_msg(da == ea_trainer_params_digest(ea_train_replay_trainer(two)),
                  "step %zu (W=%u): 1 and 2 threads differ", s, W);
    ck_assert_msg(da == ea_trainer_params_digest(manual[0]),
                  "step %zu (W=%u): the replay is not compute + ring sum + apply", s, W);
    ck_assert(a.loss == b.loss && a.loss == m.loss);
  }
  ck_assert_uint_eq(ea_trainer_step(ea_train_replay_trainer(one)), 10);
  ck_assert_int_eq(ea_train_replay_step(one, 0, NULL), -EINVAL);
  ck_assert_int_eq(ea_train_replay_step(one, 6, NULL), -EINVAL);
  ea_train_replay_free(two);
  /* W=1 throughout is the local step, and a loaded state replays on */
  ea_train_replay_free(one);
  ck_assert_int_eq(ea_train_replay_new(&c, d, 1, 4, &one, err, sizeof err), 0);
  for (int s = 0; s < 6; s++) {
    ea_train_stats a, l;
    ck_assert_int_eq(ea_train_replay_step(one, 1, &a), 0);
    ck_assert_int_eq(ea_trainer_step_local(local, &l), 0);
    ck_assert(a.loss == l.loss);
    ck_assert(ea_trainer_params_digest(ea_train_replay_trainer(one)) ==
              ea_trainer_params_digest(local));
  }
  uint64_t size = ea_trainer_state_size(local);
  uint8_t *state = malloc(size);
  ck_assert_int_eq(ea_trainer_state_serialize(manual[0], state, size), 0);
  ck_assert_msg(ea_train_replay_load_state(one, state, size, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(ea_trainer_step(ea_train_replay_trainer(one)), 10);
  ck_assert(ea_trainer_params_digest(ea_train_replay_trainer(one)) ==
            ea_trainer_params_digest(manual[0]));
  free(state);
  ea_train_replay_free(one);
  ea_trainer_free(local);
  for (int r = 0; r < 5; r++) {
    ea_trainer_free(manual[r]);
    free(parts[r]);
  }
  free(sum);
  ea_data_close(d);
}
END_TEST

START_TEST(test_loss_decreases) {
  ea_data *d = open_default_data();
  ea_train_config c;
  ea_train_config_default(&c); /* the defaults the demo runs */
  ea_trainer *t = make_trainer(&c, d);
  double head = 0, tail = 0;
  for (int s = 0; s < 200; s++) {
    ea_train_stats st;
    ck_assert_int_eq(ea_trainer_step_local(t, &st), 0);
    ck_assert(isfinite(st.loss));
    if (s < 5) head += st.loss / 5;
    if (s >= 180) tail += st.loss / 20;
    if (s % 50 == 0 || s == 199)
      printf("step %3d loss %.4f lr %.5f |g| %.3f\n", s, st.loss, st.lr, st.grad_norm);
  }
  printf("mean loss: steps 0-4 %.4f, steps 180-199 %.4f\n", head, tail);
  /* ln 256 = 5.545 at init; the default run averages 2.51 over steps 180–199. */
  ck_assert_msg(head > 5.0 && head < 5.7, "initial loss %.4f, want ≈ ln 256", head);
  ck_assert_msg(tail < 3.0, "loss after 200 steps %.4f, want < 3.0 nats/byte", tail);
  ea_trainer_free(t);
  ea_data_close(d);
}
END_TEST

START_TEST(test_apply_refuses_non_finite) {
  ea_data *d;
  ck_assert_int_eq(ea_data_from_memory("the quick brown fox jumps over the lazy dog", 43, &d), 0);
  ea_train_config c;
  ea_train_config_default(&c);
  c.model = (ea_model_dims){.context = 4, .embed_dim = 4, .hidden = 8, .layers = 1};
  c.global_batch = 8;
  c.micro_batch = 8;
  ea_trainer *t = make_trainer(&c, d);
  ck_assert_int_eq(ea_trainer_compute(t, 0, 1), 0);
  size_t n;
  float *g = ea_trainer_grad_buffer(t, &n);
  uint64_t before = ea_trainer_params_digest(t);
  g[n - 1] = NAN;
  ck_assert_int_eq(ea_trainer_apply(t, NULL), -EDOM);
  g[n - 1] = 1.0f;
  g[3] = INFINITY;
  ck_assert_int_eq(ea_trainer_apply(t, NULL), -EDOM);
  ck_assert_uint_eq(ea_trainer_step(t), 0);
  ck_assert(ea_trainer_params_digest(t) == before);
  ea_trainer_free(t);
  ea_data_close(d);
}
END_TEST

/* ---- state -------------------------------------------------------------- */

static void small_config(ea_train_config *c) {
  ea_train_config_default(c);
  c->model = (ea_model_dims){.context = 8, .embed_dim = 8, .hidden = 32, .layers = 2};
  c->global_batch = 16;
  c->micro_batch = 4;
  c->warmup_steps = 2;
  c->steps = 100;
}

START_TEST(test_state_roundtrip) {
  uint64_t seed = test_seed("state");
  ea_data *d = open_default_data();
  ea_train_config c;
  small_config(&c);
  ea_trainer *a = make_trainer(&c, d);
  for (int s = 0; s < 7; s++) ck_assert_int_eq(ea_trainer_step_local(a, NULL), 0);

  const uint64_t size = ea_trainer_state_size(a);
  const size_t P = ea_model_nparams(ea_trainer_model(a));
  ck_assert_uint_eq(size, EA_STATE_HEADER_BYTES + 12 * P);
  uint8_t *buf = malloc(size), *buf2 = malloc(size), *piece = malloc(size);
  ck_assert_int_eq(ea_trainer_state_serialize(a, buf, size - 1), -ENOSPC);
  ck_assert_int_eq(ea_trainer_state_serialize(a, buf, size), 0);

  /* The tensor table tiles the buffer, and params/ entries are the params. */
  uint64_t at = 0;
  for (size_t i = 0; i < ea_trainer_state_ntensors(a); i++) {
    ea_state_tensor st;
    ck_assert_int_eq(ea_trainer_state_tensor(a, i, &st), 0);
    ck_assert_msg(st.offset == at, "%s at %llu, want %llu", st.name, (unsigned long long)st.offset,
                  (unsigned long long)at);
    ck_assert_uint_eq(st.bytes, st.shape[0] * st.shape[1] * (strcmp(st.dtype, "u64") ? 4 : 8));
    at += st.bytes;
  }
  ck_assert_uint_eq(at, size);
  ea_state_tensor st1;
  ck_assert_int_eq(ea_trainer_state_tensor(a, 1, &st1), 0);
  ck_assert_str_eq(st1.name, "params/embed");
  ck_assert(memcmp(buf + st1.offset, ea_model_params(ea_trainer_model(a)), st1.bytes) == 0);
  ea_state_tensor stx;
  ck_assert_int_eq(ea_trainer_state_tensor(a, ea_trainer_state_ntensors(a), &stx), -ERANGE);

  /* Any byte range (a shard) equals the same slice of the whole. */
  ea_rng r;
  ea_rng_seed(&r, seed, 11, 0);
  for (int k = 0; k < 50; k++) {
    uint64_t off = ea_rng_next(&r) % size, len = ea_rng_next(&r) % (size - off + 1);
    if (k == 0) off = 100, len = 200; /* straddles header and params */
    ck_assert_int_eq(ea_trainer_state_read(a, off, piece, len), 0);
    ck_assert_msg(memcmp(piece, buf + off, len) == 0, "range [%llu,+%llu)", (unsigned long long)off,
                  (unsigned long long)len);
  }
  ck_assert_int_eq(ea_trainer_state_read(a, size - 3, piece, 4), -ERANGE);

  ea_state_info info;
  char err[256] = "";
  ck_assert_int_eq(ea_state_parse(buf, EA_STATE_HEADER_BYTES, false, &info, err, sizeof err), 0);
  ck_assert_uint_eq(info.step, 7);
  ck_assert_uint_eq(info.nparams, P);
  ck_assert_uint_eq(info.total_bytes, size);
  ck_assert_uint_eq(info.dims.hidden, 32);

  /* Load into a fresh trainer (same config, still at step 0): bit-identical
   * state. */
  ea_trainer *b = make_trainer(&c, d);
  ck_assert_int_eq(ea_trainer_state_load(b, buf, size, err, sizeof err), 0);
  ck_assert_uint_eq(ea_trainer_step(b), 7);
  ck_assert_int_eq(ea_trainer_state_serialize(b, buf2, size), 0);
  ck_assert(memcmp(buf, buf2, size) == 0);
  ck_assert(ea_trainer_params_digest(a) == ea_trainer_params_digest(b));

  /* ... and identical next steps. */
  for (int s = 0; s < 3; s++) {
    ea_train_stats sa, sb;
    ck_assert_int_eq(ea_trainer_step_local(a, &sa), 0);
    ck_assert_int_eq(ea_trainer_step_local(b, &sb), 0);
    ck_assert(sa.loss == sb.loss && sa.step == sb.step && sa.lr == sb.lr);
    ck_assert(ea_trainer_params_digest(a) == ea_trainer_params_digest(b));
  }
  ck_assert_int_eq(ea_trainer_state_serialize(a, buf, size), 0);
  ck_assert_int_eq(ea_trainer_state_serialize(b, buf2, size), 0);
  ck_assert(memcmp(buf, buf2, size) == 0);

  ea_trainer_free(a);
  ea_trainer_free(b);
  free(buf);
  free(buf2);
  free(piece);
  ea_data_close(d);
}
END_TEST

static void expect_reject(ea_trainer *t, const uint8_t *buf, size_t len, int want_rc,
                          const char *want_field) {
  char err[256] = "";
  uint64_t before = ea_trainer_params_digest(t);
  uint64_t step = ea_trainer_step(t);
  int rc = ea_trainer_state_load(t, buf, len, err, sizeof err);
  ck_assert_msg(rc == want_rc, "want %d (%s), got %d: %s", want_rc, want_field, rc, err);
  ck_assert_msg(strstr(err, want_field) != NULL, "error \"%s\" does not name %s", err, want_field);
  ck_assert(ea_trainer_params_digest(t) == before && ea_trainer_step(t) == step);
}

/* Rewrite the header digest after editing a field: a well-formed state of
 * another configuration, not a corrupted one. */
static void reseal(uint8_t *buf) {
  /* XXH3-64 of bytes [0,120) at offset 120, little-endian */
  uint64_t h = XXH3_64bits_dispatch(buf, 120);
  for (int i = 0; i < 8; i++) buf[120 + i] = (uint8_t)(h >> (8 * i));
}

START_TEST(test_state_rejects) {
  ea_data *d = open_default_data();
  ea_train_config c;
  small_config(&c);
  ea_trainer *a = make_trainer(&c, d);
  ck_assert_int_eq(ea_trainer_step_local(a, NULL), 0);
  const uint64_t size = ea_trainer_state_size(a);
  uint8_t *good = malloc(size), *bad = malloc(size);
  ck_assert_int_eq(ea_trainer_state_serialize(a, good, size), 0);
  ea_trainer *t = make_trainer(&c, d);

#define FRESH() memcpy(bad, good, size)
  FRESH(), bad[0] ^= 0xff;
  expect_reject(t, bad, size, -EBADMSG, "magic");
  FRESH(), bad[8] = 9;
  expect_reject(t, bad, size, -EPROTONOSUPPORT, "version");
  FRESH(), bad[28] ^= 0x01; /* hidden, header digest not updated: corruption */
  expect_reject(t, bad, size, -EBADMSG, "header_digest");
  FRESH(), bad[100] = 1, reseal(bad);
  expect_reject(t, bad, size, -EBADMSG, "reserved");
  FRESH(), bad[40] ^= 0x04, reseal(bad);
  expect_reject(t, bad, size, -EBADMSG, "nparams");
  FRESH(), bad[size - 5] ^= 0x10;
  expect_reject(t, bad, size, -EBADMSG, "payload_digest");
  expect_reject(t, good, size - 4, -EMSGSIZE, "length");
  expect_reject(t, good, 100, -EMSGSIZE, "length");
  FRESH(), bad[36] = 32, bad[37] = 0, reseal(bad); /* global_batch 16 → 32 */
  expect_reject(t, bad, size, -EINVAL, "global_batch: state has 32, trainer has 16");
  FRESH(), bad[56] ^= 1, reseal(bad); /* seed */
  expect_reject(t, bad, size, -EINVAL, "seed");

  /* A state of another model shape: named dimension. */
  ea_train_config c2 = c;
  c2.model.hidden = 48;
  ea_trainer *other = make_trainer(&c2, d);
  uint8_t *obuf = malloc(ea_trainer_state_size(other));
  ck_assert_int_eq(ea_trainer_state_serialize(other, obuf, ea_trainer_state_size(other)), 0);
  expect_reject(t, obuf, ea_trainer_state_size(other), -EINVAL,
                "hidden: state has 48, trainer has 32");

  /* Same shape, different data (same length): data_hash. */
  size_t n = ea_data_size(d);
  uint8_t *alt = malloc(n);
  memcpy(alt, ea_data_bytes(d), n);
  alt[n / 2] ^= 0x20;
  ea_data *d2;
  ck_assert_int_eq(ea_data_from_memory(alt, n, &d2), 0);
  ea_trainer *t2 = make_trainer(&c, d2);
  expect_reject(t2, good, size, -EINVAL, "data_hash");

  /* The good one still loads. */
  char err[256];
  ck_assert_int_eq(ea_trainer_state_load(t, good, size, err, sizeof err), 0);
  ck_assert(ea_trainer_params_digest(t) == ea_trainer_params_digest(a));
#undef FRESH
  ea_trainer_free(a);
  ea_trainer_free(t);
  ea_trainer_free(t2);
  ea_trainer_free(other);
  ea_data_close(d2);
  ea_data_close(d);
  free(alt);
  free(obuf);
  free(good);
  free(bad);
}
END_TEST

static Suite *train_suite(void) {
  Suite *s = suite_create("train");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_rng_reference);
  tcase_add_test(tc, test_rank_ranges_partition);
  tcase_add_test(tc, test_sampler_epochs_are_permutations);
  tcase_add_test(tc, test_sample_context_padding);
  tcase_add_test(tc, test_data_directory_walk);
  tcase_add_test(tc, test_gradient_check);
  tcase_add_test(tc, test_adamw_matches_reference);
  tcase_add_test(tc, test_lr_schedule);
  tcase_add_test(tc, test_config_from_job_file);
  tcase_add_test(tc, test_gradient_accumulation_steps);
  tcase_add_test(tc, test_world_size_invariance);
  tcase_add_test(tc, test_more_ranks_than_samples);
  tcase_add_test(tc, test_replay_is_the_ring);
  tcase_add_test(tc, test_loss_decreases);
  tcase_add_test(tc, test_apply_refuses_non_finite);
  tcase_add_test(tc, test_state_roundtrip);
  tcase_add_test(tc, test_state_rejects);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  (void)argc;
  /* OpenBLAS picks its kernels when it loads; on a CPU it does not know it
   * falls back to generic ones (~6× slower).  Re-run ourselves once with
   * the right OPENBLAS_CORETYPE, as a worker launcher should. */
  const char *hint = ea_train_blas_coretype_hint();
  if (hint && !getenv("OPENBLAS_CORETYPE")) {
    setenv("OPENBLAS_CORETYPE", hint, 1);
    execv("/proc/self/exe", argv);
  }
  ea_train_blas_threads(1); /* the suite measures correctness; 2 shared cores */
  SRunner *sr = srunner_create(train_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
