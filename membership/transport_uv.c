/* The libuv transport: the only place where the SWIM core meets sockets and
 * a clock.  One UDP socket carries probes and gossip; a TCP listener on the
 * same port number serves push-pull state exchanges; a single uv_timer is
 * re-armed to ea_swim_next_deadline() after every call into the core, so the
 * core is ticked exactly when it asked to be and never polled.
 *
 * Everything here runs on one loop and nothing blocks it: UDP sends use
 * uv_udp_try_send and fall back to a bounded queue, DNS goes through
 * uv_getaddrinfo, TCP frames are read incrementally.  Input from the network
 * is untrusted: every datagram and frame is size-checked before it is
 * buffered, opened with the cluster key when there is one (a sealed packet
 * without a key, or a plain one with a key, is as unauthenticated as a
 * forged one), decoded with the bounded codec, and on any failure counted
 * and dropped — never fatal, and logged at a limited rate so a flood cannot
 * turn into a log flood.
 *
 * The core is pure and calls back synchronously (send, sync, on_change); a
 * callback never re-enters the core: a push-pull only starts connecting
 * inside `sync`, and exports our state later from the connect callback.
 *
 * Seed join and graceful leave are in transport_join.c; the state both
 * files share, and the helpers each calls in the other, are declared in
 * transport_int.h.
 */
#include "transport_int.h"

#include "ea_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* Incoming push-pull connections served at once; more are answered busy.  A
 * join storm of a whole cluster restarting hits the seed with one
 * connection per node, and each lasts a few ms, so 64 concurrent is ample.
 *
 * Before its frame header (wire_frame.c) a connection is on probation: at
 * most PREAUTH_PER_SOURCE per source address and MAX_INCOMING in all, each
 * given PREAUTH_DEADLINE_MS to send the header.  Over a cap the oldest one
 * on probation is closed — one whose header has not arrived, in our buffer
 * or the kernel's, so a joiner accepted in the same turn as a flood is not
 * the one closed.  Issue 11: 200 idle connections to a seed's gossip port
 * made every join through it fail.  With a key the header is sealed, and no
 * body is buffered before it opens.  Past twice MAX_INCOMING a connection
 * is closed at once. */
#define MAX_INCOMING 64
#define PREAUTH_PER_SOURCE 8
/* Admission before any of that (issue 27; ea_admit.h): each source address
 * (an IPv6 /64) has a token bucket of SRC_BURST connects refilled at
 * SRC_RATE a second; a connect without a token is closed as soon as it is
 * accepted, before any buffer or timer (refused_rate).  A source that has
 * authenticated a push-pull before (either way) is never refused, and its
 * connections are the last evicted; past MAX_INCOMING the slots on
 * probation are shared max-min fairly.  A node syncs with a seed every
 * push-pull interval and joins a few times: far under the rate.  Issue 27:
 * 25 sources reconnecting as fast as they could (1,700 connects/s) kept
 * every join out for as long as they ran — 200 held connections over the
 * total cap made the seed answer the joiner busy or reset it. */
#define SRC_RATE 10.0
#define SRC_BURST 20.0
/* A joiner writes its state right after its connect completes. */
#define PREAUTH_DEADLINE_MS 2000
/* Datagrams queued when the socket would block; beyond this they are
 * dropped (UDP gossip tolerates loss by design).  1024 × 1.4 KB ≈ 1.4 MB. */
#define MAX_UDP_QUEUE 1024
/* One drop log line per this interval per kind; the counters keep the
 * exact numbers. */
#define DROP_LOG_INTERVAL_MS 1000
/* Attempts to find an ephemeral port free for both UDP and TCP: a miss
 * needs the TCP twin of a fresh ephemeral UDP port to be taken, so a few
 * percent at worst on a busy host; 16 misses in a row do not happen. */
#define BIND_TRIES 16

/* ---- small helpers ---------------------------------------------------- */

void ea_addr_from_sockaddr(const struct sockaddr *sa, ea_addr *out) {
  memset(out, 0, sizeof *out);
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    out->family = 4;
    out->port = ntohs(s4->sin_port);
    memcpy(out->ip, &s4->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    out->family = 6;
    out->port = ntohs(s6->sin6_port);
    memcpy(out->ip, &s6->sin6_addr, 16);
  }
}

socklen_t ea_addr_to_sockaddr(const ea_addr *a, struct sockaddr_storage *out) {
  memset(out, 0, sizeof *out);
  if (a->family == 4) {
    struct sockaddr_in *s4 = (struct sockaddr_in *)out;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(a->port);
    memcpy(&s4->sin_addr, a->ip, 4);
    return sizeof *s4;
  }
  if (a->family == 6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(a->port);
    memcpy(&s6->sin6_addr, a->ip, 16);
    return sizeof *s6;
  }
  return 0;
}

/* Split "host:port", "[v6]:port", "host" into host and port.  The host may
 * be empty (":7000").  Returns 0 or -EINVAL. */
int ea__transport_split_hostport(const char *s, uint16_t default_port, char *host, size_t hostcap,
                                 uint16_t *port) {
  const char *h = s, *colon = NULL;
  size_t hlen;
  if (*s == '[') {
    const char *rb = strchr(s, ']');
    if (!rb) return -EINVAL;
    h = s + 1;
    hlen = (size_t)(rb - h);
    if (rb[1] == ':')
      colon = rb + 1;
    else if (rb[1] != 0)
      return -EINVAL;
  } else {
    colon = strrchr(s, ':');
    if (colon && strchr(s, ':') != colon) return -EINVAL; /* bare v6 needs [] */
    hlen = colon ? (size_t)(colon - s) : strlen(s);
  }
  if (hlen + 1 > hostcap) return -EINVAL;
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = default_port;
  if (colon) {
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == 0 || *end || errno || p > 65535) return -EINVAL;
    *port = (uint16_t)p;
  }
  return 0;
}

