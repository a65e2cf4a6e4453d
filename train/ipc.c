/* ipc.c — the agent ↔ worker message codec and its socket helpers.
 *
 * The messages are msgpack maps with string keys (drawn in ea_ipc.h) rather
 * than positional arrays like the gossip wire, because the other end may be
 * a user's program: a Python dict packs to exactly this, keys in any order,
 * and a worker that adds a key of its own must not break the agent.  So the
 * decoder makes two passes over the map: the first finds "type" wherever it
 * is, the second reads the keys that type defines and skips every other
 * value with a bounded skipper.  Which keys a type requires or allows is one
 * table, `types[]`, walked by the encoder, the decoder and the validator
 * alike, so the three cannot disagree.
 *
 * Encoding uses msgpack-c's packer over a fixed buffer that refuses to grow
 * past its capacity.  Decoding pulls values with the bounded reader of
 * ea_mpread.h (no allocation, every length checked against the
 * bytes left); the few types that reader does not cover — maps, floats,
 * signed ints, and skipping an arbitrary value — are read here under the
 * same rules.  Every error names the field: "commit.peers[2]: truncated".
 */
#include "ea_ipc.h"

#include "ea_base.h"
#include "ea_mpread.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Nesting the skipper follows inside an unknown value.  Our own messages are
 * at most two deep (map → peers array); 16 leaves room for a user's extras
 * while bounding recursion on hostile input. */
#define SKIP_DEPTH_MAX 16

typedef enum {
  K_GEN,
  K_PID,
  K_LOCAL_RANK,
  K_COMM_ADDR,
  K_NEXT_STEP,
  K_DIGEST,
  K_STEP,
  K_LOSS,
  K_SAMPLES,
  K_SECONDS,
  K_GRAD_NORM,
  K_COMPUTE_SECONDS,
  K_ERROR,
  K_MESSAGE,
  K_REASON,
  K_CODE,
  K_AT_BOUNDARY,
  K_MAKE_NCCL_ID,
  K_RANK,
  K_WORLD,
  K_PEERS,
  K_SYNC_ROOT,
  K_BACKEND,
  K_TIMEOUT_MS,
  K_NCCL_ID,
  K_OFFSET,
  K_LENGTH,
  K_TOTAL,
  K_HASH,
  K_STALL_US,
  K_WAIT_US,
  K_SKIPPED,
  K_STATUS,
  K_NAME,
  K_FALLBACKS,
  K_CKPT_INTERVAL,
  K_CKPT_BUSY,
  K_CKPT_DIR,
  K_RESUME,
  K_CKPT_VERIFY,
  /* Added for python/elastic_agent (docs/pytorch.md, "Agent-side changes
   * required"): after K_CKPT_VERIFY, so every older message encodes to the
   * bytes it always did. */
  K_STORE,
  K_TORCH_BACKEND,
  K_LAYOUT,
  K_HEADER_BYTES,
  /* failed's peer (issue 11, gray failures): after everything older. */
  K_PEER,
  /* commit's ring token (issue 11, forged ring hellos). */
  K_RING_TOKEN,
  K__COUNT
} key;
/* Key sets are 64-bit masks. */
_Static_assert(K__COUNT <= 64, "key masks are uint64_t");

static const char *const key_name[K__COUNT] = {
    [K_GEN] = "gen",
    [K_PID] = "pid",
    [K_LOCAL_RANK] = "local_rank",
    [K_COMM_ADDR] = "comm_addr",
    [K_NEXT_STEP] = "next_step",
    [K_DIGEST] = "digest",
    [K_STEP] = "step",
    [K_LOSS] = "loss",
    [K_SAMPLES] = "samples",
    [K_SECONDS] = "seconds",
    [K_GRAD_NORM] = "grad_norm",
    [K_COMPUTE_SECONDS] = "compute_seconds",
    [K_ERROR] = "error",
    [K_MESSAGE] = "message",
    [K_REASON] = "reason",
    [K_CODE] = "code",
    [K_AT_BOUNDARY] = "at_boundary",
    [K_MAKE_NCCL_ID] = "make_nccl_id",
    [K_RANK] = "rank",
    [K_WORLD] = "world",
    [K_PEERS] = "peers",
    [K_SYNC_ROOT] = "sync_root",
    [K_BACKEND] = "backend",
    [K_TIMEOUT_MS] = "timeout_ms",
    [K_NCCL_ID] = "nccl_id",
    [K_OFFSET] = "offset",
    [K_LENGTH] = "length",
    [K_TOTAL] = "total",
    [K_HASH] = "hash",
    [K_STALL_US] = "stall_us",
    [K_WAIT_US] = "wait_us",
    [K_SKIPPED] = "skipped",
    [K_STATUS] = "status",
    [K_NAME] = "name",
    [K_FALLBACKS] = "fallbacks",
    [K_CKPT_INTERVAL] = "ckpt_interval",
    [K_CKPT_BUSY] = "ckpt_busy",
    [K_CKPT_DIR] = "ckpt_dir",
    [K_RESUME] = "resume",
    [K_CKPT_VERIFY] = "ckpt_verify",
    [K_STORE] = "store",
    [K_TORCH_BACKEND] = "torch_backend",
    [K_LAYOUT] = "layout",
    [K_HEADER_BYTES] = "header_bytes",
    [K_PEER] = "peer",
    [K_RING_TOKEN] = "ring_token",
};

