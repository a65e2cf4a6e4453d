/* Check suite for the libuv transport (membership/transport_uv.c, transport_join.c): several
 * real transports on one loop, on 127.0.0.1 with ephemeral ports.
 *
 * The transport's promises, each asserted here: a push-pull join makes both
 * sides see each other and counts one sync on each side; with a cluster key
 * the same holds, and a transport with another key (or none) is never let
 * in while the keyed side counts dropped_unauthenticated; every kind of bad
 * datagram (garbage, a sealed packet without a key, truncated msgpack,
 * oversize) is dropped into its own counter and nothing else changes; a TCP
 * peer that claims a huge frame is cut off at once, and one that stalls is
 * cut off at the per-connection deadline; the version-1 framing is refused
 * by its first byte; 200 connections held without a frame header do not
 * stop a join (capped per source and in all, oldest first, 2 s deadline),
 * and a joiner refused because every slot is really in use logs "busy",
 * never a reset (issue 11); a sealed datagram sent twice, or one of an
 * earlier epoch of its sender, is counted dropped_replayed and never reaches
 * the core, and one sealed without a replay header (0xEB) is refused;
 * a graceful leave is seen as LEFT
 * and its done callback runs; closing leaves no handle on the loop.  Every
 * wait polls a condition with a deadline.  Ports are ephemeral, so runs can
 * overlap; no randomness beyond the transports' own seeds (fixed here).
 */
#include "ea_log.h"
#include "ea_transport.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Generous: loopback joins take ~1 ms, but CI machines are shared. */
#define WAIT_MS 5000

typedef struct {
  ea_transport *t;
  int join_ok, join_fail;
  int changes;
  bool left_done;
  bool closed;
} node;

static void on_change(void *ctx, const ea_member *m, uint8_t old) {
  (void)m, (void)old;
  ((node *)ctx)->changes++;
}
static void on_join(void *ctx, int ok, const char *via) {
  (void)via;
  node *n = ctx;
  if (ok)
    n->join_ok++;
  else
    n->join_fail++;
}
static void on_left(void *ctx) {
  ((node *)ctx)->left_done = true;
}
static void on_closed(void *ctx) {
  ((node *)ctx)->closed = true;
}

static void start_node(uv_loop_t *loop, node *n, uint8_t idbyte, const uint8_t *key,
                       uint32_t sync_timeout_ms) {
  memset(n, 0, sizeof *n);
  ea_transport_opts o = {.bind = "127.0.0.1:0",
                         .key = key,
                         .seed = idbyte,
                         .join_retry_max_ms = 400,
                         .sync_timeout_ms = sync_timeout_ms,
                         .ctx = n,
                         .on_change = on_change,
                         .on_join = on_join};
  ea_swim_config_default(&o.swim);
  memset(o.self.b, idbyte, sizeof o.self.b);
  snprintf(o.meta.name, sizeof o.meta.name, "node%u", idbyte);
  snprintf(o.meta.role, sizeof o.meta.role, "worker");
  char err[256] = "";
  int rc = ea_transport_start(loop, &o, &n->t, err, sizeof err);
  ck_assert_msg(rc == 0, "start: %s", err);
}

static void close_node(uv_loop_t *loop, node *n) {
  ea_transport_close(n->t, on_closed, n);
  for (int i = 0; i < 1000 && !n->closed; i++) uv_run(loop, UV_RUN_ONCE);
  ck_assert(n->closed);
}

static void tick(uv_timer_t *h) {
  (void)h;
}

/* Run the loop until pred(ctx) or WAIT_MS pass; a 5 ms timer makes every
 * uv_run return often enough to re-check. */
static bool run_until(uv_loop_t *loop, bool (*pred)(void *), void *ctx, uint64_t ms) {
  uv_timer_t guard;
  uv_timer_init(loop, &guard);
  uv_timer_start(&guard, tick, 5, 5);
  uv_update_time(loop);
  uint64_t deadline = uv_now(loop) + ms;
  bool ok;
  while (!(ok = pred(ctx)) && uv_now(loop) < deadline) uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&guard, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  return ok;
}

static size_t count_state(const ea_transport *t, uint8_t state) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(t), &ms), k = 0;
  for (size_t i = 0; i < n; i++) k += ms[i].state == state;
  return k;
}

typedef struct {
  node *a, *b;
} pair;

