/* Check suite for agent/job/warm.c: which command lines start from a warm
 * interpreter, the shell commands taken as plain words, the handover packet
 * (byte for byte: python/elastic_agent/_warm.py parses it, and
 * tests/python/test_warm.py feeds the launcher the same bytes), and the
 * environment variables that must not differ between a spare's start and
 * its take. */
#include "warm.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int form(const char *const *argv, ea__warm_form *f, char *why) {
  return ea__warm_form_of((char *const *)argv, f, why, 200);
}

START_TEST(python_scripts_and_modules) {
  ea__warm_form f;
  char why[200];
  const char *a1[] = {"python3", "train.py", "--lr", "1", NULL};
  ck_assert_int_eq(form(a1, &f, why), 0);
  ck_assert_uint_eq(f.ninterp, 1);
  ck_assert(!f.module);
  const char *a2[] = {"/opt/venv/bin/python3.11", "-u", "-W", "ignore", "-Xdev", "t.py", NULL};
  ck_assert_int_eq(form(a2, &f, why), 0);
  ck_assert_uint_eq(f.ninterp, 5);
  const char *a3[] = {"python", "-uB", "-m", "pkg.main", "x", NULL};
  ck_assert_int_eq(form(a3, &f, why), 0);
  ck_assert_uint_eq(f.ninterp, 2);
  ck_assert(f.module);
  const char *a4[] = {"python", "-OO", "-I", "t.py", NULL};
  ck_assert_int_eq(form(a4, &f, why), 0);
  ck_assert_uint_eq(f.ninterp, 3);
}
END_TEST

START_TEST(what_stays_cold) {
  ea__warm_form f;
  char why[200];
  struct {
    const char *argv[6];
    const char *why;
  } cases[] = {
      {{"torchrun", "t.py", NULL}, "not a Python interpreter: torchrun"},
      {{"/bin/true", NULL}, "not a Python interpreter: /bin/true"},
      {{"pythonw", "t.py", NULL}, "not a Python interpreter"},
      {{"python3", "-c", "print(1)", NULL}, "option -c"},
      {{"python3", "-i", "t.py", NULL}, "option -i"},
      {{"python3", "-x", "t.py", NULL}, "option -x"},
      {{"python3", "-", NULL}, "option -"},
      {{"python3", "--check-hash-based-pycs", "always", "t.py", NULL}, "option --check"},
      {{"python3", "-um", "mod", NULL}, "-m inside -um"},
      {{"python3", "-m", NULL}, "-m without a module"},
      {{"python3", "-W", NULL}, "-W without its value"},
      {{"python3", "-u", NULL}, "no script"},
      {{"python3", "", NULL}, "an empty script name"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    why[0] = 0;
    ck_assert_int_eq(form(cases[i].argv, &f, why), -ENOTSUP);
    ck_assert_msg(strstr(why, cases[i].why), "case %zu: why '%s', want '%s'", i, why, cases[i].why);
  }
}
END_TEST

START_TEST(plain_shell_commands_only) {
  char **w = NULL, why[200];
  ck_assert_int_eq(ea__warm_split("  python3\t-u train.py --lr=0.1  ", &w, why, sizeof why), 0);
  const char *want[] = {"python3", "-u", "train.py", "--lr=0.1"};
  for (size_t i = 0; i < 4; i++) ck_assert_str_eq(w[i], want[i]);
  ck_assert_ptr_null(w[4]);
  ea__warm_words_free(w);
  const char *shell[] = {"python3 t.py | tee log", "python3 t.py --x=$HOME", "python3 't.py'",
                         "cd /x && python3 t.py",  "python3 *.py",           "python3 t.py > out",
                         "python3 ~/t.py",         "python3 t.py # c",       "python3 t.py\necho"};
  for (size_t i = 0; i < sizeof shell / sizeof shell[0]; i++) {
    w = NULL;
    ck_assert_int_eq(ea__warm_split(shell[i], &w, why, sizeof why), -ENOTSUP);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(why, "shell syntax"), "%s: %s", shell[i], why);
  }
  ck_assert_int_eq(ea__warm_split(" \t", &w, why, sizeof why), -ENOTSUP);
  ck_assert_str_eq(why, "an empty command");
  /* an assignment in front is no interpreter: split, then refused by form */
  ck_assert_int_eq(ea__warm_split("FOO=1 python3 t.py", &w, why, sizeof why), 0);
  ea__warm_form f;
  ck_assert_int_eq(ea__warm_form_of(w, &f, why, sizeof why), -ENOTSUP);
  ea__warm_words_free(w);
}
END_TEST

