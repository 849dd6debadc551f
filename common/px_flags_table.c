/* The table parser of px_flags.h: defaults, PHALANX_* variables, the
 * command line, and --help, all read from the same px_flag_t entries.
 *
 * Values are stored through the entry's offset and size in the section's
 * struct, so one table serves every program whose struct it describes (both
 * trainers fill a px_trainer_config_t). A PX_FLAG_LIKE entry belongs to a
 * program that passes the flag on: the value is checked by the other
 * program's entry of the same name (same range, same words) and kept as the
 * text given, to be passed on unchanged. */
#include "px_flags.h"
#include "px_version.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HELP_WIDTH 100  /* --help's lines wrap before this column */
#define HELP_COLUMN 30  /* help text starts here, or after the flag when the flag is longer */
#define ENV_PREFIX "PHALANX_"

/* ---- entries ------------------------------------------------------------------ */

static void table_error(const px_flag_t *f, const char *why) __attribute__((noreturn));
static void table_error(const px_flag_t *f, const char *why) {
    fprintf(stderr, "flag table: %s: %s\n", f->name, why);
    abort();
}

/* The entry that checks a LIKE entry's value. */
static const px_flag_t *borrowed(const px_flag_t *f) {
    for (int i = 0; f->like && i < f->like->n; i++)
        if (!strcmp(f->like->flags[i].name, f->name)) return &f->like->flags[i];
    table_error(f, "PX_FLAG_LIKE names a table without this flag");
}

/* What the entry does with a value (a LIKE entry: what the one it borrows does). */
static const px_flag_t *checker(const px_flag_t *f) { return f->kind == PX_FLAG_LIKE ? borrowed(f) : f; }

static int takes_value(const px_flag_t *f) { return checker(f)->kind != PX_FLAG_SWITCH; }

static void put_int(const px_flag_t *f, void *dst, int64_t v) {
    if (f->size == sizeof(int)) *(int *)dst = (int)v;
    else if (f->size == sizeof(int64_t)) *(int64_t *)dst = v;
    else table_error(f, "an integer flag needs an int or int64_t");
}

static int64_t get_int(const px_flag_t *f, const void *src) {
    return f->size == sizeof(int) ? *(const int *)src : *(const int64_t *)src;
}

/* "a, b or c" */
static void join_words(const char *const *w, const char *last_sep, const char *sep, char *out, size_t len) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; w[i] && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%s", i == 0 ? "" : w[i + 1] ? sep : last_sep, w[i]);
}

/* A value that is not one of the words an entry takes. */
static void not_one_of(const char *prog, const char *label, const char *val, const char *expect)
    __attribute__((noreturn));
static void not_one_of(const char *prog, const char *label, const char *val, const char *expect) {
    fprintf(stderr, "%s: %s: bad value '%s': expected %s\n", prog, label, val, expect);
    exit(2);
}

/* Checks val with entry f and stores it at dst; `label` names the flag in
 * messages ("--rank", or "--rank (from PHALANX_RANK)"). */
static void store(const char *prog, const px_flag_t *f, const char *label, const char *val, void *dst) {
    switch (f->kind) {
    case PX_FLAG_INT: {
        int64_t v = px_flag_int(prog, label, val, f->min, f->max);
        put_int(f, dst, f->scale ? v * (int64_t)f->scale : v);
        break;
    }
    case PX_FLAG_REAL: {
        double v = px_flag_double(prog, label, val, f->lo, f->hi) * (f->scale ? f->scale : 1);
        if (f->size == sizeof(float)) *(float *)dst = (float)v;
        else if (f->size == sizeof(double)) *(double *)dst = v;
        else table_error(f, "a real flag needs a float or double");
        break;
    }
    case PX_FLAG_STR: {
        if (f->valid && !f->valid(px_flag_need(prog, label, val))) not_one_of(prog, label, val, f->expect);
        *(const char **)dst = px_flag_str(prog, label, val, (int)f->max);
        char why[512];
        if (f->check && f->check(val, why, sizeof why) != 0) {
            fprintf(stderr, "%s: %s: bad value '%s': %s\n", prog, label, val, why);
            exit(2);
        }
        break;
    }
    case PX_FLAG_SWITCH:
        *(int *)dst = 1;
        break;
    case PX_FLAG_CHOICE: {
        px_flag_need(prog, label, val);
        int i = 0;
        while (f->words[i] && strcmp(f->words[i], val)) i++;
        if (!f->words[i]) {
            char expect[256];
            join_words(f->words, " or ", ", ", expect, sizeof expect);
            not_one_of(prog, label, val, expect);
        }
        *(int *)dst = i;
        break;
    }
    case PX_FLAG_HOSTPORT: {
        px_hostport_t *hp = dst;
        hp->port = f->min ? px_flag_hostport(prog, label, val, hp->host, sizeof hp->host)
                          : px_flag_hostport0(prog, label, val, hp->host, sizeof hp->host);
        break;
    }
    case PX_FLAG_TOKEN_FILE:
        free(*(char **)dst);
        *(char **)dst = px_flag_token_file(prog, label, val);
        break;
    case PX_FLAG_LIST: {
        px_flag_list_t *l = dst;
        if (l->n == PX_FLAG_LIST_MAX) {
            fprintf(stderr, "%s: %s: at most %d values (see %s --help)\n", prog, label, PX_FLAG_LIST_MAX, prog);
            exit(2);
        }
        l->v[l->n++] = px_flag_str(prog, label, val, (int)f->max);
        break;
    }
    case PX_FLAG_LIKE: {
        const px_flag_t *b = borrowed(f);
        union {
            int64_t i;
            double d;
            char *s;
            px_hostport_t hp;
            px_flag_list_t l;
        } scratch;
        memset(&scratch, 0, sizeof scratch);
        store(prog, b, label, val, &scratch);
        if (b->kind == PX_FLAG_TOKEN_FILE) free(scratch.s);
        *(const char **)dst = b->kind == PX_FLAG_SWITCH ? f->name : val;
        break;
    }
    }
}

