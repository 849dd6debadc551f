/* Tests of the flag tables' parser (common/px_flags.h), as a table of
 * command lines: good values land in the struct (scaled, as float or double,
 * int or int64), bad ones exit 2 naming the flag, the value and the range,
 * the environment gives flags and the command line wins over it, unknown
 * flags and operands are refused, a PX_FLAG_LIKE entry checks with the
 * borrowed entry and keeps the text, and --help lists every flag with its
 * range and default.
 *
 * Each case runs px_flags_parse in a child process (a bad flag exits), which
 * prints the parsed values on stdout; the parent compares its exit status,
 * stdout and stderr. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_flags.h"

#include "../lib/px_check.h"

typedef struct {
    int steps;
    int64_t window_ms;
    double lr;
    float beta;
    const char *name;
    int on, mode;
    px_hostport_t http;
    px_flag_list_t types;
} cfg_t;

static int letters_only(const char *s) {
    for (; *s; s++)
        if ((*s < 'a' || *s > 'z') && (*s < 'A' || *s > 'Z')) return 0;
    return 1;
}

static const char *const MODES[] = {"sync", "diloco", "auto", NULL};

static const px_flag_t MAIN_FLAGS[] = {
    {"--steps", PX_FLAG_INT, "N", .min = 1, .max = 100, .def = "10", .help = "steps",
     PX_FLAG_AT(cfg_t, steps)},
    {"--window", PX_FLAG_INT, "S", .min = 1, .max = 60, .scale = 1000, .def = "5", .help = "seconds",
     PX_FLAG_AT(cfg_t, window_ms)},
    {"--lr", PX_FLAG_REAL, "X", .lo = 0, .hi = 1, .def = "0.5", .help = "a double", PX_FLAG_AT(cfg_t, lr)},
    {"--beta", PX_FLAG_REAL, "X", .lo = 0, .hi = 1, .def = "0.9", .help = "a float", PX_FLAG_AT(cfg_t, beta)},
    {"--name", PX_FLAG_STR, "NAME", .max = 8, .valid = letters_only, .expect = "letters", .note = "none",
     .help = "a name", PX_FLAG_AT(cfg_t, name)},
    {"--on", PX_FLAG_SWITCH, .help = "a switch", PX_FLAG_AT(cfg_t, on)},
    {"--mode", PX_FLAG_CHOICE, .words = MODES, .def = "sync", .help = "a choice", PX_FLAG_AT(cfg_t, mode)},
    {"--http", PX_FLAG_HOSTPORT, "HOST:PORT", .min = 0, .note = "off", .help = "host and port",
     PX_FLAG_AT(cfg_t, http)},
    {"--type", PX_FLAG_LIST, "T", .max = 8, .note = "all", .help = "repeatable", PX_FLAG_AT(cfg_t, types)},
};
static const px_flag_table_t MAIN_TABLE = PX_FLAG_TABLE("flags:", MAIN_FLAGS);

/* A program that passes --steps and --on on to the one above. */
typedef struct {
    const char *steps, *on;
} pass_t;

static const px_flag_t PASS_FLAGS[] = {
    {"--steps", PX_FLAG_LIKE, .like = &MAIN_TABLE, .help = "passed on", PX_FLAG_AT(pass_t, steps)},
    {"--on", PX_FLAG_LIKE, .like = &MAIN_TABLE, .help = "passed on", PX_FLAG_AT(pass_t, on)},
};
static const px_flag_table_t PASS_TABLE = PX_FLAG_TABLE("passed on:", PASS_FLAGS);

enum { MAIN_SPEC, PASS_SPEC };

typedef struct {
    int spec;
    const char *args[40];
    const char *env[3];     /* NAME=VALUE */
    int status;             /* exit status */
    const char *out, *err;  /* substrings of stdout and stderr ("" : anything) */
} case_t;

#define VALUES_DEFAULT "steps=10 window_ms=5000 lr=0.5 beta=0.9 name=- on=0 mode=0 http=-:-1 types=0"