int ea_addr_parse(const char *s, uint16_t default_port, ea_addr *out) {
  char host[INET6_ADDRSTRLEN + 1];
  uint16_t port;
  if (!s || ea__transport_split_hostport(s, default_port, host, sizeof host, &port)) return -EINVAL;
  memset(out, 0, sizeof *out);
  out->port = port;
  if (host[0] == 0 || inet_pton(AF_INET, host, out->ip) == 1) {
    out->family = 4;
    return 0;
  }
  if (inet_pton(AF_INET6, host, out->ip) == 1) {
    out->family = 6;
    return 0;
  }
  return -EINVAL;
}

static bool addr_is_any(const ea_addr *a) {
  static const uint8_t zero[16];
  return memcmp(a->ip, zero, a->family == 4 ? 4 : 16) == 0;
}

/* kind: 0 malformed, 1 unauthenticated, 2 oversize. */
static void log_drop(ea_transport *t, int kind, const ea_addr *from, const char *detail) {
  static const char *what[] = {"malformed", "unauthenticated", "oversize", "replayed"};
  uint64_t now = uv_now(t->loop);
  if (t->drop_log_ms[kind] && now - t->drop_log_ms[kind] < DROP_LOG_INTERVAL_MS) {
    t->drop_suppressed[kind]++;
    return;
  }
  char a[64];
  ea_addr_str(from, a, sizeof a);
  /* A wrong cluster key is an operator's mistake worth a warning; garbage
   * and oversize input is noise an attacker controls: debug only. */
  ea_log(kind == 1 || kind == 3 ? EA_LOG_WARN : EA_LOG_DEBUG, "transport",
         "dropped %s input from %s: %s (%llu similar suppressed)", what[kind], a, detail,
         (unsigned long long)t->drop_suppressed[kind]);
  t->drop_log_ms[kind] = now ? now : 1;
  t->drop_suppressed[kind] = 0;
}

static void tick_cb(uv_timer_t *h);

void ea__transport_rearm(ea_transport *t) {
  if (t->closing) return;
  uint64_t d = ea_swim_next_deadline(t->swim);
  if (d == UINT64_MAX) {
    uv_timer_stop(&t->tick);
    return;
  }
  uint64_t now = uv_now(t->loop);
  uv_timer_start(&t->tick, tick_cb, d > now ? d - now : 0, 0);
}

static void tick_cb(uv_timer_t *h) {
  ea_transport *t = h->data;
  if (t->closing) return;
  ea_swim_tick(t->swim, uv_now(t->loop));
  ea__transport_rearm(t);
}

/* ---- closing ------------------------------------------------------------ */

void ea__transport_maybe_free(ea_transport *t) {
  if (!t->closing || t->open_handles > 0 || t->conns || t->join.gai_pending > 0 ||
      t->udp_queued > 0)
    return;
  void (*cb)(void *) = t->closed_cb;
  void *ctx = t->closed_ctx;
  if (t->swim) ea_swim_free(t->swim);
  for (size_t i = 0; i < t->join.nseeds; i++) free(t->join.seeds[i]);
  free(t->join.seeds);
  free(t->join.ports);
  free(t->join.extra);
  free(t->join.cand);
  free(t->local);
  ea_ar_free(&t->ar_udp);
  ea_ar_free(&t->ar_tcp);
  free(t->record_dir);
  ea_admit_free(t->admit);
  sodium_memzero(t->key, sizeof t->key);
  free(t);
  if (cb) cb(ctx);
}

static void handle_closed(uv_handle_t *h) {
  ea_transport *t = h->data;
  t->open_handles--;
  ea__transport_maybe_free(t);
}

/* ---- UDP ---------------------------------------------------------------- */

typedef struct {
  uv_udp_send_t req;
  ea_transport *t;
  size_t len;
  uint8_t data[];
} udp_pending;

static void udp_sent(uv_udp_send_t *req, int status) {
  udp_pending *p = (udp_pending *)req;
  ea_transport *t = p->t;
  t->udp_queued--;
  if (status == 0) {
    t->st.packets_out++;
    t->st.bytes_out += p->len;
  } else if (status != UV_ECANCELED) {
    t->st.send_errors++;
  }
  free(p);
  ea__transport_maybe_free(t);
}

static void udp_send_bytes(ea_transport *t, const ea_addr *to, const uint8_t *data, size_t len) {
  struct sockaddr_storage ss;
  if (!ea_addr_to_sockaddr(to, &ss) || to->family != t->bound.family) {
    t->st.send_errors++;
    return;
  }
  uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
  int rc = uv_udp_try_send(&t->udp, &b, 1, (const struct sockaddr *)&ss);
  if (rc >= 0) {
    t->st.packets_out++;
    t->st.bytes_out += len;
    return;
  }
  if (rc != UV_EAGAIN || t->udp_queued >= MAX_UDP_QUEUE) {
    t->st.send_errors++;
    return;
  }
  udp_pending *p = malloc(sizeof *p + len);
  if (!p) {
    t->st.send_errors++;
    return;
  }
  p->t = t;
  p->len = len;
  memcpy(p->data, data, len);
  b = uv_buf_init((char *)p->data, (unsigned)len);
  if (uv_udp_send(&p->req, &t->udp, &b, 1, (const struct sockaddr *)&ss, udp_sent) < 0) {
    t->st.send_errors++;
    free(p);
    return;
  }
  t->udp_queued++;
}

