/* Cluster identity: which cluster this agent belongs to, and the gate that
 * keeps an agent started with --join from starting a job of its own.
 *
 * Why.  An agent that could not join its cluster (another key, or none; its
 * seeds down) used to train alone from the cluster's newest checkpoint in
 * the shared checkpoint.dir, number its generations above the cluster's,
 * and delete the cluster's checkpoints by retention (issue 11, item 3).
 * Two things stop that:
 *
 *   - The gate.  An agent started with --join (and without --bootstrap)
 *     gives the rendezvous no view — so it elects no controller and forms
 *     no generation — until it has met another member of its cluster.
 *     While its seeds are unreachable it keeps trying and says so.  Once
 *     met, the gate stays open: later partitions are the quorum rule's.
 *   - The identity.  16 random bytes, created by the elected controller of
 *     a cluster that has none (nobody in its view advertises one), before
 *     the first generation forms; persisted in <data-dir>/cluster-id
 *     (ckpt/cluster.c's format, written atomically) before it is advertised
 *     in the gossip tags as "ea.cluster=HEX"; adopted by every member that
 *     has none from the members it sees.  A controller that has none and
 *     sees none takes the one checkpoint.dir/CLUSTER names when it is bound
 *     to our key (the cluster back on fresh data dirs: every node replaced)
 *     rather than making a new one.  It is bound to the cluster key
 *     (a BLAKE2b keyed hash of the id, unkeyed without a key), so the same
 *     id under another key is another cluster.  Until a node holds an
 *     identity it advertises EA_RDZV_TAG_STARTING: no controller takes it
 *     into a generation, so whoever trains or resumes knows its cluster.
 *     A member advertising another identity is left out of the view handed
 *     to the rendezvous (never elected, never planned) and its control
 *     messages are dropped, both named in one error line.  The checkpoint
 *     directory's DIR/CLUSTER is compared with it before a resume here
 *     (workers.c, from the copy read off the loop) and before every commit
 *     and retention on the committing thread (ckpt_ctl.c).
 *
 * Names are unique (issue 27, item 5): two agents with the same --name were
 * both admitted, `status` showed two rows of it and `drain NAME` acted on
 * whichever it met first.  The rule is checked where a newcomer is known to
 * be the newcomer — at the gate: an agent that joins with --join (without
 * --bootstrap) sees the seed's whole member table, merged by the join's
 * push-pull, in the settle that would open its gate; if a live member
 * (alive or suspect) with another node id holds its --name, it does not
 * open the gate (so it never takes part in a generation), says which member
 * holds the name, leaves (LEFT, so the others mark it at once) and exits 2.
 * The holder goes on untouched.  A restart with the same data dir keeps its
 * node id, so it is never its own rival; a fresh data dir under the name of
 * a member that died a moment ago is refused until that member is declared
 * dead (status shows it; the detection bound is a few seconds) — a
 * supervisor's restart then gets in.  Two agents already past their gates
 * with one name (two clusters bridged later; a --bootstrap node) are not
 * told apart here: each logs an error naming the other, and `drain NAME`
 * (drain.c) refuses a name more than one live member holds.
 */
#include "agent_int.h"

#include "ea_ckpt.h"
#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define BIND_CONTEXT "elastic-agent cluster-id v1"
/* Members warned about (each once): enough for a whole foreign cluster of
 * a usual size; past it the count still grows, the lines stop. */
#define WARNED_MAX 64
/* A join attempt's failure is said on the first and then every tenth: the
 * transport already logs each attempt at warn. */
#define GATE_SAY_EVERY 10
/* A cluster-id that could not be written is tried again after a second:
 * the data dir is local disk, and a full or read-only one is the
 * operator's to fix (the error line says which). */
#define RETRY_MS 1000u

typedef struct {
  uv_work_t w;
  ea__agent *a;
  char path[EA_PATH_MAX + 32];
  ea_ckpt_cluster c;
  char how[EA_NAME_MAX + 32];
  int rc;
  char err[EA_PATH_MAX + 128];
} ident_job;

