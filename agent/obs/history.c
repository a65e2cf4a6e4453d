/* The agent's short memory for the page (issue 31): the last ten minutes
 * of training progress, the last generations this node ran and why each
 * formed, and the newest checkpoint it knows of.
 *
 * Why a ring here and not a query of Prometheus: the page is served by
 * every agent, with nothing else installed, and must show the minutes
 * around a failure as soon as someone opens it.  So the loop keeps a small
 * bounded past itself: points at one-second slots (a slot takes its first
 * sample, so the loop's 500 ms tick and its jitter give exactly one point a
 * second), generations as they commit.  Both rings overwrite their oldest
 * entry; the totals say how many there ever were.
 *
 * Pure: the caller passes the time and what it read of the agent
 * (metrics.c samples on the loop's tick and records each commit); the
 * /api/v1/history text is formatted here and handed to the HTTP thread in
 * the published snapshot.  tests/unit/test_history.c drives it in virtual
 * time.
 */
#include "history.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *ea__hist_kind_str(ea__hist_kind k) {
  static const char *const n[EA__HIST_KINDS] = {
      [EA__HIST_START] = "start",       [EA__HIST_LOST] = "lost",
      [EA__HIST_HELD_OUT] = "held_out", [EA__HIST_LEFT] = "left",
      [EA__HIST_DRAINED] = "drained",   [EA__HIST_JOIN] = "join",
      [EA__HIST_FAILURE] = "failure",   [EA__HIST_REFORM] = "reform",
  };
  return (unsigned)k < EA__HIST_KINDS ? n[k] : "?";
}

void ea__hist_init(ea__hist *h) {
  memset(h, 0, sizeof *h);
}

bool ea__hist_sample(ea__hist *h, uint64_t now_ms, const ea__hist_point *p) {
  uint64_t slot = now_ms / EA__HIST_PERIOD_MS;
  if (h->sampled && slot <= h->slot) return false;
  h->sampled = true;
  h->slot = slot;
  h->pt[h->pt_next] = *p;
  h->pt_next = (h->pt_next + 1) % EA__HIST_POINTS;
  if (h->npt < EA__HIST_POINTS) h->npt++;
  h->points_total++;
  return true;
}

void ea__hist_generation(ea__hist *h, const ea__hist_gen *g) {
  h->gen[h->gen_next] = *g;
  h->gen[h->gen_next].id[sizeof g->id - 1] = 0;
  h->gen[h->gen_next].why[sizeof g->why - 1] = 0;
  h->gen_next = (h->gen_next + 1) % EA__HIST_GENS;
  if (h->ngen < EA__HIST_GENS) h->ngen++;
  h->gens_total++;
}

void ea__hist_checkpoint(ea__hist *h, const ea__hist_ckpt *ck) {
  h->ck = *ck;
}

const ea__hist_point *ea__hist_point_at(const ea__hist *h, size_t i) {
  if (i >= h->npt) return NULL;
  return &h->pt[(h->pt_next + EA__HIST_POINTS - h->npt + i) % EA__HIST_POINTS];
}

const ea__hist_gen *ea__hist_gen_at(const ea__hist *h, size_t i) {
  if (i >= h->ngen) return NULL;
  return &h->gen[(h->gen_next + EA__HIST_GENS - h->ngen + i) % EA__HIST_GENS];
}

/* ---- why a generation formed ------------------------------------------------ */

/* Appends "WORD a, b, c" to the why text at *off, "; " first when it is
 * not the first cause; ", …" ends a list that does not fit, or that had
 * more names than it was given (more). */
static void why_add(char *out, size_t cap, size_t *off, const char *word, const char *const *names,
                    size_t n, bool more) {
  if (*off + 1 >= cap) return;
  int w = snprintf(out + *off, cap - *off, "%s%s", *off ? "; " : "", word);
  if (w < 0) return;
  *off += (size_t)w < cap - *off ? (size_t)w : cap - *off - 1;
  for (size_t i = 0; i < n; i++) {
    const char *name = names[i] && names[i][0] ? names[i] : "?";
    /* Room for the name and, when more may follow, for ", …" (5 bytes). */
    size_t need = strlen(name) + (i ? 2 : 1) + (i + 1 < n || more ? 5 : 0);
    if (*off + need >= cap) {
      more = true;
      break;
    }
    *off += (size_t)snprintf(out + *off, cap - *off, "%s%s", i ? ", " : " ", name);
  }
  if (more && *off + 5 < cap) *off += (size_t)snprintf(out + *off, cap - *off, ", …");
}