#define B(k) (1ull << (k))

typedef struct {
  ea_ipc_type type;
  const char *name;
  uint64_t req, opt; /* key bit masks */
} type_def;

static const type_def types[] = {
    {EA_IPC_HELLO, "hello",
     B(K_PID) | B(K_LOCAL_RANK) | B(K_COMM_ADDR) | B(K_NEXT_STEP) | B(K_DIGEST), 0},
    {EA_IPC_READY, "ready", B(K_GEN) | B(K_COMM_ADDR) | B(K_NEXT_STEP) | B(K_DIGEST), B(K_NCCL_ID)},
    {EA_IPC_STEP, "step",
     B(K_GEN) | B(K_STEP) | B(K_LOSS) | B(K_DIGEST) | B(K_SAMPLES) | B(K_SECONDS),
     B(K_GRAD_NORM) | B(K_COMPUTE_SECONDS)},
    {EA_IPC_FAILED, "failed", B(K_GEN) | B(K_ERROR) | B(K_MESSAGE) | B(K_NEXT_STEP), B(K_PEER)},
    {EA_IPC_ABORTED, "aborted", B(K_GEN) | B(K_NEXT_STEP), 0},
    {EA_IPC_DONE, "done", B(K_GEN) | B(K_NEXT_STEP) | B(K_DIGEST), 0},
    {EA_IPC_EXITING, "exiting", B(K_REASON) | B(K_CODE), 0},
    {EA_IPC_PREPARE, "prepare", B(K_GEN) | B(K_AT_BOUNDARY), B(K_MAKE_NCCL_ID)},
    {EA_IPC_COMMIT, "commit",
     B(K_GEN) | B(K_RANK) | B(K_WORLD) | B(K_PEERS) | B(K_SYNC_ROOT) | B(K_BACKEND) |
         B(K_TIMEOUT_MS),
     B(K_NCCL_ID) | B(K_CKPT_INTERVAL) | B(K_CKPT_BUSY) | B(K_CKPT_DIR) | B(K_RESUME) |
         B(K_CKPT_VERIFY) | B(K_STORE) | B(K_TORCH_BACKEND) | B(K_RING_TOKEN)},
    {EA_IPC_PAUSE, "pause", B(K_REASON), 0},
    {EA_IPC_STOP, "stop", 0, 0},
    {EA_IPC_CKPT_STAGED, "ckpt_staged",
     B(K_GEN) | B(K_STEP) | B(K_RANK) | B(K_WORLD) | B(K_OFFSET) | B(K_LENGTH) | B(K_TOTAL) |
         B(K_HASH) | B(K_STALL_US) | B(K_WAIT_US) | B(K_SKIPPED),
     B(K_LAYOUT) | B(K_HEADER_BYTES)},
    {EA_IPC_CKPT_SKIPPED, "ckpt_skipped",
     B(K_GEN) | B(K_STEP) | B(K_RANK) | B(K_WORLD) | B(K_REASON) | B(K_SKIPPED), 0},
    {EA_IPC_CKPT_LOADED, "ckpt_loaded",
     B(K_GEN) | B(K_STEP) | B(K_NAME) | B(K_DIGEST) | B(K_FALLBACKS) | B(K_MESSAGE) | B(K_SECONDS),
     0},
    {EA_IPC_CKPT_DONE, "ckpt_done", B(K_GEN) | B(K_STEP) | B(K_STATUS) | B(K_MESSAGE), 0},
    {EA_IPC_CKPT_AGAIN, "ckpt_again", B(K_GEN) | B(K_STEP), 0},
    {EA_IPC_CKPT_AT, "ckpt_at", B(K_GEN) | B(K_STEP), 0},
};
#define NTYPES (sizeof types / sizeof types[0])

static const type_def *type_by_id(ea_ipc_type t) {
  for (size_t i = 0; i < NTYPES; i++)
    if (types[i].type == t) return &types[i];
  return NULL;
}

void ea_ipc_msg_init(ea_ipc_msg *m, ea_ipc_type type) {
  memset(m, 0, sizeof *m);
  m->type = type;
  m->backend = EA_COMM_TCP;
  m->fd = -1;
}

const char *ea_ipc_type_name(ea_ipc_type t) {
  const type_def *d = type_by_id(t);
  return d ? d->name : "?";
}

/* Which optional keys m carries. */
static uint64_t present_opt(const ea_ipc_msg *m, const type_def *d) {
  uint64_t o = 0;
  if ((d->opt & B(K_NCCL_ID)) && m->has_nccl_id) o |= B(K_NCCL_ID);
  if ((d->opt & B(K_GRAD_NORM)) && m->has_grad_norm) o |= B(K_GRAD_NORM);
  if ((d->opt & B(K_COMPUTE_SECONDS)) && m->has_compute_seconds) o |= B(K_COMPUTE_SECONDS);
  if ((d->opt & B(K_MAKE_NCCL_ID)) && m->make_nccl_id) o |= B(K_MAKE_NCCL_ID);
  if ((d->opt & B(K_CKPT_INTERVAL)) && m->ckpt_interval) o |= B(K_CKPT_INTERVAL) | B(K_CKPT_BUSY);
  if ((d->opt & B(K_CKPT_DIR)) && m->ckpt_dir[0]) o |= B(K_CKPT_DIR);
  if ((d->opt & B(K_RESUME)) && m->resume[0]) o |= B(K_RESUME) | B(K_CKPT_VERIFY);
  if ((d->opt & B(K_STORE)) && m->store[0]) o |= B(K_STORE);
  if ((d->opt & B(K_TORCH_BACKEND)) && m->torch_backend) o |= B(K_TORCH_BACKEND);
  if ((d->opt & B(K_LAYOUT)) && m->layout) o |= B(K_LAYOUT) | B(K_HEADER_BYTES);
  if ((d->opt & B(K_PEER)) && m->has_peer) o |= B(K_PEER);
  if ((d->opt & B(K_RING_TOKEN)) && m->has_ring_token) o |= B(K_RING_TOKEN);
  return o;
}

