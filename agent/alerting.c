/* alerting.c — the agent's side of alerts: the registry and its delivery
 * are obs/alerts.c's (obs.h), which knows nothing of the agent; this file
 * starts it with the job file's settings, gives the rest of agent/ its
 * ea__agent_alert* calls (agent_int.h says what an alert is), and raises
 * and resolves node_lost from the membership and the rendezvous core.
 */
#include "agent_int.h"

#include "ea_log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ea__agent_alerts_start(ea__agent *a, char *err, size_t errlen) {
  const ea_config *c = &a->o->cfg;
  ea__alerts_cfg ac = {.job = c->experiment.name,
                       .node = a->o->name,
                       .alertmanager_url = c->observability.alertmanager_url,
                       .webhook = c->observability.alert_webhook,
                       .command = c->observability.alert_command,
                       .resend_seconds = c->observability.alert_resend_seconds};
  return ea__alerts_new(&a->loop, &ac, &a->al, err, errlen);
}

void ea__agent_alerts_close(ea__agent *a) {
  ea__alerts_close(a->al);
}

void ea__agent_alerts_free(ea__agent *a) {
  ea__alerts *al = a->al;
  a->al = NULL;
  ea__alerts_free(al);
  free(a->lost_plan.ids);
  free(a->lost_plan.names);
  memset(&a->lost_plan, 0, sizeof a->lost_plan);
}

void ea__agent_alert(ea__agent *a, ea__alert_kind k, ea__alert_sev sev, const char *subject,
                     const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ea__alerts_raise_v(a->al, k, sev, subject, NULL, 0, fmt, ap);
  va_end(ap);
}

void ea__agent_alert_kv(ea__agent *a, ea__alert_kind k, ea__alert_sev sev, const char *subject,
                        const ea_log_kv *kv, unsigned nkv, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ea__alerts_raise_v(a->al, k, sev, subject, kv, nkv, fmt, ap);
  va_end(ap);
}

void ea__agent_alert_resolve(ea__agent *a, ea__alert_kind k, const char *subject, const char *fmt,
                             ...) {
  va_list ap;
  va_start(ap, fmt);
  ea__alerts_resolve_v(a->al, k, subject, fmt, ap);
  va_end(ap);
}

bool ea__agent_alert_firing(const ea__agent *a, ea__alert_kind k, const char *subject) {
  return ea__alerts_firing(a->al, k, subject);
}

uint64_t ea__agent_alerts(const ea__agent *a, ea__alert_kind k) {
  return ea__alerts_count(a->al, k);
}

void ea__agent_alerts_status(ea__agent *a, ea_jb *b, json_t *doc) {
  ea__alerts_status(a->al, b, doc);
}

static bool alive_named(ea__agent *a, const char *name) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  for (size_t j = 0; j < n; j++)
    if (ms[j].state == EA_STATE_ALIVE && strcmp(ea__agent_member_name(&ms[j]), name) == 0)
      return true;
  return false;
}

void ea__agent_alerts_members(ea__agent *a) {
  if (!a->al || !a->rdzv || !a->tr) return;
  /* Resolve first: a lost node that is back (on any node that sent it).
   * The subject is copied: resolving moves the firing table under it. */
  const ea__alert_rec *f;
  for (size_t i = 0; (f = ea__alerts_firing_at(a->al, i));) {
    char name[sizeof f->subject];
    snprintf(name, sizeof name, "%s", f->subject);
    if (f->kind == EA__ALERT_NODE_LOST && alive_named(a, name))
      ea__agent_alert_resolve(a, EA__ALERT_NODE_LOST, name, "node %s is alive again", name);
    else
      i++;
  }
  /* Cluster-wide: only the controller says it, so it is said once.  The
   * election is the one after this change (a new controller speaks for
   * the old one). */
  const ea_election *el = ea_rdzv_election(a->rdzv);
  bool ctrl = el && el->have && ea_node_id_cmp(&el->controller, &a->id) == 0;
  for (uint32_t i = 0; ctrl && i < a->lost_plan.n; i++) {
    if (ea_node_id_cmp(&a->lost_plan.ids[i], &a->id) == 0) continue;
    const ea_member *m = ea__agent_find_member(a, &a->lost_plan.ids[i]);
    if (m && m->state != EA_STATE_DEAD) continue;
    const char *name = a->lost_plan.names[i][0] ? a->lost_plan.names[i] : "?";
    if (ea__agent_alert_firing(a, EA__ALERT_NODE_LOST, name)) continue;
    uint32_t wpn = a->lost_plan.wpn;
    ea__agent_alert(a, EA__ALERT_NODE_LOST, EA__SEV_CRITICAL, name,
                    "node lost: %s (ranks %u-%u of generation %" PRIu64 ", world %u) is dead", name,
                    i * wpn, (i + 1) * wpn - 1, a->lost_plan.term, a->lost_plan.world);
  }
  /* Then remember the generation running now, if one is. */
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  if (p && p->nnodes) {
    ea_node_id *ids = realloc(a->lost_plan.ids, p->nnodes * sizeof *ids);
    if (ids) a->lost_plan.ids = ids;
    char(*names)[EA_NAME_MAX] = realloc(a->lost_plan.names, p->nnodes * sizeof *names);
    if (names) a->lost_plan.names = names;
    if (!ids || !names) return;
    for (uint32_t i = 0; i < p->nnodes; i++) {
      ids[i] = p->nodes[i].id;
      snprintf(names[i], EA_NAME_MAX, "%s", p->nodes[i].name);
    }
    a->lost_plan.n = p->nnodes;
    a->lost_plan.term = p->gen.term;
    a->lost_plan.wpn = p->wpn;
    a->lost_plan.world = p->world;
  }
}