static bool both_see_two(void *p) {
  pair *x = p;
  return ea_swim_alive_count(ea_transport_swim(x->a->t)) == 2 &&
         ea_swim_alive_count(ea_transport_swim(x->b->t)) == 2;
}

static void join_to(node *n, const node *seed) {
  char addr[64], err[256];
  ea_addr_str(ea_transport_addr(seed->t), addr, sizeof addr);
  ck_assert_int_eq(ea_transport_join(n->t, addr, NULL, 0, err, sizeof err), 0);
}

static void finish_loop(uv_loop_t *loop) {
  uv_run(loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(uv_loop_close(loop), 0); /* no leaked handle */
}

START_TEST(test_addr_parse) {
  ea_addr a;
  ck_assert_int_eq(ea_addr_parse("127.0.0.1:7001", 7000, &a), 0);
  ck_assert_int_eq(a.family, 4);
  ck_assert_int_eq(a.port, 7001);
  ck_assert_int_eq(a.ip[0], 127);
  ck_assert_int_eq(ea_addr_parse("10.1.2.3", 7000, &a), 0);
  ck_assert_int_eq(a.port, 7000);
  ck_assert_int_eq(ea_addr_parse(":0", 7000, &a), 0);
  ck_assert_int_eq(a.family, 4);
  ck_assert_int_eq(a.port, 0);
  ck_assert_int_eq(ea_addr_parse("[::1]:9", 7000, &a), 0);
  ck_assert_int_eq(a.family, 6);
  ck_assert_int_eq(a.ip[15], 1);
  ck_assert_int_eq(ea_addr_parse("::1", 7000, &a), -EINVAL); /* v6 needs [] with a port */
  ck_assert_int_eq(ea_addr_parse("1.2.3.4:70000", 7000, &a), -EINVAL);
  ck_assert_int_eq(ea_addr_parse("1.2.3.4:", 7000, &a), -EINVAL);
  ck_assert_int_eq(ea_addr_parse("host.example:7000", 7000, &a), -EINVAL); /* numeric only */
  struct sockaddr_storage ss;
  ea_addr b;
  ck_assert_int_eq(ea_addr_parse("192.168.1.2:4000", 0, &a), 0);
  ck_assert_uint_eq(ea_addr_to_sockaddr(&a, &ss), sizeof(struct sockaddr_in));
  ea_addr_from_sockaddr((struct sockaddr *)&ss, &b);
  ck_assert(ea_addr_eq(&a, &b));
}
END_TEST

static bool left_seen(void *p) {
  pair *x = p;
  return x->b->left_done && count_state(x->a->t, EA_STATE_LEFT) == 1;
}

START_TEST(test_join_and_leave) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a, b;
  start_node(&loop, &a, 1, NULL, 0);
  start_node(&loop, &b, 2, NULL, 0);
  ck_assert_int_ne(ea_transport_addr(a.t)->port, 0); /* the ephemeral port is reported */
  ck_assert_int_eq(ea_transport_addr(a.t)->port, ea_transport_bound(a.t)->port);
  join_to(&b, &a);
  pair p = {&a, &b};
  ck_assert_msg(run_until(&loop, both_see_two, &p, WAIT_MS), "no 2-member view");
  ea_transport_stats sa, sb;
  ea_transport_stats_get(a.t, &sa);
  ea_transport_stats_get(b.t, &sb);
  ck_assert_int_eq(b.join_ok, 1);
  ck_assert_uint_eq(sb.syncs_ok, 1);
  ck_assert_uint_eq(sa.syncs_served, 1);
  ck_assert_uint_eq(sa.dropped_malformed + sa.dropped_unauthenticated + sa.dropped_oversize, 0);

  /* Graceful leave: done runs, and a holds b as LEFT, not dead. */
  ea_transport_leave(b.t, on_left, &b);
  ck_assert_msg(run_until(&loop, left_seen, &p, WAIT_MS), "leave not seen");
  ck_assert_uint_eq(count_state(a.t, EA_STATE_DEAD), 0);
  close_node(&loop, &a);
  close_node(&loop, &b);
  finish_loop(&loop);
}
END_TEST

