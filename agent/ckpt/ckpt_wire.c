/* ckpt_wire.c — the checkpoint control messages between an agent and the
 * controller (SHARD_DURABLE, SHARD_FAILED; drawn in ckpt_svc.h).
 *
 * They travel on the rendezvous control channel, in its framing, so they
 * share its connection, sealing and limits; a type range of their own
 * (0x20…) lets the receiver pick the decoder from the type byte without a
 * second port or a flag.  The layout copies the rendezvous codec's habits:
 * a positional msgpack array with a version, every field required, and the
 * encoder writing into a caller's fixed buffer that refuses to grow (the
 * largest message is known: EA__CKPT_WIRE_MAX).  The decoder pulls one value
 * at a time with the bounded reader of ea_mpread.h, allocates
 * nothing, and checks everything the controller relies on when it builds a
 * manifest from these reports: the shard range is exactly
 * ea_ckpt_shard_range's, the block size is the writer's for that length
 * and the block hash count matches it.  A report that passes can be handed
 * to ea_ckpt_manifest_set_shard as it is.
 */
#include "ckpt_svc.h"

#include "ea_mpread.h"

#include <errno.h>
#include <msgpack.h>
#include <string.h>

#define BODY_DURABLE 14
#define BODY_FAILED 7
#define BODY_SAVE_NOW 2

const char *ea__ckpt_msg_type_str(uint8_t type) {
  switch (type) {
    case EA__CKPT_SHARD_DURABLE:
      return "SHARD_DURABLE";
    case EA__CKPT_SHARD_FAILED:
      return "SHARD_FAILED";
    case EA__CKPT_SAVE_NOW:
      return "SAVE_NOW";
    default:
      return "?";
  }
}

/* ---- the bounds, shared by encoder and decoder ----------------------------- */

static bool range_ok(const ea__ckpt_msg *m) {
  if (m->world < 1 || m->world > EA_CKPT_MAX_WORLD || m->rank >= m->world) return false;
  uint64_t off, len;
  ea_ckpt_shard_range(m->total, m->world, m->rank, &off, &len);
  return off == m->offset && len == m->length;
}

static bool blocks_ok(const ea__ckpt_msg *m) {
  if (m->block_size != ea_ckpt_block_size(m->length)) return false;
  uint64_t want = (m->length + m->block_size - 1) / m->block_size;
  return m->n_blocks == want && m->n_blocks <= EA_CKPT_MAX_BLOCKS;
}

static const char *check(const ea__ckpt_msg *m) {
  switch (m->type) {
    case EA__CKPT_SHARD_DURABLE:
      if (!range_ok(m)) return "range";
      if (!blocks_ok(m)) return "blocks";
      return NULL;
    case EA__CKPT_SHARD_FAILED:
      if (m->world < 1 || m->world > EA_CKPT_MAX_WORLD || m->rank >= m->world) return "rank";
      /* not carried: abandoning a checkpoint needs no range */
      if (m->total || m->offset || m->length) return "range";
      if (m->kind < EA__CKPT_FAIL_WRITE || m->kind > EA__CKPT_FAIL_INVALID) return "kind";
      if (m->error == 0 || m->error > 4095) return "errno";
      if (strnlen(m->message, sizeof m->message) >= sizeof m->message) return "message";
      return NULL;
    case EA__CKPT_SAVE_NOW:
      return m->gen ? NULL : "gen";
    default:
      return "type";
  }
}

/* ---- encode ------------------------------------------------------------- */

int ea__ckpt_encode(const ea__ckpt_msg *m, uint8_t *buf, size_t cap, size_t *len) {
  if (check(m)) return -EINVAL;
  ea__mpw_fixbuf f = {.buf = buf, .cap = cap, .len = 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, ea__mpw_fixbuf_write);
  /* packer results are OR'ed: any refusal means "does not fit" */
  int bad = ea__mpw_head(&pk, EA_WIRE_MAGIC_PLAIN, 4, EA__CKPT_WIRE_VERSION, m->type, m->src.b);
  const bool durable = m->type == EA__CKPT_SHARD_DURABLE;
  if (m->type == EA__CKPT_SAVE_NOW) {
    bad |= msgpack_pack_array(&pk, BODY_SAVE_NOW);
    bad |= msgpack_pack_uint64(&pk, m->gen);
    bad |= msgpack_pack_uint64(&pk, m->step);
    if (bad) return -EMSGSIZE;
    *len = f.len;
    return 0;
  }
  bad |= msgpack_pack_array(&pk, durable ? BODY_DURABLE : BODY_FAILED);
  bad |= msgpack_pack_uint64(&pk, m->gen);
  bad |= msgpack_pack_uint64(&pk, m->step);
  bad |= msgpack_pack_uint32(&pk, m->rank);
  bad |= msgpack_pack_uint32(&pk, m->world);
  if (durable) {
    bad |= msgpack_pack_uint64(&pk, m->total);
    bad |= msgpack_pack_uint64(&pk, m->offset);
    bad |= msgpack_pack_uint64(&pk, m->length);
    bad |= msgpack_pack_uint64(&pk, m->hash);
    bad |= msgpack_pack_uint64(&pk, m->block_size);
    bad |= msgpack_pack_array(&pk, m->n_blocks);
    for (uint32_t i = 0; i < m->n_blocks; i++) bad |= msgpack_pack_uint64(&pk, m->block_hash[i]);
    bad |= msgpack_pack_uint64(&pk, m->write_us);
    bad |= msgpack_pack_uint64(&pk, m->stall_us);
    bad |= msgpack_pack_uint64(&pk, m->wait_us);
    bad |= m->direct ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
  } else {
    bad |= msgpack_pack_uint8(&pk, m->kind);
    bad |= msgpack_pack_uint32(&pk, m->error);
    size_t n = strlen(m->message);
    bad |= msgpack_pack_str(&pk, n);
    bad |= msgpack_pack_str_body(&pk, m->message, n);
  }
  if (bad) return -EMSGSIZE;
  *len = f.len;
  return 0;
}

