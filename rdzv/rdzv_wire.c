/* The control-message codec of the rendezvous (format drawn in ea_rdzv.h).
 *
 * Encoding uses msgpack-c's packer into an sbuffer: the messages are small
 * except COMMIT, whose size is only known once the plan is built, so a
 * growing buffer is simpler than a size pre-computation.  Decoding never
 * touches msgpack-c's unpacker (it sizes storage from counts before reading
 * the elements, see ea_mpread.h); it pulls one value at a time off a
 * bounded (pos, end) cursor, checks the type, the length and the range of
 * each, and names the field that was wrong.  The only allocations are the
 * COMMIT/STATE arrays, and their counts are first checked against the bytes
 * left: each element has a minimum encoded size, so a count the remaining
 * bytes cannot hold is refused before any memory is asked for.
 */
#include "ea_rdzv.h"

#include "ea_mpread.h"

#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* addr = bin19: family(1) port(2 BE) ip(16), as in ea_wire.h. */
#define ADDR_BYTES 19

/* Smallest encodings, for bounding counts by the bytes left:
 *   node   = fixarray(1) + bin8 16 (2+16) + fixstr "" (1) + bin8 19 (2+19) */
#define NODE_MIN_BYTES (1 + 18 + 1 + 21)
/*   worker = fixarray(1) + addr (2+19) + positive fixint (1) */
#define WORKER_MIN_BYTES (1 + 21 + 1)
/*   id     = bin8 16 */
#define ID_MIN_BYTES 18

const char *ea_rdzv_msg_type_str(uint8_t type) {
  switch (type) {
    case EA_RDZV_PREPARE:
      return "PREPARE";
    case EA_RDZV_READY:
      return "READY";
    case EA_RDZV_COMMIT:
      return "COMMIT";
    case EA_RDZV_NACK:
      return "NACK";
    case EA_RDZV_ABORT:
      return "ABORT";
    case EA_RDZV_DRAIN:
      return "DRAIN";
    case EA_RDZV_REPORT:
      return "REPORT";
    case EA_RDZV_QUERY:
      return "QUERY";
    case EA_RDZV_STATE:
      return "STATE";
    case EA_RDZV_RELEASE:
      return "RELEASE";
    case EA_RDZV_BLAME:
      return "BLAME";
    default:
      return "?";
  }
}

/* ---- encode ------------------------------------------------------------- */

static void pk_bin(msgpack_packer *pk, const void *p, size_t n) {
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, p, n);
}

static void pk_str(msgpack_packer *pk, const char *s) {
  size_t n = strnlen(s, EA_NAME_MAX - 1);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

static void pk_addr(msgpack_packer *pk, const ea_addr *a) {
  uint8_t b[ADDR_BYTES];
  b[0] = a->family;
  b[1] = (uint8_t)(a->port >> 8);
  b[2] = (uint8_t)a->port;
  memcpy(b + 3, a->ip, 16);
  pk_bin(pk, b, sizeof b);
}

static void pk_gen(msgpack_packer *pk, const ea_rdzv_gen *g) {
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, g->term);
  pk_bin(pk, g->ctrl.b, 16);
}

static void pk_nccl(msgpack_packer *pk, bool has, const uint8_t *id) {
  if (has)
    pk_bin(pk, id, EA_RDZV_NCCL_ID_BYTES);
  else
    msgpack_pack_nil(pk);
}

/* READY carries each worker's state_gen to the controller, which plans
 * with it; a COMMIT's ranks leave it out (no member needs it, and it would
 * break the per-rank bound of EA_RDZV_MAX_WORLD). */
static void pk_worker(msgpack_packer *pk, const ea_rdzv_worker *w, bool state_gen) {
  msgpack_pack_array(pk, state_gen ? 3 : 2);
  pk_addr(pk, &w->listen);
  msgpack_pack_uint64(pk, w->step);
  if (state_gen) msgpack_pack_uint64(pk, w->state_gen);
}

