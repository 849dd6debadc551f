/* Implementation of ctl_event_line.h, with jansson. */
#include "ctl_event_line.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char *p;
    size_t left;
} out_t;

static void put(out_t *o, const char *fmt, ...) {
    if (o->left <= 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p, o->left, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t used = (size_t)n < o->left ? (size_t)n : o->left - 1;
    o->p += used;
    o->left -= used;
}

/* A value as text: strings bare (quoted when they hold a space or are
 * empty), numbers and booleans as JSON writes them, lists of scalars joined
 * with commas, anything else compact JSON. */
static void put_value(out_t *o, const json_t *v) {
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strpbrk(s, " \t\"")) {
            char *q = json_dumps(v, JSON_ENCODE_ANY);
            put(o, "%s", q ? q : "\"\"");
            free(q);
        } else {
            put(o, "%s", s);
        }
        return;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        int scalars = 1;
        json_array_foreach(v, i, x) scalars &= !json_is_object(x) && !json_is_array(x);
        if (scalars && json_array_size(v) > 0) {
            json_array_foreach(v, i, x) {
                if (i) put(o, ",");
                put_value(o, x);
            }
            return;
        }
    }
    char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
    put(o, "%s", d ? d : "?");
    free(d);
}

static int is_envelope(const char *key) {
    static const char *const keys[] = {"v", "type", "seq", "ts", "job", "run", "group", "rank", "step"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i])) return 1;
    return 0;
}

int px_ctl_event_line(const char *json, char *buf, size_t cap) {
    if (cap == 0) return -1;
    out_t o = {buf, cap};
    buf[0] = '\0';
    size_t len = strlen(json);
    while (len && (json[len - 1] == '\n' || json[len - 1] == '\r')) len--;
    json_error_t err;
    json_t *e = json_loadb(json, len, 0, &err);
    if (!json_is_object(e)) {
        json_decref(e);
        put(&o, "%.*s", (int)len, json);
        return -1;
    }
    json_t *ts = json_object_get(e, "ts"), *seq = json_object_get(e, "seq"), *type = json_object_get(e, "type");
    if (json_is_integer(ts)) {
        json_int_t ms = json_integer_value(ts);
        time_t s = (time_t)(ms / 1000);
        struct tm tm;
        char when[32] = "?";
        if (gmtime_r(&s, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        put(&o, "%s.%03dZ", when, (int)(ms % 1000 + 1000) % 1000);
    } else {
        put(&o, "%-24s", "-");
    }
    if (json_is_integer(seq)) put(&o, "  #%-5lld", (long long)json_integer_value(seq));
    put(&o, "  %-20s", json_is_string(type) ? json_string_value(type) : "?");
    json_t *group = json_object_get(e, "group"), *rank = json_object_get(e, "rank"), *step = json_object_get(e, "step");
    if (json_is_string(group) && json_string_value(group)[0]) {
        if (json_is_integer(rank)) put(&o, "  %s/%lld", json_string_value(group), (long long)json_integer_value(rank));
        else put(&o, "  %s", json_string_value(group));
    }
    if (json_is_integer(step)) put(&o, "  step %lld", (long long)json_integer_value(step));
    const char *key;
    json_t *v;
    int first = 1;
    json_object_foreach(e, key, v) {
        if (is_envelope(key)) continue;
        if ((json_is_string(v) && !json_string_value(v)[0]) || (json_is_array(v) && json_array_size(v) == 0))
            continue; /* nothing to say */
        put(&o, first ? "  %s=" : " %s=", key);
        put_value(&o, v);
        first = 0;
    }
    json_decref(e);
    return 0;
}
