/* Check suite for the alert registry's pure parts (agent/obs/alerts.c).
 *
 * What they promise, tested as such: the rate limiter lets the first fire
 * of a kind through, holds back every other one for EA__ALERT_RATE_S
 * (boundary: 1 ms before the window ends held, at its end admitted) and
 * hands the count held back to the next one admitted, then starts again
 * from 0; the Alertmanager body is exactly the API v2 array (labels
 * alertname/job/node/severity and subject when given, annotations summary
 * and suppressed when non-zero, startsAt, endsAt: an event's hold, a firing
 * condition's four re-sends ahead of now, a resolved one's resolve time);
 * the webhook body is exactly the documented object, endsAt null while
 * firing; strings are escaped as JSON; times are RFC 3339 UTC with
 * milliseconds.
 */
#include "agent_int.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* 2026-12-01T21:00:00.250Z */
#define T0 1796158800.25

START_TEST(time_format) {
  char t[40];
  ea__alert_time_str(T0, t, sizeof t);
  ck_assert_str_eq(t, "2026-12-01T21:00:00.250Z");
  ea__alert_time_str(0, t, sizeof t);
  ck_assert_str_eq(t, "1970-01-01T00:00:00.000Z");
}
END_TEST

START_TEST(rate_limit_window) {
  ea__alert_rl rl = {0};
  const uint64_t W = EA__ALERT_RATE_S * 1000u;
  uint32_t held = 99;
  ck_assert(ea__alert_rl_admit(&rl, 1000, W, &held)); /* the first one goes */
  ck_assert_uint_eq(held, 0);
  held = 99;
  ck_assert(!ea__alert_rl_admit(&rl, 1001, W, &held));
  ck_assert(!ea__alert_rl_admit(&rl, 30000, W, &held));
  ck_assert(!ea__alert_rl_admit(&rl, 1000 + W - 1, W, &held)); /* 1 ms short */
  ck_assert_uint_eq(held, 99);                                 /* untouched while held */
  ck_assert(ea__alert_rl_admit(&rl, 1000 + W, W, &held));      /* the window is over */
  ck_assert_uint_eq(held, 3);                                  /* "3 more since" */
  ck_assert(ea__alert_rl_admit(&rl, 1000 + 3 * W, W, &held));  /* quiet since: none held */
  ck_assert_uint_eq(held, 0);
  /* A clock that went backwards (another origin) does not hold forever. */
  ck_assert(ea__alert_rl_admit(&rl, 5, W, &held));
}
END_TEST

static ea__alert_rec rec(ea__alert_kind k, ea__alert_sev sev, bool firing, const char *subject,
                         const char *summary) {
  ea__alert_rec r = {.kind = k, .sev = sev, .firing = firing, .starts_s = T0};
  snprintf(r.subject, sizeof r.subject, "%s", subject);
  snprintf(r.summary, sizeof r.summary, "%s", summary);
  return r;
}

START_TEST(alertmanager_body_exact) {
  ea__alert_rec ev =
      rec(EA__ALERT_WORKER_EXIT, EA__SEV_WARNING, true, "worker 1", "worker exit: worker 1 \"x\"");
  ev.ends_s = T0 + EA__ALERT_EVENT_HOLD_S;
  ev.suppressed = 3;
  ea__alert_rec cond = rec(EA__ALERT_NODE_LOST, EA__SEV_CRITICAL, true, "n3", "node lost: n3");
  ea__alert_rec res = rec(EA__ALERT_STALLED, EA__SEV_CRITICAL, false, "", "stalled resolved");
  res.ends_s = T0 + 10;
  const ea__alert_rec *r[] = {&ev, &cond, &res};
  char *b = ea__alert_am_body(r, 3, "job-1", "n1", T0 + 1, 60);
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(
      b,
      "[{\"labels\":{\"alertname\":\"worker_exit\",\"job\":\"job-1\",\"node\":\"n1\","
      "\"severity\":\"warning\",\"subject\":\"worker 1\"},"
      "\"annotations\":{\"summary\":\"worker exit: worker 1 \\\"x\\\"\",\"suppressed\":\"3\"},"
      "\"startsAt\":\"2026-12-01T21:00:00.250Z\",\"endsAt\":\"2026-12-01T21:05:00.250Z\"},"
      "{\"labels\":{\"alertname\":\"node_lost\",\"job\":\"job-1\",\"node\":\"n1\","
      "\"severity\":\"critical\",\"subject\":\"n3\"},"
      "\"annotations\":{\"summary\":\"node lost: n3\"},"
      "\"startsAt\":\"2026-12-01T21:00:00.250Z\",\"endsAt\":\"2026-12-01T21:04:01.250Z\"},"
      "{\"labels\":{\"alertname\":\"stalled\",\"job\":\"job-1\",\"node\":\"n1\","
      "\"severity\":\"critical\"},"
      "\"annotations\":{\"summary\":\"stalled resolved\"},"
      "\"startsAt\":\"2026-12-01T21:00:00.250Z\",\"endsAt\":\"2026-12-01T21:00:10.250Z\"}]");
  free(b);
  /* observability.alert_resend_seconds 5: a firing condition ends four
   * re-sends (20 s) ahead; an event and a resolved one do not move. */
  b = ea__alert_am_body(r, 3, "job-1", "n1", T0 + 1, 5);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_nonnull(strstr(b,
                               "\"subject\":\"n3\"},\"annotations\":{\"summary\":\"node lost: "
                               "n3\"},\"startsAt\":\"2026-12-01T21:00:00.250Z\",\"endsAt\":"
                               "\"2026-12-01T21:00:21.250Z\"}"));
  ck_assert_ptr_nonnull(strstr(b, "\"endsAt\":\"2026-12-01T21:05:00.250Z\"}"));
  free(b);
}
END_TEST

