/* control.c — the agent's control channel: rendezvous messages (ea_rdzv.h)
 * between agents over TCP, on the agent's libuv loop.
 *
 * Why a listener of its own rather than frames multiplexed on the gossip
 * push-pull port: push-pull is one request, one answer, close, with a 5 s
 * deadline; control traffic is a stream of small messages that must not wait
 * for a handshake each time (a formation is PREPARE → READY → COMMIT to every
 * member, and recovery time is what this project sells).  Sharing the port
 * would mean sniffing the first frame to tell the two apart inside the
 * transport.  A second port is one more line in the firewall and none in
 * the membership code.  The agent listens on the gossip port + 1 by default
 * and advertises the address in meta.control, so peers never guess it.
 *
 *   sender                                    receiver
 *   connect (cached per peer) ─────────────▶  accept
 *   [hdr 8: len][0xEA | rdzv msg]  ───────▶   read header, then body,
 *   [hdr 48: sealed len][0xEB | nonce | AEAD] ▶ open, decode, deliver
 *
 * The frame header (ea_wire.h, wire_frame.c, version 2) carries the body's
 * length; with a cluster key it is sealed, and it is opened before any body
 * is buffered: a connection that does not hold the key costs 48 bytes and
 * is closed at its first header.
 *
 * Before authentication (no valid header yet) a connection is on
 * probation (ea_admit.h, shared with the gossip port): a source over its
 * connect rate is closed at accept (refused_rate); at most
 * CTL_PREAUTH_PER_SOURCE on probation per source address and
 * CTL_PREAUTH_MAX in all, shared max-min fairly among sources, each given
 * CTL_PREAUTH_DEADLINE_MS to send its header.  Over a limit the oldest one
 * on probation (from that source, or from the source holding the most) is
 * closed, never one that authenticated: a real peer sends its
 * header as soon as it connects, so it is on probation for microseconds,
 * while connections held open without a header are what an attacker can
 * cheaply make (issue 11: 64 half-sent frames took a keyed controller from
 * 16 MB to 1.07 GB).  Once a header announced a body, the body must arrive
 * within CTL_FRAME_DEADLINE_MS.
 *
 * Connections are one-way: a sender keeps one outgoing connection per peer
 * and reuses it; the receiver never writes.  The sender still reads, to see
 * the peer close (EOF) and drop the connection at once instead of learning
 * it from the next write.  Delivery is best effort, as ea_rdzv_io.send
 * allows: a frame that cannot be written (connect refused or timed out,
 * reset, queue full) is dropped and counted; the protocol re-sends what
 * matters or times out.  Frames longer than CTL_MAX_FRAME are refused
 * at their header, and the receive buffer grows only with bytes that
 * arrived.  Malformed and unauthenticated input is counted and
 * dropped, never fatal; the connection it came on is closed, since a stream
 * cannot be re-synchronised after a bad length.
 *
 * Lifetimes: every connection owns a TCP handle and a timer and is freed in
 * the close callback of the last of them; libuv completes pending writes
 * (with UV_ECANCELED) before it closes a stream, so a write request never
 * outlives its connection.  ea__ctl_close() closes everything and calls
 * `closed` once the last handle is gone.
 */
#include "agent_int.h"

#include "ea_admit.h"

#include "ea_antireplay.h"
#include "ea_log.h"
#include "ea_mpread.h"
#include "ea_rdzv.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* A COMMIT of EA_RDZV_MAX_WORLD ranks fits EA_WIRE_MAX_FRAME (ea_rdzv.h);
 * sealing adds its overhead.  Anything longer is refused unread. */
#define CTL_MAX_FRAME (EA_WIRE_MAX_FRAME + EA_WIRE_SEAL_RP_OVERHEAD)
/* Senders whose replay window is kept: a controller hears from every
 * member (EA_RDZV_MAX_NODES is far below); past it the one heard from
 * longest ago is forgotten (ea_antireplay.h). */
#define CTL_AR_SENDERS 8192
/* A connect on a LAN completes in well under a millisecond; a lost SYN is
 * retried by the kernel after 1 s.  3 s covers one retry, and a message
 * that waited longer is stale for a protocol that re-sends every second. */
#define CTL_CONNECT_TIMEOUT_MS 3000
/* An idle outgoing connection is closed by its sender after a minute (the
 * sender closes first, so it never writes into a connection the receiver
 * is closing); the receiver drops one idle for twice that, so a peer that
 * vanished without a FIN does not hold a descriptor for ever. */