/* EA_TEST_RECORD_FRAMES=DIR (a test hook, docs/security.md): the first 16
 * sealed datagrams are also written to DIR/udp-<n>.bin, so that a test can
 * replay one. */
static void record_datagram(ea_transport *t, const uint8_t *b, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/udp-%02u.bin", t->record_dir, t->recorded++);
  FILE *f = fopen(path, "wbx");
  if (!f) return;
  fwrite(b, 1, len, f);
  fclose(f);
}

/* ea_swim_io.send */
static void io_send(void *ctx, const ea_addr *to, const ea_msg *m) {
  ea_transport *t = ctx;
  if (t->closing) return;
  size_t len = 0;
  int rc = ea_wire_encode_msg(m, t->txplain, t->budget, &len);
  if (rc == -EMSGSIZE && m->nupdates > 0) {
    /* The core budgets with ea_wire_update_size, so this is a safety net:
     * a probe must still go out, even with fewer updates piggybacked. */
    t->trimmed = *m;
    while (rc == -EMSGSIZE && t->trimmed.nupdates > 0) {
      t->trimmed.nupdates--;
      rc = ea_wire_encode_msg(&t->trimmed, t->txplain, t->budget, &len);
    }
    if (rc == 0) t->st.updates_trimmed++;
  }
  if (rc < 0) {
    t->st.encode_errors++;
    return;
  }
  ea__transport_leave_sent(t, m);
  if (!t->have_key) {
    udp_send_bytes(t, to, t->txplain, len);
    return;
  }
  size_t slen = 0;
  if (ea_wire_seal_rp(t->key, t->sender, t->txplain, len, t->txsealed, sizeof t->txsealed, &slen,
                      NULL) < 0) {
    t->st.encode_errors++;
    return;
  }
  if (t->record_dir && t->recorded < 16) record_datagram(t, t->txsealed, slen);
  udp_send_bytes(t, to, t->txsealed, slen);
}

static void udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  ea_transport *t = h->data;
  *buf = uv_buf_init((char *)t->rxbuf, sizeof t->rxbuf);
}

/* Open (when keyed) a packet or frame into t->plain-like storage, and
 * judge its replay header with window ar (UDP or TCP).  Returns the
 * plaintext pointer and length, or NULL after counting the drop. */
static const uint8_t *open_input(ea_transport *t, ea_ar_table *ar, const ea_addr *from,
                                 const uint8_t *data, size_t len, uint8_t *scratch, size_t cap,
                                 size_t *plen) {
  if (len == 0) {
    t->st.dropped_malformed++;
    log_drop(t, 0, from, "empty");
    return NULL;
  }
  if (data[0] == EA_WIRE_MAGIC_SEALED || data[0] == EA_WIRE_MAGIC_SEALED_RP) {
    if (!t->have_key) {
      t->st.dropped_unauthenticated++;
      log_drop(t, 1, from, "sealed, but this agent has no cluster key (--key-file)");
      return NULL;
    }
    ea_wire_rp rp;
    int rc = ea_wire_open_rp(t->key, data, len, scratch, cap, plen, &rp);
    if (rc == -EPROTO) {
      t->st.dropped_unauthenticated++;
      log_drop(t, 1, from, "sealed without a replay header (0xEB): an agent of an older version");
      return NULL;
    }
    if (rc < 0) {
      t->st.dropped_unauthenticated++;
      log_drop(t, 1, from, "failed authentication (a different cluster key?)");
      return NULL;
    }
    ea_ar_verdict v = ea_ar_check(ar, &rp.sender, rp.epoch, rp.counter);
    if (v != EA_AR_OK) {
      char d[160], hex[33];
      ea_node_id_hex(&rp.sender, hex);
      snprintf(d, sizeof d, "sender %.12s epoch %llu counter %llu: %s", hex,
               (unsigned long long)rp.epoch, (unsigned long long)rp.counter, ea_ar_verdict_str(v));
      t->st.dropped_replayed++;
      log_drop(t, 3, from, d);
      return NULL;
    }
    return scratch;
  }
  if (data[0] == EA_WIRE_MAGIC_PLAIN) {
    if (t->have_key) {
      t->st.dropped_unauthenticated++;
      log_drop(t, 1, from, "not sealed, but this agent requires the cluster key");
      return NULL;
    }
    *plen = len;
    return data;
  }
  t->st.dropped_malformed++;
  log_drop(t, 0, from, "magic: neither 0xEA nor 0xEC");
  return NULL;
}

static void udp_recv(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *sa,
                     unsigned flags) {
  ea_transport *t = h->data;
  if (t->closing || nread == 0 || !sa) return; /* 0 with no address: nothing to read */
  ea_addr from;
  ea_addr_from_sockaddr(sa, &from);
  if (nread < 0) {
    ea_log(EA_LOG_DEBUG, "transport", "udp receive error: %s", uv_strerror((int)nread));
    return;
  }
  t->st.packets_in++;
  t->st.bytes_in += (uint64_t)nread;
  if ((flags & UV_UDP_PARTIAL) || (size_t)nread > EA_WIRE_MAX_PACKET) {
    t->st.dropped_oversize++;
    log_drop(t, 2, &from, "datagram larger than EA_WIRE_MAX_PACKET");
    return;
  }
  size_t plen = 0;
  const uint8_t *p = open_input(t, &t->ar_udp, &from, (const uint8_t *)buf->base, (size_t)nread,
                                t->plain, sizeof t->plain, &plen);
  if (!p) return;
  const char *err = "?";
  if (ea_wire_decode_msg(p, plen, &t->rxmsg, &err) < 0) {
    t->st.dropped_malformed++;
    log_drop(t, 0, &from, err);
    return;
  }
  ea_swim_recv(t->swim, uv_now(t->loop), &from, &t->rxmsg);
  ea__transport_rearm(t);
}

