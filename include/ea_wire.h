/* ea_wire.h — the gossip wire format: the message structs the SWIM core
 * speaks, their msgpack codec, and the cluster-key seal around every packet.
 *
 * The SWIM core (ea_membership.h) never sees bytes: it hands an ea_msg to its
 * transport and is handed ea_msg values back.  The libuv transport encodes,
 * seals, sends; on receipt it opens, decodes and passes the struct in.  The
 * simulator may pass structs straight through (fast) or round-trip them
 * through this codec (to exercise it).
 *
 * UDP packet (one datagram, at most EA_WIRE_MAX_PACKET bytes after sealing):
 *
 *   unsealed:  +------+----------------------------------------------+
 *              | 0xEA | msgpack array: ea_msg (see below)            |
 *              +------+----------------------------------------------+
 *   sealed:    +------+-------------------+-----------------------------------+
 *              | 0xEC | nonce (24 bytes)  | XChaCha20-Poly1305(rp | ea_msg)   |
 *              +------+-------------------+-----------------------------------+
 *                       (ciphertext = plaintext + 16-byte tag)
 *   rp      = replay header, 32 bytes: sender:16 epoch:u64 BE counter:u64 BE
 *             (ea_wire_seal_rp below; judged by ea_antireplay.h)
 *
 *   ea_msg  = [ version=1, type, seq, src:bin16, target:bin16,
 *               target_addr:addr, reply_to:addr, [update, …] ]
 *   addr    = bin19: family(1) port(2, big endian) ip(16, v4 in first 4)
 *   update  = [ state, incarnation, id:bin16, from:bin16, meta|uint|nil ]
 *             (uint: ea_update.meta_inc, never 0 — 0 is nil)
 *   meta    = [ name:str, gossip:addr, control:addr, role:str, tags:str,
 *               version:str, last_gen:uint ]
 *
 *   Every value uses msgpack-c's smallest header, except the [update, …]
 *   array of an ea_msg, which is always array16 (3 bytes) so that a message
 *   is exactly ea_wire_msg_base_size() + Σ ea_wire_update_size() bytes.
 *   Sealing drops the plaintext's 0xEA (implied by 0xEC), so a sealed
 *   packet is len + EA_WIRE_SEAL_RP_OVERHEAD - 1 bytes (len + 72).  The
 *   previous sealed layout, 0xEB without rp, is refused by name.
 *
 * TCP push-pull frame: a frame header (below), then the same 0xEA/0xEC
 * framing around  [ version=1, kind (join|sync), src:bin16, [update, …] ].
 *
 * Frame header (version 2, membership/wire_frame.c), on both TCP channels
 * (push-pull and the agent's control channel), in front of every frame:
 *
 *   plain  (8 bytes):   +------+-----+-----------+-------+-------------+
 *                       | 0xEA | 'F' | version=2 | flags | len u32 BE  |
 *                       +------+-----+-----------+-------+-------------+
 *   sealed (48 bytes):  ea_wire_seal() of the plain header (with a key;
 *                       0xEB, no replay header: the body carries one)
 *
 *   The body that follows is `len` bytes (the sealed or plain frame).  The
 *   receiver opens the 48 bytes before it buffers any body, so input
 *   without the key costs it 48 bytes.  flags: EA_WIRE_FRAME_BUSY (len 0,
 *   no body): "too many connections, try later".  Version 1 sent the body
 *   length bare (u32 BE, first byte 0x00 or 0x01); it is refused by name.
 *
 * Decoders are bounded by (buf, len), check every type and length, never
 * allocate from a length read off the wire, and on failure return
 * -EA_EWIRE with a static string naming the field that was wrong.
 */
#ifndef EA_WIRE_H
#define EA_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ea_mpread.h"

#define EA_WIRE_VERSION 1
#define EA_WIRE_MAGIC_PLAIN 0xEA
#define EA_WIRE_MAGIC_SEALED 0xEB

/* Ethernet MTU 1500 minus IPv6 (40) and UDP (8) headers, minus slack for
 * tunnels/VXLAN overlays common in GPU clusters: memberlist uses the same
 * 1400.  This is the size on the wire, seal included. */
#define EA_WIRE_MAX_PACKET 1400
/* crypto_aead_xchacha20poly1305_ietf: 1 magic + 24 nonce + 16 tag. */
#define EA_WIRE_SEAL_OVERHEAD (1 + 24 + 16)
/* Largest push-pull frame accepted: 5000 members × ~200 bytes, with room. */
#define EA_WIRE_MAX_FRAME (16u << 20)
/* Updates one message may carry; the encoder stops earlier on size. */
#define EA_WIRE_MAX_UPDATES 64