#define CTL_OUT_IDLE_MS 60000
#define CTL_IN_IDLE_MS 120000
/* Data left unacknowledged this long aborts an outgoing connection
 * (TCP_USER_TIMEOUT).  Without it a connection that carried frames into a
 * partition stays open with the kernel retransmitting on an exponential
 * back-off, so after the heal the next PREPARE waited behind the backlog
 * for the next retransmission: 1.9 s after a 5 s split, 32 s once
 * (elastic-chaos --faults split).  1.5 s is several LAN round trips under
 * loss; an abort costs one reconnect and a frame the protocol re-sends. */
#define CTL_USER_TIMEOUT_MS 1500
/* Connections kept per direction.  A controller talks to every member, so
 * the cap is about the largest cluster expected to share one controller;
 * past it the connection idle the longest is closed (and reopened by its
 * sender when next needed), so the cap costs latency, never correctness. */
#define CTL_MAX_CONNS 512
/* Bytes waiting for a connect to finish, per peer: a formation sends a
 * handful of frames; 32 MiB holds two of the largest COMMITs. */
#define CTL_QUEUE_MAX (32u << 20)
/* Read granularity; frames are assembled from these. */
#define CTL_READ_CHUNK 65536
/* Warnings about bad input are rate-limited to one per second. */
#define CTL_WARN_INTERVAL_MS 1000
/* Probation (above).  A peer writes its header right after its connect
 * completes, so 3 s covers a connect plus one SYN retry on the sender's
 * side; 8 per source covers a few agents behind one NAT address connecting
 * at once; 64 in all is the gossip push-pull's incoming limit. */
#define CTL_PREAUTH_DEADLINE_MS 3000
#define CTL_PREAUTH_PER_SOURCE 8
#define CTL_PREAUTH_MAX 64
/* Connects per source address before any of that (ea_admit.h): a burst of
 * 20, then 10 a second, unless it authenticated before.  A peer keeps one
 * connection to us and reconnects only after a reset. */
#define CTL_SRC_RATE 10.0
#define CTL_SRC_BURST 20.0
/* The largest body (16 MiB) crosses a LAN in well under a second; 10 s is
 * for a congested one. */
#define CTL_FRAME_DEADLINE_MS 10000

typedef struct cconn cconn;

typedef struct wbuf {
  uv_write_t req;
  struct wbuf *next; /* pending queue, while connecting */
  cconn *conn;
  size_t len;
  uint8_t data[];
} wbuf;

struct cconn {
  ea__ctl *c;
  cconn *prev, *next;
  bool outgoing;
  ea_node_id peer; /* outgoing: who it is to */
  ea_addr addr;    /* outgoing: where */
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_connect_t creq;
  int open; /* handles not yet closed */
  bool connected, closing;
  wbuf *qhead, *qtail; /* frames waiting for the connect */
  size_t qbytes;
  ea_wire_reader rd; /* incoming: the frame being read (ea_wire.h) */
  bool authed;       /* a valid header has arrived: off probation */
  ea_addr from;      /* incoming: the peer's address */
  uint64_t last_ms;  /* last activity */
  uint64_t since_ms; /* accepted (probation), or the body's header */
};

struct ea__ctl {
  uv_loop_t *loop;
  uv_tcp_t listener;
  ea_accept_gate gate; /* EA_ACCEPT_BATCH accepts per loop turn (ea_transport.h) */
  bool listening, closing;
  int open; /* handles of the ctl itself (the listener, the gate's timer) not yet closed */
  ea_addr bound;
  bool have_key;
  uint8_t key[EA_KEY_BYTES];
  ea_wire_sender own_sender; /* when ea__ctl_start was given none */
  ea_wire_sender *sender;    /* epoch + counter of every frame sealed here */
  ea_ar_table ar;            /* replay window of every sender heard */
  char *record_dir;          /* EA_TEST_RECORD_FRAMES (a test hook), or NULL */
  uint64_t record_seq;
  ea__ctl_recv_fn on_msg;
  ea__ctl_frame_fn on_frame;
  struct {
    uint8_t family;
    ea__ctl_frame_fn fn;
  } fam[EA__CTL_FAMILIES]; /* ea__ctl_on_family */
  size_t nfam;
  void *ctx;
  cconn *conns;
  size_t nout, nin;
  ea_admit *admit; /* incoming before their header (ea_admit.h); made at the first accept */
  ea__ctl_stats st;
  uint64_t warn_ms;
  void (*closed)(void *ctx);
  void *closed_ctx;
  uint8_t chunk[CTL_READ_CHUNK];
};

