/* libFuzzer harness for the admin socket's request side (agent/admin.c):
 * the framing of the request line (ea__admin_rx_*) and its dispatch to a
 * command table (ea__admin_dispatch) — the code the server runs on every
 * connection, driven here without a socket.
 *
 * The input is a byte stream cut into reads: byte 0 says who the peer is
 * (no SO_PEERCRED, root, the agent's uid, another uid) and how the stream
 * ends (EOF, a read error, or nothing), byte 1 seeds the read sizes (1 to
 * what ea__admin_rx_buf offers), the rest is what clients send.  When one
 * connection's framing ends (a line, a refusal, a close) the next
 * connection starts on the following bytes, with a fresh ea__admin_rx.
 *
 * Beyond "no crash, no sanitizer report", it checks the promises against
 * a model written here: the event of each read (a line is the bytes before
 * the first "\n", "\r" dropped, when that "\n" comes within
 * EA__ADMIN_LINE_MAX bytes; refused once it comes later; at EOF what came
 * is the line, nothing is a close), `extra` exactly when bytes followed
 * the line in its read; the dispatch of the line (the word and the
 * arguments split as the protocol says; "help" lists every command; an
 * owner-only command runs only for root or the agent's uid; a command that
 * gives no document gives none; any other word is an error naming it); and
 * every document is one line of valid UTF-8 JSON that parses back.  A
 * mismatch aborts, which libFuzzer reports as a crash with the input
 * saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/admin (status, drain, help, a line with bytes after
 * it, an over-long line, CRLF, EOF without newline).
 */
#include "agent_int.h"
#include "fuzz_text.h"

#include "ea_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "fuzz_admin: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

/* ---- a command table like the agent's ------------------------------------ */

/* {"args": ARGS, "len": strlen(ARGS)} */
static int cmd_echo(void *ctx, const char *args, json_t **out) {
  (void)ctx;
  ea_jb b = {0};
  json_t *d = json_object();
  ea_jb_str(&b, d, "args", args);
  ea_jb_u64(&b, d, "len", strlen(args));
  *out = d;
  return 0;
}

static int cmd_none(void *ctx, const char *args, json_t **out) {
  (void)ctx, (void)args;
  *out = NULL;
  return -ENOMEM;
}

static int cmd_fail(void *ctx, const char *args, json_t **out) {
  (void)ctx;
  char msg[128];
  snprintf(msg, sizeof msg, "no alive member named '%.64s'", args);
  *out = ea_json_error(msg);
  return -ENOENT;
}

static int cmd_change(void *ctx, const char *args, json_t **out) {
  (void)ctx, (void)args;
  ea_jb b = {0};
  json_t *d = json_object();
  ea_jb_bool(&b, d, "changed", true);
  *out = d;
  return 0;
}

