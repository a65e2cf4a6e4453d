/* Check suite for the admin socket (agent/admin.c): its framing and
 * dispatch as pure functions, and the server over a real Unix socket.
 *
 * What it promises, tested as such: one line in ("\n" or "\r\n", or the
 * bytes before EOF), one JSON document and "\n" out, then the server
 * closes — cleanly, with an EOF the client reads after the answer, never
 * a reset, even when the client sent more than the line (issue 11 item 8:
 * fuzz_admin found the answer lost to "Connection reset by peer" when
 * bytes followed a complete command); a command that gives no document is
 * finished like any other (the connection closes at once, the next
 * request is served); lines over 1 KiB are refused; unknown commands name
 * themselves; arguments are passed with leading spaces stripped.
 *
 * The server runs on a libuv loop in a thread of its own; each test ends
 * by closing it and asserting that its loop closed cleanly (no handle
 * left).
 */
#include "agent_int.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- commands ------------------------------------------------------------ */

static atomic_int none_calls;

static int cmd_echo(void *ctx, const char *args, json_t **out) {
  (void)ctx;
  json_t *d = json_object();
  json_object_set_new(d, "args", json_string(args));
  *out = d;
  return 0;
}

/* No document: as a command out of memory answers. */
static int cmd_none(void *ctx, const char *args, json_t **out) {
  (void)ctx, (void)args;
  atomic_fetch_add(&none_calls, 1);
  *out = NULL;
  return -ENOMEM;
}

static int cmd_fail(void *ctx, const char *args, json_t **out) {
  (void)ctx, (void)args;
  *out = ea_json_error("failed on purpose");
  return -EIO;
}

static const ea__admin_cmd cmds[] = {
    {"echo", "echo ARGS", cmd_echo},
    {"none", "answers nothing", cmd_none},
    {"fail", "an error", cmd_fail},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

/* ---- a server on a loop in a thread --------------------------------------- */

typedef struct {
  uv_loop_t loop;
  uv_async_t stop;
  ea__admin *a;
  pthread_t th;
  char dir[48], path[96];
} srv;

static void on_stop(uv_async_t *h) {
  srv *s = h->data;
  ea__admin_close(s->a, NULL, NULL);
  uv_close((uv_handle_t *)&s->stop, NULL);
}

static void *srv_main(void *arg) {
  srv *s = arg;
  uv_run(&s->loop, UV_RUN_DEFAULT);
  return NULL;
}

static void srv_start(srv *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "/tmp/ea-test-admin-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(s->dir));
  snprintf(s->path, sizeof s->path, "%s/admin.sock", s->dir);
  ck_assert_int_eq(uv_loop_init(&s->loop), 0);
  char err[256] = "";
  int rc = ea__admin_start(&s->loop, s->path, cmds, NCMDS, s, &s->a, err, sizeof err);
  ck_assert_msg(rc == 0, "ea__admin_start: %d %s", rc, err);
  ck_assert_int_eq(uv_async_init(&s->loop, &s->stop, on_stop), 0);
  s->stop.data = s;
  ck_assert_int_eq(pthread_create(&s->th, NULL, srv_main, s), 0);
}

static void srv_stop(srv *s) {
  uv_async_send(&s->stop);
  pthread_join(s->th, NULL);
  ck_assert_int_eq(uv_loop_close(&s->loop), 0); /* every handle closed */
  rmdir(s->dir);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int conn(const srv *s) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", s->path);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

static void send_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    ck_assert_int_gt(w, 0);
    b += w;
    n -= (size_t)w;
  }
}

/* Read until EOF (0), an error (-errno) or the deadline (-ETIMEDOUT); what
 * came is in out (NUL-terminated, cap bytes at most). */
static int read_all(int fd, char *out, size_t cap, size_t *got, int timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  *got = 0;
  out[0] = 0;
  for (;;) {
    int64_t left = end - now_ms();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&p, 1, (int)left) == 0) return -ETIMEDOUT;
    ssize_t r = recv(fd, out + *got, cap - 1 - *got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) return 0;
    *got += (size_t)r;
    out[*got] = 0;
    if (*got + 1 >= cap) return -EMSGSIZE;
  }
}

/* One exchange: send req (n bytes), read the whole answer; return what
 * read_all returned. */
static int ask(const srv *s, const void *req, size_t n, char *out, size_t cap) {
  int fd = conn(s);
  send_all(fd, req, n);
  size_t got;
  int rc = read_all(fd, out, cap, &got, 3000);
  close(fd);
  return rc;
}

/* ---- the pure framing ------------------------------------------------------ */