/* ---- TCP push-pull -------------------------------------------------------- */

static void conn_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles > 0) return;
  ea_transport *t = c->t;
  if (c->prev)
    c->prev->next = c->next;
  else
    t->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  ea_wire_reader_free(&c->rd);
  free(c->out);
  free(c);
  ea__transport_maybe_free(t);
}

/* A push-pull with a authenticated: its source is known from now on. */
static void src_authed(ea_transport *t, const ea_addr *a) {
  if (t->admit) ea_admit_authed(t->admit, a, uv_now(t->loop));
}

/* Record the outcome once and close.  ok is only ever true for outgoing
 * conns that merged the peer's state, or incoming ones that answered. */
static void conn_finish(conn *c, bool ok, const char *why) {
  if (c->done) return;
  c->done = true;
  ea_transport *t = c->t;
  if (c->outgoing) {
    if (ok) {
      t->st.syncs_ok++;
      src_authed(t, &c->peer);
    } else
      t->st.syncs_failed++;
    char a[64];
    ea_addr_str(&c->peer, a, sizeof a);
    if (!ok && !c->is_join)
      ea_log(EA_LOG_DEBUG, "transport", "push-pull with %s failed: %s", a, why);
    if (c->is_join && c->attempt == t->join.attempt)
      ea__transport_join_sync_done(t, &c->peer, ok, why);
  } else {
    if (ok) t->st.syncs_served++;
    t->nincoming--;
  }
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

static void conn_timeout(uv_timer_t *h) {
  conn *c = h->data;
  ea_transport *t = c->t;
  if (c->busy) {
    conn_finish(c, false, "answered busy");
    return;
  }
  if (!c->outgoing && !c->authed) {
    t->st.preauth_timeouts++;
    log_drop(t, 0, &c->peer, "push-pull: no frame header within the deadline");
    conn_finish(c, false, "no frame header within the deadline");
    return;
  }
  uint64_t now = uv_now(t->loop), end = c->since_ms + t->sync_timeout_ms;
  if (now < end) {
    uv_timer_start(&c->timer, conn_timeout, end - now, 0);
    return;
  }
  conn_finish(c, false, "timed out");
}

static conn *conn_new(ea_transport *t, bool outgoing) {
  conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->t = t;
  c->outgoing = outgoing;
  c->rd.key = t->have_key ? t->key : NULL;
  c->rd.max_len = EA_WIRE_MAX_FRAME + EA_WIRE_SEAL_RP_OVERHEAD;
  if (uv_tcp_init(t->loop, &c->tcp) < 0) {
    free(c);
    return NULL;
  }
  uv_timer_init(t->loop, &c->timer);
  c->tcp.data = c->timer.data = c->creq.data = c->wreq.data = c;
  c->handles = 2;
  c->next = t->conns;
  if (t->conns) t->conns->prev = c;
  t->conns = c;
  c->since_ms = uv_now(t->loop);
  uint32_t first = t->sync_timeout_ms;
  if (!outgoing && PREAUTH_DEADLINE_MS < first) first = PREAUTH_DEADLINE_MS;
  uv_timer_start(&c->timer, conn_timeout, first, 0);
  return c;
}

/* Build c->out = frame header + (sealed) state frame of our member table. */
static int conn_build_out(conn *c) {
  ea_transport *t = c->t;
  ea_update *ups = NULL;
  size_t n = 0;
  int rc = ea_swim_export(t->swim, &ups, &n);
  if (rc < 0) return rc;
  uint8_t *plain = NULL;
  size_t plen = 0;
  rc = ea_wire_encode_state(c->kind, &t->self, ups, n, &plain, &plen);
  free(ups);
  if (rc < 0) return rc;
  const size_t need = ea_wire_frame_size(t->have_key, plen);
  c->out = malloc(need);
  if (!c->out) {
    free(plain);
    return -ENOMEM;
  }
  rc = ea_wire_frame_encode(t->have_key ? t->key : NULL, t->sender, plain, plen, EA_WIRE_MAX_FRAME,
                            c->out, need, &c->out_len);
  free(plain);
  return rc;
}

static void conn_written(uv_write_t *req, int status) {
  conn *c = req->data;
  c->writing = false;
  if (c->done) return;
  /* Busy: the answer is out; the initiator reads it and closes, and we
   * keep reading until then (closing with its frame unread would reset
   * the connection and lose the answer). */
  if (c->busy) return;
  if (status < 0) {
    conn_finish(c, false, uv_strerror(status));
    return;
  }
  /* Responder: our answer is out and their state merged: done.
   * Initiator: keep reading until their frame arrives. */
  if (!c->outgoing) conn_finish(c, true, NULL);
}

static int conn_write_out(conn *c) {
  int rc = c->busy ? 0 : conn_build_out(c);
  if (c->busy) {
    c->out = malloc(EA_WIRE_FRAME_HDR_MAX);
    rc = c->out ? ea_wire_frame_hdr_encode(c->t->have_key ? c->t->key : NULL, 0, EA_WIRE_FRAME_BUSY,
                                           c->out, EA_WIRE_FRAME_HDR_MAX, &c->out_len)
                : -ENOMEM;
  }
  if (rc < 0) return rc;
  uv_buf_t b = uv_buf_init((char *)c->out, (unsigned)c->out_len);
  rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, conn_written);
  if (rc == 0) c->writing = true;
  return rc;
}