static const uint8_t key1[EA_KEY_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint8_t key2[EA_KEY_BYTES] = {9, 8, 7, 6, 5, 4, 3, 2, 1};

typedef struct {
  node *seed, *wrong, *plain;
} strangers;

static bool strangers_failed_twice(void *p) {
  strangers *x = p;
  return x->wrong->join_fail >= 2 && x->plain->join_fail >= 2;
}

START_TEST(test_cluster_key) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a, b, wrong, plain;
  start_node(&loop, &a, 1, key1, 0);
  start_node(&loop, &b, 2, key1, 0);
  start_node(&loop, &wrong, 3, key2, 0);
  start_node(&loop, &plain, 4, NULL, 0);
  ck_assert(ea_transport_has_key(a.t));
  ck_assert(!ea_transport_has_key(plain.t));
  join_to(&b, &a);
  pair p = {&a, &b};
  ck_assert_msg(run_until(&loop, both_see_two, &p, WAIT_MS), "keyed pair did not form");

  join_to(&wrong, &a);
  join_to(&plain, &a);
  strangers s = {&a, &wrong, &plain};
  ck_assert_msg(run_until(&loop, strangers_failed_twice, &s, WAIT_MS),
                "strangers' joins did not fail and retry (wrong %d, plain %d)", wrong.join_fail,
                plain.join_fail);
  ea_transport_stats sa;
  ea_transport_stats_get(a.t, &sa);
  ck_assert_uint_ge(sa.dropped_unauthenticated, 4); /* two attempts of each stranger */
  ck_assert_uint_eq(ea_swim_alive_count(ea_transport_swim(a.t)), 2);
  ck_assert_uint_eq(ea_swim_alive_count(ea_transport_swim(wrong.t)), 1);
  ck_assert_uint_eq(ea_swim_alive_count(ea_transport_swim(plain.t)), 1);
  ck_assert_int_eq(wrong.join_ok + plain.join_ok, 0);
  close_node(&loop, &a);
  close_node(&loop, &b);
  close_node(&loop, &wrong);
  close_node(&loop, &plain);
  finish_loop(&loop);
}
END_TEST

static int udp_to(const ea_transport *t, const void *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = ea_addr_to_sockaddr(ea_transport_addr(t), &ss);
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ck_assert_int_ge(fd, 0);
  ssize_t w = sendto(fd, buf, len, 0, (struct sockaddr *)&ss, sl);
  close(fd);
  return w == (ssize_t)len ? 0 : -1;
}

typedef struct {
  const ea_transport *t;
  uint64_t malformed, unauth, oversize;
} want_counts;

static bool counts_reached(void *p) {
  want_counts *w = p;
  ea_transport_stats s;
  ea_transport_stats_get(w->t, &s);
  return s.dropped_malformed >= w->malformed && s.dropped_unauthenticated >= w->unauth &&
         s.dropped_oversize >= w->oversize;
}

START_TEST(test_bad_datagrams) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a;
  start_node(&loop, &a, 1, NULL, 0);
  uint8_t buf[2000];
  memset(buf, 0x41, sizeof buf);
  ck_assert_int_eq(udp_to(a.t, buf, 10), 0); /* wrong magic */
  buf[0] = EA_WIRE_MAGIC_PLAIN;
  buf[1] = 0x98; /* fixarray(8) with nothing after it: truncated */
  ck_assert_int_eq(udp_to(a.t, buf, 2), 0);
  buf[0] = EA_WIRE_MAGIC_SEALED; /* sealed, but a has no key */
  ck_assert_int_eq(udp_to(a.t, buf, 100), 0);
  ck_assert_int_eq(udp_to(a.t, buf, EA_WIRE_MAX_PACKET + 1), 0); /* oversize */
  want_counts w = {a.t, 2, 1, 1};
  ck_assert_msg(run_until(&loop, counts_reached, &w, WAIT_MS), "drops not counted");
  ea_transport_stats s;
  ea_transport_stats_get(a.t, &s);
  ck_assert_uint_eq(s.dropped_malformed, 2);
  ck_assert_uint_eq(s.dropped_unauthenticated, 1);
  ck_assert_uint_eq(s.dropped_oversize, 1);
  ck_assert_uint_eq(s.packets_in, 4);
  ck_assert_uint_eq(ea_swim_alive_count(ea_transport_swim(a.t)), 1);
  close_node(&loop, &a);
  finish_loop(&loop);
}
END_TEST

