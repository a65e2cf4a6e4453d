/* A bounded msgpack pull reader for the gossip decoders (see ea_mpread.h for why
 * msgpack-c's own unpacker is not used on network input).  Each reader looks
 * at the type byte, checks that the whole header and payload lie before
 * `end`, and only then moves the cursor, so a failed read leaves the cursor on
 * the offending value.  Lengths are compared against the bytes left by
 * subtraction, never by forming pos + len, which could overflow. */
#include "ea_mpread.h"

#include <msgpack.h>
#include <string.h>

static uint64_t be(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v = (v << 8) | p[i];
  return v;
}

/* The int8..64 / uint8..64 type bytes: payload width and signedness; false
 * for any other type byte (fixints are the callers' own case). */
static bool int_type(uint8_t t, size_t *w, bool *sgn) {
  if (t < 0xcc || t > 0xd3) return false;
  *sgn = t >= 0xd0;
  *w = (size_t)1 << ((t - (*sgn ? 0xd0 : 0xcc)) & 3);
  return true;
}

int ea__mpr_uint(ea__mpr *r, uint64_t max, uint64_t *v) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  size_t w; /* payload bytes after the type byte */
  bool sgn = false;
  if (t <= 0x7f) {
    if (t > max) return EA__MPR_RANGE;
    *v = t;
    r->pos++;
    return 0;
  }
  if (!int_type(t, &w, &sgn))
    /* negative fixint (0xe0..0xff) is an int, but never a valid value here */
    return t >= 0xe0 ? EA__MPR_RANGE : EA__MPR_TYPE;
  if (ea__mpr_left(r) - 1 < w) return EA__MPR_EOF;
  uint64_t x = be(r->pos + 1, w);
  if (sgn && (r->pos[1] & 0x80)) return EA__MPR_RANGE; /* negative */
  if (x > max) return EA__MPR_RANGE;
  *v = x;
  r->pos += 1 + w;
  return 0;
}

int ea__mpr_nil(ea__mpr *r) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  if (r->pos[0] != 0xc0) return 0;
  r->pos++;
  return 1;
}

int ea__mpr_bool(ea__mpr *r, bool *v) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  if (r->pos[0] != 0xc2 && r->pos[0] != 0xc3) return EA__MPR_TYPE;
  *v = r->pos[0] == 0xc3;
  r->pos++;
  return 0;
}

/* Shared tail of str/bin: header of hw bytes (type byte included) announcing
 * n payload bytes. */
static int take(ea__mpr *r, size_t hw, uint64_t n, size_t max, const uint8_t **p, size_t *len) {
  size_t left = ea__mpr_left(r);
  if (left < hw) return EA__MPR_EOF;
  if (n > left - hw) return EA__MPR_EOF;
  if (n > max) return EA__MPR_RANGE;
  *p = r->pos + hw;
  *len = (size_t)n;
  r->pos += hw + (size_t)n;
  return 0;
}

static int hdr_len(ea__mpr *r, size_t w, uint64_t *n) {
  if (ea__mpr_left(r) - 1 < w) return EA__MPR_EOF;
  *n = be(r->pos + 1, w);
  return 0;
}

int ea__mpr_str(ea__mpr *r, size_t max, const uint8_t **p, size_t *len) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  uint64_t n;
  size_t w;
  if ((t & 0xe0) == 0xa0) return take(r, 1, t & 0x1f, max, p, len);
  switch (t) {
    case 0xd9:
      w = 1;
      break;
    case 0xda:
      w = 2;
      break;
    case 0xdb:
      w = 4;
      break;
    default:
      return EA__MPR_TYPE;
  }
  if (hdr_len(r, w, &n)) return EA__MPR_EOF;
  return take(r, 1 + w, n, max, p, len);
}

int ea__mpr_bin(ea__mpr *r, size_t max, const uint8_t **p, size_t *len) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint64_t n;
  size_t w;
  switch (r->pos[0]) {
    case 0xc4:
      w = 1;
      break;
    case 0xc5:
      w = 2;
      break;
    case 0xc6:
      w = 4;
      break;
    default:
      return EA__MPR_TYPE;
  }
  if (hdr_len(r, w, &n)) return EA__MPR_EOF;
  return take(r, 1 + w, n, max, p, len);
}

int ea__mpr_array(ea__mpr *r, uint32_t *n) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  uint64_t x;
  size_t w;
  if ((t & 0xf0) == 0x90) {
    *n = t & 0x0f;
    r->pos++;
    return 0;
  }
  switch (t) {
    case 0xdc:
      w = 2;
      break;
    case 0xdd:
      w = 4;
      break;
    default:
      return EA__MPR_TYPE;
  }
  if (hdr_len(r, w, &x)) return EA__MPR_EOF;
  *n = (uint32_t)x;
  r->pos += 1 + w;
  return 0;
}

int ea__mpr_array_n(ea__mpr *r, uint32_t want, const char *field, const char **err) {
  uint32_t n;
  EA__MPR_TRY(ea__mpr_array(r, &n), field);
  EA__MPR_NEED(n == want, field);
  return 0;
}