/* A whole frame arrived: open, decode, (answer), merge. */
static void conn_got_frame(conn *c) {
  ea_transport *t = c->t;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->got_frame = true;
  size_t plen = 0;
  uint8_t *scratch = NULL;
  const uint8_t *p;
  const uint8_t *frame = c->rd.body;
  const size_t flen = c->rd.len;
  if (frame[0] == EA_WIRE_MAGIC_SEALED || frame[0] == EA_WIRE_MAGIC_SEALED_RP) {
    scratch = malloc(flen);
    if (!scratch) {
      conn_finish(c, false, "out of memory");
      return;
    }
  }
  p = open_input(t, &t->ar_tcp, &c->peer, frame, flen, scratch, flen, &plen);
  if (!p) {
    free(scratch);
    conn_finish(c, false, "peer's state frame rejected (cluster key mismatch?)");
    return;
  }
  uint8_t kind = 0;
  ea_node_id src;
  ea_update *ups = NULL;
  size_t n = 0;
  const char *err = "?";
  int rc = ea_wire_decode_state(p, plen, &kind, &src, &ups, &n, &err);
  free(scratch);
  if (rc < 0) {
    t->st.dropped_malformed++;
    log_drop(t, 0, &c->peer, err);
    conn_finish(c, false, err);
    return;
  }
  if (!c->outgoing) {
    c->kind = kind;
    rc = conn_write_out(c);
    if (rc < 0) {
      free(ups);
      conn_finish(c, false, "cannot answer push-pull");
      return;
    }
  }
  ea_swim_merge(t->swim, uv_now(t->loop), ups, n);
  free(ups);
  ea__transport_rearm(t);
  if (c->outgoing) conn_finish(c, true, NULL);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn *c = h->data;
  *buf = uv_buf_init((char *)c->t->tcpbuf, sizeof c->t->tcpbuf);
}

/* The reader refused the header (rc < 0, why), or opened it: a BUSY
 * answer, or the peer authenticated.  Returns false after finishing the
 * connection. */
static bool conn_got_header(conn *c, int rc, const char *why) {
  ea_transport *t = c->t;
  if (rc == 0 && c->rd.flags && !c->outgoing)
    rc = -EA_EWIRE, why = "frame header: busy from an initiator";
  if (rc < 0) {
    if (rc == -EBADMSG) {
      t->st.dropped_unauthenticated++;
      log_drop(t, 1, &c->peer, why);
    } else if (rc == -EMSGSIZE) {
      t->st.dropped_oversize++;
      log_drop(t, 2, &c->peer, why);
    } else if (rc != -ENOMEM) {
      t->st.dropped_malformed++;
      log_drop(t, 0, &c->peer, why);
    }
    conn_finish(c, false,
                rc == -EBADMSG ? "peer's frame header rejected (cluster key mismatch?)" : why);
    return false;
  }
  if (c->rd.flags & EA_WIRE_FRAME_BUSY) {
    conn_finish(c, false,
                "busy: the peer has too many push-pull connections open (retrying with backoff)");
    return false;
  }
  c->authed = true;
  if (!c->outgoing) src_authed(t, &c->peer);
  return true;
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = s->data;
  if (c->done || nread == 0) return;
  if (nread < 0) {
    const char *why =
        nread == UV_EOF ? "peer closed before sending its state" : uv_strerror((int)nread);
    if (c->outgoing && !c->authed && (nread == UV_EOF || nread == UV_ECONNRESET))
      why = nread == UV_EOF ? "peer closed the connection before it answered (a different cluster "
                              "key, or an agent too old for frame header version 2?)"
                            : "connection reset by peer before it answered (a different cluster "
                              "key, or an agent too old for frame header version 2?)";
    conn_finish(c, false, c->busy ? "answered busy" : why);
    return;
  }
  if (c->busy) return; /* answered busy: discard what the initiator sends */
  const uint8_t *p = (const uint8_t *)buf->base;
  size_t left = (size_t)nread;
  while (left > 0 && !c->got_frame) {
    size_t used = 0;
    const char *why = "?";
    int rc = ea_wire_reader_feed(&c->rd, p, left, &used, &why);
    p += used, left -= used;
    if (rc == -ENOMEM && c->rd.in_body) {
      conn_finish(c, false, "out of memory");
      return;
    }
    if (rc < 0 || rc == EA_WIRE_RD_HEADER) {
      if (!conn_got_header(c, rc < 0 ? rc : 0, why)) return;
    } else if (rc == EA_WIRE_RD_FRAME) {
      conn_got_frame(c);
    }
  }
}

static void conn_connected(uv_connect_t *req, int status) {
  conn *c = req->data;
  if (c->done) return;
  if (status < 0) {
    conn_finish(c, false, uv_strerror(status));
    return;
  }
  int rc = conn_write_out(c);
  if (rc == 0) rc = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read);
  if (rc < 0) conn_finish(c, false, "cannot send our state");
}

/* ea_swim_io.sync: start connecting; our state is exported once connected
 * (outside the core's call stack). */
/* ea_swim_io.sync */
void ea__transport_sync(void *ctx, const ea_addr *to, ea_sync_kind kind) {
  ea_transport *t = ctx;
  if (t->closing) return;
  conn *c = conn_new(t, true);
  if (!c) {
    t->st.syncs_failed++;
    return;
  }
  c->peer = *to;
  c->kind = (uint8_t)kind;
  if (kind == EA_SYNC_JOIN && t->join.active) {
    c->is_join = true;
    c->attempt = t->join.attempt;
    t->join.syncs_pending++;
  }
  struct sockaddr_storage ss;
  int rc = ea_addr_to_sockaddr(to, &ss) ? 0 : UV_EINVAL;
  if (rc == 0) rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&ss, conn_connected);
  if (rc < 0) conn_finish(c, false, uv_strerror(rc));
}