static void maybe_free(ea__ctl *c) {
  if (!c->closing || c->open > 0 || c->conns) return;
  void (*closed)(void *) = c->closed;
  void *ctx = c->closed_ctx;
  memset(c->key, 0, sizeof c->key);
  ea_ar_free(&c->ar);
  free(c->record_dir);
  ea_admit_free(c->admit);
  free(c);
  if (closed) closed(ctx);
}

/* Unauthenticated input is a warning (a misconfigured key is worth
 * seeing); malformed and oversize input is noise an attacker controls, so
 * debug only, as in the gossip transport. */
static void warn_bad(ea__ctl *c, const char *what, const char *detail) {
  uint64_t now = uv_now(c->loop);
  if (c->warn_ms && now - c->warn_ms < CTL_WARN_INTERVAL_MS) return;
  c->warn_ms = now;
  /* A wrong key and a replay are worth a warning; garbage is noise an
   * attacker controls. */
  bool warn = strcmp(what, "unauthenticated") == 0 || strcmp(what, "replayed") == 0;
  ea_log(warn ? EA_LOG_WARN : EA_LOG_DEBUG, "control", "dropped a frame (%s): %s", what, detail);
}

/* ---- connections ------------------------------------------------------- */

static void conn_handle_closed(uv_handle_t *h) {
  cconn *k = h->data;
  if (--k->open > 0) return;
  ea__ctl *c = k->c;
  if (k->prev)
    k->prev->next = k->next;
  else
    c->conns = k->next;
  if (k->next) k->next->prev = k->prev;
  ea_wire_reader_free(&k->rd);
  free(k);
  maybe_free(c);
}

static void conn_close(cconn *k) {
  if (k->closing) return;
  k->closing = true;
  ea__ctl *c = k->c;
  if (k->outgoing)
    c->nout--;
  else
    c->nin--;
  /* Frames that never left: the connect failed or we are shutting down. */
  for (wbuf *b = k->qhead; b;) {
    wbuf *n = b->next;
    if (!c->closing) c->st.send_errors++;
    free(b);
    b = n;
  }
  k->qhead = k->qtail = NULL;
  k->qbytes = 0;
  uv_close((uv_handle_t *)&k->timer, conn_handle_closed);
  uv_close((uv_handle_t *)&k->tcp, conn_handle_closed);
}

/* When k is due to be closed: idle, on probation, or in a body too long. */
static uint64_t conn_due(const cconn *k) {
  if (k->outgoing) return k->last_ms + (k->connected ? CTL_OUT_IDLE_MS : CTL_CONNECT_TIMEOUT_MS);
  if (!k->authed) return k->since_ms + CTL_PREAUTH_DEADLINE_MS;
  uint64_t due = k->last_ms + CTL_IN_IDLE_MS;
  if (k->rd.in_body && k->since_ms + CTL_FRAME_DEADLINE_MS < due)
    due = k->since_ms + CTL_FRAME_DEADLINE_MS;
  return due;
}

static void conn_timer_cb(uv_timer_t *t);

static void conn_arm(cconn *k) {
  uint64_t now = uv_now(k->c->loop), due = conn_due(k);
  uv_timer_start(&k->timer, conn_timer_cb, due > now ? due - now : 0, 0);
}

static void conn_timer_cb(uv_timer_t *t) {
  cconn *k = t->data;
  ea__ctl *c = k->c;
  uint64_t now = uv_now(c->loop);
  if (now < conn_due(k)) {
    conn_arm(k);
    return;
  }
  if (k->outgoing && !k->connected) {
    char a[64];
    ea_addr_str(&k->addr, a, sizeof a);
    ea_log(EA_LOG_DEBUG, "control", "connect to %s timed out after %u ms", a,
           CTL_CONNECT_TIMEOUT_MS);
  } else if (!k->outgoing && (!k->authed || k->rd.in_body)) {
    c->st.preauth_timeouts++;
    char a[64], d[160];
    ea_addr_str(&k->from, a, sizeof a);
    snprintf(d, sizeof d, "%s sent no %s within %u ms", a, k->authed ? "whole frame" : "header",
             k->authed ? CTL_FRAME_DEADLINE_MS : CTL_PREAUTH_DEADLINE_MS);
    warn_bad(c, "timeout", d);
  }
  conn_close(k);
}