static void bind_of(const ea__agent_ident *id, ea_ckpt_cluster *c) {
  uint8_t msg[sizeof BIND_CONTEXT + EA_CKPT_CLUSTER_ID_BYTES];
  memcpy(msg, BIND_CONTEXT, sizeof BIND_CONTEXT);
  memcpy(msg + sizeof BIND_CONTEXT, c->id, EA_CKPT_CLUSTER_ID_BYTES);
  crypto_generichash(c->bind, sizeof c->bind, msg, sizeof msg, id->keyed ? id->key : NULL,
                     id->keyed ? sizeof id->key : 0);
  c->keyed = id->keyed;
}

static void hex32(const uint8_t id[EA_CKPT_CLUSTER_ID_BYTES], char out[33]) {
  for (int i = 0; i < EA_CKPT_CLUSTER_ID_BYTES; i++) snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* The identity a member advertises in its tags: true and id filled. */
static bool tag_id(const char *tags, uint8_t id[EA_CKPT_CLUSTER_ID_BYTES]) {
  size_t pl = strlen(EA__TAG_CLUSTER);
  for (const char *p = tags; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == pl + 32 && memcmp(p, EA__TAG_CLUSTER, pl) == 0)
      return ea_ckpt_cluster_id_parse(p + pl, 32, id) == 0;
    p = e ? e + 1 : NULL;
  }
  return false;
}

static void id_str(const uint8_t id[EA_CKPT_CLUSTER_ID_BYTES], char out[EA_CKPT_CLUSTER_STR]) {
  ea_ckpt_cluster c;
  memcpy(c.id, id, sizeof c.id);
  ea_ckpt_cluster_id_str(&c, out);
}

int ea__ident_load(ea__agent *a, const uint8_t *key, bool *usage, char *err, size_t errlen) {
  ea__agent_ident *id = &a->ident;
  const ea__agent_opts *o = a->o;
  id->keyed = key != NULL;
  if (key) memcpy(id->key, key, sizeof id->key);
  id->gated = o->join[0] && !o->bootstrap;
  snprintf(id->path, sizeof id->path, "%s/%s", o->data_dir, EA__CLUSTER_ID_FILE);
  /* Room in the gossip tags for ours: ",ea.cluster=<32 hex>" and the
   * starting flag. */
  size_t need =
      strlen(o->tags) + 2 + strlen(EA__TAG_CLUSTER) + 32 + 1 + strlen(EA_RDZV_TAG_STARTING);
  if (need >= EA_TAGS_MAX) {
    snprintf(err, errlen,
             "--tags: %zu bytes leave no room for the cluster identity in the gossip tags (at most "
             "%zu)",
             strlen(o->tags), (size_t)EA_TAGS_MAX - (need - strlen(o->tags)) - 1);
    *usage = true;
    return -EINVAL;
  }
  ea_ckpt_cluster c;
  char why[EA_PATH_MAX + 200];
  int rc = ea_ckpt_cluster_load(id->path, &c, why, sizeof why);
  if (rc == -ENOENT) {
    id->how = "none yet";
  } else if (rc < 0) {
    snprintf(err, errlen,
             "%s: %s (restore it, or remove it to let this node take its cluster's identity "
             "again)",
             id->path, why);
    return rc;
  } else {
    ea_ckpt_cluster mine = c;
    bind_of(id, &mine);
    if (ea_ckpt_cluster_same(&c, &mine)) {
      id->c = c;
      id->have = true;
      id->how = "persisted";
      ea_ckpt_cluster_id_str(&c, id->str);
      ea_log(EA_LOG_INFO, "cluster", "cluster identity %s (%s)", id->str, id->path);
    } else {
      char s[EA_CKPT_CLUSTER_STR];
      ea_ckpt_cluster_id_str(&c, s);
      id->how = "none yet";
      ea_log(EA_LOG_WARN, "cluster",
             "%s names cluster %s, made %s, and %s: it is not this node's cluster any more; the "
             "node takes the identity of the cluster it joins (or, as its first controller, "
             "makes a new one)",
             id->path, s, c.keyed ? "under a cluster key" : "without a cluster key",
             !id->keyed ? "this node has no key"
             : c.keyed  ? "this node's key is another one"
                        : "this node has a key");
    }
  }
  /* DIR/CLUSTER as it is now (one small read, before the loop). */
  char cpath[EA_PATH_MAX + 16];
  snprintf(cpath, sizeof cpath, "%s/%s", a->ckpt_dir, EA_CKPT_CLUSTER_FILE);
  id->dir_rc = ea_ckpt_cluster_load(cpath, &id->dir_c, why, sizeof why);
  if (id->dir_rc == 0) {
    char s[EA_CKPT_CLUSTER_STR];
    ea_ckpt_cluster_id_str(&id->dir_c, s);
    ea_log(EA_LOG_INFO, "cluster", "checkpoint.dir %s belongs to cluster %s%s", a->ckpt_dir, s,
           id->have ? (ea_ckpt_cluster_same(&id->dir_c, &id->c) ? " (this one)"
                                                                : " (NOT this one: it will not be "
                                                                  "used)")
                    : "");
  }
  return 0;
}