static const case_t CASES[] = {
    /* values */
    {MAIN_SPEC, {NULL}, {NULL}, 0, VALUES_DEFAULT, ""},
    {MAIN_SPEC,
     {"--steps", "7", "--window", "2", "--lr", "0.25", "--beta=0.5", "--name", "abc", "--on", "--mode", "auto",
      "--http", "127.0.0.1:0", "--type", "a", "--type", "b"},
     {NULL},
     0,
     "steps=7 window_ms=2000 lr=0.25 beta=0.5 name=abc on=1 mode=2 http=127.0.0.1:0 types=2:a,b",
     ""},
    {MAIN_SPEC, {"--steps", "3", "--steps", "5"}, {NULL}, 0, "steps=5 ", ""},
    {MAIN_SPEC, {"--steps", "100", "--lr", "1", "--lr", "0"}, {NULL}, 0, "steps=100 window_ms=5000 lr=0 ", ""},
    /* bad values name the flag, the value and the range */
    {MAIN_SPEC, {"--steps", "0"}, {NULL}, 2, "",
     "test-prog: --steps: bad value '0': expected an integer in [1, 100] (see test-prog --help)"},
    {MAIN_SPEC, {"--steps", "x"}, {NULL}, 2, "", "--steps: bad value 'x': expected an integer in [1, 100]"},
    {MAIN_SPEC, {"--steps=101"}, {NULL}, 2, "", "--steps: bad value '101'"},
    {MAIN_SPEC, {"--window", "61"}, {NULL}, 2, "", "--window: bad value '61': expected an integer in [1, 60]"},
    {MAIN_SPEC, {"--lr", "2"}, {NULL}, 2, "", "--lr: bad value '2': expected a number in [0, 1]"},
    {MAIN_SPEC, {"--beta", "nan"}, {NULL}, 2, "", "--beta: bad value 'nan'"},
    {MAIN_SPEC, {"--name", "abcdefghi"}, {NULL}, 2, "", "--name: bad value 'abcdefghi': expected a non-empty string of at most 8 bytes"},
    {MAIN_SPEC, {"--name", "ab1"}, {NULL}, 2, "", "test-prog: --name: bad value 'ab1': expected letters"},
    {MAIN_SPEC, {"--mode", "fast"}, {NULL}, 2, "", "test-prog: --mode: bad value 'fast': expected sync, diloco or auto"},
    {MAIN_SPEC, {"--http", "nohost"}, {NULL}, 2, "", "--http: bad value 'nohost': expected HOST:PORT"},
    {MAIN_SPEC, {"--http", "h:70000"}, {NULL}, 2, "", "expected HOST:PORT with PORT in [0, 65535]"},
    {MAIN_SPEC, {"--steps"}, {NULL}, 2, "", "test-prog: flag --steps needs a value (see test-prog --help)"},
    {MAIN_SPEC, {"--on=1"}, {NULL}, 2, "", "flag --on takes no value"},
    {MAIN_SPEC,
     {"--type", "1", "--type", "2", "--type", "3", "--type", "4", "--type", "5", "--type", "6", "--type", "7",
      "--type", "8", "--type", "9"},
     {NULL},
     0,
     "types=9:1,2,3,4,5,6,7,8,9",
     ""},
    {MAIN_SPEC,
     {"--type", "1", "--type", "2", "--type", "3", "--type", "4", "--type", "5", "--type", "6", "--type", "7",
      "--type", "8", "--type", "9", "--type", "10", "--type", "11", "--type", "12", "--type", "13", "--type", "14",
      "--type", "15", "--type", "16", "--type", "17"},
     {NULL},
     2,
     "",
     "test-prog: --type: at most 16 values"},
    /* unknown flags and operands */
    {MAIN_SPEC, {"--nope"}, {NULL}, 2, "", "test-prog: unknown flag '--nope' (see test-prog --help)"},
    {MAIN_SPEC, {"--nope=3"}, {NULL}, 2, "", "unknown flag '--nope=3'"},
    {MAIN_SPEC, {"-x"}, {NULL}, 2, "", "unknown flag '-x'"},
    {MAIN_SPEC, {"word"}, {NULL}, 2, "", "test-prog: unexpected argument 'word'"},
    /* the environment; the command line wins and its variable is not read */
    {MAIN_SPEC, {NULL}, {"PHALANX_STEPS=3", "PHALANX_WINDOW=7"}, 0, "steps=3 window_ms=7000 ", ""},
    {MAIN_SPEC, {"--steps", "4"}, {"PHALANX_STEPS=3"}, 0, "steps=4 ", ""},
    {MAIN_SPEC, {"--steps=4"}, {"PHALANX_STEPS=x"}, 0, "steps=4 ", ""},
    {MAIN_SPEC, {NULL}, {"PHALANX_STEPS=0"}, 2, "",
     "test-prog: --steps (from PHALANX_STEPS): bad value '0': expected an integer in [1, 100]"},
    {MAIN_SPEC, {NULL}, {"PHALANX_ON=true"}, 0, " on=1 ", ""},
    {MAIN_SPEC, {NULL}, {"PHALANX_ON=1"}, 0, " on=1 ", ""},
    {MAIN_SPEC, {NULL}, {"PHALANX_ON=0"}, 0, " on=0 ", ""},
    {MAIN_SPEC, {NULL}, {"PHALANX_ON="}, 0, " on=0 ", ""},
    {MAIN_SPEC, {NULL}, {"PHALANX_ON=maybe"}, 2, "", "--on (from PHALANX_ON): bad value 'maybe': expected 1, true, 0, false or nothing"},
    {MAIN_SPEC, {NULL}, {"PHALANX_MODE=diloco"}, 0, " mode=1 ", ""},
    {MAIN_SPEC, {NULL}, {"PHALANX_NO_SUCH_FLAG=1", "PHALANX_HELP=1"}, 0, VALUES_DEFAULT,
     "ignoring PHALANX_NO_SUCH_FLAG: test-prog has no flag --no-such-flag (see test-prog --help)"},
    {MAIN_SPEC, {NULL}, {"PHALANX_HELP=1"}, 0, VALUES_DEFAULT, "ignoring PHALANX_HELP"},
    {MAIN_SPEC, {NULL}, {"PHALANX_STEP=1"}, 0, VALUES_DEFAULT, "ignoring PHALANX_STEP:"}, /* a prefix is no flag */
    /* --help: every flag with its range and default */
    {MAIN_SPEC, {"--help"}, {NULL}, 0, "usage: test-prog", ""},
    {MAIN_SPEC, {"--steps", "0", "-h"}, {NULL}, 0, "--steps N", ""},
    {MAIN_SPEC, {"--help"}, {NULL}, 0, "steps, 1..100 [10]", ""},
    {MAIN_SPEC, {"--help"}, {NULL}, 0, "--mode sync|diloco|auto", ""},
    {MAIN_SPEC, {"--help"}, {NULL}, 0, "PHALANX_", ""},
    /* a flag passed on: checked with the borrowed entry, kept as given */
    {PASS_SPEC, {NULL}, {NULL}, 0, "steps=10 on=- rest=0", ""},
    {PASS_SPEC, {"--steps", "05", "--on"}, {NULL}, 0, "steps=05 on=--on rest=0", ""},
    {PASS_SPEC, {"--steps", "0"}, {NULL}, 2, "", "pass-prog: --steps: bad value '0': expected an integer in [1, 100]"},
    {PASS_SPEC, {"--steps", "2", "--", "--steps", "0", "x"}, {NULL}, 0, "steps=2 on=- rest=3", ""},
    {PASS_SPEC, {"--help"}, {NULL}, 0, "passed on, 1..100 [10]", ""},
    {PASS_SPEC, {NULL}, {"PHALANX_STEPS=3"}, 0, "steps=10 ", ""}, /* this program reads no environment */
};