/* A string field must end inside its array, hold no NUL before that (it
 * could not round-trip) and, for addresses, not be empty. */
static bool str_ok(const char *s, size_t cap, bool nonempty) {
  size_t n = strnlen(s, cap);
  return n < cap && (!nonempty || n > 0);
}

/* The rules the decoder enforces beyond types; the encoder runs them too. */
static int validate(const ea_ipc_msg *m, const type_def *d, uint64_t keys, char *err,
                    size_t errlen) {
  const char *t = d->name;
  if ((keys & B(K_COMM_ADDR)) && !str_ok(m->comm_addr, sizeof m->comm_addr, true)) {
    ea_seterr(err, errlen, "%s.comm_addr: expected a non-empty address < %zu bytes", t,
              sizeof m->comm_addr);
    return -EINVAL;
  }
  if ((keys & B(K_MESSAGE)) && !str_ok(m->message, sizeof m->message, false)) {
    ea_seterr(err, errlen, "%s.message: longer than %zu bytes", t, sizeof m->message - 1);
    return -EINVAL;
  }
  if ((keys & B(K_REASON)) && !str_ok(m->reason, sizeof m->reason, false)) {
    ea_seterr(err, errlen, "%s.reason: longer than %zu bytes", t, sizeof m->reason - 1);
    return -EINVAL;
  }
  if ((keys & B(K_ERROR)) && m->error >= 0) {
    ea_seterr(err, errlen, "%s.error: expected a negative errno, got %d", t, (int)m->error);
    return -EINVAL;
  }
  if ((keys & B(K_STATUS)) && m->status > 0) {
    ea_seterr(err, errlen, "%s.status: expected 0 or a negative errno, got %d", t, (int)m->status);
    return -EINVAL;
  }
  if ((keys & B(K_NAME)) && !str_ok(m->name, sizeof m->name, false)) {
    ea_seterr(err, errlen, "%s.name: longer than %zu bytes", t, sizeof m->name - 1);
    return -EINVAL;
  }
  if (m->type == EA_IPC_CKPT_STAGED || m->type == EA_IPC_CKPT_SKIPPED) {
    if (m->world < 1 || m->rank >= m->world) {
      ea_seterr(err, errlen, "%s.rank: %u not below world %u", t, m->rank, m->world);
      return -EINVAL;
    }
  }
  if (m->type == EA_IPC_CKPT_STAGED && (m->offset > m->total || m->length > m->total - m->offset)) {
    ea_seterr(err, errlen,
              "ckpt_staged.length: [%" PRIu64 ", +%" PRIu64 ") leaves the %" PRIu64 "-byte state",
              m->offset, m->length, m->total);
    return -EINVAL;
  }
  if (m->type == EA_IPC_COMMIT) {
    if (m->world < 1) {
      ea_seterr(err, errlen, "commit.world: must be >= 1");
      return -EINVAL;
    }
    if (m->rank >= m->world) {
      ea_seterr(err, errlen, "commit.rank: %u not below world %u", m->rank, m->world);
      return -EINVAL;
    }
    if (m->sync_root >= m->world) {
      ea_seterr(err, errlen, "commit.sync_root: %u not below world %u", m->sync_root, m->world);
      return -EINVAL;
    }
    if (m->backend != EA_COMM_TCP && m->backend != EA_COMM_NCCL) {
      ea_seterr(err, errlen, "commit.backend: expected \"tcp\" or \"nccl\"");
      return -EINVAL;
    }
    if (m->npeers > EA_IPC_MAX_PEERS) {
      ea_seterr(err, errlen, "commit.peers: more than %u", EA_IPC_MAX_PEERS);
      return -EINVAL;
    }
    if (m->backend == EA_COMM_TCP ? m->npeers != m->world
                                  : (m->npeers != 0 && m->npeers != m->world)) {
      ea_seterr(err, errlen, "commit.peers: %u addresses for world %u", m->npeers, m->world);
      return -EINVAL;
    }
    for (uint32_t i = 0; i < m->npeers; i++)
      if (!str_ok(m->peers[i], sizeof m->peers[i], true)) {
        ea_seterr(err, errlen, "commit.peers[%u]: expected a non-empty address < %zu bytes", i,
                  sizeof m->peers[i]);
        return -EINVAL;
      }
    if (m->backend == EA_COMM_NCCL && !m->has_nccl_id) {
      ea_seterr(err, errlen, "commit.nccl_id: required by backend nccl");
      return -EINVAL;
    }
    if (!str_ok(m->ckpt_dir, sizeof m->ckpt_dir, false)) {
      ea_seterr(err, errlen, "commit.ckpt_dir: longer than %zu bytes", sizeof m->ckpt_dir - 1);
      return -EINVAL;
    }
    if (!str_ok(m->resume, sizeof m->resume, false)) {
      ea_seterr(err, errlen, "commit.resume: longer than %zu bytes", sizeof m->resume - 1);
      return -EINVAL;
    }
    /* Settings that mean nothing alone are refused rather than dropped, so
     * that whatever decodes re-encodes to the same message. */
    if (m->ckpt_skip && !m->ckpt_interval) {
      ea_seterr(err, errlen, "commit.ckpt_busy: \"skip\" without ckpt_interval");
      return -EINVAL;
    }
    if (m->ckpt_verify_size && !m->resume[0]) {
      ea_seterr(err, errlen, "commit.ckpt_verify: without resume");
      return -EINVAL;
    }
    if (m->resume[0] && !m->ckpt_dir[0]) {
      ea_seterr(err, errlen, "commit.resume: needs ckpt_dir");
      return -EINVAL;
    }
    if ((keys & B(K_STORE)) && !str_ok(m->store, sizeof m->store, true)) {
      ea_seterr(err, errlen, "commit.store: expected a non-empty address < %zu bytes",
                sizeof m->store);
      return -EINVAL;
    }
    if ((keys & B(K_TORCH_BACKEND)) && m->torch_backend != EA_IPC_TORCH_GLOO &&
        m->torch_backend != EA_IPC_TORCH_NCCL) {
      ea_seterr(err, errlen, "commit.torch_backend: expected \"gloo\" or \"nccl\"");
      return -EINVAL;
    }
  }
  if (m->type == EA_IPC_CKPT_STAGED) {
    /* Both or neither: a table size means nothing without its format, and
     * the format cannot be read without the table's size. */
    if (!(keys & B(K_LAYOUT)) != !(keys & B(K_HEADER_BYTES))) {
      ea_seterr(err, errlen, "ckpt_staged.%s: required with %s",
                keys & B(K_LAYOUT) ? "header_bytes" : "layout",
                keys & B(K_LAYOUT) ? "layout" : "header_bytes");
      return -EINVAL;
    }
    if ((keys & B(K_LAYOUT)) && m->layout != EA_IPC_LAYOUT_EA_STATE_1) {
      ea_seterr(err, errlen, "ckpt_staged.layout: expected \"ea-state-1\"");
      return -EINVAL;
    }
    if ((keys & B(K_HEADER_BYTES)) && m->header_bytes > m->total) {
      ea_seterr(err, errlen,
                "ckpt_staged.header_bytes: %" PRIu64 " beyond the %" PRIu64 "-byte state",
                m->header_bytes, m->total);
      return -EINVAL;
    }
  }
  return 0;
}