/* Our tags as they should be: the identity once held; the starting flag
 * while none is (library mode also keeps it while a worker has not said
 * hello: workers.c). */
static void advertise(ea__agent *a) {
  ea__agent_ident *id = &a->ident;
  if (!a->tr || a->phase >= EA__PHASE_LEAVING) return;
  if (id->have) {
    char tok[64], hex[33];
    hex32(id->c.id, hex);
    snprintf(tok, sizeof tok, "%s%s", EA__TAG_CLUSTER, hex);
    (void)ea_rdzv_tags_set(a->meta.tags, sizeof a->meta.tags, tok,
                           true); /* room checked at start */
    if (a->mode == EA__MODE_LIBRARY || a->mode == EA__MODE_TORCHRUN) {
      /* its workers (library) or warm interpreters (restart) may still be
       * starting: workers.c decides the tag */
      ea_transport_set_meta(a->tr, &a->meta);
      ea__agent_update_starting(a);
      return;
    }
    (void)ea_rdzv_tags_set(a->meta.tags, sizeof a->meta.tags, EA_RDZV_TAG_STARTING, false);
  }
  ea_transport_set_meta(a->tr, &a->meta);
}

void ea__ident_start_tags(ea__agent *a, char *tags, size_t cap) {
  ea__agent_ident *id = &a->ident;
  if (id->have) {
    char tok[64], hex[33];
    hex32(id->c.id, hex);
    snprintf(tok, sizeof tok, "%s%s", EA__TAG_CLUSTER, hex);
    (void)ea_rdzv_tags_set(tags, cap, tok, true);
  } else {
    (void)ea_rdzv_tags_set(tags, cap, EA_RDZV_TAG_STARTING, true);
  }
  if (id->gated)
    ea_log(EA_LOG_INFO, "cluster",
           "waiting to join the cluster through %s: no job starts on this node before it has "
           "joined (give --bootstrap to start one alone when no seed answers)",
           a->o->join);
}

/* The data dir's file is the agent's, like node-id and generation: written
 * with ea__write_file_atomic, not through ckpt/'s fault layer (whose
 * counted points belong to checkpoint I/O). */
static void persist_work(uv_work_t *w) {
  ident_job *j = (ident_job *)w;
  char text[256];
  int n = ea_ckpt_cluster_format(&j->c, text, sizeof text);
  j->rc = n < 0 ? n : ea__write_file_atomic(j->path, text, (size_t)n, 0600);
  if (j->rc < 0) snprintf(j->err, sizeof j->err, "write %s: %s", j->path, strerror(-j->rc));
}

static void persist_after(uv_work_t *w, int status) {
  ident_job *j = (ident_job *)w;
  ea__agent *a = j->a;
  ea__agent_ident *id = &a->ident;
  id->pending = false;
  int rc = status < 0 ? status : j->rc;
  if (a->phase == EA__PHASE_CLOSING) {
    free(j);
    return;
  }
  char s[EA_CKPT_CLUSTER_STR];
  ea_ckpt_cluster_id_str(&j->c, s);
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "cluster", "cannot persist cluster identity %s: %s; retrying in %u ms", s,
           j->err, RETRY_MS);
    id->retry_ms = ea__agent_mono_ms() + RETRY_MS;
    free(j);
    return;
  }
  id->c = j->c;
  id->have = true;
  memcpy(id->str, s, sizeof id->str);
  snprintf(id->how_buf, sizeof id->how_buf, "%s", j->how);
  id->how = id->how_buf;
  ea_log(EA_LOG_INFO, "cluster", "cluster identity %s %s, written to %s", s, j->how, j->path);
  free(j);
  if (a->ckpt_ctl) ea__ckpt_ctl_set_cluster(a->ckpt_ctl, &id->c);
  advertise(a);
  ea__agent_settle_soon(a); /* the view may now leave out members of other clusters */
}

