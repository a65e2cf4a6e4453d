/* spare.c — spare nodes (compute.max_nodes): this node's health check
 * while it waits, the `spares` section of status, and the controller's
 * `no_spare` alert.
 *
 * Which nodes are spares, and which one is taken first, is the rendezvous
 * core's (ea_rdzv_spares: the ready one with the lowest node id, the same
 * on every controller); this file adds what only an agent can know.
 *
 * The health check.  A node in no generation checks, every
 * EA__SPARE_CHECK_MS on libuv's thread pool, what would break it the
 * moment it is taken in, so that a broken spare is never swapped in for a
 * lost member:
 *   - its checkpoint directory (checkpoint.dir, as resolved at start) takes
 *     a write of CHECK_BYTES, an fsync and an unlink — the writer's own
 *     path (a missing, read-only, full or dead file system fails it);
 *   - restart mode: a port for rank 0's store (MASTER_PORT) can be bound
 *     on the advertised address (ea__launch_free_port, as at READY).
 * A library or built-in worker binds its own ports when it starts, before
 * its hello; a worker that died is restarted and says hello again
 * (EA_RDZV_TAG_STARTING), so a node whose worker is not up is not ready
 * either.  A failed check sets EA_RDZV_TAG_UNFIT in this node's gossip
 * tags, which keeps it out of every generation as a joiner, logs one
 * warning naming what failed, and shows in status; the next check that
 * passes clears it.  A member is not checked (its checkpoint path reports
 * its own errors) and carries no such tag.
 *
 * The alert.  As controller: when a member of the formed generation is
 * lost (it is in the previous formed generation and not in the new one:
 * dead, left or drained) in a job that has run at max_nodes, and no ready spare
 * is left, `no_spare` fires (a condition: subject "spares"); it resolves
 * once a ready spare is there again.  A controller that loses the role
 * resolves what it raised.
 */
#include "agent_int.h"

#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK_BYTES (1u << 20)
#define SUBJECT "spares"

struct ea__agent_spare {
  /* the health check */
  bool busy;                   /* a check is on the pool */
  bool checked;                /* one has finished since start */
  bool fit;                    /* its verdict */
  char why[EA_PATH_MAX + 256]; /* what failed, or what passed */
  uint64_t next_ms;            /* the next check is due (loop clock) */
  uint64_t at_ms;              /* when the last one finished */
  uint64_t checks, failures;
  /* the alert (controller) */
  bool full_seen;     /* a running generation held max_nodes nodes */
  uint64_t plan_term; /* the formed generation last looked at */
  ea_node_id *plan_ids;
  uint32_t nplan;
  char lost[EA_NAME_MAX]; /* the member whose loss fired it */
};

typedef struct {
  uv_work_t w;
  ea__agent *a;
  char dir[EA_PATH_MAX];
  bool port; /* restart mode: bind a MASTER_PORT */
  ea_addr advertise;
  bool fit;
  char why[EA_PATH_MAX + 256];
} check_job;

static void check_dir(check_job *j) {
  if (!j->dir[0]) return;
  char path[EA_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/.ea-spare-check-%ld", j->dir, (long)getpid());
  char *buf = calloc(1, CHECK_BYTES);
  if (!buf) {
    j->fit = false;
    snprintf(j->why, sizeof j->why, "out of memory for the checkpoint directory's probe");
    return;
  }
  /* The writer makes the directory itself (ea_ckpt_prepare: one level). */
  const char *what = "mkdir";
  int e = mkdir(j->dir, 0755) < 0 && errno != EEXIST ? errno : 0;
  int fd = -1;
  if (!e) {
    what = "open";
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) e = errno;
  }
  if (!e) {
    ssize_t w = write(fd, buf, CHECK_BYTES);
    if (w != (ssize_t)CHECK_BYTES) {
      what = "write";
      e = w < 0 ? errno : ENOSPC;
    } else if (fsync(fd) < 0) {
      what = "fsync";
      e = errno;
    }
    close(fd);
    unlink(path);
  }
  free(buf);
  if (e) {
    j->fit = false;
    snprintf(j->why, sizeof j->why, "checkpoint directory %s: %s of a %u MiB probe failed: %s",
             j->dir, what, CHECK_BYTES >> 20, strerror(e));
  }
}