/* The bounds the decoder enforces, checked before encoding so that whatever
 * we send is something every peer accepts. */
static int check_out(const ea_rdzv_msg *m) {
  switch (m->type) {
    case EA_RDZV_PREPARE:
      if (m->world == 0 || m->world > EA_RDZV_MAX_WORLD || m->wpn == 0 ||
          m->wpn > EA_RDZV_MAX_WPN || m->rank_base >= m->world || m->wpn > m->world - m->rank_base)
        return -EINVAL;
      return 0;
    case EA_RDZV_READY:
      return m->nworkers == 0 || m->nworkers > EA_RDZV_MAX_WPN ? -EINVAL : 0;
    case EA_RDZV_COMMIT: {
      const ea_rdzv_plan *p = &m->plan;
      if (p->nnodes == 0 || p->nnodes > EA_RDZV_MAX_NODES || p->wpn == 0 ||
          p->wpn > EA_RDZV_MAX_WPN || (uint64_t)p->nnodes * p->wpn > EA_RDZV_MAX_WORLD ||
          p->world != p->nnodes * p->wpn || (p->has_sync && p->sync_rank >= p->world) ||
          !p->nodes || !p->ranks)
        return -EINVAL;
      return 0;
    }
    case EA_RDZV_NACK:
      return m->nack < EA_RDZV_NACK_STALE || m->nack > EA_RDZV_NACK_CONFIG ? -EINVAL : 0;
    case EA_RDZV_REPORT:
      return m->flags & ~EA_RDZV_F_ALL ? -EINVAL : 0;
    case EA_RDZV_STATE:
      return m->plan.nnodes > EA_RDZV_MAX_NODES || (m->plan.nnodes && !m->plan.nodes) ? -EINVAL : 0;
    case EA_RDZV_BLAME:
      return m->gen.term == 0 ? -EINVAL : 0;
    case EA_RDZV_ABORT:
    case EA_RDZV_DRAIN:
    case EA_RDZV_QUERY:
    case EA_RDZV_RELEASE:
      return 0;
    default:
      return -EINVAL;
  }
}

/* sbuffer's writer fails (returns -1, buffer unchanged) only when realloc
 * does; the packer's calls are not checked one by one, the failure is
 * remembered here and checked once at the end. */
typedef struct {
  msgpack_sbuffer sb;
  bool failed;
} outbuf;

static int out_write(void *data, const char *buf, size_t len) {
  outbuf *o = data;
  if (msgpack_sbuffer_write(&o->sb, buf, len) != 0) o->failed = true;
  return 0;
}