static cconn *conn_new(ea__ctl *c, bool outgoing) {
  /* At the cap, make room by closing the connection idle the longest. */
  size_t n = outgoing ? c->nout : c->nin;
  if (n >= CTL_MAX_CONNS) {
    cconn *oldest = NULL;
    for (cconn *k = c->conns; k; k = k->next)
      if (!k->closing && k->outgoing == outgoing && (!oldest || k->last_ms < oldest->last_ms))
        oldest = k;
    if (oldest) conn_close(oldest);
  }
  cconn *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  k->c = c;
  k->outgoing = outgoing;
  k->rd.key = c->have_key ? c->key : NULL;
  k->rd.max_len = CTL_MAX_FRAME;
  k->last_ms = uv_now(c->loop);
  uv_tcp_init(c->loop, &k->tcp);
  uv_timer_init(c->loop, &k->timer);
  k->tcp.data = k->timer.data = k;
  k->open = 2;
  k->next = c->conns;
  if (c->conns) c->conns->prev = k;
  c->conns = k;
  if (outgoing)
    c->nout++;
  else
    c->nin++;
  return k;
}

/* ---- receiving ------------------------------------------------------------ */

/* One whole frame (after the length): open, decode, deliver.  Returns false
 * when the connection must be closed (bad input). */
static bool frame_in(ea__ctl *c, const uint8_t *p, size_t n) {
  c->st.frames_in++;
  uint8_t *plain = NULL;
  if (n == 0) {
    c->st.dropped_malformed++;
    warn_bad(c, "malformed", "empty frame");
    return false;
  }
  if (c->have_key) {
    if (p[0] != EA_WIRE_MAGIC_SEALED_RP && p[0] != EA_WIRE_MAGIC_SEALED) {
      c->st.dropped_unauthenticated++;
      warn_bad(c, "unauthenticated", "not sealed, and this agent has a cluster key");
      return false;
    }
    plain = malloc(n);
    size_t pl = 0;
    if (!plain) return false;
    ea_wire_rp rp;
    int orc = ea_wire_open_rp(c->key, p, n, plain, n, &pl, &rp);
    if (orc != 0) {
      free(plain);
      c->st.dropped_unauthenticated++;
      warn_bad(c, "unauthenticated",
               orc == -EPROTO
                   ? "sealed without a replay header (0xEB): an agent of an older version"
                   : "does not open with this cluster key");
      return false;
    }
    ea_ar_verdict v = ea_ar_check(&c->ar, &rp.sender, rp.epoch, rp.counter);
    if (v != EA_AR_OK) {
      free(plain);
      char d[160], hex[33];
      ea_node_id_hex(&rp.sender, hex);
      snprintf(d, sizeof d, "sender %.12s epoch %llu counter %llu: %s", hex,
               (unsigned long long)rp.epoch, (unsigned long long)rp.counter, ea_ar_verdict_str(v));
      c->st.dropped_replayed++;
      warn_bad(c, "replayed", d);
      /* The stream itself is intact (the frame was whole and authentic):
       * only this frame is dropped. */
      return true;
    }
    p = plain;
    n = pl;
  } else if (p[0] == EA_WIRE_MAGIC_SEALED || p[0] == EA_WIRE_MAGIC_SEALED_RP) {
    c->st.dropped_unauthenticated++;
    warn_bad(c, "unauthenticated", "sealed, and this agent has no cluster key");
    return false;
  }
  /* Another codec sharing the channel (its own message types) takes its
   * frames first. */
  if (c->on_frame && c->on_frame(c->ctx, p, n)) {
    free(plain);
    return true;
  }
  for (size_t i = 0; i < c->nfam; i++) {
    if (!ea__mpr_family_is(p, n, EA_WIRE_MAGIC_PLAIN, c->fam[i].family)) continue;
    if (c->fam[i].fn(c->ctx, p, n)) {
      free(plain);
      return true;
    }
    break;
  }
  ea_rdzv_msg m;
  const char *why = "?";
  int rc = ea_rdzv_decode(p, n, &m, &why);
  free(plain);
  if (rc != 0) {
    c->st.dropped_malformed++;
    warn_bad(c, "malformed", why);
    return false;
  }
  if (c->on_msg) c->on_msg(c->ctx, &m);
  ea_rdzv_msg_release(&m);
  return true;
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  cconn *k = h->data;
  *buf = uv_buf_init((char *)k->c->chunk, sizeof k->c->chunk);
}

