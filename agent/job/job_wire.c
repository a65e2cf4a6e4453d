/* job_wire.c — the job's control messages (JOB_EXIT, JOB_DONE, JOB_END,
 * JOB_PACE, JOB_CKPT_AGAIN, JOB_RESTORE, JOB_LINK_*; drawn in job.h).
 *
 * Same habits as the checkpoint reports (ckpt_wire.c): the rendezvous
 * framing and sealing, a type range of their own (0x30…), a positional
 * msgpack array with a version, every field required, an encoder that
 * writes into the caller's fixed buffer and refuses what the decoder would,
 * and a decoder that pulls one value at a time off a bounded cursor,
 * allocates nothing and names the field that was wrong.
 */
#include "job.h"

#include "ea_mpread.h"
#include "ea_wire.h"

#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <string.h>

#define TRY EA__MPR_TRY
#define NEED EA__MPR_NEED

/* ---- the bounds, shared by encoder and decoder --------------------------------- */

static bool text_ok(const char *s, size_t cap) {
  return strnlen(s, cap) < cap;
}

static const char *check_failure(const ea__job_failure *f) {
  if (!text_ok(f->node, sizeof f->node)) return "node";
  if (f->source > EA__JOB_SRC_STDERR) return "source";
  if (!f->has_code && (f->signal == 0 || f->signal > 255)) return "signal";
  if (f->has_code && f->signal) return "signal";
  if (!text_ok(f->message, sizeof f->message)) return "message";
  return NULL;
}

static const char *check(const ea__job_msg *m) {
  switch (m->type) {
    case EA__JOB_EXIT:
      return check_failure(&m->f);
    case EA__JOB_DONE:
    case EA__JOB_CKPT_AGAIN:
    case EA__JOB_RESTORE:
    case EA__JOB_LINK_PING:
    case EA__JOB_LINK_PONG:
    case EA__JOB_LINK_DOWN:
      return m->gen ? NULL : "gen";
    case EA__JOB_END:
      if (m->kind < EA__JOB_SUCCESS || m->kind > EA__JOB_FINAL_CKPT) return "kind";
      if (!text_ok(m->reason, sizeof m->reason)) return "reason";
      return m->has_failure ? check_failure(&m->f) : NULL;
    case EA__JOB_PACE:
      if (!m->gen) return "gen";
      if (!m->world || m->world > EA_RDZV_MAX_WORLD) return "world";
      if (!m->npace || m->npace > EA_RDZV_MAX_WPN) return "pace";
      for (uint32_t i = 0; i < m->npace; i++) {
        if (m->pace[i].rank >= m->world) return "rank";
        if (!isfinite(m->pace[i].compute_s) || m->pace[i].compute_s < 0) return "compute";
      }
      return NULL;
    default:
      return "type";
  }
}

bool ea__job_wire_is(const uint8_t *buf, size_t len) {
  return ea__mpr_family_is(buf, len, EA_WIRE_MAGIC_PLAIN, EA__JOB_FAMILY);
}

/* ---- encode ---------------------------------------------------------------------- */

static int pk_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

static int pk_failure(msgpack_packer *pk, const ea__job_failure *f) {
  int bad = msgpack_pack_array(pk, 8);
  bad |= msgpack_pack_uint64(pk, f->gen);
  bad |= msgpack_pack_uint32(pk, f->rank);
  bad |= pk_str(pk, f->node);
  bad |= f->has_code ? msgpack_pack_uint8(pk, f->code) : msgpack_pack_nil(pk);
  bad |= msgpack_pack_uint32(pk, f->signal);
  bad |= msgpack_pack_uint8(pk, f->source);
  bad |= msgpack_pack_uint64(pk, f->at_ms);
  bad |= pk_str(pk, f->message);
  return bad;
}