int ea_rdzv_encode(const ea_rdzv_msg *m, uint8_t **out, size_t *len) {
  int rc = check_out(m);
  if (rc) return rc;
  outbuf ob = {.failed = false};
  msgpack_sbuffer_init(&ob.sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &ob, out_write);
  ea__mpw_head(&pk, EA_WIRE_MAGIC_PLAIN, 5, EA_RDZV_WIRE_VERSION, m->type, m->src.b);
  pk_gen(&pk, &m->gen);
  switch (m->type) {
    case EA_RDZV_PREPARE:
      msgpack_pack_array(&pk, 4);
      msgpack_pack_uint32(&pk, m->world);
      msgpack_pack_uint32(&pk, m->wpn);
      msgpack_pack_uint32(&pk, m->rank_base);
      if (m->boundary)
        msgpack_pack_true(&pk);
      else
        msgpack_pack_false(&pk);
      break;
    case EA_RDZV_READY:
      /* restarts only when set: an older agent's decoder wants 3 elements */
      msgpack_pack_array(&pk, m->restarts ? 4 : 3);
      msgpack_pack_array(&pk, m->nworkers);
      for (uint32_t i = 0; i < m->nworkers; i++) pk_worker(&pk, &m->workers[i], true);
      pk_nccl(&pk, m->has_nccl_id, m->nccl_id);
      pk_gen(&pk, &m->formed);
      if (m->restarts) msgpack_pack_uint64(&pk, m->restarts);
      break;
    case EA_RDZV_COMMIT: {
      const ea_rdzv_plan *p = &m->plan;
      msgpack_pack_array(&pk, p->restarts ? 7 : 6);
      msgpack_pack_uint32(&pk, p->wpn);
      if (p->has_sync)
        msgpack_pack_uint32(&pk, p->sync_rank);
      else
        msgpack_pack_nil(&pk);
      msgpack_pack_uint64(&pk, p->sync_step);
      pk_nccl(&pk, p->has_nccl_id, p->nccl_id);
      msgpack_pack_array(&pk, p->nnodes);
      for (uint32_t i = 0; i < p->nnodes; i++) {
        msgpack_pack_array(&pk, 3);
        pk_bin(&pk, p->nodes[i].id.b, 16);
        pk_str(&pk, p->nodes[i].name);
        pk_addr(&pk, &p->nodes[i].control);
      }
      msgpack_pack_array(&pk, p->world);
      for (uint32_t i = 0; i < p->world; i++) pk_worker(&pk, &p->ranks[i], false);
      if (p->restarts) msgpack_pack_uint64(&pk, p->restarts);
      break;
    }
    case EA_RDZV_NACK:
      msgpack_pack_array(&pk, 2);
      pk_gen(&pk, &m->seen);
      msgpack_pack_uint8(&pk, m->nack);
      break;
    case EA_RDZV_DRAIN:
      msgpack_pack_array(&pk, 3);
      pk_str(&pk, m->name);
      pk_bin(&pk, m->target.b, 16);
      msgpack_pack_uint32(&pk, m->target_inc);
      break;
    case EA_RDZV_REPORT:
      msgpack_pack_array(&pk, 2);
      pk_gen(&pk, &m->accepted);
      msgpack_pack_uint8(&pk, m->flags);
      break;
    case EA_RDZV_STATE:
      msgpack_pack_array(&pk, m->plan.nnodes);
      for (uint32_t i = 0; i < m->plan.nnodes; i++) pk_bin(&pk, m->plan.nodes[i].id.b, 16);
      break;
    case EA_RDZV_BLAME:
      msgpack_pack_array(&pk, 1);
      pk_bin(&pk, m->peer.b, 16);
      break;
    default: /* ABORT, QUERY, RELEASE */
      msgpack_pack_nil(&pk);
      break;
  }
  if (ob.failed || !ob.sb.data) {
    msgpack_sbuffer_destroy(&ob.sb);
    return -ENOMEM;
  }
  *out = (uint8_t *)ob.sb.data;
  *len = ob.sb.size;
  return 0;
}

/* ---- decode ------------------------------------------------------------- */

#define TRY EA__MPR_TRY
#define NEED EA__MPR_NEED

static int rd_id(ea__mpr *r, ea_node_id *id, const char *field, const char **err) {
  const uint8_t *p;
  size_t n;
  TRY(ea__mpr_bin(r, 16, &p, &n), field);
  NEED(n == 16, field);
  memcpy(id->b, p, 16);
  return 0;
}

static int rd_gen(ea__mpr *r, ea_rdzv_gen *g, const char *field, const char **err) {
  if (ea__mpr_array_n(r, 2, field, err)) return -EA_EWIRE;
  TRY(ea__mpr_uint(r, UINT64_MAX, &g->term), field);
  return rd_id(r, &g->ctrl, field, err);
}

static int rd_addr(ea__mpr *r, ea_addr *a, const char *field, const char **err) {
  const uint8_t *p;
  size_t n;
  TRY(ea__mpr_bin(r, ADDR_BYTES, &p, &n), field);
  NEED(n == ADDR_BYTES, field);
  NEED(p[0] == 0 || p[0] == 4 || p[0] == 6, field);
  a->family = p[0];
  a->port = (uint16_t)(p[1] << 8 | p[2]);
  memcpy(a->ip, p + 3, 16);
  return 0;
}

