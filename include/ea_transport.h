/* ea_transport.h — the libuv transport that drives a SWIM core in a real
 * process: UDP gossip, TCP push-pull, the cluster-key seal, seed join with
 * backoff and graceful leave, all on one libuv loop and never blocking it.
 *
 * The transport owns the core (ea_swim) it drives.  Every outgoing ea_msg is
 * encoded into the core's max_packet budget and sealed when a key is set;
 * every datagram is opened, decoded and handed to ea_swim_recv; after every
 * call into the core the loop timer is re-armed to ea_swim_next_deadline.
 *
 * Push-pull uses TCP on the same port number as the UDP socket:
 *
 *   initiator                              responder
 *   connect ───────────────────────────────▶ accept
 *   [u32 BE len][0xEA|0xEB state frame] ──▶  read, open, decode
 *                                      ◀──── [u32 BE len][state frame]
 *   read, open, decode, ea_swim_merge        ea_swim_merge, close
 *
 * Each connection has a deadline (sync_timeout_ms) so a slow or hostile peer
 * cannot hold one; frames larger than EA_WIRE_MAX_FRAME (+ seal) are refused
 * before any payload is buffered, and the buffer only grows with bytes that
 * actually arrived.
 *
 * Lifetimes: the transport and everything it allocated live until the close
 * callback of ea_transport_close() has run.  Callbacks are invoked on the
 * loop thread; on_change is called from inside the core and must not call
 * back into the transport or the core (record what happened, act later).
 */
#ifndef EA_TRANSPORT_H
#define EA_TRANSPORT_H

#include "ea_membership.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

typedef struct ea_transport ea_transport;

/* A slow or hostile push-pull peer is cut off after this long: a full state
 * of 5000 members (~1 MB) crosses a datacenter link in milliseconds, so 5 s
 * only ever expires for a stuck peer (memberlist's TCPTimeout is 10 s on a
 * LAN; our links are faster). */
#define EA_TRANSPORT_SYNC_TIMEOUT_MS 5000
/* First join retry delay; doubled per failed attempt up to join_retry_max_ms
 * (ea_config.runtime).  200 ms is one probe interval of the default config. */
#define EA_TRANSPORT_JOIN_BACKOFF_MS 200

typedef struct {
  uint64_t packets_in, packets_out;
  uint64_t bytes_in, bytes_out;
  uint64_t dropped_malformed;       /* did not decode (UDP) or bad frame (TCP) */
  uint64_t dropped_unauthenticated; /* failed to open, or sealed/unsealed mismatch */
  uint64_t dropped_replayed;        /* opened, but its (sender, epoch, counter) was seen
                                       or is older than the window (ea_antireplay.h) */
  uint64_t dropped_oversize;        /* datagram > EA_WIRE_MAX_PACKET, frame > max */
  uint64_t send_errors;             /* sendto failed or the send queue was full */
  uint64_t encode_errors;           /* an outgoing message the codec refused */
  uint64_t updates_trimmed;         /* messages shortened to fit max_packet */
  uint64_t syncs_ok, syncs_failed;  /* push-pulls we started */
  uint64_t syncs_served;            /* push-pulls peers started with us, answered */
  uint64_t syncs_refused;           /* incoming connections over the limit: answered busy */
  uint64_t join_attempts;
  uint64_t preauth_evicted;  /* incoming closed before their frame header: over a cap */
  uint64_t preauth_timeouts; /* incoming closed: no frame header within the deadline */
  uint64_t refused_rate;     /* incoming closed at accept: their source over its connect rate */
  uint64_t accepts_deferred; /* loop turns that accepted a full batch (ea_accept_gate) */
} ea_transport_stats;

typedef struct {
  const char *bind;      /* "ip:port", "[ip6]:port", ":port"; port 0 = ephemeral */
  const char *advertise; /* address others should use; NULL: bind address, or
                            the first non-loopback interface when bound to any */
  const uint8_t *key;    /* EA_KEY_BYTES, copied; NULL: no cluster key */
  ea_swim_config swim;
  ea_node_id self;
  ea_meta meta;               /* name, role, tags, version; gossip and control are
                                 filled in with the bound addresses */
  uint64_t seed;              /* seeds the core's probe order and the join jitter */
  uint32_t join_retry_max_ms; /* backoff ceiling; 0 = 5000 */
  uint32_t sync_timeout_ms;   /* 0 = EA_TRANSPORT_SYNC_TIMEOUT_MS */
  /* Epoch and counter of what this transport seals (shared with the control
   * channel); NULL: one of its own, epoch from the wall clock (µs). */
  ea_wire_sender *sender;
  /* Our first incarnation (0: 0).  The agent starts each run above the
   * last one (its boot epoch), so a command naming an incarnation of an
   * earlier run never matches (ea_swim_set_incarnation). */
  uint32_t incarnation;
  uint16_t control_port; /* TCP port of the agent's control channel, advertised
                            in meta.control with the advertised gossip ip;
                            0 = the gossip port */
  void *ctx;
  /* A member changed state; called from inside the core (see above). */
  void (*on_change)(void *ctx, const ea_member *m, uint8_t old_state);
  /* Join finished: ok = 1 joined via `via`; ok = 0 one attempt failed
   * (`via` holds the reasons, retry pending); ok = 2 every seed is this
   * agent itself (`via` NULL): it is the first of a new cluster (pod 0 of
   * a StatefulSet whose pods all join pod 0).  Optional. */
  void (*on_join)(void *ctx, int ok, const char *via);
} ea_transport_opts;