START_TEST(webhook_body_exact) {
  ea__alert_rec f = rec(EA__ALERT_LOSS_NAN, EA__SEV_CRITICAL, true, "",
                        "loss is NaN: worker 0 rank 0 step 7 gen 65536\n");
  f.suppressed = 2;
  char *b = ea__alert_webhook_body(&f, "j", "n\xff");
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(b,
                   "{\"version\":1,\"status\":\"firing\",\"kind\":\"loss_nan\","
                   "\"severity\":\"critical\",\"job\":\"j\",\"node\":\"n\xEF\xBF\xBD\","
                   "\"subject\":\"\",\"summary\":\"loss is NaN: worker 0 rank 0 step 7 gen "
                   "65536\\n\",\"startsAt\":\"2026-12-01T21:00:00.250Z\",\"endsAt\":null,"
                   "\"suppressed\":2}");
  free(b);
  ea__alert_rec r = rec(EA__ALERT_STORAGE_TIMEOUT, EA__SEV_WARNING, false, "commit", "ok again");
  r.ends_s = T0 + 0.5;
  b = ea__alert_webhook_body(&r, "j", "n1");
  ck_assert_str_eq(b,
                   "{\"version\":1,\"status\":\"resolved\",\"kind\":\"storage_timeout\","
                   "\"severity\":\"warning\",\"job\":\"j\",\"node\":\"n1\","
                   "\"subject\":\"commit\",\"summary\":\"ok again\","
                   "\"startsAt\":\"2026-12-01T21:00:00.250Z\","
                   "\"endsAt\":\"2026-12-01T21:00:00.750Z\",\"suppressed\":0}");
  free(b);
}
END_TEST

START_TEST(kinds_and_shapes) {
  ck_assert(ea__alert_kind_is_condition(EA__ALERT_STALLED));
  ck_assert(ea__alert_kind_is_condition(EA__ALERT_NODE_LOST));
  ck_assert(ea__alert_kind_is_condition(EA__ALERT_LOSS_NAN));
  ck_assert(ea__alert_kind_is_condition(EA__ALERT_STORAGE_TIMEOUT));
  ck_assert(!ea__alert_kind_is_condition(EA__ALERT_WORKER_EXIT));
  ck_assert(!ea__alert_kind_is_condition(EA__ALERT_JOB_FAILED));
  ck_assert(!ea__alert_kind_is_condition(EA__ALERT_PREEMPTED));
  ck_assert_str_eq(ea__alert_sev_str(EA__SEV_CRITICAL), "critical");
  ck_assert_str_eq(ea__alert_sev_str(EA__SEV_WARNING), "warning");
}
END_TEST

int main(void) {
  Suite *s = suite_create("alerts");
  TCase *tc = tcase_create("pure");
  tcase_add_test(tc, time_format);
  tcase_add_test(tc, rate_limit_window);
  tcase_add_test(tc, alertmanager_body_exact);
  tcase_add_test(tc, webhook_body_exact);
  tcase_add_test(tc, kinds_and_shapes);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