void ea__hist_explain(ea__hist_gen *g, bool first, const char *const *gone,
                      const ea__hist_gone *fate, size_t ngone, const char *const *joined,
                      size_t njoined, bool restarted) {
  size_t off = 0;
  g->why[0] = 0;
  if (first) {
    g->kind = EA__HIST_START;
    snprintf(g->why, sizeof g->why, "first generation here");
    return;
  }
  static const struct {
    ea__hist_gone fate;
    ea__hist_kind kind;
    const char *word;
  } causes[] = {{EA__HIST_GONE_DEAD, EA__HIST_LOST, "lost"},
                {EA__HIST_GONE_HELD, EA__HIST_HELD_OUT, "held out"},
                {EA__HIST_GONE_LEFT, EA__HIST_LEFT, "left"},
                {EA__HIST_GONE_ALIVE, EA__HIST_DRAINED, "drained"}};
  bool have = false;
  const char *names[16];
  for (size_t c = 0; c < sizeof causes / sizeof causes[0]; c++) {
    size_t n = 0, more = 0;
    for (size_t i = 0; i < ngone; i++) {
      if (fate[i] != causes[c].fate) continue;
      if (n < sizeof names / sizeof names[0])
        names[n++] = gone[i];
      else
        more++;
    }
    if (!n) continue;
    if (!have) g->kind = causes[c].kind;
    have = true;
    why_add(g->why, sizeof g->why, &off, causes[c].word, names, n, more > 0);
  }
  if (njoined) {
    if (!have) g->kind = EA__HIST_JOIN;
    have = true;
    why_add(g->why, sizeof g->why, &off, "join", joined, njoined, false);
  }
  if (have) return;
  g->kind = restarted ? EA__HIST_FAILURE : EA__HIST_REFORM;
  snprintf(g->why, sizeof g->why, "%s",
           restarted ? "a worker failed: the same nodes restarted"
                     : "the same nodes re-formed (a communicator broke, or a pause ended)");
}

/* ---- the document ------------------------------------------------------------- */

/* A real with `dec` decimals, null when not finite (JSON has no NaN). */
static void put_real(ea_sb *b, double v, int dec) {
  if (!isfinite(v)) {
    ea_sb_puts(b, "null");
    return;
  }
  ea_sb_printf(b, "%.*f", dec, v == 0 ? 0.0 : v);
}

void ea__hist_format(const ea__hist *h, const char *node, double now_s, ea_sb *b) {
  ea_sb_puts(b, "{\"version\":1,\"node\":");
  ea_sb_json_str(b, node ? node : "");
  ea_sb_puts(b, ",\"now\":");
  put_real(b, now_s, 3);
  ea_sb_printf(b,
               ",\"period_ms\":%d,\"capacity\":{\"points\":%d,\"generations\":%d},"
               "\"points_total\":%" PRIu64 ",\"generations_total\":%" PRIu64 ",\"points\":[",
               EA__HIST_PERIOD_MS, EA__HIST_POINTS, EA__HIST_GENS, h->points_total, h->gens_total);
  for (size_t i = 0; i < h->npt; i++) {
    const ea__hist_point *p = ea__hist_point_at(h, i);
    ea_sb_puts(b, i ? ",{\"t\":" : "{\"t\":");
    put_real(b, p->t_s, 3);
    ea_sb_printf(b, ",\"step\":%" PRIu64 ",\"steps_per_s\":", p->step);
    put_real(b, p->steps_per_s, 2);
    ea_sb_puts(b, ",\"loss\":");
    if (p->has_loss)
      put_real(b, p->loss, 6);
    else
      ea_sb_puts(b, "null");
    ea_sb_printf(b, ",\"gen\":%" PRIu64 ",\"world\":%u}", p->gen, p->world);
  }
  ea_sb_puts(b, "],\"generations\":[");
  for (size_t i = 0; i < h->ngen; i++) {
    const ea__hist_gen *g = ea__hist_gen_at(h, i);
    ea_sb_printf(b, "%s{\"gen\":%" PRIu64 ",\"id\":", i ? "," : "", g->gen);
    ea_sb_json_str(b, g->id);
    ea_sb_puts(b, ",\"t\":");
    put_real(b, g->t_s, 3);
    ea_sb_printf(b,
                 ",\"world\":%u,\"nodes\":%u,\"formation_ms\":%" PRIu64 ",\"stalled_ms\":%" PRIu64
                 ",\"step\":%" PRIu64 ",\"kind\":\"%s\",\"why\":",
                 g->world, g->nodes, g->formation_ms, g->stalled_ms, g->step,
                 ea__hist_kind_str(g->kind));
    ea_sb_json_str(b, g->why);
    ea_sb_puts(b, "}");
  }
  ea_sb_puts(b, "],\"checkpoint\":");
  if (h->ck.have) {
    ea_sb_printf(b, "{\"step\":%" PRIu64 ",\"gen\":%" PRIu64 ",\"t\":", h->ck.step, h->ck.gen);
    put_real(b, h->ck.t_s, 3);
    if (h->ck.have_bytes)
      ea_sb_printf(b, ",\"bytes\":%" PRIu64 "}", h->ck.bytes);
    else
      ea_sb_puts(b, ",\"bytes\":null}");
  } else {
    ea_sb_puts(b, "null");
  }
  ea_sb_puts(b, "}");
}