#define EA_NAME_MAX 64    /* member name, NUL included */
#define EA_ROLE_MAX 16    /* "worker" | "observer" | … */
#define EA_TAGS_MAX 128   /* "k=v,k=v" */
#define EA_VERSION_MAX 24 /* agent version string */

/* EA_EWIRE, the decode-error code (returned negated), is in ea_mpread.h. */

typedef struct {
  uint8_t b[16];
} ea_node_id;

typedef struct {
  uint8_t family; /* 0 = none, 4 = IPv4 (ip[0..3]), 6 = IPv6 */
  uint16_t port;  /* host byte order */
  uint8_t ip[16];
} ea_addr;

typedef enum {
  EA_STATE_ALIVE = 0,
  EA_STATE_SUSPECT = 1,
  EA_STATE_DEAD = 2,
  EA_STATE_LEFT = 3,
} ea_member_state;

/* What travels with a member.  Strings are NUL-terminated and fit. */
typedef struct {
  char name[EA_NAME_MAX];
  ea_addr gossip;
  ea_addr control;
  char role[EA_ROLE_MAX];
  char tags[EA_TAGS_MAX];
  char version[EA_VERSION_MAX];
  uint64_t last_gen; /* last generation this member ran (0: none) */
} ea_meta;

/* One piggybacked membership fact.  `from` is who asserts it (the suspector
 * for SUSPECT, used to count independent confirmations).  An update either
 * carries meta or, in the same slot, an incarnation (meta_inc; 0 travels as
 * nil):
 *  - ALIVE without meta (a refutation): the incarnation at which the member
 *    last changed its metadata.  A receiver whose copy is known current at
 *    that incarnation or later applies it; any other ignores it.
 *  - SUSPECT / DEAD: the incarnation at which the accuser's copy of the
 *    member's metadata was known current.  The accused sends its metadata
 *    with the refutation when that is older than its last change.
 * docs/membership.md, "Dissemination". */
typedef struct {
  uint8_t state; /* ea_member_state */
  uint32_t incarnation;
  ea_node_id id;
  ea_node_id from;
  uint32_t meta_inc; /* only without meta; see above */
  bool has_meta;
  ea_meta meta;
} ea_update;

typedef enum {
  EA_MSG_PING = 1,     /* direct probe; target = id we expect */
  EA_MSG_ACK = 2,      /* answer to ping, seq echoed */
  EA_MSG_PING_REQ = 3, /* "probe target_addr for me, reply to reply_to" */
  EA_MSG_NACK = 4,     /* Lifeguard: indirect prober could not reach target */
  EA_MSG_GOSSIP = 5,   /* updates only */
} ea_msg_type;

typedef struct {
  uint8_t type; /* ea_msg_type */
  uint32_t seq;
  ea_node_id src;    /* sender */
  ea_node_id target; /* ping/ping-req: id being probed; ack: id acking */
  ea_addr target_addr;
  ea_addr reply_to; /* ping-req relay: where the final ack goes */
  uint32_t nupdates;
  ea_update updates[EA_WIRE_MAX_UPDATES];
} ea_msg;

/* Push-pull (TCP) full state. */
typedef enum { EA_SYNC_JOIN = 1, EA_SYNC_PERIODIC = 2 } ea_sync_kind;

/* ---- codec ------------------------------------------------------------ */

/* Exact encoded size of one update inside a message (for budgeting). */
size_t ea_wire_update_size(const ea_update *u);
/* Exact encoded size of a message with zero updates, magic byte included. */
size_t ea_wire_msg_base_size(const ea_msg *m);

/* Encode m (magic byte first) into buf.  Returns 0 and sets *len, or
 * -EMSGSIZE when it does not fit in cap.  (Also -EINVAL when m holds
 * something the decoder would reject: unknown type, state > 3, nupdates >
 * EA_WIRE_MAX_UPDATES, address family not 0/4/6.) */
int ea_wire_encode_msg(const ea_msg *m, uint8_t *buf, size_t cap, size_t *len);
/* Decode a plaintext packet (magic 0xEA first).  On error returns -EA_EWIRE
 * and, if err is not NULL, points *err at a static string naming the field. */
int ea_wire_decode_msg(const uint8_t *buf, size_t len, ea_msg *m, const char **err);

/* Push-pull state: encode into a malloc'd buffer (*out, caller frees).
 * The buffer starts with the magic byte; no length prefix. */
int ea_wire_encode_state(uint8_t kind, const ea_node_id *src, const ea_update *ups, size_t n,
                         uint8_t **out, size_t *len);
/* Decode into a malloc'd array (*ups, caller frees) of *n updates.  The
 * count is bounded by what len can hold before anything is allocated. */