/* A NUL-free string of at most EA_NAME_MAX-1 bytes into a C string. */
static int rd_name(ea__mpr *r, char out[EA_NAME_MAX], const char *field, const char **err) {
  TRY(ea__mpr_cstr(r, out, EA_NAME_MAX), field);
  return 0;
}

static int rd_nccl(ea__mpr *r, bool *has, uint8_t id[EA_RDZV_NCCL_ID_BYTES], const char **err) {
  int nil = ea__mpr_nil(r);
  TRY(nil < 0 ? nil : 0, "nccl_id");
  *has = nil == 0;
  if (nil) return 0;
  const uint8_t *p;
  size_t n;
  TRY(ea__mpr_bin(r, EA_RDZV_NCCL_ID_BYTES, &p, &n), "nccl_id");
  NEED(n == EA_RDZV_NCCL_ID_BYTES, "nccl_id");
  memcpy(id, p, n);
  return 0;
}

/* [listen, step, state_gen]; an agent from before state_gen sends the
 * first two (its states then count as of unknown generation). */
static int rd_worker(ea__mpr *r, ea_rdzv_worker *w, const char **err) {
  uint32_t n;
  TRY(ea__mpr_array(r, &n), "worker");
  NEED(n == 2 || n == 3, "worker");
  if (rd_addr(r, &w->listen, "worker.listen", err)) return -EA_EWIRE;
  TRY(ea__mpr_uint(r, UINT64_MAX, &w->step), "worker.step");
  w->state_gen = 0;
  if (n == 3) TRY(ea__mpr_uint(r, UINT64_MAX, &w->state_gen), "worker.state_gen");
  return 0;
}

/* An array header whose count must be in [lo, hi] and whose elements, each
 * at least min_bytes long, must fit in what is left. */
static int rd_count(ea__mpr *r, uint32_t lo, uint32_t hi, size_t min_bytes, uint32_t *n,
                    const char *field, const char **err) {
  TRY(ea__mpr_array(r, n), field);
  NEED(*n >= lo && *n <= hi, field);
  NEED((uint64_t)*n * min_bytes <= ea__mpr_left(r), field);
  return 0;
}

static int body_prepare(ea__mpr *r, ea_rdzv_msg *m, const char **err) {
  if (ea__mpr_array_n(r, 4, "prepare", err)) return -EA_EWIRE;
  if (ea__mpr_u32(r, EA_RDZV_MAX_WORLD, &m->world, "world", err)) return -EA_EWIRE;
  NEED(m->world >= 1, "world");
  if (ea__mpr_u32(r, EA_RDZV_MAX_WPN, &m->wpn, "wpn", err)) return -EA_EWIRE;
  NEED(m->wpn >= 1 && m->wpn <= m->world, "wpn");
  if (ea__mpr_u32(r, m->world - m->wpn, &m->rank_base, "rank_base", err)) return -EA_EWIRE;
  TRY(ea__mpr_bool(r, &m->boundary), "boundary");
  return 0;
}

/* A body array of `base` elements, or base + 1 with a trailing restart
 * count (see ea_rdzv.h): *extra tells which. */
static int rd_body(ea__mpr *r, uint32_t base, bool *extra, const char *field, const char **err) {
  uint32_t n;
  TRY(ea__mpr_array(r, &n), field);
  NEED(n == base || n == base + 1, field);
  *extra = n == base + 1;
  return 0;
}