/* Bytes of c's frame header that have arrived, in our buffer or still in
 * the kernel's. */
static size_t header_bytes(conn *c) {
  uv_os_fd_t fd;
  int pending = 0;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &pending) != 0)
    pending = 0;
  return c->rd.hdr_got + (pending > 0 ? (size_t)pending : 0);
}

static bool on_probation(const conn *k) {
  return !k->outgoing && !k->done && !k->authed && !k->busy;
}

/* Make room for the connection on probation `self` (ea_admit_victim:
 * PREAUTH_PER_SOURCE from one source, MAX_INCOMING in all shared fairly). */
static void probation_room(ea_transport *t, conn *self) {
  const size_t hsz = ea_wire_frame_hdr_size(t->have_key);
  ea_admit_wait w[2 * MAX_INCOMING + 1];
  conn *ws[2 * MAX_INCOMING + 1];
  size_t n = 0;
  for (conn *k = t->conns; k && n < sizeof w / sizeof w[0]; k = k->next) {
    if (k == self || !on_probation(k)) continue;
    w[n] = (ea_admit_wait){
        .src = k->peer, .since_ms = k->since_ms, .header_here = header_bytes(k) >= hsz};
    ws[n++] = k;
  }
  bool own;
  int v = t->admit ? ea_admit_victim(t->admit, w, n, &self->peer, &own) : -1;
  if (v < 0) return;
  t->st.preauth_evicted++;
  log_drop(t, 0, &ws[v]->peer, "push-pull: closed, no frame header while others wait");
  conn_finish(ws[v], false, "evicted: no frame header while others wait");
}

/* Read and drop what a connection refused at accept has already sent (a
 * joiner sends its state at once), at most 64 KiB: closed with unread bytes,
 * the kernel answers with a reset, and the joiner would log "reset by peer
 * (a different cluster key?)" where the seed merely refused it for now.
 * With nothing unread it sees an ordinary close. */
static void discard_input(conn *c) {
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) return;
  char buf[4096];
  for (int i = 0; i < 16 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0; i++) {
  }
}

static void on_accept(uv_stream_t *server, int status) {
  ea_transport *t = server->data;
  if (status < 0 || t->closing) return;
  if (!ea_accept_gate_pass(&t->gate)) {
    t->st.accepts_deferred = t->gate.deferred;
    return;
  }
  conn *c = conn_new(t, false);
  if (!c) return;
  t->nincoming++;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
    conn_finish(c, false, "accept failed");
    return;
  }
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0)
    ea_addr_from_sockaddr((struct sockaddr *)&ss, &c->peer);
  if (!t->admit) {
    ea_admit_config ac = {.rate = SRC_RATE,
                          .burst = SRC_BURST,
                          .per_source = PREAUTH_PER_SOURCE,
                          .total = MAX_INCOMING};
    t->admit = ea_admit_new(&ac); /* NULL: no memory, no limits */
  }
  if (t->admit && !ea_admit_connect(t->admit, &c->peer, uv_now(t->loop))) {
    t->st.refused_rate++;
    log_drop(t, 0, &c->peer, "push-pull: closed at accept, its source is over its connect rate");
    discard_input(c);
    conn_finish(c, false, "over its source's connect rate");
    return;
  }
  if (t->nincoming > 2 * MAX_INCOMING) {
    t->st.syncs_refused++;
    conn_finish(c, false, "too many connections");
    return;
  }
  probation_room(t, c);
  if (t->nincoming > MAX_INCOMING) {
    /* Every other connection is being served or has its header here:
     * answer this one busy, so that its joiner can say so. */
    t->st.syncs_refused++;
    c->busy = true;
    uv_timer_start(&c->timer, conn_timeout, PREAUTH_DEADLINE_MS, 0);
    if (conn_write_out(c) < 0) {
      conn_finish(c, false, "cannot answer busy");
      return;
    }
  }
  if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) < 0)
    conn_finish(c, false, "read failed");
}

/* ---- start / close --------------------------------------------------------- */

/* ea_swim_io.on_change: the core's ctx is the transport; the user's is
 * passed on. */
static void io_on_change(void *ctx, const ea_member *m, uint8_t old_state) {
  ea_transport *t = ctx;
  if (t->on_change) t->on_change(t->ctx, m, old_state);
}

static void close_fds(int a, int b) {
  if (a >= 0) close(a);
  if (b >= 0) close(b);
}

/* Bind UDP and TCP to the same port with plain sockets first, so an
 * ephemeral port taken for TCP can be retried synchronously. */
