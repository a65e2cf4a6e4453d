/* The gossip wire codec: ea_msg (one UDP packet) and push-pull state (one TCP
 * frame) to and from msgpack, laid out as drawn at the top of ea_wire.h.
 *
 * Encoding goes through msgpack-c's packer over a fixed buffer whose write
 * callback refuses to pass `cap`, so an oversized message fails cleanly with
 * -EMSGSIZE instead of being truncated.  The SWIM core fills packets up to a
 * byte budget, so ea_wire_update_size() and ea_wire_msg_base_size() compute
 * the exact size the packer will produce (msgpack-c always picks the smallest
 * int/str/bin/array header; the size helpers mirror that choice and the unit
 * test checks them against the packer).  The one deliberate exception is the
 * update array of a message: its header is always array16 (3 bytes), so that
 * a message's size is base + the sum of its update sizes whatever the count
 * (a fixarray would be 2 bytes smaller below 16 updates and break that sum).
 *
 * Decoding never touches msgpack-c's unpacker (it allocates from wire counts,
 * see ea_mpread.h); it pulls values with the bounded reader in base/mpread.c and
 * checks every type, length and range.  Errors come back as -EA_EWIRE with a
 * static string "field: problem".  The encoder refuses (-EINVAL) any struct
 * the decoder would reject, so whatever decodes re-encodes to an equal struct
 * (the fuzz harness asserts that).
 */
#include "ea_wire.h"
#include "ea_mpread.h"

#include <arpa/inet.h>
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Field counts of the arrays in the diagram. */
#define MSG_FIELDS 8
#define UPDATE_FIELDS 5
#define META_FIELDS 7
#define STATE_FIELDS 4
#define ID_BYTES 16
#define ADDR_BYTES 19 /* family(1) port(2) ip(16): see addr_pack */

/* Smallest possible encoded update: fixarray, state and incarnation as
 * fixints, two bin8 ids, nil meta.  Bounds a claimed count by the bytes left. */
#define UPDATE_MIN_BYTES (1 + 1 + 1 + (2 + ID_BYTES) * 2 + 1)

/* ---- sizes (mirror msgpack-c's header choices) ------------------------ */

static size_t uint_size(uint64_t v) {
  if (v < 128) return 1;
  if (v < (1u << 8)) return 2;
  if (v < (1u << 16)) return 3;
  if (v <= UINT32_MAX) return 5;
  return 9;
}

static size_t str_hdr(size_t l) {
  if (l < 32) return 1;
  if (l < 256) return 2;
  if (l < 65536) return 3;
  return 5;
}

static size_t array_hdr(size_t n) {
  if (n < 16) return 1;
  if (n < 65536) return 3;
  return 5;
}

/* A struct string may lack its NUL if the caller filled every byte: never
 * read past the field, and send at most size-1 bytes (the decoder's limit). */
#define SLEN(field) strnlen((field), sizeof(field) - 1)

#define BIN_SIZE(n) (2 + (n)) /* bin8 header: every bin here is < 256 bytes */

static size_t meta_size(const ea_meta *mt) {
  size_t ln = SLEN(mt->name), lr = SLEN(mt->role), lt = SLEN(mt->tags), lv = SLEN(mt->version);
  return 1 + str_hdr(ln) + ln + BIN_SIZE(ADDR_BYTES) * 2 + str_hdr(lr) + lr + str_hdr(lt) + lt +
         str_hdr(lv) + lv + uint_size(mt->last_gen);
}

size_t ea_wire_update_size(const ea_update *u) {
  return 1 + uint_size(u->state) + uint_size(u->incarnation) + BIN_SIZE(ID_BYTES) * 2 +
         (u->has_meta   ? meta_size(&u->meta)
          : u->meta_inc ? uint_size(u->meta_inc)
                        : 1);
}

size_t ea_wire_msg_base_size(const ea_msg *m) {
  return 1 /* magic */ + 1 /* fixarray */ + uint_size(EA_WIRE_VERSION) + uint_size(m->type) +
         uint_size(m->seq) + BIN_SIZE(ID_BYTES) * 2 + BIN_SIZE(ADDR_BYTES) * 2 +
         3 /* array16 of updates, always */;
}