static int body_ready(ea__mpr *r, ea_rdzv_msg *m, const char **err) {
  bool extra;
  if (rd_body(r, 3, &extra, "ready", err)) return -EA_EWIRE;
  if (rd_count(r, 1, EA_RDZV_MAX_WPN, WORKER_MIN_BYTES, &m->nworkers, "workers", err))
    return -EA_EWIRE;
  for (uint32_t i = 0; i < m->nworkers; i++)
    if (rd_worker(r, &m->workers[i], err)) return -EA_EWIRE;
  if (rd_nccl(r, &m->has_nccl_id, m->nccl_id, err)) return -EA_EWIRE;
  if (rd_gen(r, &m->formed, "formed", err)) return -EA_EWIRE;
  if (extra) {
    TRY(ea__mpr_uint(r, UINT64_MAX, &m->restarts), "restarts");
    NEED(m->restarts > 0, "restarts");
  }
  return 0;
}

static int body_commit(ea__mpr *r, ea_rdzv_msg *m, const char **err) {
  ea_rdzv_plan *p = &m->plan;
  bool extra;
  if (rd_body(r, 6, &extra, "commit", err)) return -EA_EWIRE;
  if (ea__mpr_u32(r, EA_RDZV_MAX_WPN, &p->wpn, "wpn", err)) return -EA_EWIRE;
  NEED(p->wpn >= 1, "wpn");
  int nil = ea__mpr_nil(r);
  TRY(nil < 0 ? nil : 0, "sync_rank");
  p->has_sync = nil == 0;
  if (p->has_sync && ea__mpr_u32(r, EA_RDZV_MAX_WORLD - 1, &p->sync_rank, "sync_rank", err))
    return -EA_EWIRE;
  TRY(ea__mpr_uint(r, UINT64_MAX, &p->sync_step), "sync_step");
  if (rd_nccl(r, &p->has_nccl_id, p->nccl_id, err)) return -EA_EWIRE;
  uint32_t nn, nw;
  if (rd_count(r, 1, EA_RDZV_MAX_NODES, NODE_MIN_BYTES, &nn, "nodes", err)) return -EA_EWIRE;
  NEED((uint64_t)nn * p->wpn <= EA_RDZV_MAX_WORLD, "nodes");
  p->nodes = calloc(nn, sizeof *p->nodes);
  if (!p->nodes) return -ENOMEM;
  p->nnodes = nn;
  for (uint32_t i = 0; i < nn; i++) {
    if (ea__mpr_array_n(r, 3, "node", err)) return -EA_EWIRE;
    if (rd_id(r, &p->nodes[i].id, "node.id", err)) return -EA_EWIRE;
    if (rd_name(r, p->nodes[i].name, "node.name", err)) return -EA_EWIRE;
    if (rd_addr(r, &p->nodes[i].control, "node.control", err)) return -EA_EWIRE;
  }
  if (rd_count(r, nn * p->wpn, nn * p->wpn, WORKER_MIN_BYTES, &nw, "ranks", err)) return -EA_EWIRE;
  p->ranks = calloc(nw, sizeof *p->ranks);
  if (!p->ranks) return -ENOMEM;
  p->world = nw;
  for (uint32_t i = 0; i < nw; i++)
    if (rd_worker(r, &p->ranks[i], err)) return -EA_EWIRE;
  NEED(!p->has_sync || p->sync_rank < p->world, "sync_rank");
  if (extra) {
    TRY(ea__mpr_uint(r, UINT64_MAX, &p->restarts), "restarts");
    NEED(p->restarts > 0, "restarts");
  }
  return 0;
}

static int body_state(ea__mpr *r, ea_rdzv_msg *m, const char **err) {
  uint32_t n;
  if (rd_count(r, 0, EA_RDZV_MAX_NODES, ID_MIN_BYTES, &n, "members", err)) return -EA_EWIRE;
  if (n) {
    m->plan.nodes = calloc(n, sizeof *m->plan.nodes);
    if (!m->plan.nodes) return -ENOMEM;
  }
  m->plan.nnodes = n;
  for (uint32_t i = 0; i < n; i++)
    if (rd_id(r, &m->plan.nodes[i].id, "member", err)) return -EA_EWIRE;
  return 0;
}