/* ---- encoding --------------------------------------------------------- */

static int pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  if (msgpack_pack_str(pk, n)) return -1;
  return msgpack_pack_str_body(pk, s, n);
}

static int pack_value(msgpack_packer *pk, const ea_ipc_msg *m, key k) {
  switch (k) {
    case K_GEN:
      return msgpack_pack_uint64(pk, m->gen);
    case K_PID:
      return msgpack_pack_uint64(pk, m->pid);
    case K_LOCAL_RANK:
      return msgpack_pack_uint32(pk, m->local_rank);
    case K_COMM_ADDR:
      return pack_str(pk, m->comm_addr);
    case K_NEXT_STEP:
      return msgpack_pack_uint64(pk, m->next_step);
    case K_DIGEST:
      return msgpack_pack_uint64(pk, m->digest);
    case K_STEP:
      return msgpack_pack_uint64(pk, m->step);
    case K_LOSS:
      return msgpack_pack_double(pk, m->loss);
    case K_SAMPLES:
      return msgpack_pack_uint64(pk, m->samples);
    case K_SECONDS:
      return msgpack_pack_double(pk, m->seconds);
    case K_GRAD_NORM:
      return msgpack_pack_double(pk, m->grad_norm);
    case K_COMPUTE_SECONDS:
      return msgpack_pack_double(pk, m->compute_seconds);
    case K_ERROR:
      return msgpack_pack_int32(pk, m->error);
    case K_MESSAGE:
      return pack_str(pk, m->message);
    case K_REASON:
      return pack_str(pk, m->reason);
    case K_CODE:
      return msgpack_pack_int32(pk, m->code);
    case K_AT_BOUNDARY:
      return m->at_boundary ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case K_MAKE_NCCL_ID:
      return m->make_nccl_id ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case K_RANK:
      return msgpack_pack_uint32(pk, m->rank);
    case K_WORLD:
      return msgpack_pack_uint32(pk, m->world);
    case K_PEERS:
      if (msgpack_pack_array(pk, m->npeers)) return -1;
      for (uint32_t i = 0; i < m->npeers; i++)
        if (pack_str(pk, m->peers[i])) return -1;
      return 0;
    case K_SYNC_ROOT:
      return msgpack_pack_uint32(pk, m->sync_root);
    case K_BACKEND:
      return pack_str(pk, ea_comm_backend_name(m->backend));
    case K_TIMEOUT_MS:
      return msgpack_pack_uint32(pk, m->timeout_ms);
    case K_NCCL_ID:
      if (msgpack_pack_bin(pk, sizeof m->nccl_id)) return -1;
      return msgpack_pack_bin_body(pk, m->nccl_id, sizeof m->nccl_id);
    case K_RING_TOKEN:
      if (msgpack_pack_bin(pk, sizeof m->ring_token)) return -1;
      return msgpack_pack_bin_body(pk, m->ring_token, sizeof m->ring_token);
    case K_OFFSET:
      return msgpack_pack_uint64(pk, m->offset);
    case K_LENGTH:
      return msgpack_pack_uint64(pk, m->length);
    case K_TOTAL:
      return msgpack_pack_uint64(pk, m->total);
    case K_HASH:
      return msgpack_pack_uint64(pk, m->hash);
    case K_STALL_US:
      return msgpack_pack_uint64(pk, m->stall_us);
    case K_WAIT_US:
      return msgpack_pack_uint64(pk, m->wait_us);
    case K_SKIPPED:
      return msgpack_pack_uint64(pk, m->skipped);
    case K_STATUS:
      return msgpack_pack_int32(pk, m->status);
    case K_NAME:
      return pack_str(pk, m->name);
    case K_FALLBACKS:
      return msgpack_pack_uint32(pk, m->fallbacks);
    case K_CKPT_INTERVAL:
      return msgpack_pack_uint32(pk, m->ckpt_interval);
    case K_CKPT_BUSY:
      return pack_str(pk, m->ckpt_skip ? "skip" : "wait");
    case K_CKPT_DIR:
      return pack_str(pk, m->ckpt_dir);
    case K_RESUME:
      return pack_str(pk, m->resume);
    case K_CKPT_VERIFY:
      return pack_str(pk, m->ckpt_verify_size ? "size" : "full");
    case K_STORE:
      return pack_str(pk, m->store);
    case K_TORCH_BACKEND:
      return pack_str(pk, m->torch_backend == EA_IPC_TORCH_NCCL ? "nccl" : "gloo");
    case K_LAYOUT:
      return pack_str(pk, "ea-state-1");
    case K_HEADER_BYTES:
      return msgpack_pack_uint64(pk, m->header_bytes);
    case K_PEER:
      return msgpack_pack_uint32(pk, m->peer);
    case K__COUNT:
      break;
  }
  return -1;
}