static ea__admin_rx_ev feed(ea__admin_rx *r, const char *s) {
  size_t room;
  char *b = ea__admin_rx_buf(r, &room);
  size_t n = strlen(s);
  ck_assert_uint_le(n, room);
  memcpy(b, s, n);
  return ea__admin_rx_got(r, (ssize_t)n);
}

START_TEST(framing_finds_the_line) {
  ea__admin_rx r;
  ea__admin_rx_init(&r);
  ck_assert_int_eq(feed(&r, "sta"), EA__ADMIN_RX_MORE);
  ck_assert_int_eq(feed(&r, "tus\r\n"), EA__ADMIN_RX_LINE);
  ck_assert_str_eq(r.line, "status");
  ck_assert(!r.extra);

  ea__admin_rx_init(&r);
  ck_assert_int_eq(feed(&r, "echo a\nmore"), EA__ADMIN_RX_LINE);
  ck_assert_str_eq(r.line, "echo a");
  ck_assert(r.extra); /* bytes after the line: the connection must read them out */

  ea__admin_rx_init(&r);
  ck_assert_int_eq(feed(&r, "help"), EA__ADMIN_RX_MORE);
  ck_assert_int_eq(ea__admin_rx_got(&r, UV_EOF), EA__ADMIN_RX_LINE); /* echo -n | nc -U */
  ck_assert_str_eq(r.line, "help");

  ea__admin_rx_init(&r);
  ck_assert_int_eq(ea__admin_rx_got(&r, UV_EOF), EA__ADMIN_RX_CLOSE);
  ea__admin_rx_init(&r);
  ck_assert_int_eq(ea__admin_rx_got(&r, UV_ECONNRESET), EA__ADMIN_RX_CLOSE);
}
END_TEST

START_TEST(framing_refuses_long_lines_after_their_end) {
  ea__admin_rx r;
  ea__admin_rx_init(&r);
  char chunk[257];
  memset(chunk, 'x', 256);
  chunk[256] = 0;
  for (int i = 0; i < 12; i++) ck_assert_int_eq(feed(&r, chunk), EA__ADMIN_RX_MORE);
  ck_assert(r.overlong);
  ck_assert_int_eq(feed(&r, "xx\n"), EA__ADMIN_RX_TOO_LONG); /* its end: answer now */
  ea__admin_rx_init(&r);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(feed(&r, chunk), EA__ADMIN_RX_MORE);
  ck_assert_int_eq(ea__admin_rx_got(&r, UV_EOF), EA__ADMIN_RX_TOO_LONG);
}
END_TEST

START_TEST(dispatch_words_and_args) {
  ea__admin_rx r;
  ea__admin_rx_init(&r);
  feed(&r, "  echo   two words \n");
  json_t *doc = NULL;
  ea__admin_dispatch(cmds, NCMDS, NULL, r.line, true, 0, &doc);
  ck_assert_ptr_nonnull(doc);
  ck_assert_str_eq(json_string_value(json_object_get(doc, "args")), "two words ");
  json_decref(doc);

  char line[] = "nosuch \xff arg";
  ea__admin_dispatch(cmds, NCMDS, NULL, line, true, 0, &doc);
  char *t = ea_json_dump(doc);
  ck_assert_str_eq(t, "{\"error\":\"unknown command 'nosuch' (try 'help')\"}");
  free(t);
  json_decref(doc);

  char help[] = "help";
  ea__admin_dispatch(cmds, NCMDS, NULL, help, true, 0, &doc);
  ck_assert_uint_eq(json_array_size(json_object_get(doc, "commands")), NCMDS + 1);
  json_decref(doc);

  char none[] = "none";
  doc = (json_t *)1;
  ea__admin_dispatch(cmds, NCMDS, NULL, none, true, 0, &doc);
  ck_assert_ptr_null(doc);
}
END_TEST

/* ---- over the socket --------------------------------------------------------- */