/* A header arrived whole: authenticate it, then expect its body. */
/* The reader refused k's header (rc < 0, why), or opened it (rc 0).
 * Returns false when k must be closed. */
static bool header_in(ea__ctl *c, cconn *k, int rc, const char *why) {
  if (rc == 0 && k->rd.flags) rc = -EA_EWIRE, why = "frame header: busy on the control channel";
  if (rc < 0) {
    char d[200];
    char a[64];
    ea_addr_str(&k->from, a, sizeof a);
    snprintf(d, sizeof d, "%s from %s", why, a);
    if (rc == -EBADMSG) {
      c->st.dropped_unauthenticated++;
      warn_bad(c, "unauthenticated", d);
    } else if (rc == -EMSGSIZE) {
      c->st.dropped_oversize++;
      warn_bad(c, "oversize", d);
    } else {
      c->st.dropped_malformed++;
      warn_bad(c, "malformed", d);
    }
    return false;
  }
  k->authed = true;
  if (!k->outgoing && c->admit) ea_admit_authed(c->admit, &k->from, uv_now(c->loop));
  k->since_ms = uv_now(c->loop);
  conn_arm(k);
  return true;
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  cconn *k = s->data;
  ea__ctl *c = k->c;
  if (nread == 0) return;
  if (nread < 0 || k->closing) {
    conn_close(k); /* EOF or error: the peer is gone or closed first */
    return;
  }
  k->last_ms = uv_now(c->loop);
  if (k->outgoing) return; /* the receiver never writes; ignore */
  c->st.bytes_in += (uint64_t)nread;
  const uint8_t *in = (const uint8_t *)buf->base;
  size_t left = (size_t)nread;
  while (left > 0 && !k->closing && !c->closing) {
    size_t used = 0;
    const char *why = "?";
    int rc = ea_wire_reader_feed(&k->rd, in, left, &used, &why);
    in += used, left -= used;
    if (rc == -ENOMEM && k->rd.in_body) {
      conn_close(k);
      return;
    }
    if (rc < 0 || rc == EA_WIRE_RD_HEADER) {
      /* The header: nothing else is buffered before it authenticates. */
      if (!header_in(c, k, rc < 0 ? rc : 0, why)) {
        conn_close(k);
        return;
      }
    } else if (rc == EA_WIRE_RD_FRAME) {
      bool ok = frame_in(c, k->rd.body, k->rd.len);
      /* Frames are small in steady state: give back a buffer a large
       * COMMIT grew, instead of pinning megabytes per idle connection. */
      ea_wire_reader_next(&k->rd, 1u << 20);
      conn_arm(k);
      if (!ok) {
        conn_close(k);
        return;
      }
    }
  }
}

/* Bytes of k's header that have arrived, in our buffer or still in the
 * kernel's: a peer accepted in the same loop turn as a flood has its
 * header there, not yet read, and must not be the one closed. */
static size_t header_bytes(cconn *k) {
  uv_os_fd_t fd;
  int pending = 0;
  if (uv_fileno((uv_handle_t *)&k->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &pending) != 0)
    pending = 0;
  return k->rd.hdr_got + (pending > 0 ? (size_t)pending : 0);
}

/* Make room for a connection on probation from `from` (ea_admit_victim:
 * CTL_PREAUTH_PER_SOURCE from one address, CTL_PREAUTH_MAX in all shared
 * fairly among sources); connections that authenticated, or whose header
 * has arrived, are never closed here. */