static const ea__admin_cmd cmds[] = {
    {"status", "echo", cmd_echo},
    {"none", "no document", cmd_none},
    {"fail", "an error", cmd_fail},
    {"drain", "changes state", cmd_change, .owner_only = true},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

/* ---- the model ------------------------------------------------------------- */

/* The document's text: one line, valid UTF-8, JSON that parses back. */
FUZZ_NOCOV static char *check_doc(json_t *doc) {
  char *t = ea_json_dump(doc);
  CHECK(t);
  size_t n = strlen(t);
  CHECK(n > 0 && !memchr(t, '\n', n));
  CHECK(fuzz_utf8_valid(t, n));
  ea_json *j = NULL;
  char err[128];
  CHECK(ea_json_parse(t, n, &j, err, sizeof err) == 0);
  ea_json_free(j);
  return t;
}

FUZZ_NOCOV static const char *doc_str(json_t *doc, const char *key) {
  json_t *v = json_object_get(doc, key);
  CHECK(v && json_is_string(v));
  return json_string_value(v);
}

static void check_dispatch(const char *line, bool have_peer, uid_t uid) {
  /* the model's split: spaces, the word, one space, spaces, the arguments */
  char copy[EA__ADMIN_LINE_MAX + 1];
  snprintf(copy, sizeof copy, "%s", line);
  const char *w = line;
  while (*w == ' ') w++;
  size_t wl = strcspn(w, " ");
  const char *args = w[wl] ? w + wl + 1 : w + wl;
  while (*args == ' ') args++;
  char word[EA__ADMIN_LINE_MAX + 1];
  memcpy(word, w, wl);
  word[wl] = 0;

  json_t *doc = (json_t *)&doc; /* must be set */
  ea__admin_dispatch(cmds, NCMDS, NULL, copy, have_peer, uid, &doc);
  if (strcmp(word, "none") == 0) {
    CHECK(doc == NULL);
    return;
  }
  CHECK(doc != NULL && doc != (json_t *)&doc);
  char *t = check_doc(doc);
  if (strcmp(word, "help") == 0) {
    json_t *list = json_object_get(doc, "commands");
    CHECK(json_array_size(list) == NCMDS + 1);
    for (size_t i = 0; i < NCMDS; i++)
      CHECK(strcmp(json_string_value(json_object_get(json_array_get(list, i), "name")),
                   cmds[i].name) == 0);
  } else if (strcmp(word, "status") == 0) {
    CHECK(json_integer_value(json_object_get(doc, "len")) == (json_int_t)strlen(args));
    char want[3 * EA__ADMIN_LINE_MAX + 1];
    fuzz_utf8_model(args, (size_t)-1, false, want);
    CHECK(strcmp(doc_str(doc, "args"), want) == 0);
  } else if (strcmp(word, "fail") == 0) {
    CHECK(strncmp(doc_str(doc, "error"), "no alive member named '", 23) == 0);
  } else if (strcmp(word, "drain") == 0) {
    bool may = have_peer && (uid == 0 || uid == geteuid());
    if (may)
      CHECK(json_is_true(json_object_get(doc, "changed")));
    else
      CHECK(strncmp(doc_str(doc, "error"), "permission denied: 'drain' is allowed only", 42) == 0);
  } else {
    /* an error naming the word (its first 64 bytes, as UTF-8) */
    char cut[65], want[3 * 64 + 64];
    snprintf(cut, sizeof cut, "%.64s", word);
    char named[3 * 64 + 1];
    fuzz_utf8_model(cut, (size_t)-1, false, named);
    snprintf(want, sizeof want, "unknown command '%s' (try 'help')", named);
    CHECK(strcmp(doc_str(doc, "error"), want) == 0);
  }
  free(t);
  json_decref(doc);
}

/* What rx must say once its connection was fed seen[0..n), and then its
 * EOF when eof. */
FUZZ_NOCOV static ea__admin_rx_ev model_event(const uint8_t *seen, size_t n, bool eof) {
  const uint8_t *nl = memchr(seen, '\n', n);
  if (nl)
    return (size_t)(nl - seen) < EA__ADMIN_LINE_MAX ? EA__ADMIN_RX_LINE : EA__ADMIN_RX_TOO_LONG;
  if (!eof) return EA__ADMIN_RX_MORE;
  if (n == 0) return EA__ADMIN_RX_CLOSE;
  return n < EA__ADMIN_LINE_MAX ? EA__ADMIN_RX_LINE : EA__ADMIN_RX_TOO_LONG;
}

FUZZ_NOCOV static void check_line(const ea__admin_rx *rx, const uint8_t *seen, size_t n) {
  const uint8_t *nl = memchr(seen, '\n', n);
  size_t ll = nl ? (size_t)(nl - seen) : n;
  if (nl && ll > 0 && seen[ll - 1] == '\r') ll--; /* "\r\n"; at EOF a "\r" stays */
  CHECK(memcmp(rx->line, seen, ll) == 0);
  CHECK(rx->line[ll] == 0);
}

/* The refusal of an owner-only command is a warning line: not at every run. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return ea_log_setup("error", "text", NULL) == 0 ? 0 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 1 << 16) return 0;
  uint8_t mode = data[0];
  uint32_t rnd = data[1] * 2654435761u + 1;
  const uint8_t *in = data + 2;
  size_t left = size - 2;
  bool have_peer = mode & 3;
  uid_t uid = (mode & 3) == 1 ? 0 : (mode & 3) == 2 ? geteuid() : geteuid() + 1;
  int ending = (mode >> 2) % 3; /* 0 EOF, 1 a read error, 2 nothing */

  static uint8_t seen[1 << 16];
  while (left) {
    /* one connection */
    ea__admin_rx rx;
    ea__admin_rx_init(&rx);
    size_t n = 0;
    ea__admin_rx_ev ev = EA__ADMIN_RX_MORE;
    while (left && ev == EA__ADMIN_RX_MORE) {
      size_t room;
      char *buf = ea__admin_rx_buf(&rx, &room);
      CHECK(room >= 1 && room <= EA__ADMIN_LINE_MAX);
      CHECK(buf >= rx.line && buf + room <= rx.line + EA__ADMIN_LINE_MAX);
      rnd = rnd * 1103515245u + 12345u;
      size_t want = (rnd >> 8) % 4 == 0 ? room : 1 + (rnd >> 8) % (room < 64 ? room : 64);
      size_t k = want < left ? want : left;
      memcpy(buf, in, k);
      memcpy(seen + n, in, k);
      size_t last = n;
      n += k;
      in += k;
      left -= k;
      ev = ea__admin_rx_got(&rx, (ssize_t)k);
      CHECK(ev == model_event(seen, n, false));
      if (ev == EA__ADMIN_RX_LINE || ev == EA__ADMIN_RX_TOO_LONG) {
        const uint8_t *nl = memchr(seen + last, '\n', k);
        CHECK(nl != NULL);
        CHECK(rx.extra == (nl + 1 < seen + n)); /* bytes after the line in its read */
      }
    }
    if (ev == EA__ADMIN_RX_MORE) { /* the input ended inside this connection */
      if (ending == 2) return 0;
      ev = ea__admin_rx_got(&rx, ending == 0 ? UV_EOF : UV_ECONNRESET);
      CHECK(ev == (ending == 0 ? model_event(seen, n, true) : EA__ADMIN_RX_CLOSE));
      if (ev == EA__ADMIN_RX_LINE) CHECK(!rx.extra);
    }
    if (ev == EA__ADMIN_RX_LINE) {
      CHECK(strlen(rx.line) < EA__ADMIN_LINE_MAX);
      check_line(&rx, seen, n);
      check_dispatch(rx.line, have_peer, uid);
    }
  }
  return 0;
}