int ea_wire_decode_state(const uint8_t *buf, size_t len, uint8_t *kind, ea_node_id *src,
                         ea_update **ups, size_t *n, const char **err);

/* ---- seal (libsodium XChaCha20-Poly1305) ------------------------------ */

#define EA_KEY_BYTES 32

/* Seal plaintext (which starts with 0xEA) into out: 0xEB | nonce | ct.
 * out must hold len + EA_WIRE_SEAL_OVERHEAD - 1 … i.e. len + 40 bytes. */
int ea_wire_seal(const uint8_t key[EA_KEY_BYTES], const uint8_t *in, size_t len, uint8_t *out,
                 size_t cap, size_t *outlen);
/* Open a sealed buffer; -EBADMSG if it fails authentication or is not sealed. */
int ea_wire_open(const uint8_t key[EA_KEY_BYTES], const uint8_t *in, size_t len, uint8_t *out,
                 size_t cap, size_t *outlen);

/* ---- the replay-proof seal (every sealed packet and frame body) ---------
 *
 * Like ea_wire_seal, with magic 0xEC and a 32-byte replay header first in
 * the AEAD plaintext (authenticated and encrypted with it):
 *
 *   0xEC | nonce(24) | AEAD( sender:16 | epoch:u64 BE | counter:u64 BE |
 *                            plaintext after its 0xEA ) | tag(16)
 *
 * sender is the node id, epoch strictly increases across restarts of the
 * node (agent/node_id.c: <data-dir>/boot), counter strictly increases
 * within the epoch (ea_wire_sender.next).  The receiver judges the header
 * with its window (ea_antireplay.h) after the AEAD opened.  The old sealed
 * magic 0xEB is not accepted for a packet or a frame body, so an agent of
 * the previous version fails loudly ("no replay header") rather than
 * silently.  (The TCP frame header keeps ea_wire_seal: replaying one makes
 * the receiver read a body, and that body must pass the window.) */
#define EA_WIRE_MAGIC_SEALED_RP 0xEC
#define EA_WIRE_RP_BYTES 32
#define EA_WIRE_SEAL_RP_OVERHEAD (EA_WIRE_SEAL_OVERHEAD + EA_WIRE_RP_BYTES)

typedef struct {
  ea_node_id sender;
  uint64_t epoch;
  uint64_t counter;
} ea_wire_rp;

/* A sender's identity and its next counter.  One per process, shared by
 * every channel (gossip UDP and TCP, control): next is advanced atomically. */
typedef struct {
  ea_node_id id;
  uint64_t epoch;
  uint64_t next;
} ea_wire_sender;

/* Seal in (0xEA first) with the next counter of s.  out must hold
 * len + EA_WIRE_SEAL_RP_OVERHEAD - 1 bytes.  *rp_out (if not NULL) gets
 * the header used. */
int ea_wire_seal_rp(const uint8_t key[EA_KEY_BYTES], ea_wire_sender *s, const uint8_t *in,
                    size_t len, uint8_t *out, size_t cap, size_t *outlen, ea_wire_rp *rp_out);
/* Open a 0xEC buffer into out (cap ≥ len − 40; the result is 0xEA + the
 * payload, len − 72 bytes) and return its header in *rp.  -EBADMSG: does
 * not authenticate; -EPROTO: a 0xEB buffer (sealed by an older agent,
 * without a replay header). */
int ea_wire_open_rp(const uint8_t key[EA_KEY_BYTES], const uint8_t *in, size_t len, uint8_t *out,
                    size_t cap, size_t *outlen, ea_wire_rp *rp);
/* Decode the 32-byte header (for the fuzzer and the tests). */
void ea_wire_rp_decode(const uint8_t in[EA_WIRE_RP_BYTES], ea_wire_rp *rp);
void ea_wire_rp_encode(const ea_wire_rp *rp, uint8_t out[EA_WIRE_RP_BYTES]);
/* ---- the TCP frame header (wire_frame.c) ---- */

#define EA_WIRE_FRAME_VERSION 2
#define EA_WIRE_FRAME_HDR_PLAIN 8
#define EA_WIRE_FRAME_HDR_SEALED (EA_WIRE_FRAME_HDR_PLAIN + EA_WIRE_SEAL_OVERHEAD - 1)
#define EA_WIRE_FRAME_HDR_MAX EA_WIRE_FRAME_HDR_SEALED
#define EA_WIRE_FRAME_BUSY 0x01 /* a responder over its connection limit; len 0 */

/* The header's size on the wire: sealed (a cluster key) or plain. */
size_t ea_wire_frame_hdr_size(bool sealed);
/* Write the header for a body of len bytes (0 only with EA_WIRE_FRAME_BUSY)
 * into out (cap ≥ ea_wire_frame_hdr_size(key != NULL)), sealed with key, or
 * plain when key is NULL.  -EINVAL for a bad flags/len pair. */