static void check_work(uv_work_t *w) {
  check_job *j = w->data;
  j->fit = true;
  check_dir(j);
  if (j->fit && j->port) {
    uint16_t port = 0;
    int rc = ea__launch_free_port(&j->advertise, 0, &port);
    if (rc < 0) {
      char as[64];
      ea_addr_str(&j->advertise, as, sizeof as);
      j->fit = false;
      snprintf(j->why, sizeof j->why, "no port can be bound on %s for rank 0's store: %s", as,
               strerror(-rc));
    }
  }
  if (j->fit)
    snprintf(j->why, sizeof j->why, "%s%s%s", j->dir[0] ? "checkpoint directory writable" : "",
             j->dir[0] && j->port ? ", " : "", j->port ? "a MASTER_PORT can be bound" : "");
}

static void set_unfit_tag(ea__agent *a, bool on) {
  if (!a->tr || ea_rdzv_tags_have(a->meta.tags, EA_RDZV_TAG_UNFIT) == on) return;
  if (ea_rdzv_tags_set(a->meta.tags, sizeof a->meta.tags, EA_RDZV_TAG_UNFIT, on) < 0) {
    ea_log(EA_LOG_WARN, "spare",
           "no room in the gossip tags for %s: a controller may take this node in although its "
           "health check failed",
           EA_RDZV_TAG_UNFIT);
    return;
  }
  ea_transport_set_meta(a->tr, &a->meta);
}

static void check_after(uv_work_t *w, int status) {
  check_job *j = w->data;
  ea__agent *a = j->a;
  struct ea__agent_spare *s = a->spare;
  s->busy = false;
  if (status == 0 && a->phase < EA__PHASE_CLOSING) {
    bool was_fit = !s->checked || s->fit;
    s->checked = true;
    s->checks++;
    s->at_ms = ea__agent_now_ms(a);
    s->fit = j->fit;
    snprintf(s->why, sizeof s->why, "%s", j->why);
    if (!j->fit) {
      s->failures++;
      if (was_fit)
        ea_log(EA_LOG_WARN, "spare",
               "health check failed: %s; this node is taken into no generation until it passes "
               "(checked every %u s)",
               j->why, EA__SPARE_CHECK_MS / 1000);
    } else if (!was_fit) {
      ea_log(EA_LOG_INFO, "spare", "health check passes again (%s): this node can be taken in",
             j->why);
    }
    /* a member carries no tag: it may have been taken in meanwhile */
    set_unfit_tag(a, !j->fit && !a->run.active && !a->prep.active);
  }
  free(j);
}

static void check_start(ea__agent *a, uint64_t now) {
  struct ea__agent_spare *s = a->spare;
  check_job *j = calloc(1, sizeof *j);
  if (!j) return;
  j->a = a;
  j->w.data = j;
  /* Restart mode: the program keeps its own checkpoints, wherever it likes. */
  if (a->mode != EA__MODE_TORCHRUN && a->o->cfg.checkpoint.save_interval_steps)
    snprintf(j->dir, sizeof j->dir, "%s", a->ckpt_dir);
  j->port = a->mode == EA__MODE_TORCHRUN;
  j->advertise = *ea_transport_addr(a->tr);
  s->next_ms = now + EA__SPARE_CHECK_MS;
  if (uv_queue_work(&a->loop, &j->w, check_work, check_after) < 0) {
    free(j);
    return;
  }
  s->busy = true;
}

/* The core's list, malloc'd (NULL and *n 0 when there are none, or no
 * memory), and the count of each state into by (4 entries) when given. */
static ea_rdzv_spare *spares_get(ea__agent *a, size_t *n, uint32_t *by) {
  if (by) memset(by, 0, 4 * sizeof *by);
  *n = ea_rdzv_spares(a->rdzv, NULL, 0);
  ea_rdzv_spare *sp = *n ? malloc(*n * sizeof *sp) : NULL;
  *n = sp ? ea_rdzv_spares(a->rdzv, sp, *n) : 0;
  for (size_t i = 0; by && i < *n; i++)
    if (sp[i].state < 4) by[sp[i].state]++;
  return sp;
}