int ea_ipc_encode(const ea_ipc_msg *m, void *buf, size_t cap, size_t *len, char *err,
                  size_t errlen) {
  const type_def *d = type_by_id(m->type);
  if (!d) {
    ea_seterr(err, errlen, "type: unknown message type %d", (int)m->type);
    return -EINVAL;
  }
  uint64_t keys = d->req | present_opt(m, d);
  int rc = validate(m, d, keys, err, errlen);
  if (rc) return rc;
  ea__mpw_fixbuf f = {.buf = buf, .cap = cap, .len = 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, ea__mpw_fixbuf_write);
  if (msgpack_pack_map(&pk, 1 + (size_t)__builtin_popcountll(keys)) || pack_str(&pk, "type") ||
      pack_str(&pk, d->name))
    goto full;
  for (int k = 0; k < K__COUNT; k++) {
    if (!(keys & B(k))) continue;
    if (pack_str(&pk, key_name[k]) || pack_value(&pk, m, (key)k)) goto full;
  }
  *len = f.len;
  return 0;
full:
  ea_seterr(err, errlen, "%s: does not fit in %zu bytes", d->name, cap);
  return -EMSGSIZE;
}

/* ---- decoding --------------------------------------------------------- */

/* Copy a str of at most cap-1 bytes without NULs into dst. */
static int read_cstr(ea__mpr *r, char *dst, size_t cap, const char **why) {
  ea__mpr probe = *r; /* to tell "too long" from "contains a NUL" */
  int rc = ea__mpr_cstr(r, dst, cap);
  const uint8_t *p;
  size_t n;
  if (rc == EA__MPR_RANGE)
    *why = ea__mpr_str(&probe, cap - 1, &p, &n) == 0 ? "contains a NUL byte" : "too long";
  else if (rc)
    *why = rc == EA__MPR_TYPE ? "expected str" : ea__mpr_strerror(rc);
  return rc;
}

static int read_u(ea__mpr *r, uint64_t max, uint64_t *v, const char **why) {
  int rc = ea__mpr_uint(r, max, v);
  if (rc) *why = rc == EA__MPR_TYPE ? "expected uint" : ea__mpr_strerror(rc);
  return rc;
}

static int read_u32(ea__mpr *r, uint32_t *v, const char **why) {
  uint64_t x;
  int rc = read_u(r, UINT32_MAX, &x, why);
  if (rc == 0) *v = (uint32_t)x;
  return rc;
}

static int read_i32(ea__mpr *r, int32_t *v, const char **why) {
  int64_t x;
  int rc = ea__mpr_int(r, INT32_MIN, INT32_MAX, &x);
  if (rc)
    *why = rc == EA__MPR_TYPE ? "expected int" : ea__mpr_strerror(rc);
  else
    *v = (int32_t)x;
  return rc;
}

static int read_f(ea__mpr *r, double *v, const char **why) {
  int rc = ea__mpr_float(r, v);
  if (rc) *why = rc == EA__MPR_TYPE ? "expected float" : ea__mpr_strerror(rc);
  return rc;
}