static const px_flags_spec_t *spec_of(int which, cfg_t *cfg, pass_t *pass) {
    static px_flag_section_t main_sections[1], pass_sections[1];
    static px_flags_spec_t specs[2];
    main_sections[0] = (px_flag_section_t){&MAIN_TABLE, cfg, NULL};
    pass_sections[0] = (px_flag_section_t){&PASS_TABLE, pass, NULL};
    specs[MAIN_SPEC] = (px_flags_spec_t){.prog = "test-prog", .usage = "usage: test-prog [flags]\n",
                                         .sections = main_sections, .n_sections = 1, .env = 1};
    specs[PASS_SPEC] = (px_flags_spec_t){.prog = "pass-prog", .usage = "usage: pass-prog [flags] [-- flags]\n",
                                         .sections = pass_sections, .n_sections = 1, .rest = 1};
    return &specs[which];
}

/* The child: parse, print what was parsed. */
static void child(const case_t *c) {
    extern char **environ;
    for (char **e = environ; *e;) { /* a clean PHALANX_ environment, then the case's */
        if (!strncmp(*e, "PHALANX_", 8)) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(strcspn(*e, "=")), *e);
            unsetenv(name);
        } else {
            e++;
        }
    }
    for (int i = 0; c->env[i]; i++) putenv((char *)c->env[i]);
    char *argv[44] = {"prog"};
    int argc = 1;
    for (int i = 0; c->args[i]; i++) argv[argc++] = (char *)c->args[i];
    cfg_t cfg = {.http = {.port = -1}};
    pass_t pass = {0};
    px_flags_parsed_t p;
    px_flags_parse(spec_of(c->spec, &cfg, &pass), argc, argv, &p);
    if (c->spec == PASS_SPEC) {
        printf("steps=%s on=%s rest=%d\n", pass.steps ? pass.steps : "-", pass.on ? pass.on : "-", p.n_rest);
        exit(0);
    }
    printf("steps=%d window_ms=%lld lr=%g beta=%g name=%s on=%d mode=%d http=%s:%d types=%d", cfg.steps,
           (long long)cfg.window_ms, cfg.lr, cfg.beta, cfg.name ? cfg.name : "-", cfg.on, cfg.mode,
           cfg.http.port >= 0 ? cfg.http.host : "-", cfg.http.port, cfg.types.n);
    for (int i = 0; i < cfg.types.n; i++) printf("%c%s", i ? ',' : ':', cfg.types.v[i]);
    printf("\n");
    exit(0);
}

