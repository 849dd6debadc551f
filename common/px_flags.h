/* Command-line flags for every phalanx program.
 *
 * Flags are data: a program lists tables of px_flag_t (name, kind, range,
 * default, help, where the value goes) and px_flags_parse reads its command
 * line, and its PHALANX_* environment variables, against them; --help is
 * printed from the same tables. A flag several programs or modes take is
 * declared once, in a table they share (the trainer's, the coordinator
 * client's credentials); a program that passes a flag on to another
 * (phalanx-launch) checks it with that program's entry (PX_FLAG_LIKE).
 *
 * A bad value is fatal at start-up: the program prints a message naming the
 * flag, the value and the accepted range, and exits with status 2 (the
 * usage-error status). The value parsers below are that check for one value;
 * the table parser uses them, and so can a tool with a loop of its own. */
#ifndef PX_FLAGS_H
#define PX_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- one value -------------------------------------------------------------- */

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
/* Prints "PROG: unknown flag 'X' (see PROG --help)" and exits 2. */
void px_flag_unknown(const char *prog, const char *arg) __attribute__((noreturn));
/* Prints "PROG: flag X needs a value" and exits 2 when val is NULL. */
const char *px_flag_need(const char *prog, const char *flag, const char *val);

/* ---- tables ----------------------------------------------------------------- */

typedef enum {
    PX_FLAG_INT,        /* an integer in [min, max] (times scale) into an int or an int64_t */
    PX_FLAG_REAL,       /* a number in [lo, hi] (times scale) into a float or a double */
    PX_FLAG_STR,        /* a non-empty string of at most max bytes (and valid(), when set): a const char * */
    PX_FLAG_SWITCH,     /* takes no value: the int becomes 1 */
    PX_FLAG_CHOICE,     /* one of words: its index into an int */
    PX_FLAG_HOSTPORT,   /* HOST:PORT with PORT in [min, 65535]: a px_hostport_t */
    PX_FLAG_TOKEN_FILE, /* a file whose first line (1..256 bytes) is a job token: a malloc'd char * */
    PX_FLAG_LIST,       /* repeatable, strings of at most max bytes: a px_flag_list_t */
    PX_FLAG_LIKE,       /* checked by the entry of the same name in `like`, kept as given: a const char *
                           (a switch: its name); another program's flag, passed on to it */
} px_flag_kind_t;

typedef struct {
    char host[256];
    int port;
} px_hostport_t;

#define PX_FLAG_LIST_MAX 16
typedef struct {
    const char *v[PX_FLAG_LIST_MAX];
    int n;
} px_flag_list_t;

struct px_flag_table;

typedef struct px_flag {
    const char *name;          /* "--lr"; its environment variable is PHALANX_LR */
    px_flag_kind_t kind;
    const char *arg;           /* the value in --help: "N", "X", "PATH" (a choice shows its words) */
    int64_t min, max;          /* INT: the range; STR, LIST: the most bytes; HOSTPORT: the lowest port */
    double lo, hi;             /* REAL: the range */
    double scale;              /* INT, REAL: the value stored is the one given times this (0: 1) */
    const char *const *words;  /* CHOICE: NULL-terminated; the index of the one given is stored */
    const char *def;           /* the default as the command line would give it, applied before the
                                  command line; NULL: the destination's value before parsing */
    const char *note;          /* shown in --help's brackets instead of the default ("off", "none") */
    const char *help;          /* one line of --help (wrapped); the range and default are appended */
    int (*valid)(const char *); /* STR: a further check, with `expect` saying what it wants */
    const char *expect;
    int (*check)(const char *val, char *why, size_t len); /* STR: a further check that says what is wrong
                                                              (0, or -1 with why) */
    const struct px_flag_table *like; /* LIKE: the table whose entry checks the value */
    size_t offset, size;       /* where the value goes: offset in the section's struct, and its size */
} px_flag_t;

/* Where a flag's value goes: a member of the struct a table fills. */
#define PX_FLAG_AT(type, member) .offset = offsetof(type, member), .size = sizeof(((type *)0)->member)

typedef struct px_flag_table {
    const char *heading;       /* the block of --help these flags are in ("training:") */
    const px_flag_t *flags;
    int n;
} px_flag_table_t;

#define PX_FLAG_TABLE(heading, entries) {(heading), (entries), (int)(sizeof(entries) / sizeof((entries)[0]))}

/* One table and the struct its flags fill. */
typedef struct {
    const px_flag_table_t *table;
    void *base;
    const char *heading;       /* instead of the table's; "" continues the block above */
} px_flag_section_t;

/* A program's command line. */
typedef struct {
    const char *prog;          /* in messages: "phalanx-worker" */
    const char *usage;         /* --help before the flags: the usage line and what the program does */
    const char *epilogue;      /* --help after the flags (NULL: nothing) */
    const px_flag_section_t *sections;
    int n_sections;
    int env;                   /* also read PHALANX_* variables (below) */
    int max_operands;          /* words that are no flags: at most this many (-1: any) */
    int rest;                  /* "--" ends the flags; the words after it are the caller's */
} px_flags_spec_t;

/* What px_flags_parse found besides the values it stored (its arrays live
 * as long as the program). */
typedef struct {
    char **operands;           /* the words that are not flags, in order */
    int n_operands;
    char **rest;               /* with spec.rest: the words after "--" */
    int n_rest;
    const px_flag_t **given;   /* the flags given (environment, then command line), in order */
    int n_given;
} px_flags_parsed_t;

/* Parses argv against spec: first every default, then the environment, then
 * the command line (`--flag value` or `--flag=value`); a flag given twice
 * takes the last value. --help or -h prints px_flags_help on stdout and
 * exits 0; a bad value, an unknown flag or one operand too many exits 2.
 *
 * The environment (spec.env): PHALANX_SOME_FLAG=value stands for
 * `--some-flag value` (upper case, '_' for '-'). A flag given on the command
 * line wins: its variable is not read at all. Any PHALANX_ variable that names
 * no flag of the program is reported on stderr and ignored, since one
 * environment may serve several programs. A switch takes 1 or true (on), 0,
 * false or nothing (off). A bad value is reported naming the variable. */
void px_flags_parse(const px_flags_spec_t *spec, int argc, char **argv, px_flags_parsed_t *out);
/* The generated --help: usage, each section's flags with range and default, epilogue. */
void px_flags_help(const px_flags_spec_t *spec, FILE *to);
/* 1 when the flag named was given (on the command line or in the environment). */
int px_flags_given(const px_flags_parsed_t *p, const char *name);
/* The last flag of table t that was given, or NULL. */
const px_flag_t *px_flags_last_given(const px_flags_parsed_t *p, const px_flag_table_t *t);

#endif