static void persist(ea__agent *a, const uint8_t cid[EA_CKPT_CLUSTER_ID_BYTES], const char *how) {
  ea__agent_ident *id = &a->ident;
  ident_job *j = calloc(1, sizeof *j);
  if (!j) return;
  j->a = a;
  memcpy(j->c.id, cid, EA_CKPT_CLUSTER_ID_BYTES);
  bind_of(id, &j->c);
  snprintf(j->path, sizeof j->path, "%s", id->path);
  snprintf(j->how, sizeof j->how, "%s", how);
  if (uv_queue_work(&a->loop, &j->w, persist_work, persist_after) < 0) {
    free(j);
    return;
  }
  id->pending = true;
}

static bool warned(ea__agent_ident *id, const ea_node_id *n) {
  for (uint32_t i = 0; i < id->nwarned; i++)
    if (ea_node_id_cmp(&id->warned[i], n) == 0) return true;
  if (id->nwarned < WARNED_MAX) id->warned[id->nwarned++] = *n;
  return false;
}

bool ea__ident_foreign(ea__agent *a, const ea_member *m) {
  uint8_t cid[EA_CKPT_CLUSTER_ID_BYTES];
  return a->ident.have && ea_node_id_cmp(&m->id, &a->id) != 0 && tag_id(m->meta.tags, cid) &&
         memcmp(cid, a->ident.c.id, sizeof cid) != 0;
}

/* A live member other than us that holds our --name, or NULL. */
static const ea_member *name_holder(const ea__agent *a, const ea_member *ms, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((ms[i].state == EA_STATE_ALIVE || ms[i].state == EA_STATE_SUSPECT) &&
        ea_node_id_cmp(&ms[i].id, &a->id) != 0 && strcmp(ms[i].meta.name, a->o->name) == 0)
      return &ms[i];
  return NULL;
}

/* The name rule (header comment): true when this agent is refused (it is
 * leaving; hand the rendezvous nothing). */
static bool name_refused(ea__agent *a, const ea_member *ms, size_t n) {
  ea__agent_ident *id = &a->ident;
  if (a->phase >= EA__PHASE_STOPPING) return id->gated;
  const ea_member *h = name_holder(a, ms, n);
  if (!h) return false;
  char addr[64], hid[33];
  ea_addr_str(&h->meta.gossip, addr, sizeof addr);
  ea_node_id_hex(&h->id, hid);
  if (!id->gated) {
    if (!warned(id, &h->id))
      ea_log(EA_LOG_ERROR, "cluster",
             "member %s (id %.8s, %s) has this node's name too; `drain %s` is refused while "
             "both are alive: restart one of them with another --name",
             a->o->name, hid, addr, a->o->name);
    return false;
  }
  ea_log(EA_LOG_ERROR, "cluster",
         "refused: the name '%s' is held by live member id %s (%s, %s) of the cluster joined "
         "through %s; names must be unique (give this node another --name, or wait until that "
         "member is gone); leaving, exit status 2",
         a->o->name, hid, addr, ea_member_state_str(h->state), a->o->join);
  a->exit_status = EA__EXIT_USAGE;
  ea__agent_stop_and_leave(a, false, "its name is taken");
  return true;
}