static int read_b(ea__mpr *r, bool *v, const char **why) {
  int rc = ea__mpr_bool(r, v);
  if (rc) *why = rc == EA__MPR_TYPE ? "expected bool" : ea__mpr_strerror(rc);
  return rc;
}

/* One value of key k into m.  On failure *why says what was wrong and
 * *index names the array element, if any. */
static int read_value(ea__mpr *r, ea_ipc_msg *m, key k, const char **why, long *index) {
  switch (k) {
    case K_GEN:
      return read_u(r, UINT64_MAX, &m->gen, why);
    case K_PID:
      return read_u(r, UINT64_MAX, &m->pid, why);
    case K_LOCAL_RANK:
      return read_u32(r, &m->local_rank, why);
    case K_COMM_ADDR:
      return read_cstr(r, m->comm_addr, sizeof m->comm_addr, why);
    case K_NEXT_STEP:
      return read_u(r, UINT64_MAX, &m->next_step, why);
    case K_DIGEST:
      return read_u(r, UINT64_MAX, &m->digest, why);
    case K_STEP:
      return read_u(r, UINT64_MAX, &m->step, why);
    case K_LOSS:
      return read_f(r, &m->loss, why);
    case K_SAMPLES:
      return read_u(r, UINT64_MAX, &m->samples, why);
    case K_SECONDS:
      return read_f(r, &m->seconds, why);
    case K_GRAD_NORM:
      m->has_grad_norm = true;
      return read_f(r, &m->grad_norm, why);
    case K_COMPUTE_SECONDS:
      m->has_compute_seconds = true;
      return read_f(r, &m->compute_seconds, why);
    case K_ERROR:
      return read_i32(r, &m->error, why);
    case K_MESSAGE:
      return read_cstr(r, m->message, sizeof m->message, why);
    case K_REASON:
      return read_cstr(r, m->reason, sizeof m->reason, why);
    case K_CODE:
      return read_i32(r, &m->code, why);
    case K_AT_BOUNDARY:
      return read_b(r, &m->at_boundary, why);
    case K_MAKE_NCCL_ID:
      return read_b(r, &m->make_nccl_id, why);
    case K_RANK:
      return read_u32(r, &m->rank, why);
    case K_WORLD:
      return read_u32(r, &m->world, why);
    case K_SYNC_ROOT:
      return read_u32(r, &m->sync_root, why);
    case K_TIMEOUT_MS:
      return read_u32(r, &m->timeout_ms, why);
    case K_PEERS: {
      uint32_t n;
      int rc = ea__mpr_array(r, &n);
      if (rc) {
        *why = rc == EA__MPR_TYPE ? "expected array" : ea__mpr_strerror(rc);
        return rc;
      }
      if (n > EA_IPC_MAX_PEERS) {
        *why = "too many addresses";
        return EA__MPR_RANGE;
      }
      if (n > ea__mpr_left(r)) {
        *why = "truncated";
        return EA__MPR_EOF;
      }
      for (uint32_t i = 0; i < n; i++) {
        rc = read_cstr(r, m->peers[i], sizeof m->peers[i], why);
        if (rc) {
          *index = i;
          return rc;
        }
      }
      m->npeers = n;
      return 0;
    }
    case K_BACKEND: {
      char s[16];
      int rc = read_cstr(r, s, sizeof s, why);
      if (rc) return rc;
      if (strcmp(s, "tcp") == 0)
        m->backend = EA_COMM_TCP;
      else if (strcmp(s, "nccl") == 0)
        m->backend = EA_COMM_NCCL;
      else {
        *why = "expected \"tcp\" or \"nccl\"";
        return EA__MPR_RANGE;
      }
      return 0;
    }
    case K_OFFSET:
      return read_u(r, UINT64_MAX, &m->offset, why);
    case K_LENGTH:
      return read_u(r, UINT64_MAX, &m->length, why);
    case K_TOTAL:
      return read_u(r, UINT64_MAX, &m->total, why);
    case K_HASH:
      return read_u(r, UINT64_MAX, &m->hash, why);
    case K_STALL_US:
      return read_u(r, UINT64_MAX, &m->stall_us, why);
    case K_WAIT_US:
      return read_u(r, UINT64_MAX, &m->wait_us, why);
    case K_SKIPPED:
      return read_u(r, UINT64_MAX, &m->skipped, why);
    case K_STATUS:
      return read_i32(r, &m->status, why);
    case K_NAME:
      return read_cstr(r, m->name, sizeof m->name, why);
    case K_FALLBACKS:
      return read_u32(r, &m->fallbacks, why);
    case K_CKPT_INTERVAL:
      return read_u32(r, &m->ckpt_interval, why);
    case K_CKPT_DIR:
      return read_cstr(r, m->ckpt_dir, sizeof m->ckpt_dir, why);
    case K_RESUME:
      return read_cstr(r, m->resume, sizeof m->resume, why);
    case K_CKPT_BUSY:
    case K_CKPT_VERIFY: {
      char s[8];
      int rc = read_cstr(r, s, sizeof s, why);
      if (rc) return rc;
      const char *a = k == K_CKPT_BUSY ? "wait" : "full", *b = k == K_CKPT_BUSY ? "skip" : "size";
      bool *dst = k == K_CKPT_BUSY ? &m->ckpt_skip : &m->ckpt_verify_size;
      if (strcmp(s, a) == 0)
        *dst = false;
      else if (strcmp(s, b) == 0)
        *dst = true;
      else {
        *why = k == K_CKPT_BUSY ? "expected \"wait\" or \"skip\"" : "expected \"full\" or \"size\"";
        return EA__MPR_RANGE;
      }
      return 0;
    }
    case K_STORE:
      return read_cstr(r, m->store, sizeof m->store, why);
    case K_TORCH_BACKEND: {
      char s[16];
      int rc = read_cstr(r, s, sizeof s, why);
      if (rc) return rc;
      if (strcmp(s, "gloo") == 0)
        m->torch_backend = EA_IPC_TORCH_GLOO;
      else if (strcmp(s, "nccl") == 0)
        m->torch_backend = EA_IPC_TORCH_NCCL;
      else {
        *why = "expected \"gloo\" or \"nccl\"";
        return EA__MPR_RANGE;
      }
      return 0;
    }
    case K_LAYOUT: {
      char s[16];
      int rc = read_cstr(r, s, sizeof s, why);
      if (rc) return rc;
      if (strcmp(s, "ea-state-1") != 0) {
        *why = "expected \"ea-state-1\"";
        return EA__MPR_RANGE;
      }
      m->layout = EA_IPC_LAYOUT_EA_STATE_1;
      return 0;
    }
    case K_HEADER_BYTES:
      return read_u(r, UINT64_MAX, &m->header_bytes, why);
    case K_PEER:
      m->has_peer = true;
      return read_u32(r, &m->peer, why);
    case K_RING_TOKEN: {
      const uint8_t *p;
      size_t n;
      int rc = ea__mpr_bin(r, sizeof m->ring_token, &p, &n);
      if (rc == 0 && n != sizeof m->ring_token) rc = EA__MPR_RANGE;
      if (rc) {
        *why = rc == EA__MPR_TYPE    ? "expected bin"
               : rc == EA__MPR_RANGE ? "expected 32 bytes"
                                     : ea__mpr_strerror(rc);
        return rc;
      }
      memcpy(m->ring_token, p, n);
      m->has_ring_token = true;
      return 0;
    }
    case K_NCCL_ID: {
      const uint8_t *p;
      size_t n;
      int rc = ea__mpr_bin(r, sizeof m->nccl_id, &p, &n);
      if (rc == 0 && n != sizeof m->nccl_id) rc = EA__MPR_RANGE;
      if (rc) {
        *why = rc == EA__MPR_TYPE    ? "expected bin"
               : rc == EA__MPR_RANGE ? "expected 128 bytes"
                                     : ea__mpr_strerror(rc);
        return rc;
      }
      memcpy(m->nccl_id, p, n);
      m->has_nccl_id = true;
      return 0;
    }
    case K__COUNT:
      break;
  }
  *why = "unknown key";
  return EA__MPR_TYPE;
}

