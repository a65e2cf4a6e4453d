/* Drain, stop, leave, close: how a running agent ends.
 *
 * Shutdown is a drain, then a graceful leave.  SIGTERM/SIGINT (a spot
 * reclaim, a scale-in) or `elastic-agent drain` asks the controller to
 * re-form the group without this node; when it has (the DRAINED order) or
 * after the rendezvous timeout, the workers are stopped, the transport
 * broadcasts LEFT (bounded at 1 s), every handle is closed and uv_run
 * returns because nothing is left.  A second signal skips the drain
 * (workers are killed), a third skips the leave.  A node that no
 * generation can form without (fewer other nodes than min_nodes) stops at
 * once instead of waiting out the timeout.
 *
 * The phases only move forward (ea__agent_phase), so every step here is
 * idempotent and safe to reach from any callback.
 */
#include "agent_int.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

void ea__agent_shutdown(ea__agent *a) {
  if (a->phase == EA__PHASE_CLOSING) return;
  a->phase = EA__PHASE_CLOSING;
  if (a->o->smoke) ea__smoke_close(a); /* what its report needs, before it goes */
  ea__agent_metrics_close(a);
  ea__agent_notice_close(a);
  ea__agent_preempt_close(a);
  ea__agent_alerts_close(a);
  if (a->admin) ea__admin_close(a->admin, NULL, NULL);
  a->admin = NULL;
  if (a->ctl) ea__ctl_close(a->ctl, NULL, NULL);
  a->ctl = NULL;
  /* A shard write in flight stops at its next chunk and removes its file;
   * a commit in flight is finished (never cut between its renames). */
  if (a->ckpt_svc) ea__ckpt_svc_close(a->ckpt_svc, NULL, NULL);
  a->ckpt_svc = NULL;
  if (a->ckpt_ctl) ea__ckpt_ctl_close(a->ckpt_ctl, NULL, NULL);
  a->ckpt_ctl = NULL;
  if (a->sup) ea__sup_free(a->sup, NULL, NULL); /* kills what still runs */
  a->sup = NULL;
  ea__agent_job_close(a); /* the launcher, the output capture, the job */
  if (a->tr) ea_transport_close(a->tr, NULL, NULL);
  a->tr = NULL;
  if (a->handles_open) {
    a->handles_open = false;
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->settle, NULL);
    uv_close((uv_handle_t *)&a->peers_timer, NULL);
    uv_close((uv_handle_t *)&a->rdzv_timer, NULL);
    uv_close((uv_handle_t *)&a->drain_timer, NULL);
    uv_close((uv_handle_t *)&a->tick, NULL);
  }
}

static void left_done(void *ctx) {
  ea__agent *a = ctx;
  ea_log(EA_LOG_INFO, "leave", "left the cluster; shutting down");
  ea__agent_shutdown(a);
}

void ea__agent_leave_now(ea__agent *a) {
  if (a->phase >= EA__PHASE_LEAVING) return;
  a->phase = EA__PHASE_LEAVING;
  if (a->handles_open) uv_timer_stop(&a->drain_timer);
  if (a->tr)
    ea_transport_leave(a->tr, left_done, a);
  else
    ea__agent_shutdown(a);
}

/* Stop the workers (STOP, or SIGKILL when kill), then leave once they have
 * all exited (on_worker_exit, workers.c). */
void ea__agent_stop_and_leave(ea__agent *a, bool kill, const char *why) {
  if (a->phase >= EA__PHASE_STOPPING) return;
  a->phase = EA__PHASE_STOPPING;
  if (a->handles_open) uv_timer_stop(&a->drain_timer);
  if (!ea__agent_workers_running(a)) {
    ea__agent_leave_now(a);
    return;
  }
  ea_log(EA_LOG_INFO, "leave", "%s the workers (%s)", kill ? "killing" : "stopping", why);
  for (uint32_t k = 0; k < a->wpn; k++) {
    if (kill)
      ea__sup_kill(a->sup, k);
    else
      ea__sup_stop(a->sup, k);
  }
}

static void on_drain_timeout(uv_timer_t *h) {
  ea__agent *a = h->data;
  if (a->phase != EA__PHASE_DRAINING) return;
  ea_log(EA_LOG_WARN, "drain",
         "the group did not re-form without this node within its deadline "
         "(runtime.rendezvous_timeout_seconds %u); leaving anyway",
         a->o->cfg.runtime.rendezvous_timeout_seconds);
  ea__agent_stop_and_leave(a, false, "drain deadline");
}

/* Alive members other than us that could train (not observers). */
static uint32_t others_alive(ea__agent *a) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  uint32_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (ms[i].state == EA_STATE_ALIVE && ea_node_id_cmp(&ms[i].id, &a->id) != 0 &&
        strcmp(ms[i].meta.role, "observer") != 0)
      k++;
  return k;
}

/* Drain this node: the controller re-forms the group without it (the step
 * in flight is the only work lost), then DRAINED stops the workers and we
 * leave.  core_knows: the core already drains (a DRAIN message, or it was
 * told by the caller). */