/* ---- the alert (controller) ----------------------------------------------- */

static void alert_tick(ea__agent *a) {
  struct ea__agent_spare *s = a->spare;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  if (!st.controller) {
    if (ea__agent_alert_firing(a, EA__ALERT_NO_SPARE, SUBJECT))
      ea__agent_alert_resolve(a, EA__ALERT_NO_SPARE, SUBJECT,
                              "no_spare resolved: this node is no longer the controller");
    s->plan_term = 0;
    return;
  }
  /* The formed generation, not this node's running plan: a spare can be
   * the controller. */
  uint32_t maxn = a->o->cfg.compute.max_nodes;
  size_t n;
  uint32_t by[4];
  free(spares_get(a, &n, by));
  size_t ready = by[EA_RDZV_SPARE_READY];
  ea_rdzv_gen g;
  size_t nf = ea_rdzv_formed_ids(a->rdzv, &g, NULL, 0);
  if (g.term && g.term != s->plan_term) {
    ea_node_id *ids = malloc((nf ? nf : 1) * sizeof *ids);
    if (!ids) return; /* tried again next tick */
    nf = ea_rdzv_formed_ids(a->rdzv, &g, ids, nf);
    /* A member of the generation before, not in this one: lost. */
    const char *lost = NULL;
    uint32_t nlost = 0;
    for (uint32_t i = 0; s->plan_term && i < s->nplan; i++) {
      bool kept = false;
      for (size_t k = 0; k < nf && !kept; k++) kept = ea_node_id_cmp(&ids[k], &s->plan_ids[i]) == 0;
      if (!kept && nlost++ == 0)
        lost = ea__agent_member_name(ea__agent_find_member(a, &s->plan_ids[i]));
    }
    if (nlost && s->full_seen && ready == 0) {
      snprintf(s->lost, sizeof s->lost, "%s", lost && lost[0] ? lost : "?");
      ea__agent_alert_kv(
          a, EA__ALERT_NO_SPARE, EA__SEV_WARNING, SUBJECT,
          (ea_log_kv[]){EA_KV_S("lost", s->lost), EA_KV_U("nodes", nf), EA_KV_U("max_nodes", maxn)},
          3, "no spare left: %s lost; generation %" PRIu64 " runs %zu of max_nodes %u nodes%s",
          s->lost, g.term, nf, maxn, nf < maxn ? "" : "; the next loss shrinks the world");
    }
    free(s->plan_ids);
    s->plan_ids = ids;
    s->nplan = (uint32_t)nf;
    s->plan_term = g.term;
    if (nf >= maxn) s->full_seen = true;
  }
  if (ready > 0 && ea__agent_alert_firing(a, EA__ALERT_NO_SPARE, SUBJECT))
    ea__agent_alert_resolve(a, EA__ALERT_NO_SPARE, SUBJECT,
                            "no_spare resolved: %zu ready spare%s (after %s was lost)", ready,
                            ready == 1 ? "" : "s", s->lost);
}

/* ---- the tick, status ------------------------------------------------------ */

void ea__agent_spare_tick(ea__agent *a) {
  if (!a->rdzv || !a->tr || a->phase >= EA__PHASE_STOPPING) return;
  if (!a->spare) {
    a->spare = calloc(1, sizeof *a->spare);
    if (!a->spare) return;
  }
  struct ea__agent_spare *s = a->spare;
  uint64_t now = ea__agent_now_ms(a);
  bool member = a->run.active || a->prep.active;
  if (a->wpn > 0 && !member && !s->busy && now >= s->next_ms) check_start(a, now);
  if (member) set_unfit_tag(a, false);
  alert_tick(a);
}

void ea__agent_spare_free(ea__agent *a) {
  if (!a->spare) return;
  free(a->spare->plan_ids);
  free(a->spare);
  a->spare = NULL;
}

/* What is ready on this node for the moment it is taken in (the mode's
 * readiness, docs/operations.md "Spares"). */