int ea__mpr_u32(ea__mpr *r, uint32_t max, uint32_t *v, const char *field, const char **err) {
  uint64_t x;
  EA__MPR_TRY(ea__mpr_uint(r, max, &x), field);
  *v = (uint32_t)x;
  return 0;
}

int ea__mpr_decode(const uint8_t *buf, size_t len, void *m, size_t msize,
                   int (*body)(ea__mpr *r, void *m, const char **err), const char **err) {
  const char *dummy;
  if (!err) err = &dummy;
  memset(m, 0, msize);
  ea__mpr r;
  ea__mpr_init(&r, buf, len);
  int rc = body(&r, m, err);
  if (rc) memset(m, 0, msize);
  return rc;
}

bool ea__mpr_family_is(const uint8_t *buf, size_t len, uint8_t magic, uint8_t family) {
  ea__mpr r;
  ea__mpr_init(&r, buf, len);
  if (ea__mpr_left(&r) < 1 || r.pos[0] != magic) return false;
  r.pos++;
  uint32_t n;
  uint64_t v, t;
  if (ea__mpr_array(&r, &n) || n < 2) return false;
  if (ea__mpr_uint(&r, 255, &v) || ea__mpr_uint(&r, 255, &t)) return false;
  return (t & 0xf0) == family;
}

int ea__mpr_head(ea__mpr *r, uint8_t magic, uint32_t fields, uint8_t version, uint8_t type_min,
                 uint8_t type_max, uint8_t *type, uint8_t src[16], const char **err) {
  EA__MPR_NEED(ea__mpr_left(r) >= 1 && r->pos[0] == magic, "magic");
  r->pos++;
  if (ea__mpr_array_n(r, fields, "msg", err)) return -EA_EWIRE;
  uint64_t v;
  EA__MPR_TRY(ea__mpr_uint(r, 255, &v), "version");
  EA__MPR_NEED(v == version, "version");
  EA__MPR_TRY(ea__mpr_uint(r, type_max, &v), "type");
  EA__MPR_NEED(v >= type_min, "type");
  *type = (uint8_t)v;
  const uint8_t *p;
  size_t n;
  EA__MPR_TRY(ea__mpr_bin(r, 16, &p, &n), "src");
  EA__MPR_NEED(n == 16, "src");
  memcpy(src, p, 16);
  return 0;
}

int ea__mpw_head(struct msgpack_packer *pk, uint8_t magic, uint32_t fields, uint8_t version,
                 uint8_t type, const uint8_t src[16]) {
  const char m = (char)magic;
  int bad = pk->callback(pk->data, &m, 1);
  bad |= msgpack_pack_array(pk, fields);
  bad |= msgpack_pack_uint8(pk, version);
  bad |= msgpack_pack_uint8(pk, type);
  bad |= msgpack_pack_bin(pk, 16);
  bad |= msgpack_pack_bin_body(pk, src, 16);
  return bad;
}

int ea__mpw_fixbuf_write(void *data, const char *p, size_t n) {
  ea__mpw_fixbuf *f = data;
  if (n > f->cap - f->len) return -1;
  memcpy(f->buf + f->len, p, n);
  f->len += n;
  return 0;
}

/* ---- the wider readers (maps, signed integers, floats, skip) ----------- */

int ea__mpr_map(ea__mpr *r, uint32_t *n) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  size_t w;
  uint64_t x;
  if ((t & 0xf0) == 0x80) {
    w = 0;
    x = t & 0x0f;
  } else if (t == 0xde || t == 0xdf) {
    w = t == 0xde ? 2 : 4;
    if (ea__mpr_left(r) - 1 < w) return EA__MPR_EOF;
    x = be(r->pos + 1, w);
  } else {
    return EA__MPR_TYPE;
  }
  if (x > (ea__mpr_left(r) - 1 - w) / 2) return EA__MPR_EOF;
  *n = (uint32_t)x;
  r->pos += 1 + w;
  return 0;
}

int ea__mpr_int(ea__mpr *r, int64_t lo, int64_t hi, int64_t *v) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  if (t <= 0x7f || t >= 0xe0) {
    int64_t x = (int8_t)t;
    if (x < lo || x > hi) return EA__MPR_RANGE;
    *v = x;
    r->pos++;
    return 0;
  }
  size_t w;
  bool sgn;
  if (!int_type(t, &w, &sgn)) return EA__MPR_TYPE;
  if (ea__mpr_left(r) - 1 < w) return EA__MPR_EOF;
  uint64_t u = be(r->pos + 1, w);
  int64_t x;
  if (sgn) {
    /* sign-extend the w-byte two's complement value */
    if (w < 8 && (u >> (8 * w - 1)) & 1) u |= ~0ull << (8 * w);
    x = (int64_t)u;
  } else {
    if (u > (uint64_t)INT64_MAX) return EA__MPR_RANGE;
    x = (int64_t)u;
  }
  if (x < lo || x > hi) return EA__MPR_RANGE;
  *v = x;
  r->pos += 1 + w;
  return 0;
}

