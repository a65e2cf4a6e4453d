/* accept_gate.c — at most EA_ACCEPT_BATCH accepts per turn of the loop
 * (ea_transport.h says why). */
#include "ea_transport.h"

#include <stddef.h>

static void resume(uv_timer_t *h) {
  ea_accept_gate *g = (ea_accept_gate *)((char *)h - offsetof(ea_accept_gate, resume));
  g->turn = uv_now(h->loop);
  g->n = 0;
  /* The connection left pending is accepted now: uv_accept takes it and
   * starts watching the listener again. */
  g->cb(g->server, 0);
}

void ea_accept_gate_init(ea_accept_gate *g, uv_loop_t *loop, uv_stream_t *server,
                         uv_connection_cb cb) {
  g->server = server;
  g->cb = cb;
  g->turn = 0;
  g->n = 0;
  g->deferred = 0;
  uv_timer_init(loop, &g->resume);
}

bool ea_accept_gate_pass(ea_accept_gate *g) {
  /* uv_now is updated once per turn, so every accept of one call of
   * libuv's accept loop sees the same value. */
  uint64_t now = uv_now(g->resume.loop);
  if (now != g->turn) {
    g->turn = now;
    g->n = 0;
  }
  if (g->n >= EA_ACCEPT_BATCH) {
    g->deferred++;
    uv_timer_start(&g->resume, resume, 0, 0);
    return false;
  }
  g->n++;
  return true;
}