/* A keyed transport receiving a valid unsealed packet drops it unopened. */
START_TEST(test_keyed_drops_plain) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a;
  start_node(&loop, &a, 1, key1, 0);
  ea_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA_MSG_PING;
  m.seq = 7;
  memset(m.src.b, 5, 16);
  memset(m.target.b, 1, 16);
  uint8_t buf[EA_WIRE_MAX_PACKET];
  size_t len = 0;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), 0);
  ck_assert_int_eq(udp_to(a.t, buf, len), 0);
  want_counts w = {a.t, 0, 1, 0};
  ck_assert_msg(run_until(&loop, counts_reached, &w, WAIT_MS), "plain packet not dropped");
  ea_swim_stats ss;
  ea_swim_stats_get(ea_transport_swim(a.t), &ss);
  ck_assert_uint_eq(ss.msgs_in, 0); /* never reached the core */
  close_node(&loop, &a);
  finish_loop(&loop);
}
END_TEST

typedef struct {
  const ea_transport *t;
  uint64_t replayed;
  uint64_t msgs;
} want_replay;

static bool replay_reached(void *p) {
  want_replay *w = p;
  ea_transport_stats s;
  ea_transport_stats_get(w->t, &s);
  ea_swim_stats ss;
  ea_swim_stats_get(ea_transport_swim(w->t), &ss);
  return s.dropped_replayed >= w->replayed && ss.msgs_in >= w->msgs;
}

/* Issue 11: a sealed datagram sent again byte for byte is dropped and
 * counted (dropped_replayed) and never reaches the core; so is one of an
 * earlier epoch of its sender (before it restarted); one sealed the old
 * way (0xEB, no replay header) is refused as unauthenticated. */
START_TEST(test_replayed_datagram) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a;
  start_node(&loop, &a, 1, key1, 0);
  ea_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA_MSG_GOSSIP;
  memset(m.src.b, 5, 16);
  uint8_t plain[EA_WIRE_MAX_PACKET], p1[EA_WIRE_MAX_PACKET], p2[EA_WIRE_MAX_PACKET],
      old[EA_WIRE_MAX_PACKET];
  size_t len = 0, l1 = 0, l2 = 0, lo = 0;
  ck_assert_int_eq(ea_wire_encode_msg(&m, plain, sizeof plain, &len), 0);
  ea_wire_sender s5 = {.epoch = 50};
  memset(s5.id.b, 5, 16);
  ck_assert_int_eq(ea_wire_seal_rp(key1, &s5, plain, len, p1, sizeof p1, &l1, NULL), 0);
  ck_assert_uint_le(l1, EA_WIRE_MAX_PACKET);
  ck_assert_int_eq(udp_to(a.t, p1, l1), 0);
  want_replay w = {a.t, 0, 1};
  ck_assert_msg(run_until(&loop, replay_reached, &w, WAIT_MS), "first packet not taken");
  ck_assert_int_eq(udp_to(a.t, p1, l1), 0); /* the same bytes again */
  w.replayed = 1;
  ck_assert_msg(run_until(&loop, replay_reached, &w, WAIT_MS), "replay not counted");
  /* the sender restarts: epoch 51; then its epoch-50 packet is a replay */
  ck_assert_int_eq(ea_wire_seal_rp(key1, &s5, plain, len, p2, sizeof p2, &l2, NULL), 0);
  s5.epoch = 51, s5.next = 0;
  uint8_t p3[EA_WIRE_MAX_PACKET];
  size_t l3 = 0;
  ck_assert_int_eq(ea_wire_seal_rp(key1, &s5, plain, len, p3, sizeof p3, &l3, NULL), 0);
  ck_assert_int_eq(udp_to(a.t, p3, l3), 0);
  w.msgs = 2;
  ck_assert_msg(run_until(&loop, replay_reached, &w, WAIT_MS), "new epoch not taken");
  ck_assert_int_eq(udp_to(a.t, p2, l2), 0); /* never seen, but of epoch 50 */
  w.replayed = 2;
  ck_assert_msg(run_until(&loop, replay_reached, &w, WAIT_MS), "old epoch not counted");
  ck_assert_int_eq(ea_wire_seal(key1, plain, len, old, sizeof old, &lo), 0);
  ck_assert_int_eq(udp_to(a.t, old, lo), 0);
  want_counts wu = {a.t, 0, 1, 0};
  ck_assert_msg(run_until(&loop, counts_reached, &wu, WAIT_MS), "0xEB packet not refused");
  ea_transport_stats st;
  ea_transport_stats_get(a.t, &st);
  ck_assert_uint_eq(st.dropped_replayed, 2);
  ck_assert_uint_eq(st.dropped_malformed, 0);
  ea_swim_stats ss;
  ea_swim_stats_get(ea_transport_swim(a.t), &ss);
  ck_assert_uint_eq(ss.msgs_in, 2);
  close_node(&loop, &a);
  finish_loop(&loop);
}
END_TEST

