/* history_parse.c — the agents' logs read into the history (history_int.h)
 * after the run, one line at a time: step, generation, worker, member, ckpt
 * (and checkpoint alert), drain and leave lines.  What one agent's lines
 * prove in order is checked as they are read: ranks_agree, one_generation,
 * generations_grow, one_plan, and that a generation's ranks started from
 * one step.  The lineage and the checks that need the whole history are
 * history.c's, whose opening comment says what the logs prove.
 */
#include "chaos.h"
#include "history_int.h"

#include "ea_rdzv.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Room for one more element, or return -ENOMEM from the caller. */
#define GROW(arr, n, cap)                                             \
  do {                                                                \
    if (EA_ARRAY_RESERVE((arr), (cap), (n) + 1) != 0) return -ENOMEM; \
  } while (0)

static int gen_index(struct ea__chaos_history *h, uint64_t gen) {
  /* Generations are few (one per fault or two); a linear scan from the end
   * finds the current one first. */
  for (size_t i = h->ngens; i-- > 0;)
    if (h->gens[i].gen == gen) return (int)i;
  if (EA_ARRAY_RESERVE(h->gens, h->capgens, h->ngens + 1) != 0) return -1;
  hgen *g = &h->gens[h->ngens];
  memset(g, 0, sizeof *g);
  g->gen = gen;
  g->sync_rank = -1;
  g->root_proc = -1;
  g->pred = -1;
  g->ts_first = g->ts_last = g->t_commit = -1;
  return (int)h->ngens++;
}

/* Room for need steps in g's three arrays (capacity doubles from 1024). */
static int gen_room(hgen *g, size_t need) {
  if (need <= g->cap) return 0;
  size_t nc = g->cap ? g->cap * 2 : 1024;
  while (nc < need) nc *= 2;
  uint64_t *nd = realloc(g->dig, nc * sizeof *nd);
  if (!nd) return -ENOMEM;
  g->dig = nd;
  float *nl = realloc(g->loss, nc * sizeof *nl);
  if (!nl) return -ENOMEM;
  g->loss = nl;
  uint8_t *nn = realloc(g->cnt, nc);
  if (!nn) return -ENOMEM;
  g->cnt = nn;
  g->cap = nc;
  return 0;
}

static int gen_put(hgen *g, uint64_t step, uint64_t digest, float loss) {
  if (g->len == 0) {
    g->base = step;
  } else if (step < g->base) {
    size_t shift = (size_t)(g->base - step);
    size_t need = g->len + shift;
    if (gen_room(g, need)) return -ENOMEM;
    memmove(g->dig + shift, g->dig, g->len * sizeof *g->dig);
    memmove(g->loss + shift, g->loss, g->len * sizeof *g->loss);
    memmove(g->cnt + shift, g->cnt, g->len);
    memset(g->cnt, 0, shift);
    g->len += shift;
    g->base = step;
  }
  size_t i = (size_t)(step - g->base);
  if (i >= g->len) {
    size_t need = i + 1;
    if (gen_room(g, need)) return -ENOMEM;
    memset(g->cnt + g->len, 0, need - g->len);
    g->len = need;
  }
  if (g->cnt[i] == 0) {
    g->dig[i] = digest;
    g->loss[i] = loss;
    g->cnt[i] = 1;
    return 0;
  }
  if (g->cnt[i] < 255) g->cnt[i]++;
  return g->dig[i] == digest ? 0 : 1;
}

/* ---- small parsers ------------------------------------------------------------ */

/* Value of "key=" in msg (up to the next space) into out. */
static bool kv(const char *msg, const char *end, const char *key, char *out, size_t cap) {
  size_t kl = strlen(key);
  for (const char *p = msg; p + kl < end; p++) {
    if ((p == msg || p[-1] == ' ') && memcmp(p, key, kl) == 0 && p[kl] == '=') {
      const char *v = p + kl + 1, *e = v;
      while (e < end && *e != ' ') e++;
      size_t l = (size_t)(e - v);
      if (l >= cap) l = cap - 1;
      memcpy(out, v, l);
      out[l] = 0;
      return true;
    }
  }
  return false;
}

static bool kv_u64(const char *msg, const char *end, const char *key, uint64_t *v) {
  char b[32];
  if (!kv(msg, end, key, b, sizeof b)) return false;
  char *e;
  *v = strtoull(b, &e, 10);
  return e != b;
}

static bool kv_hex(const char *msg, const char *end, const char *key, uint64_t *v) {
  char b[32];
  if (!kv(msg, end, key, b, sizeof b)) return false;
  char *e;
  *v = strtoull(b, &e, 16);
  return e != b;
}

