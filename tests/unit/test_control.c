/* Check suite for the agent's control channel (agent/control.c): real
 * listeners on one libuv loop, 127.0.0.1, ephemeral ports.
 *
 * Promises asserted: messages arrive decoded, equal to what was sent, in
 * order, over one reused connection (a COMMIT with its arrays too); with a
 * cluster key they are sealed and still arrive, while a receiver with
 * another key or none — or a keyed receiver given plaintext — delivers
 * nothing and counts dropped_unauthenticated; a raw peer's zero length,
 * oversize length and undecodable payload are counted and cut off, while a
 * valid frame dribbled in one byte per write is assembled and delivered;
 * a keyed receiver reads only a 48-byte sealed header before it buffers
 * a body, cuts forged headers off, keeps at most 8 connections without a
 * header per source address (the oldest closed first) and closes them at
 * their 3 s deadline while a keyed sender still gets through (issue 11);
 * the version-1 framing is refused by its first byte; a sealed frame sent
 * again byte for byte is dropped and counted (dropped_replayed) — to the
 * same receiver, to one that restarted, after the sender restarted —
 * while the connection and later frames are unharmed;
 * a send to a port nobody listens on is dropped and counted, never fatal;
 * a peer that restarts elsewhere is reached at its new address; frames of
 * another codec sharing the channel go to the frame hook and the rest are
 * still decoded as rendezvous messages; closing
 * with connections open leaves no handle on the loop.  Every wait polls a
 * condition with a deadline; nothing is random.
 */
#include "ea_rdzv.h"
#include "ea_transport.h"

#include "agent_int.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Loopback delivery takes well under a millisecond; shared CI machines
 * are slow, so the deadline is generous. */
#define WAIT_MS 5000

typedef struct {
  ea__ctl *c;
  int got;
  ea_rdzv_msg last[8]; /* scalar fields of the last few messages */
  uint32_t commit_world, commit_nodes;
  char commit_name1[EA_NAME_MAX];
  uint64_t commit_step2;
  bool closed;
} peer;

static void on_msg(void *ctx, const ea_rdzv_msg *m) {
  peer *p = ctx;
  ea_rdzv_msg *slot = &p->last[p->got % 8];
  *slot = *m;
  slot->plan.nodes = NULL; /* arrays are valid during the call only */
  slot->plan.ranks = NULL;
  if (m->type == EA_RDZV_COMMIT) {
    p->commit_world = m->plan.world;
    p->commit_nodes = m->plan.nnodes;
    snprintf(p->commit_name1, sizeof p->commit_name1, "%s", m->plan.nodes[1].name);
    p->commit_step2 = m->plan.ranks[2].step;
  }
  p->got++;
}

static void on_closed(void *ctx) {
  ((peer *)ctx)->closed = true;
}

static void tick(uv_timer_t *t) {
  (void)t;
}

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

static void start_as(uv_loop_t *loop, peer *p, const uint8_t *key, ea_wire_sender *sender) {
  memset(p, 0, sizeof *p);
  ea_addr bind;
  ck_assert_int_eq(ea_addr_parse("127.0.0.1:0", 0, &bind), 0);
  char err[256];
  int rc = ea__ctl_start(loop, &bind, key, sender, on_msg, p, &p->c, err, sizeof err);
  ck_assert_msg(rc == 0, "start: %s", err);
  ck_assert_uint_ne(ea__ctl_bound(p->c)->port, 0);
}

static void start(uv_loop_t *loop, peer *p, const uint8_t *key) {
  start_as(loop, p, key, NULL);
}

static void close_peer(uv_loop_t *loop, peer *p) {
  ea__ctl_close(p->c, on_closed, p);
  for (int i = 0; i < 100 && !p->closed; i++) uv_run(loop, UV_RUN_NOWAIT);
  ck_assert(p->closed);
}