typedef struct {
  int fd;
} sockwait;

/* The server closed our connection: recv sees EOF (or a reset). */
static bool peer_closed(void *p) {
  sockwait *s = p;
  char c;
  ssize_t r = recv(s->fd, &c, 1, MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int tcp_to(const ea_transport *t) {
  struct sockaddr_storage ss;
  socklen_t sl = ea_addr_to_sockaddr(ea_transport_addr(t), &ss);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&ss, sl), 0);
  return fd;
}

START_TEST(test_tcp_hostile_peers) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a;
  start_node(&loop, &a, 1, NULL, 300); /* 300 ms per-connection deadline */

  /* Claims a 1 GiB frame: refused at the header, before any buffering. */
  int fd = tcp_to(a.t);
  uint8_t hdr[8] = {EA_WIRE_MAGIC_PLAIN, 'F', EA_WIRE_FRAME_VERSION, 0, 0x40, 0, 0, 0};
  ck_assert_int_eq(send(fd, hdr, 8, 0), 8);
  sockwait sw = {fd};
  ck_assert_msg(run_until(&loop, peer_closed, &sw, WAIT_MS), "huge frame not refused");
  close(fd);
  ea_transport_stats s;
  ea_transport_stats_get(a.t, &s);
  ck_assert_uint_eq(s.dropped_oversize, 1);

  /* Claims 100 bytes, sends 3, then stalls: cut off at the deadline, not
   * before 300 ms. */
  fd = tcp_to(a.t);
  uint8_t part[11] = {EA_WIRE_MAGIC_PLAIN,
                      'F',
                      EA_WIRE_FRAME_VERSION,
                      0,
                      0,
                      0,
                      0,
                      100,
                      EA_WIRE_MAGIC_PLAIN,
                      0x94,
                      0x01};
  ck_assert_int_eq(send(fd, part, sizeof part, 0), (ssize_t)sizeof part);
  uv_update_time(&loop);
  uint64_t t0 = uv_now(&loop);
  sw.fd = fd;
  ck_assert_msg(run_until(&loop, peer_closed, &sw, WAIT_MS), "stalled peer not cut off");
  uint64_t waited = uv_now(&loop) - t0;
  ck_assert_msg(waited >= 290, "cut off after %llu ms, before the 300 ms deadline",
                (unsigned long long)waited);
  close(fd);

  /* Garbage frame of the announced size: malformed, connection closed. */
  fd = tcp_to(a.t);
  uint8_t junk[8 + 8] = {EA_WIRE_MAGIC_PLAIN,
                         'F',
                         EA_WIRE_FRAME_VERSION,
                         0,
                         0,
                         0,
                         0,
                         8,
                         EA_WIRE_MAGIC_PLAIN,
                         0xc1,
                         0xc1,
                         0xc1,
                         0xc1,
                         0xc1,
                         0xc1,
                         0xc1};
  ck_assert_int_eq(send(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
  sw.fd = fd;
  ck_assert_msg(run_until(&loop, peer_closed, &sw, WAIT_MS), "garbage frame not refused");
  close(fd);
  /* The version-1 framing (a bare u32 length): refused at its first byte. */
  fd = tcp_to(a.t);
  uint8_t v1[4 + 8] = {0, 0, 0, 8, EA_WIRE_MAGIC_PLAIN, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1};
  ck_assert_int_eq(send(fd, v1, sizeof v1, 0), (ssize_t)sizeof v1);
  sw.fd = fd;
  ck_assert_msg(run_until(&loop, peer_closed, &sw, WAIT_MS), "version-1 frame not refused");
  close(fd);
  ea_transport_stats_get(a.t, &s);
  ck_assert_uint_eq(s.dropped_malformed, 2);
  ck_assert_uint_eq(s.syncs_served, 0);
  ck_assert_uint_eq(ea_swim_alive_count(ea_transport_swim(a.t)), 1);
  close_node(&loop, &a);
  finish_loop(&loop);
}
END_TEST

/* Issue 11: 200 idle connections to a seed's gossip port made joins
 * through it fail ("connection reset by peer").  Now a source past its
 * connect rate is closed at accept (issue 27), connections without a frame
 * header are capped per source (8) and in all (64), the oldest closed
 * first but never one whose header has arrived, and closed after 2 s; a
 * joiner gets through while 200 are held (from its own address, once a
 * token is back), and one refused because every slot is really in use is
 * told "busy", not reset. */
typedef struct {
  node *n;
  int want_ok, want_fail;
} joinwait;
static bool join_outcome(void *p) {
  joinwait *w = p;
  return w->n->join_ok >= w->want_ok && w->n->join_fail >= w->want_fail;
}

START_TEST(test_tcp_preauth_bounded) {
  char logp[] = "/tmp/ea-test-transport-log-XXXXXX";
  int lfd = mkstemp(logp);
  ck_assert_int_ge(lfd, 0);
  close(lfd);
  ck_assert_int_eq(ea_log_setup("info", "text", logp), 0);
  uint8_t key[EA_KEY_BYTES];
  memset(key, 0x3c, sizeof key);
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a, b, c;
  start_node(&loop, &a, 1, key, 0);
  start_node(&loop, &b, 2, key, 0);
  start_node(&loop, &c, 3, key, 0);
  /* 200 connections: idle, or 47 of the 48 header bytes */
  enum { HOLD = 200 };
  static int fds[HOLD];
  uint8_t part[EA_WIRE_FRAME_HDR_SEALED];
  memset(part, 0x11, sizeof part);
  part[0] = EA_WIRE_MAGIC_SEALED;
  for (int i = 0; i < HOLD; i++) {
    fds[i] = tcp_to(a.t);
    if (i % 2) ck_assert_int_eq(send(fds[i], part, sizeof part - 1, 0), (ssize_t)sizeof part - 1);
    if (i % 10 == 0) uv_run(&loop, UV_RUN_NOWAIT);
  }
  /* b joins through a while they are held */
  join_to(&b, &a);
  joinwait jw = {&b, 1, 0};
  ck_assert_msg(run_until(&loop, join_outcome, &jw, WAIT_MS), "join failed with %d held: %d fails",
                HOLD, b.join_fail);
  ea_transport_stats s;
  ea_transport_stats_get(a.t, &s);
  /* all from 127.0.0.1: past its burst (20) the rest are closed at
   * accept (refused_rate), of those let in all but 8 evicted */
  ck_assert_uint_ge(s.refused_rate, HOLD - 30);
  ck_assert_uint_ge(s.preauth_evicted + s.refused_rate, HOLD - 8);
  ck_assert_uint_ge(s.syncs_served, 1);
  /* the ones kept are closed at the 2 s deadline */
  for (int i = 0; i < HOLD; i++) {
    sockwait sw = {fds[i]};
    ck_assert_msg(run_until(&loop, peer_closed, &sw, 2000 + WAIT_MS), "held connection %d kept", i);
    close(fds[i]);
  }
  ea_transport_stats_get(a.t, &s);
  ck_assert_uint_ge(s.preauth_timeouts, 1);
  /* (b's own first connects, from the same address, may be among the refused) */
  ck_assert_uint_ge(s.preauth_evicted + s.preauth_timeouts + s.refused_rate, HOLD);
  ck_assert_uint_le(s.preauth_evicted + s.preauth_timeouts + s.refused_rate, HOLD + 5);

  /* 64 connections that sent a valid sealed header and hold their body:
   * every slot is in use, so c's join is answered busy, and says so */
  enum { BUSY = 64 };
  static int bfd[BUSY];
  uint8_t hdr[EA_WIRE_FRAME_HDR_SEALED];
  size_t hl = 0;
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 1000, 0, hdr, sizeof hdr, &hl), 0);
  for (int i = 0; i < BUSY; i++) {
    bfd[i] = tcp_to(a.t);
    ck_assert_int_eq(send(bfd[i], hdr, hl, 0), (ssize_t)hl);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  join_to(&c, &a);
  joinwait jc = {&c, 0, 1};
  ck_assert_msg(run_until(&loop, join_outcome, &jc, WAIT_MS), "c's join did not fail");
  ea_transport_stats_get(a.t, &s);
  ck_assert_uint_ge(s.syncs_refused, 1);
  for (int i = 0; i < BUSY; i++) close(bfd[i]);
  /* once they are gone, c's retry gets in */
  jc = (joinwait){&c, 1, 1};
  ck_assert_msg(run_until(&loop, join_outcome, &jc, 5000 + WAIT_MS), "c never joined");
  close_node(&loop, &a);
  close_node(&loop, &b);
  close_node(&loop, &c);
  finish_loop(&loop);
  ea_log_setup("error", "text", NULL);
  FILE *f = fopen(logp, "r");
  ck_assert_ptr_nonnull(f);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  unlink(logp);
  ck_assert_msg(strstr(text, "busy: the peer has too many push-pull connections open"),
                "the joiner did not say busy: %.2000s", text);
  ck_assert_msg(!strstr(text, "reset by peer"), "a joiner saw a reset: %.2000s", text);
}
END_TEST

