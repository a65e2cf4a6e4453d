/* probe_wire.c — the checkpoint-directory probe's messages (PROBE_REQ,
 * PROBE_ANS; drawn in probe.h).
 *
 * Same habits as the checkpoint reports (ckpt_wire.c) and the job's
 * messages (job_wire.c): the control channel's framing and sealing, a type
 * range of their own (0x40…), a positional msgpack array with a version,
 * every field required, an encoder writing into the caller's fixed buffer
 * that refuses what the decoder would, and a decoder that pulls one value
 * at a time off a bounded cursor, allocates nothing and names the field
 * that was wrong.
 */
#include "probe.h"

#include "ea_mpread.h"

#include <errno.h>
#include <msgpack.h>
#include <string.h>

#define TRY EA__MPR_TRY
#define NEED EA__MPR_NEED
#define ADDR_BYTES 19

const char *ea__probe_result_str(uint8_t r) {
  switch (r) {
    case EA__PROBE_SEEN:
      return "seen";
    case EA__PROBE_ABSENT:
      return "absent";
    case EA__PROBE_DIFFERS:
      return "differs";
    case EA__PROBE_ERROR:
      return "error";
    default:
      return "?";
  }
}

bool ea__probe_file_ok(const char *name) {
  const size_t pl = sizeof EA__PROBE_FILE_PREFIX - 1;
  if (strncmp(name, EA__PROBE_FILE_PREFIX, pl) != 0) return false;
  size_t n = strlen(name + pl);
  if (n < 1 || n > 32) return false;
  for (const char *p = name + pl; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

static bool text_ok(const char *s, size_t cap) {
  return strnlen(s, cap) < cap;
}

static const char *check(const ea__probe_msg *m) {
  switch (m->type) {
    case EA__PROBE_REQ:
      if (m->reply_to.family != 4 && m->reply_to.family != 6) return "reply_to";
      if (m->reply_to.port == 0) return "reply_to";
      if (!text_ok(m->file, sizeof m->file) || !ea__probe_file_ok(m->file)) return "file";
      if (!text_ok(m->token, sizeof m->token) || !m->token[0]) return "token";
      return NULL;
    case EA__PROBE_ANS:
      if (m->result > EA__PROBE_ERROR) return "result";
      if ((m->result == EA__PROBE_ERROR) != (m->error != 0) || m->error > 4095) return "errno";
      if (!text_ok(m->node, sizeof m->node)) return "node";
      if (!text_ok(m->dir, sizeof m->dir)) return "dir";
      return NULL;
    default:
      return "type";
  }
}

bool ea__probe_wire_is(const uint8_t *buf, size_t len) {
  return ea__mpr_family_is(buf, len, EA_WIRE_MAGIC_PLAIN, EA__PROBE_FAMILY);
}

/* ---- encode -------------------------------------------------------------------- */

static int pk_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

int ea__probe_encode(const ea__probe_msg *m, uint8_t *buf, size_t cap, size_t *len) {
  if (check(m)) return -EINVAL;
  ea__mpw_fixbuf f = {.buf = buf, .cap = cap, .len = 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, ea__mpw_fixbuf_write);
  int bad = ea__mpw_head(&pk, EA_WIRE_MAGIC_PLAIN, 5, EA__PROBE_WIRE_VERSION, m->type, m->src.b);
  bad |= msgpack_pack_uint64(&pk, m->nonce);
  if (m->type == EA__PROBE_REQ) {
    uint8_t a[ADDR_BYTES] = {0};
    a[0] = m->reply_to.family;
    a[1] = (uint8_t)(m->reply_to.port >> 8);
    a[2] = (uint8_t)m->reply_to.port;
    memcpy(a + 3, m->reply_to.ip, 16);
    bad |= msgpack_pack_array(&pk, 3);
    bad |= msgpack_pack_bin(&pk, ADDR_BYTES) | msgpack_pack_bin_body(&pk, a, ADDR_BYTES);
    bad |= pk_str(&pk, m->file);
    bad |= pk_str(&pk, m->token);
  } else {
    bad |= msgpack_pack_array(&pk, 5);
    bad |= msgpack_pack_uint8(&pk, m->result);
    bad |= msgpack_pack_uint32(&pk, m->error);
    bad |= pk_str(&pk, m->node);
    bad |= pk_str(&pk, m->dir);
    bad |= msgpack_pack_uint64(&pk, m->wall_us);
  }
  if (bad) return -EMSGSIZE;
  *len = f.len;
  return 0;
}

/* ---- decode -------------------------------------------------------------------- */

static int decode(ea__mpr *r, void *mv, const char **err) {
  ea__probe_msg *m = mv;
  if (ea__mpr_head(r, EA_WIRE_MAGIC_PLAIN, 5, EA__PROBE_WIRE_VERSION, EA__PROBE_REQ, EA__PROBE_ANS,
                   &m->type, m->src.b, err))
    return -EA_EWIRE;
  const uint8_t *p;
  size_t n;
  uint64_t v;
  TRY(ea__mpr_uint(r, UINT64_MAX, &m->nonce), "nonce");
  if (m->type == EA__PROBE_REQ) {
    if (ea__mpr_array_n(r, 3, "body", err)) return -EA_EWIRE;
    TRY(ea__mpr_bin(r, ADDR_BYTES, &p, &n), "reply_to");
    NEED(n == ADDR_BYTES && (p[0] == 4 || p[0] == 6), "reply_to");
    m->reply_to.family = p[0];
    m->reply_to.port = (uint16_t)(p[1] << 8 | p[2]);
    memcpy(m->reply_to.ip, p + 3, 16);
    NEED(m->reply_to.port != 0, "reply_to");
    TRY(ea__mpr_cstr(r, m->file, sizeof m->file), "file");
    NEED(ea__probe_file_ok(m->file), "file");
    TRY(ea__mpr_cstr(r, m->token, sizeof m->token), "token");
    NEED(m->token[0], "token");
  } else {
    if (ea__mpr_array_n(r, 5, "body", err)) return -EA_EWIRE;
    TRY(ea__mpr_uint(r, EA__PROBE_ERROR, &v), "result");
    m->result = (uint8_t)v;
    if (ea__mpr_u32(r, 4095, &m->error, "errno", err)) return -EA_EWIRE;
    NEED((m->result == EA__PROBE_ERROR) == (m->error != 0), "errno");
    TRY(ea__mpr_cstr(r, m->node, sizeof m->node), "node");
    TRY(ea__mpr_cstr(r, m->dir, sizeof m->dir), "dir");
    TRY(ea__mpr_uint(r, UINT64_MAX, &m->wall_us), "wall_us");
  }
  NEED(ea__mpr_left(r) == 0, "trailing bytes");
  return 0;
}

int ea__probe_decode(const uint8_t *buf, size_t len, ea__probe_msg *m, const char **err) {
  return ea__mpr_decode(buf, len, m, sizeof *m, decode, err);
}