static void probation_room(ea__ctl *c, const cconn *self, const ea_addr *from) {
  ea_admit_wait w[CTL_MAX_CONNS];
  cconn *ws[CTL_MAX_CONNS];
  size_t n = 0;
  const size_t hsz = ea_wire_frame_hdr_size(c->have_key);
  for (cconn *k = c->conns; k && n < CTL_MAX_CONNS; k = k->next) {
    if (k == self || k->outgoing || k->closing || k->authed) continue;
    w[n] = (ea_admit_wait){
        .src = k->from, .since_ms = k->since_ms, .header_here = header_bytes(k) >= hsz};
    ws[n++] = k;
  }
  bool own = false;
  int v = c->admit ? ea_admit_victim(c->admit, w, n, from, &own) : -1;
  if (v < 0) return;
  c->st.preauth_evicted++;
  char a[64], d[160];
  ea_addr_str(&ws[v]->from, a, sizeof a);
  snprintf(d, sizeof d, "closed a connection from %s that sent no header (%zu waiting%s)", a, n,
           own ? " from that address" : "");
  warn_bad(c, "probation", d);
  conn_close(ws[v]);
}

static void on_accept(uv_stream_t *server, int status) {
  ea__ctl *c = server->data;
  if (status < 0 || c->closing) return;
  if (!ea_accept_gate_pass(&c->gate)) {
    c->st.accepts_deferred = c->gate.deferred;
    return;
  }
  cconn *k = conn_new(c, false);
  if (!k) return;
  if (uv_accept(server, (uv_stream_t *)&k->tcp) != 0) {
    conn_close(k);
    return;
  }
  c->st.accepted++;
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  if (uv_tcp_getpeername(&k->tcp, (struct sockaddr *)&ss, &sl) == 0)
    ea_addr_from_sockaddr((struct sockaddr *)&ss, &k->from);
  k->from.port = 0; /* per address, not per connection */
  k->since_ms = uv_now(c->loop);
  if (!c->admit) {
    ea_admit_config ac = {.rate = CTL_SRC_RATE,
                          .burst = CTL_SRC_BURST,
                          .per_source = CTL_PREAUTH_PER_SOURCE,
                          .total = CTL_PREAUTH_MAX};
    c->admit = ea_admit_new(&ac); /* NULL: no memory, no limits */
  }
  if (c->admit && !ea_admit_connect(c->admit, &k->from, k->since_ms)) {
    c->st.refused_rate++;
    conn_close(k);
    return;
  }
  probation_room(c, k, &k->from);
  uv_tcp_nodelay(&k->tcp, 1);
  uv_read_start((uv_stream_t *)&k->tcp, conn_alloc, conn_read);
  conn_arm(k);
}

/* ---- sending ----------------------------------------------------------------- */

static void write_done(uv_write_t *req, int status) {
  wbuf *b = (wbuf *)req;
  cconn *k = b->conn;
  ea__ctl *c = k->c;
  if (status == 0) {
    c->st.frames_out++;
    c->st.bytes_out += b->len;
  } else if (status != UV_ECANCELED || !c->closing) {
    c->st.send_errors++;
    if (!k->closing) {
      char a[64];
      ea_addr_str(&k->addr, a, sizeof a);
      ea_log(EA_LOG_DEBUG, "control", "write to %s: %s", a, uv_strerror(status));
    }
    conn_close(k);
  }
  free(b);
}

static void write_now(cconn *k, wbuf *b) {
  b->conn = k;
  uv_buf_t ub = uv_buf_init((char *)b->data, (unsigned)b->len);
  k->last_ms = uv_now(k->c->loop);
  if (uv_write(&b->req, (uv_stream_t *)&k->tcp, &ub, 1, write_done) != 0) {
    k->c->st.send_errors++;
    free(b);
    conn_close(k);
  }
}

static void on_connect(uv_connect_t *req, int status) {
  cconn *k = req->data;
  ea__ctl *c = k->c;
  if (k->closing) return;
  if (status < 0) {
    char a[64];
    ea_addr_str(&k->addr, a, sizeof a);
    ea_log(EA_LOG_DEBUG, "control", "connect to %s: %s", a, uv_strerror(status));
    conn_close(k); /* counts the queued frames as send errors */
    return;
  }
  k->connected = true;
  c->st.connects++;
  uv_tcp_nodelay(&k->tcp, 1);
  uv_os_fd_t fd;
  unsigned ut = CTL_USER_TIMEOUT_MS;
  if (uv_fileno((uv_handle_t *)&k->tcp, &fd) == 0)
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
  uv_read_start((uv_stream_t *)&k->tcp, conn_alloc, conn_read);
  k->last_ms = uv_now(c->loop);
  uv_timer_start(&k->timer, conn_timer_cb, CTL_OUT_IDLE_MS, 0);
  wbuf *b = k->qhead;
  k->qhead = k->qtail = NULL;
  k->qbytes = 0;
  while (b) {
    wbuf *n = b->next;
    if (k->closing) {
      c->st.send_errors++;
      free(b);
    } else {
      write_now(k, b);
    }
    b = n;
  }
}