START_TEST(answers_one_line_then_closes) {
  srv s;
  srv_start(&s);
  char out[4096];
  ck_assert_int_eq(ask(&s, "echo hello\n", 11, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"args\":\"hello\"}\n");
  ck_assert_int_eq(ask(&s, "echo crlf\r\n", 11, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"args\":\"crlf\"}\n");
  ck_assert_int_eq(ask(&s, "fail\n", 5, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"error\":\"failed on purpose\"}\n");
  ck_assert_int_eq(ask(&s, "bogus\n", 6, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"error\":\"unknown command 'bogus' (try 'help')\"}\n");
  /* the client's own request function */
  char *resp = NULL, err[256];
  size_t len = 0;
  ck_assert_int_eq(ea__admin_request(s.path, "echo x", 3000, &resp, &len, err, sizeof err), 0);
  ck_assert_str_eq(resp, "{\"args\":\"x\"}\n");
  free(resp);
  srv_stop(&s);
}
END_TEST

/* Bytes after a complete command: the answer arrives whole and the
 * connection ends with an EOF, not a reset (before the fix, the server
 * stopped reading at the line and closed with the rest unread, which on a
 * Unix socket resets the connection: the client read the answer, then
 * ECONNRESET instead of its EOF, and ea__admin_request failed). */
START_TEST(bytes_after_the_line_do_not_reset) {
  srv s;
  srv_start(&s);
  static char req[8192];
  memcpy(req, "echo first\n", 11);
  memset(req + 11, 'y', sizeof req - 12);
  req[sizeof req - 1] = '\n';
  char out[4096];
  for (int i = 0; i < 20; i++) {
    int rc = ask(&s, req, sizeof req, out, sizeof out);
    ck_assert_msg(rc == 0, "round %d: %s after %zu bytes of answer", i, strerror(-rc), strlen(out));
    ck_assert_str_eq(out, "{\"args\":\"first\"}\n");
  }
  /* a second whole line in the same write: only the first is a request */
  ck_assert_int_eq(ask(&s, "echo one\necho two\n", 18, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"args\":\"one\"}\n");
  /* and the client that keeps sending after its line gets its answer too */
  int fd = conn(&s);
  send_all(fd, "echo slow\n", 10);
  char junk[512];
  memset(junk, 'z', sizeof junk);
  for (int i = 0; i < 8; i++) send(fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
  shutdown(fd, SHUT_WR);
  size_t got;
  ck_assert_int_eq(read_all(fd, out, sizeof out, &got, 3000), 0);
  ck_assert_str_eq(out, "{\"args\":\"slow\"}\n");
  close(fd);
  srv_stop(&s);
}
END_TEST

/* A command that gives no document: the connection is finished (closed at
 * once, without an answer and without a reset), and the server goes on
 * serving — more of them than it has connection slots. */
START_TEST(no_answer_finishes_the_connection) {
  srv s;
  srv_start(&s);
  atomic_store(&none_calls, 0);
  char out[4096];
  for (int i = 0; i < 40; i++) {
    int64_t t0 = now_ms();
    int rc = ask(&s, "none\n", 5, out, sizeof out);
    ck_assert_msg(rc == 0, "round %d: %s", i, strerror(-rc));
    ck_assert_str_eq(out, "");
    ck_assert_int_lt(now_ms() - t0, 900); /* not the 1 s drain nor the 5 s timeout */
  }
  /* with bytes after the line, too */
  static char req[4096];
  memcpy(req, "none\n", 5);
  memset(req + 5, 'q', sizeof req - 5);
  for (int i = 0; i < 20; i++) {
    int rc = ask(&s, req, sizeof req, out, sizeof out);
    ck_assert_msg(rc == 0, "round %d: %s", i, strerror(-rc));
    ck_assert_str_eq(out, "");
  }
  ck_assert_int_eq(atomic_load(&none_calls), 60);
  /* 16 slots held by clients that sent nothing, plus one request: served
   * (one held client is evicted) — the finished ones hold no slot */
  int held[16];
  /* no wait needed: the listen backlog is accepted in order, so the 16
   * held connections are the server's before the request's */
  for (int i = 0; i < 16; i++) held[i] = conn(&s);
  ck_assert_int_eq(ask(&s, "echo still\n", 11, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"args\":\"still\"}\n");
  for (int i = 0; i < 16; i++) close(held[i]);
  srv_stop(&s);
}
END_TEST

START_TEST(long_line_refused) {
  srv s;
  srv_start(&s);
  static char req[3000];
  memset(req, 'a', sizeof req);
  req[sizeof req - 1] = '\n';
  char out[4096];
  ck_assert_int_eq(ask(&s, req, sizeof req, out, sizeof out), 0);
  ck_assert_str_eq(out, "{\"error\":\"request line too long\"}\n");
  srv_stop(&s);
}
END_TEST

static Suite *admin_suite(void) {
  Suite *s = suite_create("admin");
  TCase *tc = tcase_create("admin");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, framing_finds_the_line);
  tcase_add_test(tc, framing_refuses_long_lines_after_their_end);
  tcase_add_test(tc, dispatch_words_and_args);
  tcase_add_test(tc, answers_one_line_then_closes);
  tcase_add_test(tc, bytes_after_the_line_do_not_reset);
  tcase_add_test(tc, no_answer_finishes_the_connection);
  tcase_add_test(tc, long_line_refused);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(admin_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