/* ---- encoding --------------------------------------------------------- */

#define P(expr)                        \
  do {                                 \
    if ((expr) != 0) return -EMSGSIZE; \
  } while (0)

static int valid_family(uint8_t f) {
  return f == 0 || f == 4 || f == 6;
}

/* family(1) port(2, BE) ip(16); bytes past the family's address are zero,
 * and an address of family 0 ("none") is all zeros. */
static void addr_pack(const ea_addr *a, uint8_t out[ADDR_BYTES]) {
  memset(out, 0, ADDR_BYTES);
  if (a->family == 0) return;
  out[0] = a->family;
  out[1] = (uint8_t)(a->port >> 8);
  out[2] = (uint8_t)a->port;
  memcpy(out + 3, a->ip, a->family == 4 ? 4 : 16);
}

static int pack_bin(msgpack_packer *pk, const void *p, size_t n) {
  if (msgpack_pack_bin(pk, n)) return -1;
  return msgpack_pack_bin_body(pk, p, n);
}

static int pack_addr(msgpack_packer *pk, const ea_addr *a) {
  uint8_t b[ADDR_BYTES];
  addr_pack(a, b);
  return pack_bin(pk, b, sizeof b);
}

static int pack_str(msgpack_packer *pk, const char *s, size_t n) {
  if (msgpack_pack_str(pk, n)) return -1;
  return msgpack_pack_str_body(pk, s, n);
}

static int check_update(const ea_update *u) {
  if (u->state > EA_STATE_LEFT) return -EINVAL;
  if (u->has_meta && u->meta_inc) return -EINVAL; /* one slot: meta or an incarnation */
  if (u->has_meta &&
      (!valid_family(u->meta.gossip.family) || !valid_family(u->meta.control.family)))
    return -EINVAL;
  return 0;
}

static int pack_update(msgpack_packer *pk, const ea_update *u) {
  P(msgpack_pack_array(pk, UPDATE_FIELDS));
  P(msgpack_pack_uint8(pk, u->state));
  P(msgpack_pack_uint32(pk, u->incarnation));
  P(pack_bin(pk, u->id.b, ID_BYTES));
  P(pack_bin(pk, u->from.b, ID_BYTES));
  if (!u->has_meta) {
    P(u->meta_inc ? msgpack_pack_uint32(pk, u->meta_inc) : msgpack_pack_nil(pk));
    return 0;
  }
  const ea_meta *mt = &u->meta;
  P(msgpack_pack_array(pk, META_FIELDS));
  P(pack_str(pk, mt->name, SLEN(mt->name)));
  P(pack_addr(pk, &mt->gossip));
  P(pack_addr(pk, &mt->control));
  P(pack_str(pk, mt->role, SLEN(mt->role)));
  P(pack_str(pk, mt->tags, SLEN(mt->tags)));
  P(pack_str(pk, mt->version, SLEN(mt->version)));
  P(msgpack_pack_uint64(pk, mt->last_gen));
  return 0;
}

int ea_wire_encode_msg(const ea_msg *m, uint8_t *buf, size_t cap, size_t *len) {
  if (m->type < EA_MSG_PING || m->type > EA_MSG_GOSSIP || m->nupdates > EA_WIRE_MAX_UPDATES ||
      !valid_family(m->target_addr.family) || !valid_family(m->reply_to.family))
    return -EINVAL;
  for (uint32_t i = 0; i < m->nupdates; i++)
    if (check_update(&m->updates[i])) return -EINVAL;

  ea__mpw_fixbuf f = {buf, cap, 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, ea__mpw_fixbuf_write);
  uint8_t magic = EA_WIRE_MAGIC_PLAIN;
  P(ea__mpw_fixbuf_write(&f, (const char *)&magic, 1));
  P(msgpack_pack_array(&pk, MSG_FIELDS));
  P(msgpack_pack_uint8(&pk, EA_WIRE_VERSION));
  P(msgpack_pack_uint8(&pk, m->type));
  P(msgpack_pack_uint32(&pk, m->seq));
  P(pack_bin(&pk, m->src.b, ID_BYTES));
  P(pack_bin(&pk, m->target.b, ID_BYTES));
  P(pack_addr(&pk, &m->target_addr));
  P(pack_addr(&pk, &m->reply_to));
  /* array16 whatever the count: see the file comment */
  uint8_t ah[3] = {0xdc, 0, (uint8_t)m->nupdates};
  P(ea__mpw_fixbuf_write(&f, (const char *)ah, sizeof ah));
  for (uint32_t i = 0; i < m->nupdates; i++) {
    int rc = pack_update(&pk, &m->updates[i]);
    if (rc) return rc;
  }
  *len = f.len;
  return 0;
}