/* ---- decode ------------------------------------------------------------- */

#define TRY EA__MPR_TRY
#define NEED EA__MPR_NEED

static int rd_u64(ea__mpr *r, uint64_t *v, const char *field, const char **err) {
  TRY(ea__mpr_uint(r, UINT64_MAX, v), field);
  return 0;
}

bool ea__ckpt_wire_is(const uint8_t *buf, size_t len) {
  return ea__mpr_family_is(buf, len, EA_WIRE_MAGIC_PLAIN, EA__CKPT_FAMILY);
}

static int decode(ea__mpr *r, void *mv, const char **err) {
  ea__ckpt_msg *m = mv;
  if (ea__mpr_head(r, EA_WIRE_MAGIC_PLAIN, 4, EA__CKPT_WIRE_VERSION, EA__CKPT_SHARD_DURABLE,
                   EA__CKPT_SAVE_NOW, &m->type, m->src.b, err))
    return -EA_EWIRE;
  if (m->type == EA__CKPT_SAVE_NOW) {
    if (ea__mpr_array_n(r, BODY_SAVE_NOW, "body", err)) return -EA_EWIRE;
    if (rd_u64(r, &m->gen, "gen", err) || rd_u64(r, &m->step, "step", err)) return -EA_EWIRE;
    NEED(m->gen != 0, "gen");
    NEED(ea__mpr_left(r) == 0, "trailing bytes");
    return 0;
  }
  const bool durable = m->type == EA__CKPT_SHARD_DURABLE;
  if (ea__mpr_array_n(r, durable ? BODY_DURABLE : BODY_FAILED, "body", err)) return -EA_EWIRE;
  if (rd_u64(r, &m->gen, "gen", err) || rd_u64(r, &m->step, "step", err)) return -EA_EWIRE;
  if (ea__mpr_u32(r, EA_CKPT_MAX_WORLD - 1, &m->rank, "rank", err)) return -EA_EWIRE;
  if (ea__mpr_u32(r, EA_CKPT_MAX_WORLD, &m->world, "world", err)) return -EA_EWIRE;
  NEED(m->world >= 1 && m->rank < m->world, "rank");
  if (durable) {
    if (rd_u64(r, &m->total, "total", err) || rd_u64(r, &m->offset, "offset", err) ||
        rd_u64(r, &m->length, "length", err))
      return -EA_EWIRE;
    NEED(range_ok(m), "length");
    if (rd_u64(r, &m->hash, "hash", err) || rd_u64(r, &m->block_size, "block_size", err))
      return -EA_EWIRE;
    NEED(m->block_size == ea_ckpt_block_size(m->length), "block_size");
    uint32_t nb;
    TRY(ea__mpr_array(r, &nb), "block_hash");
    NEED(nb == (m->length + m->block_size - 1) / m->block_size && nb <= EA_CKPT_MAX_BLOCKS,
         "block_hash");
    m->n_blocks = nb;
    for (uint32_t i = 0; i < nb; i++)
      if (rd_u64(r, &m->block_hash[i], "block_hash", err)) return -EA_EWIRE;
    if (rd_u64(r, &m->write_us, "write_us", err) || rd_u64(r, &m->stall_us, "stall_us", err) ||
        rd_u64(r, &m->wait_us, "wait_us", err))
      return -EA_EWIRE;
    TRY(ea__mpr_bool(r, &m->direct), "direct");
  } else {
    uint32_t x;
    if (ea__mpr_u32(r, EA__CKPT_FAIL_INVALID, &x, "kind", err)) return -EA_EWIRE;
    NEED(x >= EA__CKPT_FAIL_WRITE, "kind");
    m->kind = (uint8_t)x;
    if (ea__mpr_u32(r, 4095, &m->error, "errno", err)) return -EA_EWIRE;
    NEED(m->error > 0, "errno");
    TRY(ea__mpr_cstr(r, m->message, sizeof m->message), "message");
  }
  NEED(ea__mpr_left(r) == 0, "trailing bytes");
  return 0;
}

int ea__ckpt_decode(const uint8_t *buf, size_t len, ea__ckpt_msg *m, const char **err) {
  return ea__mpr_decode(buf, len, m, sizeof *m, decode, err);
}