/* Joining an address nobody listens on fails, is retried with backoff,
 * and the retries stop once someone else brings us into a cluster. */
static bool failed_twice(void *p) {
  return ((node *)p)->join_fail >= 2;
}

START_TEST(test_join_retry) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  node a, b;
  start_node(&loop, &a, 1, NULL, 0);
  start_node(&loop, &b, 2, NULL, 0);
  char err[256];
  /* Port 1 on loopback: connection refused at once. */
  ck_assert_int_eq(ea_transport_join(a.t, "127.0.0.1:1", NULL, 0, err, sizeof err), 0);
  ck_assert_msg(run_until(&loop, failed_twice, &a, WAIT_MS), "no retry after a refused join");
  ea_transport_stats s;
  ea_transport_stats_get(a.t, &s);
  ck_assert_uint_ge(s.join_attempts, 2);
  ck_assert_uint_ge(s.syncs_failed, 2);
  /* b joins a: a's retries must stop (it is in a cluster now). */
  join_to(&b, &a);
  pair p = {&a, &b};
  ck_assert(run_until(&loop, both_see_two, &p, WAIT_MS));
  int fails = a.join_fail;
  /* The backoff ceiling is 400 ms here: 1 s without a new failure means
   * the retry loop stopped. */
  uv_update_time(&loop);
  uint64_t until = uv_now(&loop) + 1000;
  while (uv_now(&loop) < until) {
    ck_assert(run_until(&loop, both_see_two, &p, 10));
    uv_run(&loop, UV_RUN_ONCE);
  }
  ck_assert_int_le(a.join_fail, fails + 1); /* at most the attempt in flight */
  ck_assert_int_eq(ea_transport_join(a.t, "bad host", NULL, 0, err, sizeof err), -EINVAL);
  close_node(&loop, &a);
  close_node(&loop, &b);
  finish_loop(&loop);
}
END_TEST