int ea__mpr_float(ea__mpr *r, double *v) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  if (t == 0xca || t == 0xcb) {
    size_t w = t == 0xca ? 4 : 8;
    if (ea__mpr_left(r) - 1 < w) return EA__MPR_EOF;
    uint64_t u = be(r->pos + 1, w);
    if (w == 4) {
      uint32_t u32 = (uint32_t)u;
      float f;
      memcpy(&f, &u32, sizeof f);
      *v = f;
    } else {
      memcpy(v, &u, sizeof *v);
    }
    r->pos += 1 + w;
    return 0;
  }
  int64_t x;
  int rc = ea__mpr_int(r, INT64_MIN, INT64_MAX, &x);
  if (rc == EA__MPR_RANGE) {
    uint64_t u; /* a uint64 above INT64_MAX */
    rc = ea__mpr_uint(r, UINT64_MAX, &u);
    if (rc == 0) *v = (double)u;
    return rc;
  }
  if (rc == 0) *v = (double)x;
  return rc;
}

static int skip(ea__mpr *r, int depth, int max_depth) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  if (depth > max_depth) return EA__MPR_RANGE;
  uint8_t t = r->pos[0];
  size_t left = ea__mpr_left(r);
  uint64_t n = 0; /* payload bytes, or elements */
  size_t hw = 1;  /* header bytes */
  int kind = 0;   /* 0: bytes, 1: array of n, 2: map of n */
  if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
    n = 0;
  } else if ((t & 0xe0) == 0xa0) {
    n = t & 0x1f;
  } else if ((t & 0xf0) == 0x90) {
    n = t & 0x0f;
    kind = 1;
  } else if ((t & 0xf0) == 0x80) {
    n = t & 0x0f;
    kind = 2;
  } else {
    size_t lw = 0; /* width of a length field */
    switch (t) {
      case 0xcc:
      case 0xd0:
        n = 1;
        break;
      case 0xcd:
      case 0xd1:
        n = 2;
        break;
      case 0xca:
      case 0xce:
      case 0xd2:
        n = 4;
        break;
      case 0xcb:
      case 0xcf:
      case 0xd3:
        n = 8;
        break;
      case 0xd4:
        n = 2;
        break; /* fixext: type byte + 1..16 */
      case 0xd5:
        n = 3;
        break;
      case 0xd6:
        n = 5;
        break;
      case 0xd7:
        n = 9;
        break;
      case 0xd8:
        n = 17;
        break;
      case 0xc4:
      case 0xd9:
        lw = 1;
        break;
      case 0xc5:
      case 0xda:
        lw = 2;
        break;
      case 0xc6:
      case 0xdb:
        lw = 4;
        break;
      case 0xc7:
        lw = 1;
        break; /* ext: length, type byte, data */
      case 0xc8:
        lw = 2;
        break;
      case 0xc9:
        lw = 4;
        break;
      case 0xdc:
        lw = 2;
        kind = 1;
        break;
      case 0xdd:
        lw = 4;
        kind = 1;
        break;
      case 0xde:
        lw = 2;
        kind = 2;
        break;
      case 0xdf:
        lw = 4;
        kind = 2;
        break;
      default:
        return EA__MPR_TYPE; /* 0xc1, never used */
    }
    if (lw) {
      if (left - 1 < lw) return EA__MPR_EOF;
      n = be(r->pos + 1, lw);
      hw = 1 + lw;
      if (t >= 0xc7 && t <= 0xc9) n += 1; /* the ext type byte */
    }
  }
  if (kind == 0) {
    if (left < hw || n > left - hw) return EA__MPR_EOF;
    r->pos += hw + n;
    return 0;
  }
  if (left < hw) return EA__MPR_EOF;
  /* Each element takes at least one byte: a count above the bytes left is
   * a lie, caught before looping on it. */
  uint64_t elems = kind == 2 ? 2 * n : n;
  if (elems > left - hw) return EA__MPR_EOF;
  const uint8_t *save = r->pos;
  r->pos += hw;
  for (uint64_t i = 0; i < elems; i++) {
    int rc = skip(r, depth + 1, max_depth);
    if (rc) {
      r->pos = save;
      return rc;
    }
  }
  return 0;
}

const char *ea__mpr_strerror(int rc) {
  switch (rc) {
    case EA__MPR_EOF:
      return "truncated";
    case EA__MPR_TYPE:
      return "wrong type";
    case EA__MPR_RANGE:
      return "out of range";
    default:
      return "invalid";
  }
}

int ea__mpr_skip(ea__mpr *r, int max_depth) {
  return skip(r, 0, max_depth);
}

int ea__mpr_cstr(ea__mpr *r, char *dst, size_t cap) {
  const uint8_t *p;
  size_t n;
  if (cap == 0) return EA__MPR_RANGE;
  const uint8_t *save = r->pos;
  int rc = ea__mpr_str(r, cap - 1, &p, &n);
  if (rc) return rc;
  if (memchr(p, 0, n)) {
    r->pos = save; /* a failed read leaves the cursor on the value */
    return EA__MPR_RANGE;
  }
  memcpy(dst, p, n);
  dst[n] = 0;
  return 0;
}