static int bind_pair(const ea_addr *want, int *ufd_out, int *tfd_out, ea_addr *bound, char *err,
                     size_t errlen) {
  int dom = want->family == 6 ? AF_INET6 : AF_INET;
  int tries = want->port == 0 ? BIND_TRIES : 1;
  int rc = 0;
  for (int i = 0; i < tries; i++) {
    int ufd = socket(dom, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int tfd = socket(dom, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ufd < 0 || tfd < 0) {
      rc = -errno;
      close_fds(ufd, tfd);
      snprintf(err, errlen, "socket: %s", strerror(-rc));
      return rc;
    }
    struct sockaddr_storage ss;
    socklen_t sl = ea_addr_to_sockaddr(want, &ss);
    if (bind(ufd, (struct sockaddr *)&ss, sl) < 0) {
      rc = -errno;
      close_fds(ufd, tfd);
      snprintf(err, errlen, "cannot bind UDP: %s", strerror(-rc));
      return rc;
    }
    sl = sizeof ss;
    getsockname(ufd, (struct sockaddr *)&ss, &sl);
    ea_addr_from_sockaddr((struct sockaddr *)&ss, bound);
    int one = 1;
    /* Restarting agents must rebind while old connections sit in TIME_WAIT. */
    setsockopt(tfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(tfd, (struct sockaddr *)&ss, sl) < 0) {
      rc = -errno;
      close_fds(ufd, tfd);
      if (rc == -EADDRINUSE && i + 1 < tries) continue;
      snprintf(err, errlen, "cannot bind TCP port %u: %s", bound->port, strerror(-rc));
      return rc;
    }
    *ufd_out = ufd;
    *tfd_out = tfd;
    return 0;
  }
  return rc;
}

static void collect_local(ea_transport *t, ea_addr *first_external) {
  uv_interface_address_t *ifs = NULL;
  int n = 0;
  memset(first_external, 0, sizeof *first_external);
  if (uv_interface_addresses(&ifs, &n) < 0) return;
  t->local = calloc((size_t)n + 1, sizeof *t->local);
  for (int i = 0; t->local && i < n; i++) {
    ea_addr a;
    ea_addr_from_sockaddr((struct sockaddr *)&ifs[i].address, &a);
    if (a.family != t->bound.family) continue;
    t->local[t->nlocal++] = a;
    /* An IPv6 link-local address is useless to peers without a scope. */
    bool link_local = a.family == 6 && a.ip[0] == 0xfe && (a.ip[1] & 0xc0) == 0x80;
    if (!ifs[i].is_internal && !link_local && first_external->family == 0) *first_external = a;
  }
  uv_free_interface_addresses(ifs, n);
}

int ea_transport_start(uv_loop_t *loop, const ea_transport_opts *o, ea_transport **out, char *err,
                       size_t errlen) {
  ea_addr want;
  if (ea_addr_parse(o->bind, EA__TRANSPORT_DEFAULT_PORT, &want) < 0) {
    snprintf(err, errlen, "--bind: cannot parse '%s' (want ip:port, [ip6]:port or :port)",
             o->bind ? o->bind : "");
    return -EINVAL;
  }
  ea_addr adv = {0};
  if (o->advertise && *o->advertise && ea_addr_parse(o->advertise, 0, &adv) < 0) {
    snprintf(err, errlen, "--advertise: cannot parse '%s' (want ip:port)", o->advertise);
    return -EINVAL;
  }
  ea_transport *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  int ufd = -1, tfd = -1;
  int rc = bind_pair(&want, &ufd, &tfd, &t->bound, err, errlen);
  if (rc < 0) {
    free(t);
    return rc;
  }
  t->loop = loop;
  t->cfg = o->swim;
  t->self = o->self;
  t->ctx = o->ctx;
  t->on_change = o->on_change;
  t->on_join = o->on_join;
  t->sync_timeout_ms = o->sync_timeout_ms ? o->sync_timeout_ms : EA_TRANSPORT_SYNC_TIMEOUT_MS;
  t->join_retry_max_ms = o->join_retry_max_ms ? o->join_retry_max_ms : 5000;
  ea_rng_seed(&t->rng, o->seed, EA_RNG_TRANSPORT, 0);
  t->have_key = o->key != NULL;
  if (o->key) memcpy(t->key, o->key, EA_KEY_BYTES);
  /* The datagram on the wire must fit EA_WIRE_MAX_PACKET with the seal
   * and its replay header. */
  size_t cap =
      t->have_key ? EA_WIRE_MAX_PACKET - (EA_WIRE_SEAL_RP_OVERHEAD - 1) : EA_WIRE_MAX_PACKET;
  if (o->sender) {
    t->sender = o->sender;
  } else {
    /* A transport of its own (tests, tools): an epoch from the wall clock
     * in microseconds, larger at every start. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    t->own_sender.id = o->self;
    t->own_sender.epoch = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    t->sender = &t->own_sender;
  }
  if (ea_ar_init(&t->ar_udp, EA__TRANSPORT_AR_SENDERS) < 0 ||
      ea_ar_init(&t->ar_tcp, EA__TRANSPORT_AR_SENDERS) < 0) {
    ea_ar_free(&t->ar_udp);
    close_fds(ufd, tfd);
    free(t);
    snprintf(err, errlen, "transport: out of memory");
    return -ENOMEM;
  }
  const char *rec = getenv("EA_TEST_RECORD_FRAMES");
  if (rec && *rec) t->record_dir = strdup(rec);
  t->budget = t->cfg.max_packet && t->cfg.max_packet < cap ? t->cfg.max_packet : cap;
  t->cfg.max_packet = (uint32_t)t->budget;

  ea_addr ext;
  collect_local(t, &ext);
  if (adv.family) {
    t->gossip = adv;
    if (t->gossip.port == 0) t->gossip.port = t->bound.port;
  } else if (addr_is_any(&t->bound)) {
    t->gossip = ext.family ? ext : t->bound;
    if (!ext.family) { /* no external interface: loopback only */
      t->gossip.ip[0] = t->bound.family == 4 ? 127 : 0;
      t->gossip.ip[3] = t->bound.family == 4 ? 1 : 0;
      if (t->bound.family == 6) t->gossip.ip[15] = 1;
    }
    t->gossip.port = t->bound.port;
    char a[64];
    ea_addr_str(&t->gossip, a, sizeof a);
    ea_log(EA_LOG_INFO, "transport",
           "bound to the any-address: advertising %s (set --advertise to choose)", a);
  } else {
    t->gossip = t->bound;
  }
  t->control = t->gossip;
  if (o->control_port) t->control.port = o->control_port;

  uv_udp_init(loop, &t->udp);
  uv_tcp_init(loop, &t->listener);
  uv_timer_init(loop, &t->tick);
  uv_timer_init(loop, &t->join_timer);
  uv_timer_init(loop, &t->leave_timer);
  ea_accept_gate_init(&t->gate, loop, (uv_stream_t *)&t->listener, on_accept);
  t->udp.data = t->listener.data = t->tick.data = t->join_timer.data = t->leave_timer.data =
      t->gate.resume.data = t;
  t->open_handles = 6;
  const char *step = "udp open";
  rc = uv_udp_open(&t->udp, ufd);
  if (rc == 0) ufd = -1, step = "tcp open", rc = uv_tcp_open(&t->listener, tfd);
  if (rc == 0)
    /* A deep accept queue: 128 filled under a 200-connection flood and the
     * kernel dropped a joiner's SYN (TcpExtListenOverflows: 42 k in 5 s),
     * which then waited out TCP's 1 s retransmission.  SOMAXCONN is 4096;
     * the kernel caps it at net.core.somaxconn.  Admission is per source
     * after the accept (the pre-auth limits). */
    tfd = -1, step = "listen", rc = uv_listen((uv_stream_t *)&t->listener, SOMAXCONN, on_accept);
  if (rc == 0) step = "udp recv", rc = uv_udp_recv_start(&t->udp, udp_alloc, udp_recv);
  if (rc == 0) {
    ea_meta meta = o->meta;
    meta.gossip = t->gossip;
    meta.control = t->control;
    ea_swim_io io = {
        .ctx = t, .send = io_send, .sync = ea__transport_sync, .on_change = io_on_change};
    t->swim = ea_swim_new(&t->cfg, &t->self, &meta, &io, o->seed, uv_now(loop));
    if (!t->swim) step = "swim", rc = UV_ENOMEM;
    if (t->swim && o->incarnation) ea_swim_set_incarnation(t->swim, uv_now(loop), o->incarnation);
  }
  if (rc < 0) {
    snprintf(err, errlen, "transport: %s: %s", step, uv_strerror(rc));
    close_fds(ufd, tfd);
    t->closing = true;
    uv_close((uv_handle_t *)&t->udp, handle_closed);
    uv_close((uv_handle_t *)&t->listener, handle_closed);
    uv_close((uv_handle_t *)&t->tick, handle_closed);
    uv_close((uv_handle_t *)&t->join_timer, handle_closed);
    uv_close((uv_handle_t *)&t->leave_timer, handle_closed);
    uv_close((uv_handle_t *)&t->gate.resume, handle_closed);
    /* Freed by the last close callback once the loop runs. */
    return rc;
  }
  ea__transport_rearm(t);
  *out = t;
  return 0;
}