/* ---- the program's tables ------------------------------------------------------ */

typedef struct {
    const px_flag_t *f;
    void *dst;
} found_t;

static found_t find(const px_flags_spec_t *s, const char *name, size_t name_len) {
    for (int k = 0; k < s->n_sections; k++) {
        const px_flag_section_t *sec = &s->sections[k];
        for (int i = 0; i < sec->table->n; i++) {
            const px_flag_t *f = &sec->table->flags[i];
            if (strlen(f->name) == name_len && !strncmp(f->name, name, name_len))
                return (found_t){f, (char *)sec->base + f->offset};
        }
    }
    return (found_t){NULL, NULL};
}

static void apply_defaults(const px_flags_spec_t *s) {
    for (int k = 0; k < s->n_sections; k++)
        for (int i = 0; i < s->sections[k].table->n; i++) {
            const px_flag_t *f = &s->sections[k].table->flags[i];
            const char *def = f->def ? f->def : f->kind == PX_FLAG_LIKE ? borrowed(f)->def : NULL;
            if (def) store(s->prog, f, f->name, def, (char *)s->sections[k].base + f->offset);
        }
}

/* Is the flag on the command line (before a "--" that ends the flags)? */
static int on_command_line(const px_flags_spec_t *s, int argc, char **argv, const char *flag) {
    size_t n = strlen(flag);
    for (int i = 1; i < argc; i++) {
        if (s->rest && !strcmp(argv[i], "--")) break;
        if (!strncmp(argv[i], flag, n) && (argv[i][n] == '\0' || argv[i][n] == '=')) return 1;
    }
    return 0;
}

/* ---- the environment ------------------------------------------------------------ */

typedef struct {
    found_t at;
    char *label;   /* "--rank (from PHALANX_RANK)" */
    const char *val;
} env_flag_t;

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

extern char **environ;

/* The PHALANX_ variables that give flags of this program, sorted by name
 * (the same order whatever the environment's); reports the others. Returns
 * how many were put in out[]. */
static int read_env(const px_flags_spec_t *s, int argc, char **argv, env_flag_t **out) {
    int n_vars = 0;
    for (char **e = environ; *e; e++) n_vars += !strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX));
    const char **vars = calloc((size_t)n_vars + 1, sizeof *vars);
    *out = calloc((size_t)n_vars + 1, sizeof **out);
    if (!vars || !*out) {
        fprintf(stderr, "%s: out of memory reading %s variables\n", s->prog, ENV_PREFIX);
        exit(2);
    }
    n_vars = 0;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX))) vars[n_vars++] = *e;
    qsort(vars, (size_t)n_vars, sizeof *vars, cmp_str);
    int n = 0;
    for (int i = 0; i < n_vars; i++) {
        const char *eq = strchr(vars[i], '=');
        size_t name_len = (size_t)(eq - vars[i]);
        char var[80], flag[80];
        if (name_len >= sizeof var) {
            fprintf(stderr, "%s: ignoring %.40s...: no flag has so long a name\n", s->prog, vars[i]);
            continue;
        }
        memcpy(var, vars[i], name_len);
        var[name_len] = '\0';
        /* PHALANX_CHECKPOINT_DIR -> --checkpoint-dir */
        size_t p = strlen(ENV_PREFIX);
        flag[0] = flag[1] = '-';
        for (size_t k = p; k < name_len; k++)
            flag[k - p + 2] = var[k] == '_' ? '-' : (char)tolower((unsigned char)var[k]);
        flag[name_len - p + 2] = '\0';
        found_t at = find(s, flag, strlen(flag));
        if (!at.f) { /* not fatal: one environment may serve several programs */
            fprintf(stderr, "%s: ignoring %s: %s has no flag %s (see %s --help)\n", s->prog, var, s->prog, flag,
                    s->prog);
            continue;
        }
        if (on_command_line(s, argc, argv, flag)) continue; /* that one wins; this value is not even checked */
        char *label = malloc(strlen(flag) + strlen(var) + 16);
        if (!label) {
            fprintf(stderr, "%s: out of memory reading %s variables\n", s->prog, ENV_PREFIX);
            exit(2);
        }
        sprintf(label, "%s (from %s)", flag, var);
        const char *val = eq + 1;
        if (!takes_value(at.f)) {
            if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "")) {
                free(label);
                continue;
            }
            if (strcmp(val, "1") && strcmp(val, "true")) {
                fprintf(stderr, "%s: %s: bad value '%s': expected 1, true, 0, false or nothing (see %s --help)\n",
                        s->prog, label, val, s->prog);
                exit(2);
            }
            val = NULL;
        }
        (*out)[n++] = (env_flag_t){at, label, val};
    }
    free(vars);
    return n;
}