static ea__ctl_stats stats(const peer *p) {
  ea__ctl_stats s;
  ea__ctl_stats_get(p->c, &s);
  return s;
}

static ea_node_id idof(uint8_t b) {
  ea_node_id id;
  memset(id.b, b, sizeof id.b);
  return id;
}

typedef struct {
  peer *p;
  int want;
} got_arg;
static bool got_n(void *ctx) {
  got_arg *g = ctx;
  return g->p->got >= g->want;
}

typedef struct {
  peer *p;
  uint64_t malformed, unauth, oversize, send_errors;
} cnt_arg;
static bool counted(void *ctx) {
  cnt_arg *a = ctx;
  ea__ctl_stats s = stats(a->p);
  return s.dropped_malformed >= a->malformed && s.dropped_unauthenticated >= a->unauth &&
         s.dropped_oversize >= a->oversize && s.send_errors >= a->send_errors;
}

typedef struct {
  peer *p;
  uint64_t replayed;
} rp_arg;
static bool replayed_n(void *ctx) {
  rp_arg *a = ctx;
  return stats(a->p).dropped_replayed >= a->replayed;
}

static ea_rdzv_msg report(uint64_t term, uint8_t flags) {
  ea_rdzv_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_REPORT;
  m.src = idof(1);
  m.gen.term = term;
  m.gen.ctrl = idof(9);
  m.accepted = m.gen;
  m.flags = flags;
  return m;
}