bool ea__ident_settle(ea__agent *a, const ea_member *ms, size_t n, ea_member **view,
                      size_t *nview) {
  ea__agent_ident *id = &a->ident;
  *view = NULL;
  *nview = n;
  if (name_refused(a, ms, n)) return false;
  /* No identity yet: take the one of the cluster we joined — the lowest id
   * advertising one, the member the election would name among them. */
  if (!id->have && !id->pending) {
    const ea_member *from = NULL;
    uint8_t cid[EA_CKPT_CLUSTER_ID_BYTES], best[EA_CKPT_CLUSTER_ID_BYTES];
    for (size_t i = 0; i < n; i++) {
      if (ea_node_id_cmp(&ms[i].id, &a->id) == 0 || ms[i].state != EA_STATE_ALIVE) continue;
      if (!tag_id(ms[i].meta.tags, cid)) continue;
      if (!from || ea_node_id_cmp(&ms[i].id, &from->id) < 0) {
        from = &ms[i];
        memcpy(best, cid, sizeof best);
      }
    }
    if (from) {
      char how[EA_NAME_MAX + 32];
      snprintf(how, sizeof how, "adopted from %s", ea__agent_member_name(from));
      persist(a, best, how);
    }
  }
  /* Members of other clusters: out of the view. */
  *view = NULL;
  *nview = n;
  size_t k = 0;
  bool other = false; /* another alive member of our cluster (or of none yet) */
  for (size_t i = 0; i < n; i++) {
    if (ea__ident_foreign(a, &ms[i])) {
      if (!*view) {
        *view = malloc(n * sizeof **view);
        if (*view) memcpy(*view, ms, i * sizeof **view);
        k = i;
      }
      id->foreign_seen++;
      if (!warned(id, &ms[i].id)) {
        uint8_t cid[EA_CKPT_CLUSTER_ID_BYTES];
        char s[EA_CKPT_CLUSTER_STR], addr[64];
        (void)tag_id(ms[i].meta.tags, cid);
        id_str(cid, s);
        ea_addr_str(&ms[i].meta.gossip, addr, sizeof addr);
        ea_log(EA_LOG_ERROR, "cluster",
               "member %s (%s) belongs to cluster %s, this node to cluster %s (%s): refusing it "
               "(it is taken into no generation here and its control messages are dropped); a "
               "node of another cluster is joining through the same seeds",
               ea__agent_member_name(&ms[i]), addr, s, id->str, id->path);
      }
      continue;
    }
    if (ea_node_id_cmp(&ms[i].id, &a->id) != 0 && ms[i].state == EA_STATE_ALIVE) other = true;
    if (*view) (*view)[k++] = ms[i];
  }
  if (*view) *nview = k;
  if (id->gated && other) {
    id->gated = false;
    ea_log(EA_LOG_INFO, "cluster",
           "joined the cluster (through %s): this node may now take part in its generations",
           a->o->join);
  }
  return !id->gated;
}

void ea__ident_after_elect(ea__agent *a, const ea_member *ms, size_t n) {
  ea__agent_ident *id = &a->ident;
  if (id->have || id->pending || id->gated || a->phase != EA__PHASE_RUNNING) return;
  const ea_election *e = ea_rdzv_election(a->rdzv);
  if (!e || !e->have || ea_node_id_cmp(&e->controller, &a->id) != 0) return;
  uint8_t cid[EA_CKPT_CLUSTER_ID_BYTES];
  for (size_t i = 0; i < n; i++)
    if (ms[i].state == EA_STATE_ALIVE && tag_id(ms[i].meta.tags, cid)) return; /* adopt instead */
  /* A checkpoint.dir that names an identity bound to our key is this
   * cluster's, come back on fresh data dirs (every node replaced, as after
   * losing all spot instances): take that identity, and the directory is
   * resumed from as before.  Under another key (or none), it is not ours. */
  if (id->dir_rc == 0) {
    ea_ckpt_cluster mine = id->dir_c;
    bind_of(id, &mine);
    if (ea_ckpt_cluster_same(&mine, &id->dir_c)) {
      char how[EA_PATH_MAX + 64];
      snprintf(how, sizeof how, "adopted from %s/%s (bound to this cluster's %s)", a->ckpt_dir,
               EA_CKPT_CLUSTER_FILE, id->keyed ? "key" : "lack of a key");
      persist(a, id->dir_c.id, how);
      return;
    }
  }
  if (getrandom(cid, sizeof cid, 0) != (ssize_t)sizeof cid) {
    ea_log(EA_LOG_ERROR, "cluster", "cannot make a cluster identity: getrandom failed");
    return;
  }
  persist(a, cid, "created (this node is the first controller of a cluster that had none)");
}