void ea__agent_begin_drain(ea__agent *a, const char *why, bool core_knows) {
  if (a->phase != EA__PHASE_RUNNING) return;
  a->phase = EA__PHASE_DRAINING;
  a->draining_seen = true;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  bool in_gen =
      st.phase == EA_RDZV_RUNNING || st.phase == EA_RDZV_FAILED || st.phase == EA_RDZV_PREPARED;
  uint32_t others = a->tr ? others_alive(a) : 0, minn = a->o->cfg.compute.min_nodes;
  /* With the checkpoint before a mass preemption (preempt.c) the controller
   * decides even then: it commits one first, then lets this node go. */
  uint32_t last_ms = ea__agent_preempt_grace_ms(a);
  if (!a->sup || (in_gen && others < minn && !last_ms)) {
    if (a->sup)
      ea_log(EA_LOG_INFO, "drain",
             "%s: no generation can form without this node (%u other node%s alive, min_nodes "
             "%u): stopping now",
             why, others, others == 1 ? "" : "s", minn);
    ea__agent_stop_and_leave(a, false, why);
    return;
  }
  /* The controller may hold the group for a last checkpoint first: the
   * deadline leaves it that long and 2 s more. */
  uint64_t deadline_ms = (uint64_t)a->o->cfg.runtime.rendezvous_timeout_seconds * 1000u;
  if (last_ms && (uint64_t)last_ms + 2000u > deadline_ms) deadline_ms = (uint64_t)last_ms + 2000u;
  ea_log(EA_LOG_INFO, "drain",
         "%s: asking the controller to re-form the group without this node (deadline %" PRIu64
         " s)",
         why, deadline_ms / 1000u);
  uv_timer_start(&a->drain_timer, on_drain_timeout, deadline_ms, 0);
  if (!core_knows) ea__agent_do1(a, (ea__intent){.kind = EA__DO_DRAIN});
}

void ea__agent_on_signal(uv_signal_t *h, int signum) {
  ea__agent *a = h->data;
  const char *sig = signum == SIGTERM ? "SIGTERM" : "SIGINT";
  switch (a->phase) {
    case EA__PHASE_RUNNING:
      ea_log(EA_LOG_INFO, "leave", "received %s: draining this node, then leaving the cluster",
             sig);
      ea__agent_begin_drain(a, sig, false);
      break;
    case EA__PHASE_DRAINING:
      ea_log(EA_LOG_WARN, "leave", "second signal: not waiting for the drain");
      ea__agent_stop_and_leave(a, true, "second signal");
      break;
    case EA__PHASE_STOPPING:
      ea_log(EA_LOG_WARN, "leave", "second signal: killing the workers");
      for (uint32_t k = 0; k < a->wpn; k++) ea__sup_kill(a->sup, k);
      break;
    default:
      ea_log(EA_LOG_WARN, "leave", "another signal: exiting without waiting for the leave");
      ea__agent_shutdown(a);
      break;
  }
}

/* ---- the admin command ------------------------------------------------------------- */

/* Live members (alive or suspect; this node included) named name. */
static size_t live_named(ea__agent *a, const char *name) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms), k = 0;
  for (size_t i = 0; i < n; i++)
    k += (ms[i].state == EA_STATE_ALIVE || ms[i].state == EA_STATE_SUSPECT) &&
         strcmp(ms[i].meta.name, name) == 0;
  return k;
}

/* "drain NAME": drain a member (this node's own name: ourselves).  A name
 * that more than one live member holds is refused, never guessed (issue 27:
 * it acted on whichever came first); ident.c keeps names unique at join. */
int ea__agent_cmd_drain(void *ctx, const char *args, json_t **out) {
  ea__agent *a = ctx;
  char name[EA_NAME_MAX];
  while (*args == ' ') args++;
  size_t n = strcspn(args, " \t\r\n");
  if (n == 0 || n >= sizeof name || args[n + strspn(args + n, " \t\r\n")]) {
    *out = ea_json_error("usage: drain NAME (one member name)");
    return -EINVAL;
  }
  memcpy(name, args, n);
  name[n] = 0;
  if (!a->rdzv || a->phase >= EA__PHASE_LEAVING) {
    *out = ea_json_error("shutting down");
    return -ESHUTDOWN;
  }
  size_t holders = a->tr ? live_named(a, name) : 0;
  if (holders > 1) {
    char msg[EA_NAME_MAX + 128];
    snprintf(msg, sizeof msg,
             "ambiguous: %zu live members are named '%s' (see status); nothing drained", holders,
             name);
    *out = ea_json_error(msg);
    return -EEXIST;
  }
  ea_jb b = {0};
  json_t *doc = NULL;
  if (strcmp(name, a->o->name) == 0) {
    bool already = a->phase != EA__PHASE_RUNNING;
    ea__agent_begin_drain(a, "drain command", false);
    doc = json_object();
    ea_jb_str(&b, doc, "draining", name);
    ea_jb_bool(&b, doc, "self", true);
    ea_jb_bool(&b, doc, "already", already);
  } else {
    int rc = ea__agent_do1(a, (ea__intent){.kind = EA__DO_DRAIN, .text = name});
    if (rc < 0) {
      char msg[EA_NAME_MAX + 64];
      if (rc == -ECANCELED)
        snprintf(msg, sizeof msg, "this agent is shutting down: cannot drain '%s'", name);
      else
        snprintf(msg, sizeof msg, "no alive member named '%s'", name);
      *out = ea_json_error(msg);
      return rc;
    }
    ea_log(EA_LOG_INFO, "drain", "asked %s to drain (drain command)", name);
    doc = json_object();
    ea_jb_str(&b, doc, "draining", name);
    ea_jb_bool(&b, doc, "self", false);
  }
  if (b.oom) {
    json_decref(doc);
    doc = NULL;
  }
  *out = doc;
  return 0;
}