static bool starts(const char *p, const char *end, const char *lit) {
  size_t l = strlen(lit);
  return (size_t)(end - p) >= l && memcmp(p, lit, l) == 0;
}

/* ---- parsing one log file ------------------------------------------------------- */

typedef struct {
  ea__chaos_run *r;
  struct ea__chaos_history *h;
  int node;
  int start_k;
  size_t next_probe;      /* a log file's lines are in time order */
  int cur[CH_MAX_WPN];    /* current process of each local worker, -1 none */
  uint64_t committed_max; /* newest generation this agent committed */
  uint64_t prepared_max;  /* newest generation this agent prepared */
  uint32_t wpn;
  bool ones_reported;
} pctx;

static int new_proc(pctx *c, int widx, uint64_t pid) {
  struct ea__chaos_history *h = c->h;
  GROW(h->procs, h->nprocs, h->capprocs);
  proc *p = &h->procs[h->nprocs];
  memset(p, 0, sizeof *p);
  p->node = c->node;
  p->start_k = c->start_k;
  p->widx = widx;
  p->pid = pid;
  c->cur[widx] = (int)h->nprocs++;
  return 0;
}

static const char *nodename(const pctx *c) {
  return c->r->nodes[c->node].name;
}

static int on_step(pctx *c, int64_t ts, const char *msg, const char *end) {
  uint64_t widx, gen, rank, world, step, digest;
  char lossb[32];
  if (!kv_u64(msg, end, "worker", &widx) || !kv_u64(msg, end, "gen", &gen) ||
      !kv_u64(msg, end, "rank", &rank) || !kv_u64(msg, end, "world", &world) ||
      !kv_u64(msg, end, "step", &step) || !kv_hex(msg, end, "digest", &digest) ||
      !kv(msg, end, "loss", lossb, sizeof lossb))
    return 0;
  ea__chaos_run *r = c->r;
  struct ea__chaos_history *h = c->h;
  h->records++;
  while (c->next_probe < h->nprobes && h->probe_t[c->next_probe] <= ts) {
    int64_t *b = &h->probe_best[c->next_probe++];
    if (*b < 0 || ts < *b) *b = ts;
  }
  float loss = strtof(lossb, NULL);
  if (widx >= CH_MAX_WPN) return 0;
  if (c->cur[widx] < 0 && new_proc(c, (int)widx, 0) < 0) return -ENOMEM;
  int gi = gen_index(h, gen);
  if (gi < 0) return -ENOMEM;
  hgen *g = &h->gens[gi];
  if (!g->world) g->world = (uint32_t)world;
  if (g->ts_first < 0 || ts < g->ts_first) g->ts_first = ts;
  if (ts > g->ts_last) g->ts_last = ts;
  int d = gen_put(g, step, digest, loss);
  if (d < 0) return d;
  if (d == 1 && !g->digest_reported) {
    g->digest_reported = true;
    ea__chaos_violate(r, EA__I_DIGEST,
                      "generation %" PRIu64 "/%04" PRIx64 " step %" PRIu64 ": %s rank %" PRIu64
                      " logged params digest %016" PRIx64 ", another rank %016" PRIx64,
                      ea_rdzv_gen64_term(gen), (uint64_t)ea_rdzv_gen64_ctrl(gen), step, nodename(c),
                      rank, digest, g->dig[step - g->base]);
  }
  if (rank < MAX_RANKS) {
    if (!g->rank_seen[rank] || step > g->rank_last[rank]) g->rank_last[rank] = step;
    g->rank_seen[rank] = true;
  }
  /* One agent never logs a step of a generation older than one it committed. */
  if (gen < c->committed_max && !c->ones_reported) {
    c->ones_reported = true;
    ea__chaos_violate(r, EA__I_ONE_GEN,
                      "%s logged step %" PRIu64 " of generation %" PRIu64 "/%04" PRIx64
                      " after committing generation %" PRIu64 "/%04" PRIx64,
                      nodename(c), step, ea_rdzv_gen64_term(gen), (uint64_t)ea_rdzv_gen64_ctrl(gen),
                      ea_rdzv_gen64_term(c->committed_max),
                      (uint64_t)ea_rdzv_gen64_ctrl(c->committed_max));
  }
  proc *p = &h->procs[c->cur[widx]];
  if (p->any) {
    if (gen < p->last_gen) {
      ea__chaos_violate(r, EA__I_ONE_GEN,
                        "%s worker %" PRIu64 " ran generation %" PRIu64 "/%04" PRIx64
                        " (step %" PRIu64 ") after generation %" PRIu64 "/%04" PRIx64,
                        nodename(c), widx, ea_rdzv_gen64_term(gen),
                        (uint64_t)ea_rdzv_gen64_ctrl(gen), step, ea_rdzv_gen64_term(p->last_gen),
                        (uint64_t)ea_rdzv_gen64_ctrl(p->last_gen));
    } else if (step <= p->last_step) {
      ea__chaos_violate(r, EA__I_ONCE,
                        "%s worker %" PRIu64 " completed step %" PRIu64 " (generation %" PRIu64
                        ") after step %" PRIu64 ": a step repeated or rolled back",
                        nodename(c), widx, step, ea_rdzv_gen64_term(gen), p->last_step);
    } else if (gen == p->last_gen && step != p->last_step + 1) {
      ea__chaos_violate(r, EA__I_ONCE,
                        "%s worker %" PRIu64 " jumped from step %" PRIu64 " to %" PRIu64
                        " inside generation %" PRIu64,
                        nodename(c), widx, p->last_step, step, ea_rdzv_gen64_term(gen));
    }
  }
  if (!p->nsegs || p->segs[p->nsegs - 1].gen != gen) {
    GROW(p->segs, p->nsegs, p->capsegs);
    p->segs[p->nsegs++] = (seg){.gen = gen, .first = step, .last = step, .last_digest = digest};
  } else {
    p->segs[p->nsegs - 1].last = step;
    p->segs[p->nsegs - 1].last_digest = digest;
  }
  p->any = true;
  p->last_gen = gen;
  p->last_step = step;
  return 0;
}

