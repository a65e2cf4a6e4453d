/* A bounded msgpack pull reader for the gossip decoders (see mpread.h for why
 * msgpack-c's own unpacker is not used on network input).  Each reader looks
 * at the type byte, checks that the whole header and payload lie before
 * `end`, and only then moves the cursor, so a failed read leaves the cursor on
 * the offending value.  Lengths are compared against the bytes left by
 * subtraction, never by forming pos + len, which could overflow. */
#include "mpread.h"

#include "ea_wire.h"

#include <string.h>

static uint64_t be(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v = (v << 8) | p[i];
  return v;
}

int ea__mpr_uint(ea__mpr *r, uint64_t max, uint64_t *v) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint8_t t = r->pos[0];
  size_t w;      /* payload bytes after the type byte */
  bool sgn = false;
  if (t <= 0x7f) {
    if (t > max) return EA__MPR_RANGE;
    *v = t;
    r->pos++;
    return 0;
  }
  switch (t) {
  case 0xcc: w = 1; break;
  case 0xcd: w = 2; break;
  case 0xce: w = 4; break;
  case 0xcf: w = 8; break;
  case 0xd0: w = 1; sgn = true; break;
  case 0xd1: w = 2; sgn = true; break;
  case 0xd2: w = 4; sgn = true; break;
  case 0xd3: w = 8; sgn = true; break;
  default:
    /* negative fixint (0xe0..0xff) is an int, but never a valid value here */
    return t >= 0xe0 ? EA__MPR_RANGE : EA__MPR_TYPE;
  }
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
  case 0xd9: w = 1; break;
  case 0xda: w = 2; break;
  case 0xdb: w = 4; break;
  default: return EA__MPR_TYPE;
  }
  if (hdr_len(r, w, &n)) return EA__MPR_EOF;
  return take(r, 1 + w, n, max, p, len);
}

int ea__mpr_bin(ea__mpr *r, size_t max, const uint8_t **p, size_t *len) {
  if (r->pos >= r->end) return EA__MPR_EOF;
  uint64_t n;
  size_t w;
  switch (r->pos[0]) {
  case 0xc4: w = 1; break;
  case 0xc5: w = 2; break;
  case 0xc6: w = 4; break;
  default: return EA__MPR_TYPE;
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
  case 0xdc: w = 2; break;
  case 0xdd: w = 4; break;
  default: return EA__MPR_TYPE;
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

int ea__mpw_fixbuf_write(void *data, const char *p, size_t n) {
  ea__mpw_fixbuf *f = data;
  if (n > f->cap - f->len) return -1;
  memcpy(f->buf + f->len, p, n);
  f->len += n;
  return 0;
}
