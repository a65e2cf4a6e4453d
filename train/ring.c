/* ring.c — the tcp ring's arithmetic: which segment each rank adds at each
 * step, and how two operands are combined.  The one place that defines the
 * order in which a ring allreduce sums.
 *
 * Float addition is not associative, so "the sum of the ranks' gradients"
 * is only defined once the order is: the ring's reduce-scatter adds segment
 * j as g_j, then g_{j+1} + that, then g_{j+2} + that, …, around the ring,
 * each addition done by the receiving rank with its own operand first.
 * comm_tcp.c builds its schedule from ea__ring_rs_send/_recv and reduces
 * every chunk with ea__ring_reduce; ea_comm_ring_reduce follows the same
 * schedule with the same kernels in one process, which is how the chaos
 * harness and the tests reproduce a W-rank job bit for bit (a copy of the
 * order elsewhere would silently stop matching when the ring changes).
 */
#include "comm_int.h"

#include <errno.h>
#include <string.h>

void ea__ring_segment(size_t count, uint32_t W, uint32_t j, size_t *start, size_t *len) {
  size_t q = count / W, rem = count % W;
  *start = q * j + (j < rem ? j : rem);
  *len = q + (j < rem ? 1 : 0);
}

/* Reductions in GCC/clang vector types, 16 bytes per step (one SSE
 * register on baseline x86-64; 32-byte vectors made gcc scalarize the max
 * comparisons without AVX, checked in the disassembly).  Plain
 * loops are not enough: gcc's -O2 "very cheap" vectorizer leaves a loop of
 * unknown trip count scalar (checked with -fopt-info-vec), and a scalar add
 * is ~4× slower than the chunk arrives over loopback.  Unaligned loads and
 * stores go through memcpy (movups).  The tail is scalar with the same
 * expression, so results do not depend on where a chunk starts.  max keeps
 * the local operand unless the received one compares greater, in both
 * forms (so NaN handling is the same everywhere).  Integer sums wrap. */
typedef float vf32 __attribute__((vector_size(16)));
typedef double vf64 __attribute__((vector_size(16)));
typedef int64_t vi64 __attribute__((vector_size(16)));
typedef int32_t vi32 __attribute__((vector_size(16)));
typedef uint64_t vu64 __attribute__((vector_size(16)));

#define VSUM(VT, MT, a, b) ((a) + (b))
#define VMAX(VT, MT, a, b) ((VT)(((MT)(a) & ~(MT)((b) > (a))) | ((MT)(b) & (MT)((b) > (a)))))
#define SSUM(a, b) ((a) + (b))
#define SMAX(a, b) ((b) > (a) ? (b) : (a))

#define DEFINE_RED(name, T, VT, MT, VOP, SOP)                      \
  static void name(T *restrict d, const T *restrict s, size_t n) { \
    const size_t per = sizeof(VT) / sizeof(T);                     \
    size_t i = 0;                                                  \
    for (; i + per <= n; i += per) {                               \
      VT a, b;                                                     \
      memcpy(&a, d + i, sizeof a);                                 \
      memcpy(&b, s + i, sizeof b);                                 \
      a = VOP(VT, MT, a, b);                                       \
      memcpy(d + i, &a, sizeof a);                                 \
    }                                                              \
    for (; i < n; i++) d[i] = SOP(d[i], s[i]);                     \
  }
DEFINE_RED(red_sum_f32, float, vf32, vi32, VSUM, SSUM)
DEFINE_RED(red_sum_f64, double, vf64, vi64, VSUM, SSUM)
/* Two's complement wrap through the unsigned view: no signed overflow UB. */
DEFINE_RED(red_sum_i64, uint64_t, vu64, vu64, VSUM, SSUM)
DEFINE_RED(red_max_f32, float, vf32, vi32, VMAX, SMAX)
DEFINE_RED(red_max_f64, double, vf64, vi64, VMAX, SMAX)
DEFINE_RED(red_max_i64, int64_t, vi64, vi64, VMAX, SMAX)

void ea__ring_reduce(void *d, const void *s, size_t bytes, ea_comm_dtype dt, ea_comm_op op) {
  switch (dt) {
    case EA_COMM_F32:
      if (op == EA_COMM_SUM)
        red_sum_f32(d, s, bytes / 4);
      else
        red_max_f32(d, s, bytes / 4);
      break;
    case EA_COMM_F64:
      if (op == EA_COMM_SUM)
        red_sum_f64(d, s, bytes / 8);
      else
        red_max_f64(d, s, bytes / 8);
      break;
    case EA_COMM_I64:
      if (op == EA_COMM_SUM)
        red_sum_i64(d, s, bytes / 8);
      else
        red_max_i64(d, s, bytes / 8);
      break;
  }
}

/* Scratch for ea_comm_ring_reduce's "own operand first": 4 KiB on the
 * stack, a multiple of every element size and of the 16-byte vectors; the
 * kernels' results do not depend on where a piece starts. */
#define SIM_PIECE 4096u

int ea_comm_ring_reduce(void *out, const void *const *parts, uint32_t world, size_t count,
                        ea_comm_dtype dtype, ea_comm_op op) {
  if (!out || (count && !parts) || world == 0) return -EINVAL;
  if (dtype != EA_COMM_F32 && dtype != EA_COMM_F64 && dtype != EA_COMM_I64) return -EINVAL;
  if (op != EA_COMM_SUM && op != EA_COMM_MAX) return -EINVAL;
  const size_t es = ea_comm_dtype_size(dtype);
  uint8_t *o = out;
  /* Step 0's senders send their own segment as it is: that is where each
   * segment's running value starts. */
  for (uint32_t r = 0; r < world; r++) {
    size_t start, len;
    ea__ring_segment(count, world, ea__ring_rs_send(r, world, 0), &start, &len);
    memcpy(o + start * es, (const uint8_t *)parts[r] + start * es, len * es);
  }
  /* Step k: rank r receives its left neighbour's running value of segment
   * rs_recv(r, k) and adds it to its own operand, which is what it passes
   * on at step k+1 (rs_send(r, k+1) = rs_recv(r, k)). */
  uint8_t tmp[SIM_PIECE] __attribute__((aligned(16)));
  for (uint32_t k = 0; k + 1 < world; k++)
    for (uint32_t r = 0; r < world; r++) {
      size_t start, len;
      ea__ring_segment(count, world, ea__ring_rs_recv(r, world, k), &start, &len);
      const uint8_t *own = (const uint8_t *)parts[r] + start * es;
      uint8_t *acc = o + start * es;
      for (size_t done = 0, bytes = len * es; done < bytes;) {
        size_t n = bytes - done < SIM_PIECE ? bytes - done : SIM_PIECE;
        memcpy(tmp, own + done, n);
        ea__ring_reduce(tmp, acc + done, n, dtype, op);
        memcpy(acc + done, tmp, n);
        done += n;
      }
    }
  return 0;
}
