/* px_sim figures: reads the figures JSON (figures.h) with jansson. The only
 * file I/O of the simulator's library; sim.c stays pure. */
#include "figures.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

int px_sim_figures_load(const char *path, px_sim_config_t *c, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return snprintf(err, errlen, "cannot read figures '%s': %s (line %d)", path, je.text, je.line), -1;
    struct {
        const char *key;
        double *dst;
    } keys[] = {
        {"detect_s", &c->detect_s},
        {"requorum_s", &c->requorum_s},
        {"promotion_s", &c->promotion_s},
        {"heal_bytes_per_s", &c->heal_bytes_per_s},
        {"checkpoint_write_bytes_per_s", &c->checkpoint_write_bytes_per_s},
        {"checkpoint_hold_bytes_per_s", &c->checkpoint_hold_bytes_per_s},
    };
    int rc = 0;
    const char *key;
    json_t *v;
    if (!json_is_object(root)) {
        rc = -1, snprintf(err, errlen, "figures '%s': not a JSON object", path);
        goto out;
    }
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "source")) continue;
        size_t i = 0;
        while (i < sizeof keys / sizeof keys[0] && strcmp(key, keys[i].key)) i++;
        if (i == sizeof keys / sizeof keys[0]) {
            rc = -1, snprintf(err, errlen, "figures '%s': unknown key '%s'", path, key);
            goto out;
        }
        if (!json_is_number(v) || json_number_value(v) < 0) {
            rc = -1, snprintf(err, errlen, "figures '%s': '%s' must be a number >= 0", path, key);
            goto out;
        }
        *keys[i].dst = json_number_value(v);
    }
out:
    json_decref(root);
    return rc;
}