START_TEST(test_roundtrip_in_order_one_connection) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer a, b;
  start(&loop, &a, NULL);
  start(&loop, &b, NULL);
  ea_node_id bid = idof(2);
  for (int i = 0; i < 5; i++) {
    ea_rdzv_msg m = report(10 + (uint64_t)i, EA_RDZV_F_RUNNING);
    ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  }
  /* A COMMIT with its plan arrays. */
  ea_rdzv_node nodes[3];
  ea_rdzv_worker ranks[3];
  memset(nodes, 0, sizeof nodes);
  memset(ranks, 0, sizeof ranks);
  for (int i = 0; i < 3; i++) {
    nodes[i].id = idof((uint8_t)(20 + i));
    snprintf(nodes[i].name, sizeof nodes[i].name, "node-%d", i);
    nodes[i].control = *ea__ctl_bound(b.c);
    ranks[i].listen = *ea__ctl_bound(a.c);
    ranks[i].step = 100 + (uint64_t)i;
  }
  ea_rdzv_msg cm;
  memset(&cm, 0, sizeof cm);
  cm.type = EA_RDZV_COMMIT;
  cm.src = idof(1);
  cm.gen.term = 15;
  cm.gen.ctrl = idof(1);
  cm.plan.gen = cm.gen;
  cm.plan.nnodes = 3;
  cm.plan.wpn = 1;
  cm.plan.world = 3;
  cm.plan.nodes = nodes;
  cm.plan.ranks = ranks;
  cm.plan.has_sync = true;
  cm.plan.sync_rank = 2;
  cm.plan.sync_step = 102;
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &cm);
  got_arg g = {&b, 6};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "only %d of 6 delivered", b.got);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(b.last[i].type, EA_RDZV_REPORT);
    ck_assert_uint_eq(b.last[i].gen.term, 10 + (uint64_t)i); /* in order */
    ck_assert_int_eq(b.last[i].flags, EA_RDZV_F_RUNNING);
    ea_node_id one = idof(1);
    ck_assert(ea_node_id_cmp(&b.last[i].src, &one) == 0);
  }
  ck_assert_int_eq(b.last[5].type, EA_RDZV_COMMIT);
  ck_assert_uint_eq(b.commit_world, 3);
  ck_assert_uint_eq(b.commit_nodes, 3);
  ck_assert_str_eq(b.commit_name1, "node-1");
  ck_assert_uint_eq(b.commit_step2, 102);
  ea__ctl_stats sa = stats(&a), sb = stats(&b);
  ck_assert_uint_eq(sa.connects, 1); /* reused */
  ck_assert_uint_eq(sa.frames_out, 6);
  ck_assert_uint_eq(sb.frames_in, 6);
  ck_assert_uint_eq(sb.accepted, 1);
  ck_assert_uint_eq(sb.bytes_in, sa.bytes_out);
  ck_assert_uint_eq(sa.send_errors + sb.dropped_malformed + sb.dropped_unauthenticated, 0);
  ck_assert_uint_eq(a.got, 0); /* one-way: the receiver never writes */
  close_peer(&loop, &a);
  close_peer(&loop, &b);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(test_sealed) {
  uint8_t k1[EA_KEY_BYTES], k2[EA_KEY_BYTES];
  memset(k1, 0x11, sizeof k1);
  memset(k2, 0x22, sizeof k2);
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer a, b, other, plain;
  start(&loop, &a, k1);
  start(&loop, &b, k1);
  start(&loop, &other, k2);
  start(&loop, &plain, NULL);
  ea_rdzv_msg m = report(7, EA_RDZV_F_DRAINING);
  ea_node_id bid = idof(2), oid = idof(3), pid = idof(4);
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  got_arg g = {&b, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "sealed message not delivered");
  ck_assert_uint_eq(b.last[0].gen.term, 7);
  ck_assert_int_eq(b.last[0].flags, EA_RDZV_F_DRAINING);
  /* Another key, no key, and plaintext to a keyed receiver. */
  ea__ctl_send(a.c, &oid, ea__ctl_bound(other.c), &m);
  ea__ctl_send(a.c, &pid, ea__ctl_bound(plain.c), &m);
  ea__ctl_send(plain.c, &bid, ea__ctl_bound(b.c), &m);
  cnt_arg c1 = {&other, 0, 1, 0, 0}, c2 = {&plain, 0, 1, 0, 0}, c3 = {&b, 0, 1, 0, 0};
  ck_assert_msg(run_until(&loop, counted, &c1, WAIT_MS), "other key: not counted");
  ck_assert_msg(run_until(&loop, counted, &c2, WAIT_MS), "no key: not counted");
  ck_assert_msg(run_until(&loop, counted, &c3, WAIT_MS), "plaintext to keyed: not counted");
  ck_assert_int_eq(other.got, 0);
  ck_assert_int_eq(plain.got, 0);
  ck_assert_int_eq(b.got, 1);
  close_peer(&loop, &a);
  close_peer(&loop, &b);
  close_peer(&loop, &other);
  close_peer(&loop, &plain);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* A raw blocking client: the kernel completes the handshake from the
 * listen backlog, so connect() returns before the loop runs. */
/* A connection to `to` from source address `from` (NULL: any). */
static int raw_connect_from(const ea_addr *to, const char *from) {
  struct sockaddr_storage ss;
  socklen_t len = ea_addr_to_sockaddr(to, &ss);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  if (from) {
    struct sockaddr_in src = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, from, &src.sin_addr), 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&src, sizeof src), 0);
  }
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&ss, len), 0);
  return fd;
}

