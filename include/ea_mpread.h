/* ea_mpread.h — base/: a bounded msgpack pull reader, and the small helpers
 * every msgpack codec of the project shares (gossip, control, checkpoint
 * reports, agent<->worker IPC): a fixed-buffer writer for msgpack-c's packer,
 * decoders that name the field that was wrong, and the wider readers the IPC
 * codec needs (maps, signed integers, floats, skipping unknown values).
 *
 * msgpack-c's unpacker sizes array storage from the count in an array header
 * before it has read a single element, so a 5-byte packet can make it ask for
 * gigabytes.  The gossip decoders instead pull one value at a time off a
 * (pos, end) cursor: every call checks that the bytes are there and that the
 * type is the one asked for, and nothing is ever allocated here.
 *
 * Only the subset the wire format uses is read: non-negative integers (any
 * width up to uint64, including signed encodings that hold a value >= 0, as
 * other msgpack writers emit), nil, bool, str (fixstr/8/16/32), bin (8/16/32)
 * and arrays (fixarray/16/32).
 *
 * Every function returns 0 on success or one of the negative EA__MPR_* codes
 * below; on failure the cursor is left where it was, so a caller can report
 * exactly which field was bad.  Returned str/bin pointers point into the
 * caller's buffer and live as long as it does.
 */
#ifndef EA_MPREAD_H
#define EA_MPREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
  EA__MPR_EOF = -1,   /* the value runs past end */
  EA__MPR_TYPE = -2,  /* a different msgpack type is there */
  EA__MPR_RANGE = -3, /* the value or its length exceeds the caller's limit */
};

typedef struct {
  const uint8_t *pos;
  const uint8_t *end;
} ea__mpr;

static inline void ea__mpr_init(ea__mpr *r, const uint8_t *buf, size_t len) {
  r->pos = buf;
  r->end = buf + len;
}

static inline size_t ea__mpr_left(const ea__mpr *r) {
  return (size_t)(r->end - r->pos);
}

/* A non-negative integer no larger than max. */
int ea__mpr_uint(ea__mpr *r, uint64_t max, uint64_t *v);
/* Consumes a nil and returns 1 if one is next; returns 0 (nothing consumed)
 * if something else is next; EA__MPR_EOF at the end. */
int ea__mpr_nil(ea__mpr *r);
int ea__mpr_bool(ea__mpr *r, bool *v);
/* A str of at most max bytes; *p points at its bytes (not NUL-terminated). */
int ea__mpr_str(ea__mpr *r, size_t max, const uint8_t **p, size_t *len);
/* A bin of at most max bytes. */
int ea__mpr_bin(ea__mpr *r, size_t max, const uint8_t **p, size_t *len);
/* An array header; *n is the element count as claimed (not yet checked
 * against the bytes left: that is the caller's job, see ea__mpr_left). */
int ea__mpr_array(ea__mpr *r, uint32_t *n);

/* A map header; *n is checked against the bytes left (each entry takes at
 * least two). */
int ea__mpr_map(ea__mpr *r, uint32_t *n);
/* Any integer encoding (positive or negative fixint, int8..64, uint8..64)
 * whose value lies in [lo, hi]. */
int ea__mpr_int(ea__mpr *r, int64_t lo, int64_t hi, int64_t *v);
/* float32/float64, or any integer (a writer may pack 0.0 as 0). */
int ea__mpr_float(ea__mpr *r, double *v);
/* Skip one value of any type (ext included), nested at most max_depth deep;
 * EA__MPR_RANGE past that.  A container claiming more elements than there
 * are bytes left is EA__MPR_EOF before any looping. */
int ea__mpr_skip(ea__mpr *r, int max_depth);
/* A str of at most cap-1 bytes without NUL bytes, copied NUL-terminated into
 * dst; a NUL inside is EA__MPR_RANGE. */
int ea__mpr_cstr(ea__mpr *r, char *dst, size_t cap);
/* "truncated", "wrong type", "out of range" for the codes above. */
const char *ea__mpr_strerror(int rc);

/* ---- field-naming decode helpers ----------------------------------------
 * For decoders of the form  int dec(…, const char **err)  that return
 * -EA_EWIRE with *err pointing at a static field name.  EA_EWIRE is the
 * project's one decode-error code (ea_wire.h re-exports it).              */
#ifndef EA_EWIRE_DEFINED
#define EA_EWIRE_DEFINED
enum { EA_EWIRE = 2001 }; /* decode error (returned negated) */
#endif
#define EA__MPR_TRY(call, field) \
  do {                           \
    if ((call) != 0) {           \
      *err = (field);            \
      return -EA_EWIRE;          \
    }                            \
  } while (0)
#define EA__MPR_NEED(cond, field) \
  do {                            \
    if (!(cond)) {                \
      *err = (field);             \
      return -EA_EWIRE;           \
    }                             \
  } while (0)

/* An array header claiming exactly `want` elements. */
int ea__mpr_array_n(ea__mpr *r, uint32_t want, const char *field, const char **err);
/* An unsigned integer ≤ max, into a uint32_t. */
int ea__mpr_u32(ea__mpr *r, uint32_t max, uint32_t *v, const char *field, const char **err);

/* A codec's whole-message decode: *m (msize bytes) zeroed, then body run
 * over buf with a fresh reader, and *m zeroed again if it fails, so a
 * caller never sees half a message.  err may be NULL. */
int ea__mpr_decode(const uint8_t *buf, size_t len, void *m, size_t msize,
                   int (*body)(ea__mpr *r, void *m, const char **err), const char **err);

/* Whether buf is a frame of one codec family sharing a channel: `magic`,
 * then an array of at least [version, type] whose type's high nibble is
 * `family` (the control channel's codecs: checkpoint 0x20, job 0x30, probe
 * 0x40).  Judges nothing else: each codec's decoder does. */
bool ea__mpr_family_is(const uint8_t *buf, size_t len, uint8_t magic, uint8_t family);

/* ---- the control codecs' shared head -------------------------------------
 * Every message of the control channel's codecs (rdzv, checkpoint, job and
 * probe) starts the same way, and only the body after it is the codec's:
 *
 *   MAGIC  [ version, type, src (bin 16), <fields - 3 more items: the body> ]
 *
 * ea__mpr_head reads it and names what was wrong: the magic byte ("magic"),
 * an array of exactly `fields` items ("msg"), version == `version`
 * ("version"), type_min <= type <= type_max ("type"), a 16-byte src ("src").
 * On success r is at the first item after src.  ea__mpw_head writes it
 * (the magic through the packer's own write callback) and returns the OR of
 * the packer's results: nonzero when it did not fit. */
int ea__mpr_head(ea__mpr *r, uint8_t magic, uint32_t fields, uint8_t version, uint8_t type_min,
                 uint8_t type_max, uint8_t *type, uint8_t src[16], const char **err);
struct msgpack_packer;
int ea__mpw_head(struct msgpack_packer *pk, uint8_t magic, uint32_t fields, uint8_t version,
                 uint8_t type, const uint8_t src[16]);

/* ---- fixed-buffer writer for msgpack_packer ------------------------------ */
typedef struct {
  uint8_t *buf;
  size_t cap, len;
} ea__mpw_fixbuf;

/* msgpack_packer write callback (msgpack_packer_init(&pk, &fixbuf,
 * ea__mpw_fixbuf_write)): append, or fail without writing when the bytes
 * would pass cap; the packer hands the nonzero result back to its caller. */
int ea__mpw_fixbuf_write(void *data, const char *p, size_t n);

#endif