/* ---- ea_accept_gate: a reconnect flood cannot hold the loop ------------------ */

/* A listener whose connection callback accepts, spends 200 µs (an agent on
 * a loaded machine: the chaos run where this was found had 5 agents and
 * their workers on 2 cores) and closes; a thread keeps FLOOD_CONNS
 * connections open to it and reopens each the moment it is closed.  A 10 ms
 * timer on the same loop measures the longest turn.  Without the gate
 * libuv's accept loop never finds the queue empty and the timer waits out
 * the whole flood; with it, a turn is at most a batch. */
enum { FLOOD_CONNS = 64, FLOOD_MS = 1500 };

typedef struct {
  uv_loop_t *loop;
  uv_tcp_t server;
  ea_accept_gate gate;
  bool gated;
  uint64_t accepted;
  uv_timer_t clock;
  uint64_t last, max_gap;
  uint16_t port;
} gate_rig;

static void gate_conn_closed(uv_handle_t *h) {
  free(h);
}

static void gate_on_accept(uv_stream_t *server, int status) {
  gate_rig *g = server->data;
  if (status < 0) return;
  if (g->gated && !ea_accept_gate_pass(&g->gate)) return;
  uv_tcp_t *c = malloc(sizeof *c);
  uv_tcp_init(g->loop, c);
  if (uv_accept(server, (uv_stream_t *)c) == 0) g->accepted++;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000);
  uv_close((uv_handle_t *)c, gate_conn_closed);
}

static void gate_clock(uv_timer_t *h) {
  gate_rig *g = h->data;
  uint64_t now = uv_now(g->loop);
  if (now - g->last > g->max_gap) g->max_gap = now - g->last;
  g->last = now;
}

static int flood_connect(const struct sockaddr_in *to) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd >= 0 && connect(fd, (const struct sockaddr *)to, sizeof *to) < 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

