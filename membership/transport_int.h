/* transport_int.h — private to the libuv transport (transport_uv.c and
 * transport_join.c): the transport's state and the few helpers the two
 * files call in each other.  transport_uv.c owns the sockets, the timer and
 * closing; transport_join.c owns the seed join and the graceful leave, which
 * only read and write their own parts of the struct (join, leave) and go
 * through these helpers for everything else.  Nothing outside membership/
 * includes this header; the public contract is include/ea_transport.h.
 */
#ifndef EA_TRANSPORT_INT_H
#define EA_TRANSPORT_INT_H

#include "ea_antireplay.h"
#include "ea_admit.h"
#include "ea_transport.h"
#include "ea_base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Default port for seeds written without one (the documented gossip port). */
#define EA__TRANSPORT_DEFAULT_PORT 7000
/* Senders the replay windows remember (UDP and TCP each): the gossip
 * peers one node hears from; the least recently heard is forgotten. */
#define EA__TRANSPORT_AR_SENDERS 4096

typedef struct conn conn;
typedef struct gai_req gai_req;

struct ea_transport {
  uv_loop_t *loop;
  ea_swim *swim;
  ea_swim_config cfg;
  size_t budget; /* plaintext bytes per datagram */
  bool have_key;
  uint8_t key[EA_KEY_BYTES];
  ea_wire_sender own_sender;  /* when opts.sender is NULL */
  ea_wire_sender *sender;     /* epoch + counter of what we seal */
  ea_ar_table ar_udp, ar_tcp; /* replay windows (ea_antireplay.h) */
  char *record_dir;           /* EA_TEST_RECORD_FRAMES (a test hook), or NULL */
  unsigned recorded;          /* datagrams written there (the first few only) */
  ea_node_id self;
  ea_addr bound, gossip;
  ea_addr control; /* advertised in meta.control: gossip, or its ip with opts.control_port */
  ea_addr *local;  /* our interface addresses, for skipping ourselves as a seed */
  size_t nlocal;
  void *ctx;
  void (*on_change)(void *ctx, const ea_member *m, uint8_t old_state);
  void (*on_join)(void *ctx, int ok, const char *via);
  uint32_t sync_timeout_ms;
  uint32_t join_retry_max_ms;
  ea_rng rng; /* seed retry jitter */

  uv_udp_t udp;
  uv_tcp_t listener;
  ea_accept_gate gate; /* EA_ACCEPT_BATCH accepts per loop turn */
  uv_timer_t tick;
  uv_timer_t join_timer;
  uv_timer_t leave_timer;
  int open_handles;
  int udp_queued;
  bool closing;
  void (*closed_cb)(void *ctx);
  void *closed_ctx;

  conn *conns;
  int nincoming;
  ea_admit *admit; /* incoming push-pull before its header (ea_admit.h); made at the first accept */
  ea_transport_stats st;

  struct {
    bool active;
    char **seeds;
    uint16_t *ports;
    size_t nseeds;
    ea_addr *extra;
    size_t nextra;
    unsigned attempt;
    uint32_t backoff_ms;
    int gai_pending;
    gai_req *gais; /* in flight, so close can cancel them */
    ea_addr *cand;
    size_t ncand, capcand;
    int syncs_pending;
    char why[512]; /* reasons of the current attempt's failures */
  } join;

  struct {
    bool active;
    int sends;
    void (*done)(void *ctx);
    void *ctx;
  } leave;

  uint64_t drop_log_ms[4];
  uint64_t drop_suppressed[4];

  uint8_t rxbuf[65536];
  uint8_t plain[65536];
  uint8_t txplain[EA_WIRE_MAX_PACKET];
  uint8_t txsealed[EA_WIRE_MAX_PACKET + EA_WIRE_SEAL_RP_OVERHEAD];
  uint8_t tcpbuf[65536];
  ea_msg rxmsg;
  ea_msg trimmed;
};

struct conn {
  conn *prev, *next;
  ea_transport *t;
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_connect_t creq;
  uv_write_t wreq;
  int handles;   /* open handles of this conn (tcp, timer) */
  bool outgoing; /* we started it (sync callback) */
  bool is_join;
  unsigned attempt;
  uint8_t kind;
  bool done; /* outcome recorded; closing */
  bool writing;
  bool got_frame;
  bool authed;       /* a valid frame header arrived */
  bool busy;         /* incoming over the limit: answered EA_WIRE_FRAME_BUSY */
  uint64_t since_ms; /* created */
  ea_addr peer;
  ea_wire_reader rd; /* the peer's frame (ea_wire.h) */
  uint8_t *out;      /* frame header + our state frame */
  size_t out_len;
};

struct gai_req {
  uv_getaddrinfo_t req;
  ea_transport *t;
  gai_req *prev, *next;
  size_t seed;
  unsigned attempt;
};

/* ---- transport_uv.c, for transport_join.c ---------------------------------- */

/* Split "host:port", "[v6]:port", "host" into host and port.  The host may
 * be empty (":7000").  Returns 0 or -EINVAL. */
int ea__transport_split_hostport(const char *s, uint16_t default_port, char *host, size_t hostcap,
                                 uint16_t *port);
/* Re-arm the tick timer to the core's next deadline; after every call into
 * the core. */
void ea__transport_rearm(ea_transport *t);
/* Free the transport once it is closing and nothing is left in flight
 * (handles, conns, resolver requests, queued sends). */
void ea__transport_maybe_free(ea_transport *t);
/* ea_swim_io.sync: start a push-pull with `to`; ctx is the transport. */
void ea__transport_sync(void *ctx, const ea_addr *to, ea_sync_kind kind);

/* ---- transport_join.c, for transport_uv.c ---------------------------------- */

/* A join push-pull with peer ended (ok: the peer's state was merged); only
 * for conns of the current attempt. */
void ea__transport_join_sync_done(ea_transport *t, const ea_addr *peer, bool ok, const char *why);
/* io_send encoded m: if we are leaving and m carries our LEFT, count it and
 * finish the leave once it went out often enough. */
void ea__transport_leave_sent(ea_transport *t, const ea_msg *m);

#endif