/* ---- parsing -------------------------------------------------------------------- */

static void help_if_asked(const px_flags_spec_t *s, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (s->rest && !strcmp(argv[i], "--")) return;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            px_flags_help(s, stdout);
            exit(0);
        }
        if (!strcmp(argv[i], "--version")) {
            printf("%s %s\n", s->prog, px_version());
            exit(0);
        }
    }
}

void px_flags_parse(const px_flags_spec_t *s, int argc, char **argv, px_flags_parsed_t *out) {
    memset(out, 0, sizeof *out);
    apply_defaults(s);
    env_flag_t *env = NULL;
    int n_env = s->env ? read_env(s, argc, argv, &env) : 0;
    help_if_asked(s, argc, argv);
    out->operands = calloc((size_t)argc + 1, sizeof *out->operands);
    out->given = calloc((size_t)(argc + n_env) + 1, sizeof *out->given);
    if (!out->operands || !out->given) {
        fprintf(stderr, "%s: out of memory\n", s->prog);
        exit(2);
    }
    for (int i = 0; i < n_env; i++) {
        store(s->prog, env[i].at.f, env[i].label, env[i].val, env[i].at.dst);
        out->given[out->n_given++] = env[i].at.f;
        free(env[i].label);
    }
    free(env);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (s->rest && !strcmp(a, "--")) {
            out->rest = argv + i + 1;
            out->n_rest = argc - i - 1;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (s->max_operands >= 0 && out->n_operands == s->max_operands) {
                fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", s->prog, a, s->prog);
                exit(2);
            }
            out->operands[out->n_operands++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        found_t at = find(s, a, eq ? (size_t)(eq - a) : strlen(a));
        if (!at.f) px_flag_unknown(s->prog, a);
        const char *val = NULL;
        if (takes_value(at.f)) {
            val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        } else if (eq) {
            fprintf(stderr, "%s: flag %s takes no value (see %s --help)\n", s->prog, at.f->name, s->prog);
            exit(2);
        }
        store(s->prog, at.f, at.f->name, val, at.dst);
        out->given[out->n_given++] = at.f;
    }
}

int px_flags_given(const px_flags_parsed_t *p, const char *name) {
    for (int i = 0; i < p->n_given; i++)
        if (!strcmp(p->given[i]->name, name)) return 1;
    return 0;
}

const px_flag_t *px_flags_last_given(const px_flags_parsed_t *p, const px_flag_table_t *t) {
    for (int i = p->n_given - 1; i >= 0; i--)
        if (p->given[i] >= t->flags && p->given[i] < t->flags + t->n) return p->given[i];
    return NULL;
}

/* ---- --help ---------------------------------------------------------------------- */

/* "--mode sync|diloco|auto" */
static void flag_and_arg(const px_flag_t *f, char *out, size_t len) {
    const px_flag_t *c = checker(f);
    char words[256] = "";
    if (c->kind == PX_FLAG_CHOICE) join_words(c->words, "|", "|", words, sizeof words);
    const char *arg = f->arg ? f->arg : c->kind == PX_FLAG_CHOICE ? words : c->arg;
    snprintf(out, len, "%s%s%s", f->name, arg && c->kind != PX_FLAG_SWITCH ? " " : "",
             arg && c->kind != PX_FLAG_SWITCH ? arg : "");
}

static void range_of(const px_flag_t *f, char *out, size_t len) {
    out[0] = '\0';
    if (f->kind == PX_FLAG_INT && f->max == INT64_MAX) snprintf(out, len, ">= %lld", (long long)f->min);
    else if (f->kind == PX_FLAG_INT) snprintf(out, len, "%lld..%lld", (long long)f->min, (long long)f->max);
    else if (f->kind == PX_FLAG_REAL) snprintf(out, len, "%g..%g", f->lo, f->hi);
}

/* What --help shows in brackets: the note, the default, or the destination's
 * value before parsing (its program's or library's default). NULL: nothing. */
static const char *default_of(const px_flag_t *f, const void *base, char *buf, size_t len) {
    if (f->note || f->def) return f->note ? f->note : f->def;
    if (f->kind == PX_FLAG_LIKE) return default_of(borrowed(f), NULL, buf, len);
    if (f->kind == PX_FLAG_SWITCH) return "off";
    if (!base) return NULL;
    const void *v = (const char *)base + f->offset;
    double scale = f->scale ? f->scale : 1;
    if (f->kind == PX_FLAG_INT) {
        snprintf(buf, len, "%lld", (long long)(get_int(f, v) / (int64_t)scale));
    } else if (f->kind == PX_FLAG_REAL) {
        double d = f->size == sizeof(float) ? *(const float *)v : *(const double *)v;
        if (isnan(d)) return NULL;
        snprintf(buf, len, "%g", d / scale);
    } else if (f->kind == PX_FLAG_CHOICE) {
        int i = *(const int *)v, n = 0;
        while (f->words[n]) n++;
        return i >= 0 && i < n ? f->words[i] : NULL;
    } else if (f->kind == PX_FLAG_STR) {
        return *(const char *const *)v;
    } else {
        return NULL;
    }
    return buf;
}

/* Writes text from column `at`, wrapping at spaces before HELP_WIDTH to
 * lines indented to `col`. */
static void wrap(FILE *to, const char *text, int at, int col) {
    int first = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        int n = (int)strcspn(p, " ");
        if (!n) break;
        if (!first && at + 1 + n > HELP_WIDTH) {
            fprintf(to, "\n%*s", col, "");
            at = col;
        } else if (!first) {
            fputc(' ', to);
            at++;
        }
        fwrite(p, 1, (size_t)n, to);
        at += n;
        p += n;
        first = 0;
    }
    fputc('\n', to);
}