void ea_transport_close(ea_transport *t, void (*closed)(void *ctx), void *ctx) {
  if (t->closing) return;
  t->closing = true;
  t->closed_cb = closed;
  t->closed_ctx = ctx;
  t->join.active = false;
  t->leave.active = false;
  /* A resolver stuck on an unreachable DNS server must not hold up exit. */
  for (gai_req *g = t->join.gais; g; g = g->next) uv_cancel((uv_req_t *)&g->req);
  for (conn *c = t->conns; c; c = c->next) {
    if (!c->done) {
      /* Outcome of a sync cut short by shutdown: not a failure worth
       * counting against the peer. */
      c->done = true;
      if (!c->outgoing) t->nincoming--;
      uv_timer_stop(&c->timer);
      uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
      uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
    }
  }
  uv_close((uv_handle_t *)&t->udp, handle_closed);
  uv_close((uv_handle_t *)&t->listener, handle_closed);
  uv_close((uv_handle_t *)&t->tick, handle_closed);
  uv_close((uv_handle_t *)&t->join_timer, handle_closed);
  uv_close((uv_handle_t *)&t->leave_timer, handle_closed);
  uv_close((uv_handle_t *)&t->gate.resume, handle_closed);
}

const ea_swim *ea_transport_swim(const ea_transport *t) {
  return t->swim;
}

void ea_transport_set_meta(ea_transport *t, const ea_meta *meta) {
  if (t->closing) return;
  ea_meta m = *meta;
  m.gossip = t->gossip;
  m.control = t->control;
  ea_swim_set_meta(t->swim, uv_now(t->loop), &m);
  ea__transport_rearm(t);
}

bool ea_transport_probe_soon(ea_transport *t, const ea_node_id *id, bool gone) {
  if (t->closing) return false;
  uint64_t now = uv_now(t->loop);
  bool yes = gone ? ea_swim_peer_gone(t->swim, now, id) : ea_swim_probe_soon(t->swim, now, id);
  if (yes) ea__transport_rearm(t);
  return yes;
}

void ea_transport_stats_get(const ea_transport *t, ea_transport_stats *out) {
  *out = t->st;
}
const ea_addr *ea_transport_addr(const ea_transport *t) {
  return &t->gossip;
}
const ea_addr *ea_transport_control(const ea_transport *t) {
  return &t->control;
}
const ea_addr *ea_transport_bound(const ea_transport *t) {
  return &t->bound;
}
bool ea_transport_has_key(const ea_transport *t) {
  return t->have_key;
}