static cconn *find_out(ea__ctl *c, const ea_node_id *to) {
  for (cconn *k = c->conns; k; k = k->next)
    if (k->outgoing && !k->closing && ea_node_id_cmp(&k->peer, to) == 0) return k;
  return NULL;
}

void ea__ctl_reset_peer(ea__ctl *c, const ea_node_id *to) {
  if (!c || c->closing) return;
  cconn *k = find_out(c, to);
  if (!k) return;
  c->st.resets++;
  conn_close(k);
}

static void send_frame(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const uint8_t *plain,
                       size_t plen, const char *label);

void ea__ctl_send(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const ea_rdzv_msg *m) {
  if (!c || c->closing) return;
  uint8_t *plain = NULL;
  size_t plen = 0;
  int rc = ea_rdzv_encode(m, &plain, &plen);
  if (rc != 0) {
    c->st.encode_errors++;
    ea_log(EA_LOG_ERROR, "control", "cannot encode %s: %s", ea_rdzv_msg_type_str(m->type),
           strerror(-rc));
    return;
  }
  send_frame(c, to, addr, plain, plen, ea_rdzv_msg_type_str(m->type));
  free(plain);
}

void ea__ctl_send_bytes(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const uint8_t *plain,
                        size_t plen) {
  send_frame(c, to, addr, plain, plen, "frame");
}

/* EA_TEST_RECORD_FRAMES=DIR (a test hook, docs/security.md): every frame
 * written to the wire is also written to DIR/<seq>-<label>-<to>.bin, header
 * and body as sent, so that a test can replay one. */
static void record_frame(ea__ctl *c, const ea_node_id *to, const char *label, const uint8_t *b,
                         size_t len) {
  char hex[33], path[4096];
  ea_node_id_hex(to, hex);
  snprintf(path, sizeof path, "%s/%06llu-%s-%.12s.bin", c->record_dir,
           (unsigned long long)++c->record_seq, label, hex);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t w = write(fd, b, len);
  (void)w;
  close(fd);
}

static void send_frame(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const uint8_t *plain,
                       size_t plen, const char *label) {
  if (!c || c->closing) return;
  if (!addr || (addr->family != 4 && addr->family != 6) || addr->port == 0) {
    c->st.send_errors++;
    return;
  }
  if (plen == 0 || plain[0] != EA_WIRE_MAGIC_PLAIN) {
    c->st.encode_errors++;
    return;
  }
  const size_t need = ea_wire_frame_size(c->have_key, plen);
  wbuf *b = malloc(sizeof *b + need);
  if (!b) {
    c->st.send_errors++;
    return;
  }
  b->next = NULL;
  if (ea_wire_frame_encode(c->have_key ? c->key : NULL, c->sender, plain, plen, CTL_MAX_FRAME,
                           b->data, need, &b->len) != 0) {
    free(b);
    c->st.encode_errors++;
    return;
  }
  if (c->record_dir) record_frame(c, to, label, b->data, b->len);

  cconn *k = find_out(c, to);
  if (k && !ea_addr_eq(&k->addr, addr)) { /* it moved (restarted elsewhere) */
    conn_close(k);
    k = NULL;
  }
  if (!k) {
    struct sockaddr_storage ss;
    if (ea_addr_to_sockaddr(addr, &ss) == 0 || !(k = conn_new(c, true))) {
      free(b);
      c->st.send_errors++;
      return;
    }
    k->peer = *to;
    k->addr = *addr;
    k->creq.data = k;
    int rc = uv_tcp_connect(&k->creq, &k->tcp, (const struct sockaddr *)&ss, on_connect);
    if (rc != 0) {
      free(b);
      c->st.send_errors++;
      conn_close(k);
      return;
    }
    uv_timer_start(&k->timer, conn_timer_cb, CTL_CONNECT_TIMEOUT_MS, 0);
  }
  if (k->connected) {
    write_now(k, b);
    return;
  }
  if (k->qbytes + b->len > CTL_QUEUE_MAX) {
    free(b);
    c->st.send_errors++;
    return;
  }
  if (k->qtail)
    k->qtail->next = b;
  else
    k->qhead = b;
  k->qtail = b;
  k->qbytes += b->len;
}

