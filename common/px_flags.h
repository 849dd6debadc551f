/* Command-line value parsing shared by every phalanx program. A bad value is
 * fatal at start-up: the program prints a message naming the flag, the value
 * and the accepted range, and exits with status 2 (the usage-error status). */
#ifndef PX_FLAGS_H
#define PX_FLAGS_H

#include <stdint.h>
#include <stdio.h>

/* Integer in [min, max], or exit(2) naming `flag`. */
int64_t px_flag_int(const char *prog, const char *flag, const char *val, int64_t min, int64_t max);
/* Floating point in [min, max], or exit(2). */
double px_flag_double(const char *prog, const char *flag, const char *val, double min, double max);
/* Non-empty string of at most maxlen bytes, or exit(2). */
const char *px_flag_str(const char *prog, const char *flag, const char *val, int maxlen);
/* "host:port" with port in 1..65535, or exit(2). Writes the host into host[hostlen]. */
int px_flag_hostport(const char *prog, const char *flag, const char *val, char *host, int hostlen);
/* The same, with port 0 allowed (meaning: pick a free port). */
int px_flag_hostport0(const char *prog, const char *flag, const char *val, char *host, int hostlen);
/* Reads a job token from the first line of file `val` (1..256 bytes), or
 * exit(2) naming `flag`. Returns a malloc'd string. */
char *px_flag_token_file(const char *prog, const char *flag, const char *val);
/* Prints "PROG: unknown flag 'X' (see --help)" and exits 2. */
void px_flag_unknown(const char *prog, const char *arg) __attribute__((noreturn));
/* Prints "PROG: flag X needs a value" and exits 2 when val is NULL. */
const char *px_flag_need(const char *prog, const char *flag, const char *val);

/* The environment form of every flag: PHALANX_SOME_FLAG=value stands for
 * `--some-flag value` (upper case, '_' for '-'). Rewrites argc and argv so
 * that the flags from PHALANX_ variables come first (sorted by name) and the
 * command line after them. A flag given on the command line wins: its
 * variable is not read at all. Only flags that print_usage (the program's
 * --help, written to a FILE) documents are taken; any other PHALANX_ variable
 * is reported on stderr and ignored, since one environment may serve several
 * programs. `booleans` (NULL-terminated names without the dashes) take no
 * value: 1 or true gives the flag, 0, false or empty leaves it out. A bad
 * value is reported naming the variable, exit 2. */
void px_flags_from_env(const char *prog, void (*print_usage)(FILE *), const char *const *booleans, int *argc,
                       char ***argv);

#endif