static int raw_connect(const ea_addr *to) {
  return raw_connect_from(to, NULL);
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

typedef struct {
  int fd;
} eof_arg;
static bool peer_closed(void *ctx) {
  eof_arg *e = ctx;
  char c;
  ssize_t n = recv(e->fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The bytes of the n-th frame a channel started with EA_TEST_RECORD_FRAMES
 * wrote (header and body, as sent). */
static size_t recorded(const char *dir, int n, uint8_t *buf, size_t cap) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "ls %s | sort | sed -n %dp", dir, n);
  FILE *ls = popen(cmd, "r");
  ck_assert_ptr_nonnull(ls);
  char name[256] = "";
  ck_assert_ptr_nonnull(fgets(name, sizeof name, ls));
  pclose(ls);
  name[strcspn(name, "\n")] = 0;
  char path[768];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  size_t len = fread(buf, 1, cap, f);
  fclose(f);
  ck_assert_uint_gt(len, EA_WIRE_FRAME_HDR_SEALED);
  return len;
}

static void send_raw(const ea_addr *to, const uint8_t *b, size_t len) {
  int fd = raw_connect(to);
  ck_assert_int_eq(write(fd, b, len), (ssize_t)len);
  close(fd);
}

/* Issue 11: a sealed frame captured on the wire and sent again is dropped
 * and counted (dropped_replayed) — to the same receiver, to a receiver that
 * restarted (its window is empty: the first frame it sees from the sender
 * sets the floor), and after the sender restarted (a newer epoch). */
START_TEST(test_replayed_frame_dropped) {
  uint8_t k[EA_KEY_BYTES];
  memset(k, 0x33, sizeof k);
  char dir[] = "/tmp/ea-ctl-record-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  uv_loop_t loop;
  uv_loop_init(&loop);
  ea_wire_sender sa = {.id = idof(1), .epoch = 100};
  peer a, b;
  setenv("EA_TEST_RECORD_FRAMES", dir, 1);
  start_as(&loop, &a, k, &sa);
  unsetenv("EA_TEST_RECORD_FRAMES");
  start(&loop, &b, k);
  ea_rdzv_msg m = report(7, 0);
  ea_node_id bid = idof(2);
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  got_arg g = {&b, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "first frame not delivered");
  static uint8_t cap[65536];
  size_t len = recorded(dir, 1, cap, sizeof cap);
  /* the same bytes, on a new connection: a duplicate */
  send_raw(ea__ctl_bound(b.c), cap, len);
  rp_arg r = {&b, 1};
  ck_assert_msg(run_until(&loop, replayed_n, &r, WAIT_MS), "replay not counted");
  ck_assert_int_eq(b.got, 1);
  ck_assert_uint_eq(stats(&b).dropped_unauthenticated + stats(&b).dropped_malformed, 0);
  /* the connection survives a replayed frame: the next real one arrives */
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  g.want = 2;
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "frame after the replay not delivered");

  /* the receiver restarts: a fresh window, and the sender's next frame
   * arrives first; the captured one is older than it and refused */
  close_peer(&loop, &b);
  start(&loop, &b, k);
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  g.want = 1;
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "frame to the restarted receiver lost");
  send_raw(ea__ctl_bound(b.c), cap, len);
  r.replayed = 1;
  ck_assert_msg(run_until(&loop, replayed_n, &r, WAIT_MS), "replay to a restarted receiver");
  ck_assert_int_eq(b.got, 1);

  /* the sender restarts (a newer epoch, its counter from 0): everything of
   * its earlier run is refused, whatever the counter */
  close_peer(&loop, &a);
  ea_wire_sender sa2 = {.id = idof(1), .epoch = 101};
  start_as(&loop, &a, k, &sa2);
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  g.want = 2;
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "frame of the new epoch lost");
  size_t len3 = recorded(dir, 3, cap, sizeof cap); /* counter 2 of epoch 100 */
  send_raw(ea__ctl_bound(b.c), cap, len3);
  r.replayed = 2;
  ck_assert_msg(run_until(&loop, replayed_n, &r, WAIT_MS), "replay of an older epoch");
  ck_assert_int_eq(b.got, 2);
  close_peer(&loop, &a);
  close_peer(&loop, &b);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  ck_assert_int_eq(system(rm), 0);
}
END_TEST