static int on_generation(pctx *c, int64_t ts, const char *msg, const char *end) {
  ea__chaos_run *r = c->r;
  struct ea__chaos_history *h = c->h;
  char gs[48];
  if (starts(msg, end, "prepare ")) {
    if (!kv(msg, end, "gen", gs, sizeof gs)) return 0;
    uint64_t g = ea__chaos_gen_from_str(gs);
    ea__chaos_node *n = &r->nodes[c->node];
    /* Across restarts on one data dir: kept in the node (max_durable is
     * the polled one; this is the logged one). */
    if (g && g <= c->prepared_max)
      ea__chaos_violate(r, EA__I_GEN_GROWS,
                        "%s prepared generation %s after generation %" PRIu64 "/%04" PRIx64
                        " (agent start %d)",
                        n->name, gs, ea_rdzv_gen64_term(c->prepared_max),
                        (uint64_t)ea_rdzv_gen64_ctrl(c->prepared_max), c->start_k);
    if (g > c->prepared_max) c->prepared_max = g;
    return 0;
  }
  if (!starts(msg, end, "committed ")) return 0;
  if (!kv(msg, end, "gen", gs, sizeof gs)) return 0;
  uint64_t gen = ea__chaos_gen_from_str(gs);
  if (!gen) return 0;
  uint64_t world = 0;
  kv_u64(msg, end, "world", &world);
  char nodes[512] = "", ranks[32] = "";
  kv(msg, end, "nodes", nodes, sizeof nodes);
  kv(msg, end, "ranks", ranks, sizeof ranks);
  uint32_t rank_base = (uint32_t)strtoul(ranks, NULL, 10);
  int sync_rank = -1;
  uint64_t sync_step = 0;
  const char *sp = strstr(msg, "sync=rank ");
  if (sp && sp < end) {
    sync_rank = (int)strtol(sp + 10, NULL, 10);
    const char *at = strstr(sp, " at step ");
    if (at && at < end) sync_step = strtoull(at + 9, NULL, 10);
  }
  int gi = gen_index(h, gen);
  if (gi < 0) return -ENOMEM;
  hgen *g = &h->gens[gi];
  char plan[700];
  snprintf(plan, sizeof plan, "world=%" PRIu64 " nodes=%s sync=%d@%" PRIu64, world, nodes,
           sync_rank, sync_step);
  if (!g->committed) {
    g->committed = true;
    snprintf(g->nodes, sizeof g->nodes, "%s", nodes);
    g->sync_rank = sync_rank;
    g->sync_step = sync_step;
    g->world = (uint32_t)world;
    snprintf(g->plan, sizeof g->plan, "%s", plan);
    snprintf(g->plan_node, sizeof g->plan_node, "%s", nodename(c));
  } else if (strcmp(g->plan, plan) != 0 && !g->plan_reported) {
    g->plan_reported = true;
    ea__chaos_violate(r, EA__I_ONE_PLAN, "generation %s: %s committed {%s} but %s committed {%s}",
                      gs, g->plan_node, g->plan, nodename(c), plan);
  }
  if (g->t_commit < 0 || ts < g->t_commit) g->t_commit = ts;
  if (gen <= c->committed_max)
    ea__chaos_violate(r, EA__I_GEN_GROWS,
                      "%s committed generation %s after generation %" PRIu64 "/%04" PRIx64,
                      nodename(c), gs, ea_rdzv_gen64_term(c->committed_max),
                      (uint64_t)ea_rdzv_gen64_ctrl(c->committed_max));
  if (gen > c->committed_max) c->committed_max = gen;
  /* Is this node the state-sync source?  Rank R lives on node R / wpn. */
  if (sync_rank >= 0 && c->wpn && (uint32_t)sync_rank / c->wpn == rank_base / c->wpn) {
    uint32_t k = (uint32_t)sync_rank % c->wpn;
    if (k < CH_MAX_WPN && c->cur[k] >= 0) {
      proc *p = &h->procs[c->cur[k]];
      g->root_proc = c->cur[k];
      if (p->have_ready && p->ready_gen == gen) {
        g->ready_digest = p->ready_digest;
        g->have_ready = true;
      }
    }
  }
  return 0;
}

