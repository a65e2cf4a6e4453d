/* cli.h — internal to agent/cli/: what main.c shares with the other files of
 * the command line (status_text.c).  The JSON tree is ea_json.h's
 * (base/json.c); its callers include that. */
#ifndef EA_CLI_H
#define EA_CLI_H

struct ea_json;

/* Replace control characters in every string of j (member names come from
 * the network: none may carry terminal escape sequences to a screen). */
void ea__cli_scrub(struct ea_json *j);
/* `status`: the status document j, as text, on stdout. */
void ea__cli_print_status(const struct ea_json *j);

#endif