START_TEST(test_bad_input_counted_and_cut_off) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer b;
  start(&loop, &b, NULL);
  const ea_addr *baddr = ea__ctl_bound(b.c);
  uint8_t buf[64];

  /* zero length (a plain version-2 header announcing no body) */
  int fd = raw_connect(baddr);
  memcpy(buf,
         "\xEA"
         "F\x02\x00\x00\x00\x00\x00",
         8);
  ck_assert_int_eq(write(fd, buf, 8), 8);
  cnt_arg c = {&b, 1, 0, 0, 0};
  ck_assert_msg(run_until(&loop, counted, &c, WAIT_MS), "zero length not counted");
  eof_arg e = {fd};
  ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "not cut off after zero length");
  close(fd);

  /* a length over the limit: refused before any payload */
  fd = raw_connect(baddr);
  memcpy(buf,
         "\xEA"
         "F\x02\x00",
         4);
  put32(buf + 4, EA_WIRE_MAX_FRAME + EA_WIRE_SEAL_RP_OVERHEAD + 1);
  ck_assert_int_eq(write(fd, buf, 8), 8);
  c = (cnt_arg){&b, 1, 0, 1, 0};
  ck_assert_msg(run_until(&loop, counted, &c, WAIT_MS), "oversize not counted");
  e.fd = fd;
  ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "not cut off after oversize");
  close(fd);

  /* a payload that does not decode */
  fd = raw_connect(baddr);
  size_t hl;
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 5, 0, buf, sizeof buf, &hl), 0);
  ck_assert_uint_eq(hl, EA_WIRE_FRAME_HDR_PLAIN);
  memcpy(buf + hl, "\xEA\x93\x01\x10\xc0", 5);
  ck_assert_int_eq(write(fd, buf, hl + 5), (ssize_t)(hl + 5));
  c = (cnt_arg){&b, 2, 0, 1, 0};
  ck_assert_msg(run_until(&loop, counted, &c, WAIT_MS), "undecodable payload not counted");
  e.fd = fd;
  ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "not cut off after garbage");
  close(fd);
  /* the version-1 framing (a bare length first): refused at its first byte */
  fd = raw_connect(baddr);
  put32(buf, 5);
  memcpy(buf + 4, "\xEA\x93\x01\x10\xc0", 5);
  ck_assert_int_eq(write(fd, buf, 9), 9);
  c = (cnt_arg){&b, 3, 0, 1, 0};
  ck_assert_msg(run_until(&loop, counted, &c, WAIT_MS), "version-1 framing not counted");
  e.fd = fd;
  ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "not cut off after version 1");
  close(fd);
  ck_assert_int_eq(b.got, 0);

  /* a valid frame, one byte per write: assembled and delivered */
  ea_rdzv_msg m = report(42, EA_RDZV_F_FAILED);
  uint8_t *enc;
  size_t len;
  ck_assert_int_eq(ea_rdzv_encode(&m, &enc, &len), 0);
  uint8_t *frame = malloc(EA_WIRE_FRAME_HDR_PLAIN + len);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, (uint32_t)len, 0, frame, 64, &hl), 0);
  memcpy(frame + hl, enc, len);
  free(enc);
  fd = raw_connect(baddr);
  for (size_t i = 0; i < hl + len; i++) {
    ck_assert_int_eq(write(fd, frame + i, 1), 1);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  free(frame);
  got_arg g = {&b, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "dribbled frame not delivered");
  ck_assert_uint_eq(b.last[0].gen.term, 42);
  ck_assert_int_eq(b.last[0].flags, EA_RDZV_F_FAILED);
  ck_assert_uint_eq(stats(&b).dropped_malformed, 3);
  close(fd);
  close_peer(&loop, &b);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Issue 11: the control port buffered a whole frame (up to 16 MiB) before
 * it checked the key.  Now a keyed receiver reads a 48-byte sealed header
 * first: junk is cut off at the header, connections that send no header
 * are capped per source address (the oldest closed first) and closed at
 * their deadline, and a keyed sender still gets through all the while. */
static bool stats_at_least(void *ctx) {
  uint64_t *want = ctx; /* {&peer, evicted, timeouts, unauth} packed below */
  peer *p = (peer *)(uintptr_t)want[0];
  ea__ctl_stats st = stats(p);
  return st.preauth_evicted >= want[1] && st.preauth_timeouts >= want[2] &&
         st.dropped_unauthenticated >= want[3];
}

START_TEST(test_preauth_bounded) {
  uint8_t key[EA_KEY_BYTES];
  memset(key, 0x5a, sizeof key);
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer a, b;
  start(&loop, &a, key);
  start(&loop, &b, key);
  const ea_addr *baddr = ea__ctl_bound(b.c);
  /* a frame that claims to be sealed, with 1 MiB behind it: closed at its
   * 48th byte, the rest never buffered */
  int junk = raw_connect(baddr);
  static uint8_t big[1 << 20];
  memset(big, 0x77, sizeof big);
  big[0] = EA_WIRE_MAGIC_SEALED;
  ck_assert_int_eq(send(junk, big, EA_WIRE_FRAME_HDR_SEALED, 0), EA_WIRE_FRAME_HDR_SEALED);
  uint64_t w1[4] = {(uintptr_t)&b, 0, 0, 1};
  ck_assert_msg(run_until(&loop, stats_at_least, w1, WAIT_MS), "forged header not counted");
  eof_arg e = {junk};
  ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "forged header not cut off");
  close(junk);
  /* 18 connections holding 47 of the 48 header bytes, all from 127.0.0.1
   * (with the junk one and the keyed sender below, 20: its connect burst,
   * ea_admit.h): at most CTL_PREAUTH_PER_SOURCE (8) are kept, the oldest
   * closed first */
  enum { HOLD = 18 };
  int fds[HOLD];
  for (int i = 0; i < HOLD; i++) {
    fds[i] = raw_connect(baddr);
    ck_assert_int_eq(send(fds[i], big, EA_WIRE_FRAME_HDR_SEALED - 1, 0),
                     EA_WIRE_FRAME_HDR_SEALED - 1);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  uint64_t w2[4] = {(uintptr_t)&b, HOLD - 8, 0, 1};
  ck_assert_msg(run_until(&loop, stats_at_least, w2, WAIT_MS), "evicted %llu, want %d",
                (unsigned long long)stats(&b).preauth_evicted, HOLD - 8);
  ck_assert_uint_eq(stats(&b).preauth_evicted, HOLD - 8);
  for (int i = 0; i < HOLD - 8; i++) {
    e.fd = fds[i];
    ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "connection %d (oldest) kept", i);
  }
  /* a keyed sender from the same address still gets through: its
   * connection makes room by closing the oldest one still waiting */
  ea_rdzv_msg m = report(77, 0);
  ea_node_id bid = idof(2);
  ea__ctl_send(a.c, &bid, baddr, &m);
  got_arg g = {&b, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "keyed frame not delivered");
  ck_assert_uint_eq(b.last[0].gen.term, 77);
  ck_assert_uint_eq(stats(&b).preauth_evicted, HOLD - 8 + 1);
  /* the 7 left are closed at their deadline (3 s), the keyed one is not */
  uint64_t w3[4] = {(uintptr_t)&b, HOLD - 8 + 1, 7, 1};
  ck_assert_msg(run_until(&loop, stats_at_least, w3, 3000 + WAIT_MS), "timeouts %llu, want 7",
                (unsigned long long)stats(&b).preauth_timeouts);
  for (int i = HOLD - 8; i < HOLD; i++) {
    e.fd = fds[i];
    ck_assert_msg(run_until(&loop, peer_closed, &e, WAIT_MS), "connection %d not timed out", i);
    close(fds[i]);
  }
  for (int i = 0; i < HOLD - 8; i++) close(fds[i]);
  ck_assert_uint_eq(stats(&b).conns_in, 1);
  ea__ctl_send(a.c, &bid, baddr, &m);
  g.want = 2;
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "keyed connection did not survive");
  /* Connect rates (ea_admit.h, issue 27): 127.0.0.1 has authenticated, so
   * it is never refused at accept; a stranger (127.0.0.2) gets its burst of
   * 20, the rest of 30 quick connects are closed at accept. */
  ck_assert_uint_eq(stats(&b).refused_rate, 0);
  int more[30];
  uint64_t ev = stats(&b).preauth_evicted;
  for (int i = 0; i < 30; i++) {
    more[i] = raw_connect(baddr);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  uint64_t w4[4] = {(uintptr_t)&b, ev + 22, 0, 1};
  ck_assert_msg(run_until(&loop, stats_at_least, w4, WAIT_MS), "evicted %llu, want %llu",
                (unsigned long long)stats(&b).preauth_evicted, (unsigned long long)(ev + 22));
  ck_assert_uint_eq(stats(&b).refused_rate, 0);
  for (int i = 0; i < 30; i++) close(more[i]);
  int strange[30];
  for (int i = 0; i < 30; i++) {
    strange[i] = raw_connect_from(baddr, "127.0.0.2");
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  for (int i = 0; i < 30 && stats(&b).refused_rate < 5; i++) uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_uint_ge(stats(&b).refused_rate, 5); /* 30 − 20, less what came back meanwhile */
  ck_assert_uint_le(stats(&b).refused_rate, 10);
  for (int i = 0; i < 30; i++) close(strange[i]);
  close_peer(&loop, &a);
  close_peer(&loop, &b);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(test_unreachable_and_moved_peer) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer a, b;
  start(&loop, &a, NULL);
  start(&loop, &b, NULL);
  ea_node_id bid = idof(2);
  /* Nobody listens on b's port once b is closed: the frame is dropped. */
  ea_addr old = *ea__ctl_bound(b.c);
  ea_rdzv_msg m = report(1, 0);
  ea__ctl_send(a.c, &bid, &old, &m);
  got_arg g = {&b, 1};
  ck_assert(run_until(&loop, got_n, &g, WAIT_MS));
  close_peer(&loop, &b);
  ea_addr none = {0};
  ea__ctl_send(a.c, &bid, &none, &m); /* no address at all */
  cnt_arg c = {&a, 0, 0, 0, 1};
  ck_assert(run_until(&loop, counted, &c, WAIT_MS));
  /* b "restarts" on a new port: the cached connection (its peer closed)
   * is replaced and the message reaches the new address. */
  peer b2;
  start(&loop, &b2, NULL);
  ea__ctl_send(a.c, &bid, &old, &m); /* the old address: refused */
  c = (cnt_arg){&a, 0, 0, 0, 2};
  ck_assert_msg(run_until(&loop, counted, &c, WAIT_MS), "send to a closed port not counted");
  m.gen.term = 2;
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b2.c), &m);
  g = (got_arg){&b2, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "moved peer not reached");
  ck_assert_uint_eq(b2.last[0].gen.term, 2);
  /* Close with a connection open on each side. */
  close_peer(&loop, &a);
  close_peer(&loop, &b2);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static int hooked;