int ea_wire_frame_hdr_encode(const uint8_t *key, uint32_t len, uint8_t flags, uint8_t *out,
                             size_t cap, size_t *outlen);
/* Read a header of exactly ea_wire_frame_hdr_size(key != NULL) bytes
 * (version-1 framing is recognised from the first byte alone).  0: *len and
 * *flags set.  -EBADMSG: not authenticated (does not open with key, or
 * sealed/plain mismatch); -EMSGSIZE: len > max_len; -EA_EWIRE: malformed.
 * *err names the problem (a static string). */
int ea_wire_frame_hdr_decode(const uint8_t *key, const uint8_t *in, size_t n, uint32_t max_len,
                             uint32_t *len, uint8_t *flags, const char **err);

/* ---- one frame of a stream, written (wire_frame.c) ----
 * The sending half of both TCP channels and of preflight's push-pull: the
 * header, then the body — plain[0..plen) sealed with key and the sender's
 * replay counter (ea_wire_seal_rp), or copied when key is NULL. */
/* Bytes ea_wire_frame_encode writes for a plain body of plen bytes. */
size_t ea_wire_frame_size(bool sealed, size_t plen);
/* Writes header | body into out (cap ≥ ea_wire_frame_size(key != NULL,
 * plen)); *outlen the bytes to send.  -EMSGSIZE: the body on the wire
 * would be over max_len (or cap is short); -EINVAL: plain is not a frame
 * (its first byte not EA_WIRE_MAGIC_PLAIN, when sealing). */
int ea_wire_frame_encode(const uint8_t *key, ea_wire_sender *sender, const uint8_t *plain,
                         size_t plen, uint32_t max_len, uint8_t *out, size_t cap, size_t *outlen);

/* ---- one framed stream, read as it arrives (wire_frame.c) ----
 * The receiving half of both TCP channels (membership/transport_uv.c and
 * agent/control.c): the header is gathered — never more than its own size
 * is buffered before it opens with the key — then a body of the announced
 * length, its buffer grown with what actually arrives (a peer announcing
 * 16 MiB and sending 5 bytes costs 4 KiB).  Zero it, set key (borrowed;
 * NULL: plain) and max_len, feed it. */
typedef struct {
  const uint8_t *key;
  uint32_t max_len;
  uint8_t hdr[EA_WIRE_FRAME_HDR_MAX];
  size_t hdr_got; /* header bytes gathered (0 while in a body) */
  bool in_body;   /* a header opened: reading its body */
  uint8_t flags;  /* the last header's */
  uint32_t len;   /* its body's length (0: EA_WIRE_FRAME_BUSY) */
  uint8_t *body;
  size_t got, cap;
} ea_wire_reader;

enum {
  EA_WIRE_RD_MORE = 0,   /* everything taken; more bytes needed */
  EA_WIRE_RD_HEADER = 1, /* a header opened: r->flags, r->len; a BUSY one has no body */
  EA_WIRE_RD_FRAME = 2,  /* r->body[0..r->len) is a whole body, until the next call */
};
/* Take bytes from in[0..n), *used of them, up to the next event: one of
 * EA_WIRE_RD_*, or the negative error of ea_wire_frame_hdr_decode with *err
 * (-ENOMEM: no memory for the body).  A version-1 length or the wrong magic
 * for the key is refused at the first byte.  After an error the reader
 * must not be fed again. */
int ea_wire_reader_feed(ea_wire_reader *r, const uint8_t *in, size_t n, size_t *used,
                        const char **err);
/* After a frame (or a BUSY header): ready for the next header.  A body
 * buffer over keep bytes is given back. */
void ea_wire_reader_next(ea_wire_reader *r, size_t keep);
void ea_wire_reader_free(ea_wire_reader *r);

/* Load a key file: 64 hex characters (optionally followed by whitespace), or
 * 32 raw bytes.  Returns 0, or a negative errno with *err naming the problem
 * (valid until the next call on this thread).  -EPERM: group or others may
 * read it (mode 0600 wanted; root-owned group-readable is accepted only for a
 * non-root agent in that group, the systemd/Kubernetes arrangement). */
int ea_wire_load_key(const char *path, uint8_t key[EA_KEY_BYTES], const char **err);

/* Helpers shared by every module. */
void ea_node_id_hex(const ea_node_id *id, char out[33]);
int ea_node_id_cmp(const ea_node_id *a, const ea_node_id *b);
/* "1.2.3.4:7000" or "[::1]:7000" */
void ea_addr_str(const ea_addr *a, char *out, size_t cap);
int ea_addr_eq(const ea_addr *a, const ea_addr *b);

#endif