static void help_line(FILE *to, const char *left, const char *body, int col) {
    int at = fprintf(to, "  %s", left);
    if (at + 2 > col) at += fprintf(to, "  ");
    else at += fprintf(to, "%*s", col - at, "");
    wrap(to, body, at, col);
}

static void help_entry(FILE *to, const px_flag_t *f, const void *base, int col) {
    char left[160], range[96], dbuf[64], body[2048];
    flag_and_arg(f, left, sizeof left);
    range_of(checker(f), range, sizeof range);
    const char *def = default_of(f, base, dbuf, sizeof dbuf);
    const char *help = f->help ? f->help : "";
    snprintf(body, sizeof body, "%s%s%s%s%s%s", help, range[0] && help[0] ? ", " : "", range, def ? " [" : "",
             def ? def : "", def ? "]" : "");
    help_line(to, left, body, col);
}

static int help_column(const px_flags_spec_t *s) {
    int col = 0;
    for (int k = 0; k < s->n_sections; k++)
        for (int i = 0; i < s->sections[k].table->n; i++) {
            char left[160];
            flag_and_arg(&s->sections[k].table->flags[i], left, sizeof left);
            int w = 2 + (int)strlen(left) + 2;
            if (w > col && w <= HELP_COLUMN) col = w;
        }
    return col ? col : HELP_COLUMN;
}

void px_flags_help(const px_flags_spec_t *s, FILE *to) {
    int col = help_column(s);
    fputs(s->usage, to);
    for (int k = 0; k < s->n_sections; k++) {
        const px_flag_section_t *sec = &s->sections[k];
        const char *heading = sec->heading ? sec->heading : sec->table->heading;
        if (heading && heading[0]) {
            fputc('\n', to);
            wrap(to, heading, 0, 0);
        }
        for (int i = 0; i < sec->table->n; i++) help_entry(to, &sec->table->flags[i], sec->base, col);
    }
    help_line(to, "-h, --help", "this text", col);
    help_line(to, "--version", "the version (git describe of the source it was built from)", col);
    if (s->env)
        fputs("\nEvery flag can also be given as an environment variable: " ENV_PREFIX " and its name in upper\n"
              "case, '_' for '-' (" ENV_PREFIX "CHECKPOINT_DIR=DIR for --checkpoint-dir DIR; 1 or true turns a\n"
              "switch on, 0, false or nothing leaves it off); the command line wins.\n", to);
    if (s->epilogue) fprintf(to, "\n%s", s->epilogue);
}