/* Bind UDP and TCP, create the core.  On failure returns a negative errno
 * and writes a one-line reason to err; nothing is left open. */
int ea_transport_start(uv_loop_t *loop, const ea_transport_opts *o, ea_transport **out, char *err,
                       size_t errlen);

/* Join through seeds ("host:port,host:port…"; a host may be a DNS name with
 * many addresses; port defaults to 7000) and/or extra known addresses (the
 * remembered peers).  Retries with backoff until one push-pull succeeds or
 * someone else has brought us into a cluster.  Our own address is skipped.
 * Returns -EINVAL with err set when a seed does not parse. */
int ea_transport_join(ea_transport *t, const char *seeds, const ea_addr *extra, size_t nextra,
                      char *err, size_t errlen);

/* Graceful leave: broadcast LEFT, then call done once it has gone out about
 * three times (or after at most 1 s, or at once with nobody to tell).  The
 * loop keeps running meanwhile; done is called on the loop, never inline. */
void ea_transport_leave(ea_transport *t, void (*done)(void *ctx), void *ctx);

/* Close every handle; `closed` runs once all are closed and the transport
 * (and its core) are freed.  Safe during a leave (done is then not called). */
void ea_transport_close(ea_transport *t, void (*closed)(void *ctx), void *ctx);

/* The core, for read-only queries between loop callbacks (members, stats). */
const ea_swim *ea_transport_swim(const ea_transport *t);
/* Replace our metadata (gossip/control are kept), then re-arm the timer. */
void ea_transport_set_meta(ea_transport *t, const ea_meta *meta);
/* ea_swim_probe_soon (gone: ea_swim_peer_gone) on the transport's core, its
 * timer re-armed. */
bool ea_transport_probe_soon(ea_transport *t, const ea_node_id *id, bool gone);
void ea_transport_stats_get(const ea_transport *t, ea_transport_stats *out);
/* The advertised gossip address (also the TCP push-pull address). */
const ea_addr *ea_transport_addr(const ea_transport *t);
/* The advertised control address (meta.control). */
const ea_addr *ea_transport_control(const ea_transport *t);
/* The address the sockets are bound to (may be 0.0.0.0). */
const ea_addr *ea_transport_bound(const ea_transport *t);
bool ea_transport_has_key(const ea_transport *t);

/* ---- accepting a bounded batch per loop turn ------------------------------ */

/* libuv accepts in a loop until accept(2) says EAGAIN, calling the
 * connection callback for each.  A host that reopens every connection as
 * fast as we close it keeps the kernel's queue from ever emptying, and that
 * loop from ever returning: in a chaos run in network namespaces a join
 * flood froze an agent for 18 s (no gossip, no status, declared dead) until
 * the flood stopped.  The gate lets EA_ACCEPT_BATCH through per turn of the
 * loop; past it, the callback leaves the connection where it is (libuv then
 * stops watching the listener) and a zero timer accepts it on the next
 * turn, after every other handle has had its go.  Used by the gossip
 * listener and the agent's control channel. */
#define EA_ACCEPT_BATCH 32

typedef struct {
  uv_timer_t resume; /* its data is the owner's, for the owner's close callback */
  uv_stream_t *server;
  uv_connection_cb cb;
  uint64_t turn; /* uv_now of the turn being counted */
  uint32_t n;
  uint64_t deferred; /* turns that filled the batch */
} ea_accept_gate;

/* Initialise the gate's timer (one more handle for the owner to close with
 * uv_close(&g->resume, …)) for server, whose connection callback is cb. */
void ea_accept_gate_init(ea_accept_gate *g, uv_loop_t *loop, uv_stream_t *server,
                         uv_connection_cb cb);
/* In cb, before uv_accept: true, accept it now; false, this turn's batch is
 * full: return without accepting; cb is called again on the next turn. */
bool ea_accept_gate_pass(ea_accept_gate *g);

/* ---- addresses ---------------------------------------------------------- */

/* Parse a numeric "ip:port", "[ip6]:port", ":port" (any IPv4) or "ip" (then
 * default_port).  Returns 0 or -EINVAL. */
int ea_addr_parse(const char *s, uint16_t default_port, ea_addr *out);
void ea_addr_from_sockaddr(const struct sockaddr *sa, ea_addr *out);
/* Returns the sockaddr length, or 0 for family 0. */
socklen_t ea_addr_to_sockaddr(const ea_addr *a, struct sockaddr_storage *out);

#endif