void ea__ident_tick(ea__agent *a) {
  ea__agent_ident *id = &a->ident;
  if (!id->retry_ms || id->have || id->pending || ea__agent_mono_ms() < id->retry_ms) return;
  id->retry_ms = 0;
  ea__agent_settle_soon(a); /* adopts or creates again */
}

void ea__ident_seed_is_self(ea__agent *a) {
  ea__agent_ident *id = &a->ident;
  if (!id->gated) return;
  id->gated = false;
  ea_log(EA_LOG_INFO, "cluster",
         "every seed of --join %s is this node and it remembers no peer: it starts the cluster, "
         "as without --join",
         a->o->join);
  ea__agent_settle_soon(a);
}

void ea__ident_join_failed(ea__agent *a, const char *why) {
  ea__agent_ident *id = &a->ident;
  if (!id->gated) return;
  if (id->join_failures++ % GATE_SAY_EVERY != 0) return;
  ea_log(EA_LOG_WARN, "cluster",
         "still waiting to join the cluster: no seed of %s answered (%" PRIu32
         " attempt%s; last: %s); no job runs on this node until one does (--bootstrap starts one "
         "alone)",
         a->o->join, id->join_failures, id->join_failures == 1 ? "" : "s", why ? why : "?");
}

bool ea__ident_ckpt_refused(ea__agent *a, const char *op, char *why, size_t cap) {
  ea__agent_ident *id = &a->ident;
  /* Only a CLUSTER that is there and does not parse is refused here (as the
   * commit path does); a directory that cannot be read at all fails the
   * resume and the shard writes on its own, with its own error. */
  if (!id->have || (id->dir_rc != 0 && id->dir_rc != -EBADMSG)) return false;
  if (id->dir_rc != 0) {
    snprintf(why, cap,
             "refusing to %s checkpoint.dir %s: its cluster identity %s/%s cannot be read (%s)", op,
             a->ckpt_dir, a->ckpt_dir, EA_CKPT_CLUSTER_FILE, strerror(-id->dir_rc));
    ea__ident_refusal(a, why);
    return true;
  }
  if (ea_ckpt_cluster_match(a->ckpt_dir, &id->dir_c, &id->c, op, why, cap) == 0) return false;
  ea__ident_refusal(a, why);
  return true;
}

void ea__ident_refusal(ea__agent *a, const char *why) {
  ea__agent_ident *id = &a->ident;
  id->refusals++;
  snprintf(id->last_refusal, sizeof id->last_refusal, "%s", why);
  ea__agent_alert(a, EA__ALERT_CHECKPOINT_FAILED, EA__SEV_CRITICAL, "cluster", "checkpoint %s",
                  why);
}

void ea__ident_dir_seen(ea__agent *a, int rc, const ea_ckpt_cluster *c) {
  a->ident.dir_rc = rc;
  if (rc == 0) a->ident.dir_c = *c;
}

void ea__ident_status(ea__agent *a, ea_jb *b, json_t *doc) {
  ea__agent_ident *id = &a->ident;
  json_t *o = ea_jb_obj(b, doc, "cluster");
  ea_jb_str(b, o, "id", id->have ? id->str : "");
  ea_jb_str(b, o, "how", id->how ? id->how : "");
  ea_jb_str(b, o, "state", id->gated ? "waiting to join" : id->have ? "member" : "no identity yet");
  ea_jb_str(b, o, "join", a->o->join);
  ea_jb_bool(b, o, "bootstrap", a->o->bootstrap);
  ea_jb_u64(b, o, "join_failures", id->join_failures);
  ea_jb_u64(b, o, "foreign_members_seen", id->foreign_seen);
  char s[EA_CKPT_CLUSTER_STR] = "";
  if (id->dir_rc == 0) ea_ckpt_cluster_id_str(&id->dir_c, s);
  ea_jb_str(b, o, "checkpoint_dir_cluster", s);
  ea_jb_u64(b, o, "checkpoint_dir_refusals", id->refusals);
  ea_jb_str(b, o, "last_refusal", id->last_refusal);
}