static bool hook(void *ctx, const uint8_t *plain, size_t len) {
  (void)ctx;
  if (len == 3 && plain[1] == 0x91 && plain[2] == 0x2a) {
    hooked++;
    return true;
  }
  return false;
}

static bool hooked_one(void *ctx) {
  (void)ctx;
  return hooked >= 1;
}

START_TEST(test_frame_hook_shares_the_channel) {
  uint8_t key[EA_KEY_BYTES];
  memset(key, 0x33, sizeof key);
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer a, b;
  start(&loop, &a, key);
  start(&loop, &b, key);
  ea__ctl_set_frame_hook(b.c, hook);
  ea_node_id bid = idof(2);
  const uint8_t other[3] = {0xEA, 0x91, 0x2a}; /* another codec's [42] */
  ea__ctl_send_bytes(a.c, &bid, ea__ctl_bound(b.c), other, sizeof other);
  ea_rdzv_msg m = report(5, 0);
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  ck_assert_msg(run_until(&loop, hooked_one, NULL, WAIT_MS), "hook not called");
  got_arg g = {&b, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "rendezvous message not delivered");
  ck_assert_int_eq(hooked, 1);
  ck_assert_int_eq(b.got, 1);
  ck_assert_uint_eq(b.last[0].gen.term, 5);
  ck_assert_uint_eq(stats(&b).dropped_malformed, 0);
  /* Not 0xEA first: refused at the sender. */
  const uint8_t bad[2] = {0x01, 0x02};
  ea__ctl_send_bytes(a.c, &bid, ea__ctl_bound(b.c), bad, sizeof bad);
  ck_assert_uint_eq(stats(&a).encode_errors, 1);
  close_peer(&loop, &a);
  close_peer(&loop, &b);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* The codecs that share the channel get their frames by family (the high
 * nibble of the type), one handler each; a frame of no registered family is
 * the rendezvous's, and a malformed one of those is counted as before. */
static int fam_called;
static bool fam_fn(void *ctx, const uint8_t *plain, size_t len) {
  (void)ctx, (void)plain, (void)len;
  fam_called++;
  return true;
}

START_TEST(test_families_dispatched_by_type) {
  uint8_t key[EA_KEY_BYTES];
  memset(key, 0x34, sizeof key);
  uv_loop_t loop;
  uv_loop_init(&loop);
  peer a, b;
  start(&loop, &a, key);
  start(&loop, &b, key);
  ck_assert_int_eq(ea__ctl_on_family(b.c, 0x30, fam_fn), 0);
  ea_node_id bid = idof(2);
  const uint8_t job[4] = {0xEA, 0x92, 0x01, 0x35}; /* [version 1, type 0x35]: family 0x30 */
  ea__ctl_send_bytes(a.c, &bid, ea__ctl_bound(b.c), job, sizeof job);
  ea_rdzv_msg m = report(6, 0);
  ea__ctl_send(a.c, &bid, ea__ctl_bound(b.c), &m);
  got_arg g = {&b, 1};
  ck_assert_msg(run_until(&loop, got_n, &g, WAIT_MS), "rendezvous message not delivered");
  ck_assert_int_eq(fam_called, 1);
  ck_assert_uint_eq(b.last[0].gen.term, 6);
  ck_assert_uint_eq(stats(&b).dropped_malformed, 0);
  /* Family 0x50 has no handler: the rendezvous decoder refuses it. */
  const uint8_t other[4] = {0xEA, 0x92, 0x01, 0x55};
  ea__ctl_send_bytes(a.c, &bid, ea__ctl_bound(b.c), other, sizeof other);
  cnt_arg c = {&b, 1, 0, 0, 0};
  ck_assert_msg(run_until(&loop, counted, &c, WAIT_MS), "frame of no family not counted");
  ck_assert_int_eq(fam_called, 1);
  for (int i = 0; i < EA__CTL_FAMILIES - 1; i++) ea__ctl_on_family(b.c, 0x60, fam_fn);
  ck_assert_int_eq(ea__ctl_on_family(b.c, 0x70, fam_fn), -ENOSPC);
  close_peer(&loop, &a);
  close_peer(&loop, &b);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *control_suite(void) {
  Suite *s = suite_create("control");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_roundtrip_in_order_one_connection);
  tcase_add_test(tc, test_sealed);
  tcase_add_test(tc, test_bad_input_counted_and_cut_off);
  tcase_add_test(tc, test_replayed_frame_dropped);
  tcase_add_test(tc, test_preauth_bounded);
  tcase_add_test(tc, test_unreachable_and_moved_peer);
  tcase_add_test(tc, test_frame_hook_shares_the_channel);
  tcase_add_test(tc, test_families_dispatched_by_type);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(control_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