static int on_worker(pctx *c, int64_t ts, const char *node_tok, size_t node_len, const char *msg,
                     const char *end) {
  struct ea__chaos_history *h = c->h;
  /* The worker's own line: "n1/w0 worker gen=G rank=R world=W step=S ... sync=X" */
  const char *slash = memchr(node_tok, '/', node_len);
  if (slash) {
    if (!starts(msg, end, "gen=")) return 0;
    uint64_t gen, step;
    if (!kv_u64(msg, end, "gen", &gen) || !kv_u64(msg, end, "step", &step)) return 0;
    int gi = gen_index(h, gen);
    if (gi < 0) return -ENOMEM;
    hgen *g = &h->gens[gi];
    if (!g->have_start) {
      g->have_start = true;
      g->start = step;
    } else if (g->start != step && !g->start_reported) {
      g->start_reported = true;
      ea__chaos_violate(c->r, EA__I_ONCE,
                        "generation %" PRIu64
                        ": ranks started from different steps after the state sync "
                        "(%" PRIu64 " and %" PRIu64 ", %.*s)",
                        ea_rdzv_gen64_term(gen), g->start, step, (int)node_len, node_tok);
    }
    return 0;
  }
  if (!starts(msg, end, "worker ")) return 0;
  const char *p = msg + 7;
  char *e;
  unsigned long k = strtoul(p, &e, 10);
  if (e == p || k >= CH_MAX_WPN) return 0;
  p = e + 1;
  if (starts(p, end, "hello ")) {
    uint64_t pid = 0;
    kv_u64(p, end, "pid", &pid);
    return new_proc(c, (int)k, pid);
  }
  if (starts(p, end, "ready ")) {
    uint64_t gen, step, dig;
    if (c->cur[k] >= 0 && kv_u64(p, end, "gen", &gen) && kv_u64(p, end, "step", &step) &&
        kv_hex(p, end, "digest", &dig)) {
      proc *q = &h->procs[c->cur[k]];
      q->ready_gen = gen;
      q->ready_step = step;
      q->ready_digest = dig;
      q->have_ready = true;
    }
    return 0;
  }
  int kind = -1;
  if (starts(p, end, "failed gen=")) kind = 0;
  if (starts(p, end, "failure: exited")) kind = 1;
  if (kind >= 0) {
    GROW(h->ev, h->nev, h->capev);
    h->ev[h->nev++] = (evrec){.ts = ts, .node = c->node, .kind = kind};
  }
  return 0;
}

static int on_member(pctx *c, int64_t ts, const char *msg, const char *end) {
  struct ea__chaos_history *h = c->h;
  char name[CH_NAME_MAX], state[40];
  if (!kv(msg, end, "name", name, sizeof name) || !kv(msg, end, "state", state, sizeof state))
    return 0;
  char *arrow = strstr(state, "->");
  if (!arrow) return 0;
  *arrow = 0;
  const char *to = arrow + 2;
  if (strcmp(state, to) == 0) return 0; /* refreshes (alive->alive) */
  GROW(h->mem, h->nmem, h->capmem);
  memev *m = &h->mem[h->nmem++];
  m->ts = ts;
  snprintf(m->observer, sizeof m->observer, "%s", nodename(c));
  snprintf(m->member, sizeof m->member, "%s", name);
  snprintf(m->from, sizeof m->from, "%.11s", state);
  snprintf(m->to, sizeof m->to, "%.11s", to);
  return 0;
}