int ea_wire_encode_state(uint8_t kind, const ea_node_id *src, const ea_update *ups, size_t n,
                         uint8_t **out, size_t *len) {
  if (kind != EA_SYNC_JOIN && kind != EA_SYNC_PERIODIC) return -EINVAL;
  if (n > UINT32_MAX) return -EMSGSIZE;
  size_t total =
      1 + 1 + uint_size(EA_WIRE_VERSION) + uint_size(kind) + BIN_SIZE(ID_BYTES) + array_hdr(n);
  for (size_t i = 0; i < n; i++) {
    if (check_update(&ups[i])) return -EINVAL;
    total += ea_wire_update_size(&ups[i]);
    if (total > EA_WIRE_MAX_FRAME) return -EMSGSIZE;
  }
  uint8_t *buf = malloc(total);
  if (!buf) return -ENOMEM;
  ea__mpw_fixbuf f = {buf, total, 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, ea__mpw_fixbuf_write);
  uint8_t magic = EA_WIRE_MAGIC_PLAIN;
  int rc = -EMSGSIZE;
  if (ea__mpw_fixbuf_write(&f, (const char *)&magic, 1) || msgpack_pack_array(&pk, STATE_FIELDS) ||
      msgpack_pack_uint8(&pk, EA_WIRE_VERSION) || msgpack_pack_uint8(&pk, kind) ||
      pack_bin(&pk, src->b, ID_BYTES) || msgpack_pack_array(&pk, n))
    goto fail;
  for (size_t i = 0; i < n; i++)
    if ((rc = pack_update(&pk, &ups[i])) != 0) goto fail;
  if (f.len != total) { /* the size helpers and the packer disagree: a bug here */
    rc = -EMSGSIZE;
    goto fail;
  }
  *out = buf;
  *len = total;
  return 0;
fail:
  free(buf);
  return rc;
}

/* ---- decoding --------------------------------------------------------- */

/* Turn a reader code into "field: problem" with static strings: the field
 * name is a literal, pasted onto each of the three problems. */
#define WHY(rc, field)                                          \
  ((rc) == EA__MPR_EOF     ? field ": truncated"                \
   : (rc) == EA__MPR_RANGE ? field ": out of range or too long" \
                           : field ": wrong type")

#define R(call, field)                              \
  do {                                              \
    int rc_ = (call);                               \
    if (rc_ < 0) return fail(err, WHY(rc_, field)); \
  } while (0)

#define FAIL(msg) return fail(err, msg)

static int fail(const char **err, const char *msg) {
  if (err) *err = msg;
  return -EA_EWIRE;
}

/* An array header announcing exactly `want` elements. */
static int arr_exact(ea__mpr *r, uint32_t want) {
  uint32_t n;
  int rc = ea__mpr_array(r, &n);
  if (rc) return rc;
  return n == want ? 0 : EA__MPR_RANGE;
}

static int rd_id(ea__mpr *r, ea_node_id *id) {
  const uint8_t *p;
  size_t n;
  int rc = ea__mpr_bin(r, ID_BYTES, &p, &n);
  if (rc) return rc;
  if (n != ID_BYTES) return EA__MPR_RANGE;
  memcpy(id->b, p, ID_BYTES);
  return 0;
}

/* Returns 1 for a bad family (reported separately from a bad length). */
static int rd_addr(ea__mpr *r, ea_addr *a) {
  const uint8_t *p;
  size_t n;
  int rc = ea__mpr_bin(r, ADDR_BYTES, &p, &n);
  if (rc) return rc;
  if (n != ADDR_BYTES) return EA__MPR_RANGE;
  memset(a, 0, sizeof *a);
  if (!valid_family(p[0])) return 1;
  /* bytes past the family's address are ignored (and come out zero), so
   * that a sender with a different padding convention still interoperates */
  if (p[0] == 0) return 0;
  a->family = p[0];
  a->port = (uint16_t)(p[1] << 8 | p[2]);
  memcpy(a->ip, p + 3, a->family == 4 ? 4 : 16);
  return 0;
}