static void *flood_thread(void *arg) {
  gate_rig *g = arg;
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(g->port)};
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct pollfd p[FLOOD_CONNS];
  for (int i = 0; i < FLOOD_CONNS; i++) p[i] = (struct pollfd){flood_connect(&to), POLLIN, 0};
  /* it ends by itself: an ungated loop never returns to say stop */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= FLOOD_MS) break;
    if (poll(p, FLOOD_CONNS, 10) <= 0) continue;
    for (int i = 0; i < FLOOD_CONNS; i++) {
      if (!p[i].revents) continue;
      char b[64];
      if (p[i].fd >= 0 && read(p[i].fd, b, sizeof b) > 0) continue;
      if (p[i].fd >= 0) close(p[i].fd);
      p[i].fd = flood_connect(&to);
      p[i].revents = 0;
    }
  }
  for (int i = 0; i < FLOOD_CONNS; i++)
    if (p[i].fd >= 0) close(p[i].fd);
  return NULL;
}

/* The longest turn of the loop (ms) while the flood runs. */
static uint64_t flood_turn_ms(bool gated, uint64_t *accepted, uint64_t *deferred) {
  gate_rig *g = calloc(1, sizeof *g);
  uv_loop_t loop;
  uv_loop_init(&loop);
  g->loop = &loop;
  g->gated = gated;
  uv_tcp_init(&loop, &g->server);
  g->server.data = g;
  ea_accept_gate_init(&g->gate, &loop, (uv_stream_t *)&g->server, gate_on_accept);
  struct sockaddr_in any = {.sin_family = AF_INET};
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(uv_tcp_bind(&g->server, (const struct sockaddr *)&any, 0), 0);
  ck_assert_int_eq(uv_listen((uv_stream_t *)&g->server, SOMAXCONN, gate_on_accept), 0);
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  uv_tcp_getsockname(&g->server, (struct sockaddr *)&ss, &sl);
  g->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  uv_timer_init(&loop, &g->clock);
  g->clock.data = g;
  uv_timer_start(&g->clock, gate_clock, 10, 10);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, flood_thread, g), 0);
  uv_update_time(&loop);
  g->last = uv_now(&loop);
  uint64_t end = g->last + FLOOD_MS;
  while (uv_now(&loop) < end) uv_run(&loop, UV_RUN_ONCE);
  gate_clock(&g->clock); /* the last turn counts too */
  pthread_join(th, NULL);
  uv_close((uv_handle_t *)&g->clock, NULL);
  uv_close((uv_handle_t *)&g->gate.resume, NULL);
  uv_close((uv_handle_t *)&g->server, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  uint64_t gap = g->max_gap;
  *accepted = g->accepted;
  *deferred = g->gate.deferred;
  free(g);
  return gap;
}

START_TEST(test_accept_gate) {
  uint64_t acc, def;
  /* the hazard, on this machine: without the gate one turn lasts most of
   * the flood */
  uint64_t ungated = flood_turn_ms(false, &acc, &def);
  ck_assert_msg(ungated > FLOOD_MS / 3, "ungated: longest turn %llu ms, %llu accepted",
                (unsigned long long)ungated, (unsigned long long)acc);
  /* with it, a turn is a batch (32 × 200 µs) and what else is ready */
  uint64_t gated = flood_turn_ms(true, &acc, &def);
  ck_assert_msg(gated < 200, "gated: longest turn %llu ms, %llu accepted, %llu deferred",
                (unsigned long long)gated, (unsigned long long)acc, (unsigned long long)def);
  ck_assert_uint_gt(def, 0);
  ck_assert_uint_gt(acc, 1000); /* and it still accepts at the rate it can */
  fprintf(stderr, "ACCEPT_GATE longest turn under a %d ms flood: %llu ms ungated, %llu ms gated\n",
          FLOOD_MS, (unsigned long long)ungated, (unsigned long long)gated);
}
END_TEST

Suite *transport_suite(void) {
  Suite *s = suite_create("transport");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_addr_parse);
  tcase_add_test(tc, test_join_and_leave);
  tcase_add_test(tc, test_cluster_key);
  tcase_add_test(tc, test_bad_datagrams);
  tcase_add_test(tc, test_keyed_drops_plain);
  tcase_add_test(tc, test_replayed_datagram);
  tcase_add_test(tc, test_tcp_hostile_peers);
  tcase_add_test(tc, test_tcp_preauth_bounded);
  tcase_add_test(tc, test_join_retry);
  tcase_add_test(tc, test_accept_gate);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  ea_log_setup("error", "text", NULL);
  SRunner *sr = srunner_create(transport_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