int ea__job_encode(const ea__job_msg *m, uint8_t *buf, size_t cap, size_t *len) {
  if (check(m)) return -EINVAL;
  ea__mpw_fixbuf f = {.buf = buf, .cap = cap, .len = 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, ea__mpw_fixbuf_write);
  int bad = ea__mpw_head(&pk, EA_WIRE_MAGIC_PLAIN, 4, EA__JOB_WIRE_VERSION, m->type, m->src.b);
  switch (m->type) {
    case EA__JOB_EXIT:
      bad |= pk_failure(&pk, &m->f);
      break;
    case EA__JOB_DONE:
    case EA__JOB_CKPT_AGAIN:
    case EA__JOB_RESTORE:
      bad |= msgpack_pack_array(&pk, 2);
      bad |= msgpack_pack_uint64(&pk, m->gen);
      bad |= msgpack_pack_uint64(&pk, m->step);
      break;
    case EA__JOB_LINK_PING:
    case EA__JOB_LINK_PONG:
      bad |= msgpack_pack_array(&pk, 2);
      bad |= msgpack_pack_uint64(&pk, m->gen);
      bad |= msgpack_pack_uint64(&pk, m->nonce);
      break;
    case EA__JOB_LINK_DOWN:
      bad |= msgpack_pack_array(&pk, 2);
      bad |= msgpack_pack_uint64(&pk, m->gen);
      bad |= msgpack_pack_bin(&pk, sizeof m->peer.b);
      bad |= msgpack_pack_bin_body(&pk, m->peer.b, sizeof m->peer.b);
      break;
    case EA__JOB_PACE:
      bad |= msgpack_pack_array(&pk, 3);
      bad |= msgpack_pack_uint64(&pk, m->gen);
      bad |= msgpack_pack_uint32(&pk, m->world);
      bad |= msgpack_pack_array(&pk, m->npace);
      for (uint32_t i = 0; i < m->npace; i++) {
        bad |= msgpack_pack_array(&pk, 2);
        bad |= msgpack_pack_uint32(&pk, m->pace[i].rank);
        bad |= msgpack_pack_double(&pk, m->pace[i].compute_s);
      }
      break;
    default: /* END */
      bad |= msgpack_pack_array(&pk, 3);
      bad |= msgpack_pack_uint8(&pk, m->kind);
      bad |= pk_str(&pk, m->reason);
      bad |= m->has_failure ? pk_failure(&pk, &m->f) : msgpack_pack_nil(&pk);
      break;
  }
  if (bad) return -EMSGSIZE;
  *len = f.len;
  return 0;
}

/* ---- decode ------------------------------------------------------------------------ */

static int rd_failure(ea__mpr *r, ea__job_failure *f, const char **err) {
  if (ea__mpr_array_n(r, 8, "failure", err)) return -EA_EWIRE;
  TRY(ea__mpr_uint(r, UINT64_MAX, &f->gen), "gen");
  if (ea__mpr_u32(r, UINT32_MAX, &f->rank, "rank", err)) return -EA_EWIRE;
  TRY(ea__mpr_cstr(r, f->node, sizeof f->node), "node");
  int nil = ea__mpr_nil(r);
  TRY(nil < 0 ? nil : 0, "code");
  f->has_code = nil == 0;
  if (f->has_code) {
    uint64_t c;
    TRY(ea__mpr_uint(r, 255, &c), "code");
    f->code = (uint8_t)c;
  }
  if (ea__mpr_u32(r, 255, &f->signal, "signal", err)) return -EA_EWIRE;
  NEED(f->has_code ? f->signal == 0 : f->signal > 0, "signal");
  uint32_t src;
  if (ea__mpr_u32(r, EA__JOB_SRC_STDERR, &src, "source", err)) return -EA_EWIRE;
  f->source = (uint8_t)src;
  TRY(ea__mpr_uint(r, UINT64_MAX, &f->at_ms), "at_ms");
  TRY(ea__mpr_cstr(r, f->message, sizeof f->message), "message");
  return 0;
}