#define ADDR(call, field)                                                               \
  do {                                                                                  \
    int rc_ = (call);                                                                   \
    if (rc_ == 1) FAIL(field ": bad address family");                                   \
    if (rc_ < 0) FAIL(rc_ == EA__MPR_RANGE ? field ": not 19 bytes" : WHY(rc_, field)); \
  } while (0)

/* A member's name, role, tags and version end up in log lines, status and
 * the metrics labels of every node: a control byte (a newline, an escape
 * sequence) in one would forge lines there.  They are refused here, on
 * input from the network, as malformed (counted and dropped by the
 * transport); base/log.c escapes them on output as well. */
static bool has_ctl(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f) return true;
  return false;
}

#define TEXT(dst, field)                                           \
  do {                                                             \
    R(ea__mpr_cstr(r, dst, sizeof dst), field);                    \
    if (has_ctl(dst)) FAIL(field ": control character in string"); \
  } while (0)

static int rd_update(ea__mpr *r, ea_update *u, const char **err) {
  uint64_t v;
  memset(u, 0, sizeof *u);
  R(arr_exact(r, UPDATE_FIELDS), "update: not a 5-element array");
  R(ea__mpr_uint(r, EA_STATE_LEFT, &v), "update.state");
  u->state = (uint8_t)v;
  R(ea__mpr_uint(r, UINT32_MAX, &v), "update.incarnation");
  u->incarnation = (uint32_t)v;
  R(rd_id(r, &u->id), "update.id");
  R(rd_id(r, &u->from), "update.from");
  int nil = ea__mpr_nil(r);
  R(nil, "update.meta");
  if (nil == 1) return 0;
  int rc = ea__mpr_uint(r, UINT32_MAX, &v);
  if (rc == 0) { /* an incarnation instead of the metadata (ea_wire.h) */
    if (v == 0) FAIL("update.meta: incarnation 0 travels as nil");
    u->meta_inc = (uint32_t)v;
    return 0;
  }
  if (rc != EA__MPR_TYPE) R(rc, "update.meta");
  u->has_meta = true;
  ea_meta *mt = &u->meta;
  R(arr_exact(r, META_FIELDS), "update.meta: not a 7-element array, an incarnation or nil");
  TEXT(mt->name, "update.meta.name");
  ADDR(rd_addr(r, &mt->gossip), "update.meta.gossip");
  ADDR(rd_addr(r, &mt->control), "update.meta.control");
  TEXT(mt->role, "update.meta.role");
  TEXT(mt->tags, "update.meta.tags");
  TEXT(mt->version, "update.meta.version");
  R(ea__mpr_uint(r, UINT64_MAX, &mt->last_gen), "update.meta.last_gen");
  return 0;
}

/* Magic byte, outer array, version: common to packets and frames. */
static int rd_head(ea__mpr *r, const uint8_t *buf, size_t len, uint32_t fields, const char **err) {
  if (len < 1) FAIL("magic: empty input");
  if (buf[0] == EA_WIRE_MAGIC_SEALED || buf[0] == EA_WIRE_MAGIC_SEALED_RP)
    FAIL("magic: sealed input (no cluster key configured?)");
  if (buf[0] != EA_WIRE_MAGIC_PLAIN) FAIL("magic: not an elastic-agent packet");
  ea__mpr_init(r, buf + 1, len - 1);
  uint32_t n;
  R(ea__mpr_array(r, &n), "header");
  uint64_t v;
  R(ea__mpr_uint(r, UINT64_MAX, &v), "version");
  if (v != EA_WIRE_VERSION) FAIL("version: unsupported");
  if (n != fields) FAIL("header: wrong number of fields");
  return 0;
}