static int find_key(const uint8_t *p, size_t n) {
  for (int k = 0; k < K__COUNT; k++)
    if (strlen(key_name[k]) == n && memcmp(key_name[k], p, n) == 0) return k;
  return -1;
}

static bool is_type_key(const uint8_t *p, size_t n) {
  return n == 4 && memcmp(p, "type", 4) == 0;
}

int ea_ipc_decode(const void *buf, size_t len, ea_ipc_msg *m, char *err, size_t errlen) {
  ea__mpr r;
  ea__mpr_init(&r, buf, len);
  uint32_t n;
  int rc = ea__mpr_map(&r, &n);
  if (rc) {
    ea_seterr(err, errlen, "message: expected a map (%s)", ea__mpr_strerror(rc));
    return -EBADMSG;
  }
  const uint8_t *body = r.pos;

  /* Pass 1: find "type" and the end of the map. */
  const type_def *d = NULL;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *kp;
    size_t kn;
    rc = ea__mpr_str(&r, EA_IPC_MAX_MSG, &kp, &kn);
    if (rc) {
      ea_seterr(err, errlen, "message: key %u: %s", i,
                rc == EA__MPR_TYPE ? "expected str" : ea__mpr_strerror(rc));
      return -EBADMSG;
    }
    if (is_type_key(kp, kn)) {
      if (d) {
        ea_seterr(err, errlen, "type: duplicate key");
        return -EBADMSG;
      }
      char tn[16];
      const char *why;
      if (read_cstr(&r, tn, sizeof tn, &why)) {
        ea_seterr(err, errlen, "type: %s", why);
        return -EBADMSG;
      }
      for (size_t j = 0; j < NTYPES; j++)
        if (strcmp(types[j].name, tn) == 0) d = &types[j];
      if (!d) {
        ea_seterr(err, errlen, "type: unknown message type \"%s\"", tn);
        return -EBADMSG;
      }
    } else if ((rc = ea__mpr_skip(&r, SKIP_DEPTH_MAX)) != 0) {
      ea_seterr(err, errlen, "message: value of \"%.*s\": %s", (int)kn, (const char *)kp,
                ea__mpr_strerror(rc));
      return -EBADMSG;
    }
  }
  if (!d) {
    ea_seterr(err, errlen, "type: missing");
    return -EBADMSG;
  }
  if (r.pos != r.end) {
    ea_seterr(err, errlen, "%s: %zu trailing bytes after the map", d->name, ea__mpr_left(&r));
    return -EBADMSG;
  }

  /* Pass 2: the type's keys; everything else is skipped (pass 1 already
   * proved every value well-formed). */
  ea_ipc_msg_init(m, d->type);
  r.pos = body;
  uint64_t seen = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *kp;
    size_t kn;
    (void)ea__mpr_str(&r, EA_IPC_MAX_MSG, &kp, &kn);
    int k = is_type_key(kp, kn) ? -1 : find_key(kp, kn);
    if (k < 0 || !((d->req | d->opt) & B(k))) {
      (void)ea__mpr_skip(&r, SKIP_DEPTH_MAX);
      continue;
    }
    if (seen & B(k)) {
      ea_seterr(err, errlen, "%s.%s: duplicate key", d->name, key_name[k]);
      return -EBADMSG;
    }
    const char *why = "invalid";
    long index = -1;
    if (read_value(&r, m, (key)k, &why, &index)) {
      if (index >= 0)
        ea_seterr(err, errlen, "%s.%s[%ld]: %s", d->name, key_name[k], index, why);
      else
        ea_seterr(err, errlen, "%s.%s: %s", d->name, key_name[k], why);
      return -EBADMSG;
    }
    seen |= B(k);
  }
  uint64_t missing = d->req & ~seen;
  if (missing) {
    ea_seterr(err, errlen, "%s.%s: missing", d->name, key_name[__builtin_ctzll(missing)]);
    return -EBADMSG;
  }
  if (validate(m, d, seen, err, errlen)) return -EBADMSG;
  return 0;
}