static int decode(ea__mpr *r, void *mv, const char **err) {
  ea__job_msg *m = mv;
  if (ea__mpr_head(r, EA_WIRE_MAGIC_PLAIN, 4, EA__JOB_WIRE_VERSION, EA__JOB_EXIT, EA__JOB_LINK_DOWN,
                   &m->type, m->src.b, err))
    return -EA_EWIRE;
  switch (m->type) {
    case EA__JOB_EXIT:
      if (rd_failure(r, &m->f, err)) return -EA_EWIRE;
      break;
    case EA__JOB_DONE:
    case EA__JOB_CKPT_AGAIN:
    case EA__JOB_RESTORE:
      if (ea__mpr_array_n(r, 2, "done", err)) return -EA_EWIRE;
      TRY(ea__mpr_uint(r, UINT64_MAX, &m->gen), "gen");
      NEED(m->gen > 0, "gen");
      TRY(ea__mpr_uint(r, UINT64_MAX, &m->step), "step");
      break;
    case EA__JOB_LINK_PING:
    case EA__JOB_LINK_PONG:
      if (ea__mpr_array_n(r, 2, "link", err)) return -EA_EWIRE;
      TRY(ea__mpr_uint(r, UINT64_MAX, &m->gen), "gen");
      NEED(m->gen > 0, "gen");
      TRY(ea__mpr_uint(r, UINT64_MAX, &m->nonce), "nonce");
      break;
    case EA__JOB_LINK_DOWN: {
      if (ea__mpr_array_n(r, 2, "link", err)) return -EA_EWIRE;
      TRY(ea__mpr_uint(r, UINT64_MAX, &m->gen), "gen");
      NEED(m->gen > 0, "gen");
      const uint8_t *p;
      size_t n;
      TRY(ea__mpr_bin(r, sizeof m->peer.b, &p, &n), "peer");
      NEED(n == sizeof m->peer.b, "peer");
      memcpy(m->peer.b, p, n);
      break;
    }
    case EA__JOB_PACE: {
      if (ea__mpr_array_n(r, 3, "pace", err)) return -EA_EWIRE;
      TRY(ea__mpr_uint(r, UINT64_MAX, &m->gen), "gen");
      NEED(m->gen > 0, "gen");
      if (ea__mpr_u32(r, EA_RDZV_MAX_WORLD, &m->world, "world", err)) return -EA_EWIRE;
      NEED(m->world > 0, "world");
      uint32_t n;
      TRY(ea__mpr_array(r, &n), "pace");
      NEED(n > 0 && n <= EA_RDZV_MAX_WPN, "pace");
      for (uint32_t i = 0; i < n; i++) {
        if (ea__mpr_array_n(r, 2, "pace", err)) return -EA_EWIRE;
        if (ea__mpr_u32(r, m->world - 1, &m->pace[i].rank, "rank", err)) return -EA_EWIRE;
        TRY(ea__mpr_float(r, &m->pace[i].compute_s), "compute");
        NEED(isfinite(m->pace[i].compute_s) && m->pace[i].compute_s >= 0, "compute");
      }
      m->npace = n;
      break;
    }
    default: {
      if (ea__mpr_array_n(r, 3, "end", err)) return -EA_EWIRE;
      uint32_t k;
      if (ea__mpr_u32(r, EA__JOB_FINAL_CKPT, &k, "kind", err)) return -EA_EWIRE;
      NEED(k >= EA__JOB_SUCCESS, "kind");
      m->kind = (uint8_t)k;
      TRY(ea__mpr_cstr(r, m->reason, sizeof m->reason), "reason");
      int nil = ea__mpr_nil(r);
      TRY(nil < 0 ? nil : 0, "failure");
      m->has_failure = nil == 0;
      if (m->has_failure && rd_failure(r, &m->f, err)) return -EA_EWIRE;
      break;
    }
  }
  NEED(ea__mpr_left(r) == 0, "trailing bytes");
  return 0;
}

int ea__job_decode(const uint8_t *buf, size_t len, ea__job_msg *m, const char **err) {
  return ea__mpr_decode(buf, len, m, sizeof *m, decode, err);
}