int ea_wire_decode_msg(const uint8_t *buf, size_t len, ea_msg *m, const char **err) {
  ea__mpr r;
  uint64_t v;
  int rc = rd_head(&r, buf, len, MSG_FIELDS, err);
  if (rc) return rc;
  memset(m, 0, offsetof(ea_msg, updates));
  R(ea__mpr_uint(&r, UINT8_MAX, &v), "type");
  if (v < EA_MSG_PING || v > EA_MSG_GOSSIP) FAIL("type: unknown message type");
  m->type = (uint8_t)v;
  R(ea__mpr_uint(&r, UINT32_MAX, &v), "seq");
  m->seq = (uint32_t)v;
  R(rd_id(&r, &m->src), "src");
  R(rd_id(&r, &m->target), "target");
  ADDR(rd_addr(&r, &m->target_addr), "target_addr");
  ADDR(rd_addr(&r, &m->reply_to), "reply_to");
  uint32_t n;
  R(ea__mpr_array(&r, &n), "updates");
  if (n > EA_WIRE_MAX_UPDATES) FAIL("updates: too many");
  for (uint32_t i = 0; i < n; i++) {
    rc = rd_update(&r, &m->updates[i], err);
    if (rc) return rc;
  }
  m->nupdates = n;
  if (r.pos != r.end) FAIL("packet: trailing bytes");
  return 0;
}

int ea_wire_decode_state(const uint8_t *buf, size_t len, uint8_t *kind, ea_node_id *src,
                         ea_update **ups, size_t *n, const char **err) {
  ea__mpr r;
  uint64_t v;
  *ups = NULL;
  *n = 0;
  if (len > EA_WIRE_MAX_FRAME) FAIL("frame: larger than EA_WIRE_MAX_FRAME");
  int rc = rd_head(&r, buf, len, STATE_FIELDS, err);
  if (rc) return rc;
  R(ea__mpr_uint(&r, UINT8_MAX, &v), "kind");
  if (v != EA_SYNC_JOIN && v != EA_SYNC_PERIODIC) FAIL("kind: unknown sync kind");
  uint8_t k = (uint8_t)v;
  ea_node_id id = {{0}};
  R(rd_id(&r, &id), "src");
  uint32_t cnt;
  R(ea__mpr_array(&r, &cnt), "updates");
  /* Bound the claim by what the bytes left could hold before allocating:
   * a short frame cannot make us allocate for billions of updates. */
  if (cnt > ea__mpr_left(&r) / UPDATE_MIN_BYTES) FAIL("updates: count exceeds frame size");
  ea_update *a = NULL;
  if (cnt > 0) {
    a = malloc((size_t)cnt * sizeof *a);
    if (!a) {
      if (err) *err = "updates: out of memory";
      return -ENOMEM;
    }
  }
  for (uint32_t i = 0; i < cnt; i++) {
    rc = rd_update(&r, &a[i], err);
    if (rc) {
      free(a);
      return rc;
    }
  }
  if (r.pos != r.end) {
    free(a);
    FAIL("frame: trailing bytes");
  }
  *kind = k;
  *src = id;
  *ups = a;
  *n = cnt;
  return 0;
}

/* ---- helpers ---------------------------------------------------------- */

void ea_node_id_hex(const ea_node_id *id, char out[33]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = hx[id->b[i] >> 4];
    out[2 * i + 1] = hx[id->b[i] & 15];
  }
  out[32] = 0;
}

int ea_node_id_cmp(const ea_node_id *a, const ea_node_id *b) {
  int c = memcmp(a->b, b->b, sizeof a->b);
  return (c > 0) - (c < 0);
}

void ea_addr_str(const ea_addr *a, char *out, size_t cap) {
  char ip[INET6_ADDRSTRLEN];
  if (cap == 0) return;
  if (a->family == 4 && inet_ntop(AF_INET, a->ip, ip, sizeof ip))
    snprintf(out, cap, "%s:%u", ip, a->port);
  else if (a->family == 6 && inet_ntop(AF_INET6, a->ip, ip, sizeof ip))
    snprintf(out, cap, "[%s]:%u", ip, a->port);
  else
    snprintf(out, cap, "none");
}

int ea_addr_eq(const ea_addr *a, const ea_addr *b) {
  if (a->family != b->family) return 0;
  if (a->family == 0) return 1;
  return a->port == b->port && memcmp(a->ip, b->ip, a->family == 4 ? 4 : 16) == 0;
}
