/* election.c — who is the controller, and may it act?
 *
 * No messages and no terms here: the controller is a pure function of the
 * local membership view (the alive or suspect, non-observer member with the
 * lowest id), so every member that holds the same view names the same
 * controller without a round of voting, and SWIM's convergence is the
 * election.  Suspect members still count: a suspicion is not yet a death,
 * and re-electing on every suspicion would churn the controller under packet
 * loss.  Two views can briefly disagree; the generation numbers of the
 * rendezvous (a member obeys only a plan newer than the one it has) make a
 * stale controller harmless, and the quorum rule below keeps a minority side
 * of a partition from acting at all.
 *
 * Quorum: a majority of the last formed generation's members, not counting
 * those that left gracefully (a drained or preempted node announced its exit;
 * it must not hold the survivors hostage), must be alive or suspect in this
 * view.  `quorum: none` turns the rule off.  Every outcome carries a reason
 * string for `status`, so an operator sees why nothing is happening.
 */
#include "ea_membership.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool counts_alive(uint8_t st) {
  return st == EA_STATE_ALIVE || st == EA_STATE_SUSPECT;
}

static bool is_observer(const ea_member *m) {
  return strncmp(m->meta.role, "observer", sizeof m->meta.role) == 0;
}

static int cmp_member_id(const void *a, const void *b) {
  const ea_member *x = *(const ea_member *const *)a, *y = *(const ea_member *const *)b;
  return ea_node_id_cmp(&x->id, &y->id);
}

static int cmp_id(const void *a, const void *b) {
  return ea_node_id_cmp(a, b);
}

/* Find id in the sorted array of pointers. */
static const ea_member *lookup(const ea_member **sorted, size_t n, const ea_node_id *id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = ea_node_id_cmp(&sorted[mid]->id, id);
    if (c == 0) return sorted[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Quorum over gen's members.  Returns has_quorum; *alive and *voters get the
 * counts (voters = gen members not LEFT in this view; unknown ids, e.g. a
 * member reaped after its death, vote and count as not alive). */
static bool quorum(const ea_member *members, size_t n, const ea_election_gen *gen, uint32_t *alive,
                   uint32_t *voters) {
  *alive = *voters = 0;
  const ea_member **sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) return false; /* cannot tell: do not act */
  for (size_t i = 0; i < n; i++) sorted[i] = &members[i];
  qsort(sorted, n, sizeof *sorted, cmp_member_id);
  /* A generation lists each member once; sorting its ids too lets a
   * duplicate (which would double-vote) be skipped in O(m log m). */
  ea_node_id *ids = malloc(gen->nmembers * sizeof *ids);
  if (!ids) {
    free(sorted);
    return false;
  }
  memcpy(ids, gen->members, gen->nmembers * sizeof *ids);
  qsort(ids, gen->nmembers, sizeof *ids, cmp_id);
  for (size_t i = 0; i < gen->nmembers; i++) {
    if (i > 0 && ea_node_id_cmp(&ids[i - 1], &ids[i]) == 0) continue;
    const ea_member *m = lookup(sorted, n, &ids[i]);
    if (m && m->state == EA_STATE_LEFT) continue;
    (*voters)++;
    if (m && counts_alive(m->state)) (*alive)++;
  }
  free(ids);
  free(sorted);
  /* Everyone of the last generation left gracefully: nobody can object. */
  if (*voters == 0) return true;
  return 2 * *alive > *voters;
}

void ea_elect(const ea_member *members, size_t n, const ea_election_gen *gen, ea_election *out) {
  memset(out, 0, sizeof *out);
  const ea_member *best = NULL;
  uint32_t observers = 0;
  for (size_t i = 0; i < n; i++) {
    const ea_member *m = &members[i];
    if (!counts_alive(m->state)) continue;
    if (is_observer(m)) {
      observers++;
      continue;
    }
    out->eligible++;
    if (!best || ea_node_id_cmp(&m->id, &best->id) < 0) best = m;
  }
  if (best) {
    out->have = true;
    out->controller = best->id;
  }

  char why[96];
  if (best)
    snprintf(why, sizeof why, "lowest id among %u eligible alive member%s", out->eligible,
             out->eligible == 1 ? "" : "s");
  else
    snprintf(why, sizeof why, "no eligible member alive: %u observer%s", observers,
             observers == 1 ? "" : "s");

  if (!gen || gen->nmembers == 0 || gen->quorum_none) {
    out->has_quorum = true;
    snprintf(out->reason, sizeof out->reason, "%s", why);
    return;
  }
  uint32_t alive, voters;
  out->has_quorum = quorum(members, n, gen, &alive, &voters);
  if (out->has_quorum)
    snprintf(out->reason, sizeof out->reason, "%s; quorum %u of %u", why, alive, voters);
  else
    snprintf(out->reason, sizeof out->reason, "no quorum: %u of %u; %s", alive, voters, why);
}