static int on_ckpt(pctx *c, int64_t ts, const char *msg, const char *end) {
  struct ea__chaos_history *h = c->h;
  int kind = -1;
  if (starts(msg, end, "committed ")) kind = 0;
  if (starts(msg, end, "failed ")) kind = 1;
  if (starts(msg, end, "stale ")) kind = 2;
  if (kind < 0) return 0;
  const char *name = strchr(msg, ' ') + 1;
  char nm[64];
  size_t l = strcspn(name, " \n");
  if (l >= sizeof nm) l = sizeof nm - 1;
  memcpy(nm, name, l);
  nm[l] = 0;
  uint64_t s, g;
  if (ea_ckpt_parse_dir_name(nm, &s, &g) < 0) return 0;
  GROW(h->ck, h->nck, h->capck);
  ea__chaos_ckev *k = &h->ck[h->nck++];
  k->t_ms = ts;
  k->step = s;
  k->gen = g;
  k->kind = kind;
  snprintf(k->node, sizeof k->node, "%s", nodename(c));
  if (kind == 1) c->r->ckpt_failed_events++;
  return 0;
}

int ea__chaos_history_parse_file(ea__chaos_run *r, struct ea__chaos_history *h, int node,
                                 int start_k, const char *path, uint64_t *prepared_max) {
  char *buf;
  size_t len;
  int rc = ea__chaos_read_file(path, &buf, &len);
  if (rc < 0) return rc == -ENOENT ? 0 : rc;
  h->log_bytes += len;
  pctx c = {.r = r,
            .h = h,
            .node = node,
            .start_k = start_k,
            .wpn = r->cfg.compute.workers_per_node,
            .prepared_max = *prepared_max};
  for (int k = 0; k < CH_MAX_WPN; k++) c.cur[k] = -1;
  const char *p = buf, *end = buf + len;
  while (p < end && rc == 0) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    /* "<ts> <level> <node> <event> <msg>" */
    if (le - p > 30 && p[4] == '-' && p[10] == 'T') {
      int64_t ts = ea__chaos_parse_ts(p, (size_t)(le - p));
      const char *q = p + 24;
      while (q < le && *q == ' ') q++;
      while (q < le && *q != ' ') q++; /* level */
      while (q < le && *q == ' ') q++;
      const char *nt = q;
      while (q < le && *q != ' ') q++;
      size_t nlen = (size_t)(q - nt);
      while (q < le && *q == ' ') q++;
      const char *ev = q;
      while (q < le && *q != ' ') q++;
      size_t evlen = (size_t)(q - ev);
      if (q < le) q++;
      const char *msg = q;
      if (ts >= 0) {
        if (evlen == 4 && memcmp(ev, "step", 4) == 0)
          rc = on_step(&c, ts, msg, le);
        else if (evlen == 10 && memcmp(ev, "generation", 10) == 0) {
          rc = on_generation(&c, ts, msg, le);
          if (rc == 0 && starts(msg, le, "paused: no quorum")) {
            GROW(h->ev, h->nev, h->capev);
            h->ev[h->nev++] = (evrec){.ts = ts, .node = node, .kind = 3};
          }
        } else if (evlen == 6 && memcmp(ev, "worker", 6) == 0)
          rc = on_worker(&c, ts, nt, nlen, msg, le);
        else if (evlen == 6 && memcmp(ev, "member", 6) == 0)
          rc = on_member(&c, ts, msg, le);
        else if (evlen == 4 && memcmp(ev, "ckpt", 4) == 0)
          rc = on_ckpt(&c, ts, msg, le);
        else if (evlen == 5 && memcmp(ev, "alert", 5) == 0 && starts(msg, le, "checkpoint "))
          rc = on_ckpt(&c, ts, msg + 11, le); /* failed / stale checkpoints are alerts */
        else if ((evlen == 5 && memcmp(ev, "drain", 5) == 0) ||
                 (evlen == 5 && memcmp(ev, "leave", 5) == 0)) {
          if (EA_ARRAY_RESERVE(h->ev, h->capev, h->nev + 1) != 0) rc = -ENOMEM;
          if (rc == 0) h->ev[h->nev++] = (evrec){.ts = ts, .node = node, .kind = 2};
        }
      }
    }
    p = le + 1;
  }
  *prepared_max = c.prepared_max;
  free(buf);
  return rc;
}