/* ---- start / close ---------------------------------------------------------- */

static void listener_closed(uv_handle_t *h) {
  ea__ctl *c = h->data;
  c->open--;
  maybe_free(c);
}

int ea__ctl_start(uv_loop_t *loop, const ea_addr *bind, const uint8_t *key, ea_wire_sender *sender,
                  ea__ctl_recv_fn on_msg, void *ctx, ea__ctl **out, char *err, size_t errlen) {
  *out = NULL;
  ea__ctl *c = calloc(1, sizeof *c);
  if (!c || ea_ar_init(&c->ar, CTL_AR_SENDERS) < 0) {
    free(c);
    snprintf(err, errlen, "control: out of memory");
    return -ENOMEM;
  }
  if (sender) {
    c->sender = sender;
  } else {
    /* A channel of its own (preflight, tests): a random id, an epoch from
     * the wall clock in microseconds. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    randombytes_buf(c->own_sender.id.b, sizeof c->own_sender.id.b);
    c->own_sender.epoch = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    c->sender = &c->own_sender;
  }
  const char *rec = getenv("EA_TEST_RECORD_FRAMES");
  if (rec && *rec) c->record_dir = strdup(rec);
  c->loop = loop;
  c->on_msg = on_msg;
  c->ctx = ctx;
  if (key) {
    c->have_key = true;
    memcpy(c->key, key, EA_KEY_BYTES);
  }
  struct sockaddr_storage ss;
  if (ea_addr_to_sockaddr(bind, &ss) == 0) {
    free(c);
    snprintf(err, errlen, "control: no address to bind");
    return -EINVAL;
  }
  uv_tcp_init(loop, &c->listener);
  ea_accept_gate_init(&c->gate, loop, (uv_stream_t *)&c->listener, on_accept);
  c->listener.data = c->gate.resume.data = c;
  c->open = 2;
  const char *step = "bind";
  int rc = uv_tcp_bind(&c->listener, (const struct sockaddr *)&ss, 0);
  /* As deep as the gossip listener's (transport_uv.c says why). */
  if (rc == 0) step = "listen", rc = uv_listen((uv_stream_t *)&c->listener, SOMAXCONN, on_accept);
  if (rc == 0) {
    struct sockaddr_storage got;
    int len = sizeof got;
    step = "getsockname";
    rc = uv_tcp_getsockname(&c->listener, (struct sockaddr *)&got, &len);
    if (rc == 0) ea_addr_from_sockaddr((const struct sockaddr *)&got, &c->bound);
  }
  if (rc != 0) {
    char a[64];
    ea_addr_str(bind, a, sizeof a);
    snprintf(err, errlen, "control channel: %s %s (tcp): %s%s", step, a, uv_strerror(rc),
             rc == UV_EADDRINUSE ? " (choose another port with --control-bind)" : "");
    c->closing = true;
    uv_close((uv_handle_t *)&c->gate.resume, listener_closed);
    uv_close((uv_handle_t *)&c->listener, listener_closed); /* frees c */
    return rc;
  }
  c->listening = true;
  *out = c;
  return 0;
}

void ea__ctl_set_frame_hook(ea__ctl *c, ea__ctl_frame_fn fn) {
  c->on_frame = fn;
}

int ea__ctl_on_family(ea__ctl *c, uint8_t family, ea__ctl_frame_fn fn) {
  if (c->nfam == EA__CTL_FAMILIES) return -ENOSPC;
  c->fam[c->nfam].family = family;
  c->fam[c->nfam].fn = fn;
  c->nfam++;
  return 0;
}

const ea_addr *ea__ctl_bound(const ea__ctl *c) {
  return &c->bound;
}

void ea__ctl_stats_get(const ea__ctl *c, ea__ctl_stats *out) {
  *out = c->st;
  out->conns_out = c->nout;
  out->conns_in = c->nin;
}

void ea__ctl_close(ea__ctl *c, void (*closed)(void *ctx), void *ctx) {
  if (!c || c->closing) return;
  c->closing = true;
  c->closed = closed;
  c->closed_ctx = ctx;
  for (cconn *k = c->conns; k; k = k->next) conn_close(k);
  uv_close((uv_handle_t *)&c->listener, listener_closed);
  uv_close((uv_handle_t *)&c->gate.resume, listener_closed);
}