START_TEST(preload_words) {
  char **w = NULL;
  ck_assert_int_eq(ea__warm_preload_words("torch, torch.distributed,,numpy  x", &w), 0);
  const char *want[] = {"torch", "torch.distributed", "numpy", "x"};
  for (size_t i = 0; i < 4; i++) ck_assert_str_eq(w[i], want[i]);
  ck_assert_ptr_null(w[4]);
  ea__warm_words_free(w);
  ck_assert_int_eq(ea__warm_preload_words("", &w), 0);
  ck_assert_ptr_null(w[0]);
  ea__warm_words_free(w);
}
END_TEST

/* The packet _warm.py parses; tests/python/test_warm.py holds the same bytes. */
START_TEST(handover_bytes) {
  const char *argv[] = {"python3", "-u", "t.py", "a b", NULL};
  const char *env[] = {"RANK=1", "X=", NULL};
  ea__warm_form f = {.ninterp = 2, .module = false};
  char *p = NULL;
  size_t len = 0;
  ck_assert_int_eq(
      ea__warm_handover((char *const *)argv, &f, (char *const *)env, "/w d", 1024, &p, &len), 0);
  static const char want[] =
      "EAW1\0"
      "4\0"
      "python3\0"
      "-u\0"
      "t.py\0"
      "a b\0"
      "2\0"
      "s\0"
      "2\0"
      "RANK=1\0"
      "X=\0"
      "/w d";
  ck_assert_uint_eq(len, sizeof want);
  ck_assert_int_eq(memcmp(p, want, len), 0);
  free(p);
  ck_assert_int_eq(
      ea__warm_handover((char *const *)argv, &f, (char *const *)env, "/w d", 40, &p, &len), -E2BIG);
  ck_assert_ptr_null(p);
  f.module = true;
  const char *margv[] = {"python", "-m", "pkg", NULL};
  f.ninterp = 1;
  ck_assert_int_eq(ea__warm_handover((char *const *)margv, &f, NULL, "/", 1024, &p, &len), 0);
  static const char mwant[] =
      "EAW1\0"
      "3\0"
      "python\0"
      "-m\0"
      "pkg\0"
      "1\0"
      "m\0"
      "0\0"
      "/";
  ck_assert_uint_eq(len, sizeof mwant);
  ck_assert_int_eq(memcmp(p, mwant, len), 0);
  free(p);
}
END_TEST

START_TEST(environment_read_at_start) {
  char name[64];
  const char *was[] = {"PATH=/bin", "PYTHONPATH=/a", "LOCAL_RANK=0", "OMP_NUM_THREADS=1", NULL};
  /* per-generation names may come and go */
  const char *now1[] = {
      "RANK=3", "PATH=/bin", "PYTHONPATH=/a", "LOCAL_RANK=0", "MASTER_PORT=9", "OMP_NUM_THREADS=1",
      NULL};
  ck_assert(ea__warm_env_compatible((char *const *)was, (char *const *)now1, name, sizeof name));
  const char *now2[] = {"PATH=/bin", "PYTHONPATH=/b", "OMP_NUM_THREADS=1", NULL};
  ck_assert(!ea__warm_env_compatible((char *const *)was, (char *const *)now2, name, sizeof name));
  ck_assert_str_eq(name, "PYTHONPATH");
  const char *now3[] = {"PATH=/bin", "PYTHONPATH=/a", "OMP_NUM_THREADS=1", "LC_ALL=C", NULL};
  ck_assert(!ea__warm_env_compatible((char *const *)was, (char *const *)now3, name, sizeof name));
  ck_assert_str_eq(name, "LC_ALL");
  const char *now4[] = {"PATH=/bin", "PYTHONPATH=/a", NULL};
  ck_assert(!ea__warm_env_compatible((char *const *)was, (char *const *)now4, name, sizeof name));
  ck_assert_str_eq(name, "OMP_NUM_THREADS");
  /* a name that is a prefix of another is not it */
  const char *w5[] = {"PATHX=1", NULL}, *n5[] = {"PATH=/bin", NULL};
  ck_assert(!ea__warm_env_compatible((char *const *)w5, (char *const *)n5, name, sizeof name));
  ck_assert_str_eq(name, "PATH");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("warm");
  TCase *t = tcase_create("warm");
  tcase_add_test(t, python_scripts_and_modules);
  tcase_add_test(t, what_stays_cold);
  tcase_add_test(t, plain_shell_commands_only);
  tcase_add_test(t, preload_words);
  tcase_add_test(t, handover_bytes);
  tcase_add_test(t, environment_read_at_start);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