/* ---- sockets ------------------------------------------------------------ */

int ea_ipc_socketpair(int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
  return 0;
}

int ea_ipc_send_fd(int sock, const ea_ipc_msg *m, int fd) {
  uint8_t buf[EA_IPC_MAX_MSG];
  size_t len;
  int rc = ea_ipc_encode(m, buf, sizeof buf, &len, NULL, 0);
  if (rc) return rc;
  struct iovec iov = {.iov_base = buf, .iov_len = len};
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.b;
    mh.msg_controllen = sizeof ctl.b;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (;;) {
    ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (w >= 0) return 0; /* SEQPACKET: all or nothing */
    if (errno != EINTR) return -errno;
  }
}

int ea_ipc_send(int fd, const ea_ipc_msg *m) {
  return ea_ipc_send_fd(fd, m, -1);
}

/* At most this many fds are taken off one packet (the rest of a hostile
 * sender's fds are discarded by the kernel, MSG_CTRUNC); one is used. */
#define RECV_FDS_MAX 4

ssize_t ea_ipc_recv_packet(int sock, void *buf, size_t cap, int *fd) {
  if (fd) *fd = -1;
  struct iovec iov = {.iov_base = buf, .iov_len = cap};
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(RECV_FDS_MAX * sizeof(int))];
  } ctl;
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
  ssize_t n;
  do n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  /* A peer that closed while packets we had sent it were still unread
   * (a worker exiting after STOP with a CKPT_DONE in its queue) makes Linux
   * set ECONNRESET on our end, and the next receive reports that error
   * *before* the packets the peer sent ahead of closing, which are still
   * queued: its last words (EXITING, DONE, FAILED).  Reporting clears the
   * error, so receive once more: a queued packet, or 0 when none is left
   * (the peer is gone, so that is end of stream). */
  if (n < 0 && errno == ECONNRESET) {
    mh.msg_controllen = sizeof ctl.b;
    do n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
  }
  if (n < 0) return -errno;
  /* Whatever fds came are ours now: keep the first, close the rest. */
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (fd && *fd < 0)
        *fd = f;
      else
        close(f);
    }
  }
  return n;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ea_ipc_recv(int fd, ea_ipc_msg *m, int timeout_ms, char *err, size_t errlen) {
  uint8_t buf[EA_IPC_MAX_MSG];
  const int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  for (;;) {
    int wait = -1;
    if (deadline >= 0) {
      int64_t left = deadline - now_ms();
      wait = left > 0 ? (int)left : 0;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, wait);
    if (pr < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (pr == 0) {
      ea_seterr(err, errlen, "no message within %d ms", timeout_ms);
      return -ETIMEDOUT;
    }
    /* MSG_TRUNC: the return value is the packet's real length, so an
     * oversized packet is detected (and dropped) rather than half-read. */
    int pfd;
    ssize_t n = ea_ipc_recv_packet(fd, buf, sizeof buf, &pfd);
    if (n < 0) {
      if (n == -EAGAIN) continue;
      return (int)n;
    }
    if (n == 0) {
      if (pfd >= 0) close(pfd);
      ea_seterr(err, errlen, "the other end closed the connection");
      return -ECONNRESET;
    }
    if ((size_t)n > sizeof buf) {
      if (pfd >= 0) close(pfd);
      ea_seterr(err, errlen, "message: %zd bytes, more than %u", n, EA_IPC_MAX_MSG);
      return -EMSGSIZE;
    }
    int rc = ea_ipc_decode(buf, (size_t)n, m, err, errlen);
    if (rc) {
      if (pfd >= 0) close(pfd);
      return rc;
    }
    m->fd = pfd;
    return 0;
  }
}
