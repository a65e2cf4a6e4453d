/* probe.h — the ckpt wing's: the checkpoint-directory probe that
 * `elastic-agent preflight --join` sends to running agents: its codec
 * (probe_wire.c), shared by the asking side (agent/cli/preflight_net.c)
 * and the running agent's answer (agent/probe.c).
 *
 * The probe asks "do you see this file in your checkpoint.dir?".  The
 * preflight writes a random token into DIR/.preflight-<hex> on its own node
 * and asks every worker agent of the cluster; an agent that reads the same
 * token there sees the same directory.  The answer also carries the
 * agent's wall clock, which gives the clock offset between the two nodes
 * (NTP's estimate: bounded by half the round trip).
 *
 * The messages travel on the control channel (control.c) in its framing
 * and sealing, a type range of their own (0x40…), as the checkpoint (0x20)
 * and job (0x30) messages do:
 *
 *   msg  = [ version=1, type, src:bin16, nonce:u64, body ]
 *   PROBE_REQ (0x40) body = [ reply_to:addr, file:str, token:str ]
 *   PROBE_ANS (0x41) body = [ result:u8, errno:u32, node:str, dir:str, wall_us:u64 ]
 *   addr = bin19: family(1) port(2, big endian) ip(16, v4 in the first 4)
 *
 * The file name is checked on both ends: ".preflight-" then 1..32 lowercase
 * hex digits, so a request can never name another path.  The answer goes
 * to reply_to (the asker's own control listener), to the id in src: the
 * channel's connections are one-way.  Every field is required; the decoder
 * is bounded by (buf, len), allocates nothing and names the field that was
 * wrong (tests/unit/test_probe.c, tests/fuzz/fuzz_probe_wire.c).
 */
#ifndef EA_AGENT_PROBE_H
#define EA_AGENT_PROBE_H

#include "ea_config.h"
#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EA__PROBE_WIRE_VERSION 1
#define EA__PROBE_FILE_PREFIX ".preflight-"
#define EA__PROBE_FILE_MAX 48  /* the prefix + 32 hex digits, NUL included */
#define EA__PROBE_TOKEN_MAX 80 /* what the file holds: a line of text */
/* The largest message: an answer with the longest dir and name. */
#define EA__PROBE_WIRE_MAX (EA_PATH_MAX + EA_NAME_MAX + 128)

/* The high nibble of every type here (ea__ctl_on_family). */
#define EA__PROBE_FAMILY 0x40
typedef enum { EA__PROBE_REQ = 0x40, EA__PROBE_ANS = 0x41 } ea__probe_type;

/* What the asked agent found at DIR/file. */
typedef enum {
  EA__PROBE_SEEN = 0,    /* the file holds the token: the same directory */
  EA__PROBE_ABSENT = 1,  /* no such file there: another directory */
  EA__PROBE_DIFFERS = 2, /* a file of that name with other contents */
  EA__PROBE_ERROR = 3,   /* it could not look (errno says why) */
} ea__probe_result;

typedef struct {
  uint8_t type; /* ea__probe_type */
  ea_node_id src;
  uint64_t nonce; /* echoed in the answer */
  /* PROBE_REQ */
  ea_addr reply_to;
  char file[EA__PROBE_FILE_MAX];
  char token[EA__PROBE_TOKEN_MAX];
  /* PROBE_ANS */
  uint8_t result; /* ea__probe_result */
  uint32_t error; /* errno for EA__PROBE_ERROR, else 0 */
  char node[EA_NAME_MAX];
  char dir[EA_PATH_MAX]; /* the answering agent's checkpoint.dir, resolved */
  uint64_t wall_us;      /* its CLOCK_REALTIME when it answered */
} ea__probe_msg;

const char *ea__probe_result_str(uint8_t r); /* "seen", "absent", "differs", "error" */
/* ".preflight-" followed by 1..32 lowercase hex digits. */
bool ea__probe_file_ok(const char *name);
/* Whether a control-channel plaintext is one of these (type 0x40..0x4f). */
bool ea__probe_wire_is(const uint8_t *buf, size_t len);
/* Encode m (0xEA first) into buf: 0, -EINVAL for a message the decoder
 * would refuse, -EMSGSIZE when cap is too small. */
int ea__probe_encode(const ea__probe_msg *m, uint8_t *buf, size_t cap, size_t *len);
/* Decode: 0, or -EA_EWIRE with *err naming the field (m zeroed). */
int ea__probe_decode(const uint8_t *buf, size_t len, ea__probe_msg *m, const char **err);

/* ---- the commands (main.c dispatches) ------------------------------------ */

/* `elastic-agent preflight …` (argv[0] = "preflight"): 0 nothing failed,
 * 1 something did, 2 a usage error. */
int ea__preflight_main(int argc, char **argv);

#endif
