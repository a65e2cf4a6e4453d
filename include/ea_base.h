/* ea_base.h — base/: the small data structures every module shares, so that
 * none of them writes its own: a growable string, a growable array, and one
 * seeded random-number generator.  base/ depends on nothing of ours (libc
 * only); log lines are in ea_log.h, the bounded msgpack reader in
 * ea_mpread.h, JSON is jansson's.
 *
 * Conventions (as everywhere in the project): the caller owns the struct;
 * zero-initialised is empty and valid; calls return 0 or a negative errno.
 */
#ifndef EA_BASE_H
#define EA_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- growable string (base/strbuf.c) --------------------------------------
 * Appends never fail loudly: the first allocation failure sets `oom`, later
 * appends do nothing, and the caller checks `oom` once at the end (a status
 * document or a report is either whole or refused).  buf is NUL-terminated
 * whenever it is non-NULL. */
typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} ea_sb;

void ea_sb_printf(ea_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ea_sb_vprintf(ea_sb *b, const char *fmt, va_list ap);
void ea_sb_puts(ea_sb *b, const char *s);
void ea_sb_putn(ea_sb *b, const char *s, size_t n);
/* s as a JSON string literal, quotes included: control bytes as \u00XX, and
 * invalid UTF-8 (member names come off the network) as U+FFFD, so the result
 * stays valid JSON for strict parsers. */
void ea_sb_json_str(ea_sb *b, const char *s);
/* Length of the valid UTF-8 sequence at p (1..4; 1 for ASCII), or 0 if it
 * is not one (overlong forms, surrogates and code points past U+10FFFF
 * are not).  p must be NUL-terminated: it never reads past a NUL. */
size_t ea_utf8_len(const unsigned char *p);
/* s as UTF-8 text (for answers that say charset=utf-8: a name or a URL is
 * any bytes): each byte that does not start a valid sequence becomes
 * U+FFFD; at most max bytes of s are read (fewer at its NUL), and a
 * character that would cross max is left out whole, never cut. */
void ea_sb_put_utf8(ea_sb *b, const char *s, size_t max);
/* Room for `extra` more bytes (and the NUL); false (and oom set) if not. */
bool ea_sb_reserve(ea_sb *b, size_t extra);
void ea_sb_reset(ea_sb *b); /* len = 0, keeps the memory */
void ea_sb_free(ea_sb *b);  /* back to the zero state */

/* snprintf into a caller's error buffer: `err` may be NULL or `errlen` 0
 * (the caller wants no text), then nothing is written.  The one copy of
 * what train/, config/ and ckpt/ each wrote for themselves. */
void ea_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- growable array (base/array.c) ----------------------------------------
 * Make *p (an array of elements of `elem` bytes with capacity *cap) hold at
 * least `need` elements: capacity doubles from `init` (16 when 0).  On
 * failure (-ENOMEM, or -EOVERFLOW when need·elem does not fit a size_t)
 * *p and *cap are unchanged.  New slots are not initialised. */
int ea_array_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t init);
/* The typed form for any T *arr with a size_t cap; evaluates to the rc. */
#define EA_ARRAY_RESERVE(arr, cap, need)                               \
  __extension__({                                                      \
    void *p_ = (arr);                                                  \
    int rc_ = ea_array_reserve(&p_, &(cap), (need), sizeof *(arr), 0); \
    if (rc_ == 0) (arr) = p_;                                          \
    rc_;                                                               \
  })

/* ---- random numbers (base/rng.c) -----------------------------------------
 * xoshiro256** 1.0 seeded through splitmix64: fast, 256 bits of state, and
 * documented well enough that another implementation can replay a stream
 * exactly (the trainer's data order depends on it: docs/trainer.md).  Not
 * for secrets (keys and nonces come from libsodium).
 *
 * A stream is named by (seed, domain, index): its four state words are
 * successive splitmix64 outputs starting from
 *     seed ^ mix64(domain·0x9E3779B97F4A7C15 + index)
 * so each user draws from its own domain and two users given the same seed
 * never share a stream. */
typedef struct {
  uint64_t s[4];
} ea_rng;

enum {
  EA_RNG_INIT = 1,      /* trainer: parameter init (index 0) */
  EA_RNG_EPOCH = 2,     /* trainer: the data order (index = epoch) */
  EA_RNG_SWIM = 3,      /* gossip core: probe order, member picks, phases */
  EA_RNG_SIM = 4,       /* simulator: loss, delay */
  EA_RNG_TRANSPORT = 5, /* transport: seed retry jitter */
  EA_RNG_RDZV = 6,      /* rendezvous: back-off jitter */
  EA_RNG_FAULTS = 7,    /* checkpoint fault injection: torn writes */
  EA_RNG_JOB = 8,       /* job end: which peers relay the outcome */
  /* the chaos harness seeds (seed, its stream number, EA_RNG_CHAOS_INDEX) */
};
#define EA_RNG_CHAOS_INDEX 0x43484153u /* "CHAS" */

/* splitmix64's finaliser: a bijective 64-bit hash. */
uint64_t ea_mix64(uint64_t z);
/* One splitmix64 step: advances *x and returns the mixed value (for one-off
 * derivations, such as a seed per simulated node). */
uint64_t ea_splitmix64(uint64_t *x);
void ea_rng_seed(ea_rng *r, uint64_t seed, uint64_t domain, uint64_t index);
uint64_t ea_rng_next(ea_rng *r);
/* Uniform in [0, bound) for 1 ≤ bound ≤ 2^32, exact (Lemire's multiply-shift
 * with rejection on the high 32 bits of each draw); bound 0 or 1 gives 0
 * and draws nothing. */
uint32_t ea_rng_below(ea_rng *r, uint64_t bound);
/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
float ea_rng_unit(ea_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double ea_rng_double(ea_rng *r);

#endif