static void drain(int fd, char *buf, size_t cap) {
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(fd);
}

/* Runs a case; its exit status, or -1 when it could not run or did not exit. */
static int run(const case_t *c, char *out, size_t outcap, char *err, size_t errcap) {
    int po[2], pe[2];
    if (pipe(po) || pipe(pe)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(po[1], 1), dup2(pe[1], 2);
        close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
        child(c);
    }
    close(po[1]), close(pe[1]);
    drain(po[0], out, outcap); /* the outputs are small: the child never blocks on a full pipe */
    drain(pe[0], err, errcap);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static void describe(const case_t *c, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s", c->spec == PASS_SPEC ? "pass-prog" : "test-prog");
    for (int i = 0; c->env[i] && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, " [%s]", c->env[i]);
    for (int i = 0; c->args[i] && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, " %s", c->args[i]);
}

static int test_cases(void) {
    int failed = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const case_t *c = &CASES[i];
        char out[16384], err[4096], what[512];
        describe(c, what, sizeof what);
        int status = run(c, out, sizeof out, err, sizeof err);
        CHECK(status == c->status, "%s: exit %d, want %d (stderr: %s)", what, status, c->status, err);
        CHECK(strstr(out, c->out) != NULL, "%s: stdout lacks '%s': %s", what, c->out, out);
        CHECK(strstr(err, c->err) != NULL, "%s: stderr lacks '%s': %s", what, c->err, err);
    }
    return failed;
}

/* --help names every flag of the table, each with a default or a note in brackets. */
static int test_help_lists_every_flag(void) {
    int failed = 0;
    static const case_t help = {MAIN_SPEC, {"--help"}, {NULL}, 0, "", ""};
    char out[16384], err[4096];
    CHECK(run(&help, out, sizeof out, err, sizeof err) == 0, "--help exits 0");
    for (int i = 0; i < MAIN_TABLE.n; i++) {
        const px_flag_t *f = &MAIN_TABLE.flags[i];
        const char *line = strstr(out, f->name);
        CHECK(line != NULL, "--help lists %s", f->name);
        if (!line) continue;
        const char *next = strstr(line, "\n  -");
        const char *open = strchr(line, '[');
        CHECK(open && (!next || open < next), "--help shows %s's default in brackets", f->name);
        const char *want = f->note ? f->note : f->def ? f->def : "off";
        CHECK(open && !strncmp(open + 1, want, strlen(want)), "--help shows %s's default as [%s]", f->name, want);
    }
    return failed;
}

int main(void) {
    int failed = test_cases() + test_help_lists_every_flag();
    printf("test_flags: %zu cases, %d failed\n", sizeof CASES / sizeof *CASES, failed);
    return failed ? 1 : 0;
}