static const char *readiness(ea__agent *a, char *buf, size_t cap) {
  if (a->mode == EA__MODE_LIBRARY) {
    uint32_t hello = 0;
    for (uint32_t k = 0; k < a->wpn; k++) hello += a->w[k].hello;
    if (hello == a->wpn)
      snprintf(buf, cap,
               "every worker said hello (its program imported torch and built its model): "
               "taking it in costs the state broadcast");
    else
      snprintf(buf, cap, "%u of %u workers said hello: not taken in before all have", hello,
               a->wpn);
  } else if (a->mode == EA__MODE_TORCHRUN) {
    uint32_t warm = 0;
    for (uint32_t k = 0; a->sup && k < a->wpn; k++) {
      ea__sup_spare sp;
      ea__sup_spare_get(a->sup, k, &sp);
      warm += sp.kept && !sp.off && sp.ready;
    }
    if (warm == a->wpn)
      snprintf(buf, cap,
               "a warm interpreter per local rank (compute.preload imported); the program "
               "itself starts when it has a rank");
    else
      snprintf(buf, cap,
               "%u of %u local ranks have a warm interpreter; the program starts when it has "
               "a rank",
               warm, a->wpn);
  } else {
    uint32_t up = 0;
    for (uint32_t k = 0; k < a->wpn; k++) up += a->w[k].hello;
    snprintf(buf, cap, "%u of %u built-in workers up", up, a->wpn);
  }
  return buf;
}

void ea__agent_spare_status(ea__agent *a, ea_jb *b, json_t *doc) {
  json_t *o = ea_jb_obj(b, doc, "spares");
  size_t n;
  uint32_t by[4];
  ea_rdzv_spare *sp = spares_get(a, &n, by);
  ea_jb_int(b, o, "max_nodes", a->o->cfg.compute.max_nodes);
  ea_jb_u64(b, o, "total", n);
  ea_jb_u64(b, o, "ready", by[EA_RDZV_SPARE_READY]);
  json_t *arr = ea_jb_arr(b, o, "nodes"); /* in the order they would be taken */
  size_t me = n;
  for (size_t i = 0; i < n; i++) {
    json_t *x = ea_jb_obj(b, arr, NULL);
    char hex[33];
    ea_node_id_hex(&sp[i].id, hex);
    ea_jb_str(b, x, "name", sp[i].name);
    ea_jb_str(b, x, "id", hex);
    ea_jb_str(b, x, "state", ea_rdzv_spare_state_str(sp[i].state));
    if (ea_node_id_cmp(&sp[i].id, &a->id) == 0) me = i;
  }
  /* this node */
  json_t *self = ea_jb_obj(b, o, "self");
  ea_jb_bool(b, self, "spare", me < n);
  if (me < n) {
    ea_jb_str(b, self, "state", ea_rdzv_spare_state_str(sp[me].state));
    ea_jb_u64(b, self, "in_line", me + 1); /* 1: the first taken */
  }
  free(sp);
  char buf[256];
  if (a->wpn) ea_jb_str(b, self, "readiness", readiness(a, buf, sizeof buf));
  struct ea__agent_spare *s = a->spare;
  json_t *c = ea_jb_obj(b, self, "check");
  if (s && s->checked) {
    ea_jb_bool(b, c, "ok", s->fit);
    ea_jb_str(b, c, "detail", s->why);
    ea_jb_fixed(b, c, "age_s", (double)(ea__agent_now_ms(a) - s->at_ms) / 1000.0, 1);
  } else {
    ea_jb_null(b, c, "ok");
  }
  ea_jb_u64(b, c, "checks", s ? s->checks : 0);
  ea_jb_u64(b, c, "failures", s ? s->failures : 0);
}

void ea__agent_spare_counts(ea__agent *a, uint32_t by_state[4], bool *self) {
  size_t n;
  ea_rdzv_spare *sp = spares_get(a, &n, by_state);
  *self = false;
  for (size_t i = 0; i < n; i++) *self = *self || ea_node_id_cmp(&sp[i].id, &a->id) == 0;
  free(sp);
}