static int decode(ea__mpr *r, ea_rdzv_msg *m, const char **err) {
  if (ea__mpr_head(r, EA_WIRE_MAGIC_PLAIN, 5, EA_RDZV_WIRE_VERSION, EA_RDZV_PREPARE, EA_RDZV_BLAME,
                   &m->type, m->src.b, err))
    return -EA_EWIRE;
  uint64_t v;
  if (rd_gen(r, &m->gen, "gen", err)) return -EA_EWIRE;
  /* These name a generation; one numbered 0 ("none") is meaningless. */
  switch (m->type) {
    case EA_RDZV_PREPARE:
    case EA_RDZV_READY:
    case EA_RDZV_COMMIT:
    case EA_RDZV_NACK:
    case EA_RDZV_ABORT:
    case EA_RDZV_RELEASE:
    case EA_RDZV_BLAME:
      NEED(m->gen.term > 0, "gen");
      break;
    default:
      break;
  }
  int rc = 0;
  switch (m->type) {
    case EA_RDZV_PREPARE:
      rc = body_prepare(r, m, err);
      break;
    case EA_RDZV_READY:
      rc = body_ready(r, m, err);
      break;
    case EA_RDZV_COMMIT:
      rc = body_commit(r, m, err);
      m->plan.gen = m->gen;
      break;
    case EA_RDZV_NACK:
      if (ea__mpr_array_n(r, 2, "nack", err)) return -EA_EWIRE;
      if (rd_gen(r, &m->seen, "seen", err)) return -EA_EWIRE;
      TRY(ea__mpr_uint(r, EA_RDZV_NACK_CONFIG, &v), "why");
      NEED(v >= EA_RDZV_NACK_STALE, "why");
      m->nack = (uint8_t)v;
      break;
    case EA_RDZV_DRAIN:
      /* [name] alone is a DRAIN of an older agent, which names no
       * incarnation and so could apply to any later run: refused. */
      if (ea__mpr_array_n(r, 3, "drain (without target id and incarnation: an older agent)", err))
        return -EA_EWIRE;
      rc = rd_name(r, m->name, "name", err);
      if (rc == 0) rc = rd_id(r, &m->target, "target", err);
      if (rc == 0) {
        TRY(ea__mpr_uint(r, UINT32_MAX, &v), "target incarnation");
        m->target_inc = (uint32_t)v;
      }
      break;
    case EA_RDZV_REPORT:
      if (ea__mpr_array_n(r, 2, "report", err)) return -EA_EWIRE;
      if (rd_gen(r, &m->accepted, "accepted", err)) return -EA_EWIRE;
      TRY(ea__mpr_uint(r, EA_RDZV_F_ALL, &v), "flags");
      m->flags = (uint8_t)v;
      break;
    case EA_RDZV_STATE:
      rc = body_state(r, m, err);
      m->plan.gen = m->gen;
      break;
    case EA_RDZV_BLAME:
      if (ea__mpr_array_n(r, 1, "blame", err)) return -EA_EWIRE;
      rc = rd_id(r, &m->peer, "peer", err);
      break;
    default: /* ABORT, QUERY, RELEASE: body nil */
      NEED(ea__mpr_nil(r) == 1, "body");
      break;
  }
  if (rc) return rc;
  NEED(ea__mpr_left(r) == 0, "trailing bytes");
  return 0;
}

int ea_rdzv_decode(const uint8_t *buf, size_t len, ea_rdzv_msg *m, const char **err) {
  const char *dummy;
  if (!err) err = &dummy;
  memset(m, 0, sizeof *m);
  ea__mpr r;
  ea__mpr_init(&r, buf, len);
  int rc = decode(&r, m, err);
  if (rc == -ENOMEM) *err = "out of memory";
  if (rc) ea_rdzv_msg_release(m);
  return rc;
}

void ea_rdzv_msg_release(ea_rdzv_msg *m) {
  free(m->plan.nodes);
  free(m->plan.ranks);
  m->plan.nodes = NULL;
  m->plan.ranks = NULL;
  m->plan.nnodes = m->plan.world = 0;
}
