/* Documents from what a user hands phalanx-data: text files, folders of them
 * (walked recursively), standard input ("-"), JSON Lines (one document per
 * record, its text under a key), and any of these gzip-compressed. Reading is
 * apart from tokenizing (dataprep.c), so each input kind is tested on its own
 * and every input is checked before anything is written.
 *
 * A text file is one document. A JSONL file (a name ending in .jsonl or
 * .ndjson, before an optional .gz; or any input under --format jsonl) is one
 * document per non-blank line: a JSON object whose `key` field is a string.
 * Compression is recognised by its magic bytes, not by the name. */
#ifndef PX_TEXT_SOURCE_H
#define PX_TEXT_SOURCE_H

#include <stddef.h>

typedef enum {
    PX_TEXT_FORMAT_AUTO, /* by the file name: .jsonl/.ndjson (optionally .gz) are JSONL, the rest text */
    PX_TEXT_FORMAT_TEXT, /* every input is one document */
    PX_TEXT_FORMAT_JSONL /* every input is JSON Lines */
} px_text_format_t;

typedef enum { PX_DOC_FILE, PX_DOC_RECORD } px_doc_kind_t;

/* Receives one document: its source (a path, or "-"), what it is, and its
 * bytes (text[len], not NUL-terminated, any encoding). 0 goes on; -1 stops
 * the reading, with err set. */
typedef int (*px_doc_fn)(void *arg, const char *source, px_doc_kind_t kind, const unsigned char *text, size_t len,
                         char *err, size_t errlen);

/* Expands the inputs into the list of files to read, in order: a file stays,
 * a folder becomes the regular files below it (sorted by path, names starting
 * with '.' skipped), "-" stays (standard input, at most once). Checks that
 * each exists and can be read before anything is read, so a typo is found
 * first: -1 with a message naming the input. *files is NULL-terminated; free
 * it with px_text_files_free. A folder with no files is an error. */
int px_text_inputs_expand(char *const *inputs, int n, char ***files, int *nfiles, char *err, size_t errlen);
void px_text_files_free(char **files);

/* Reads one file (or "-") and hands its documents to fn in order. *bytes
 * grows by the uncompressed bytes read. A JSONL line that is not an object
 * with a string `key` is an error naming the file and line. */
int px_text_source_read(const char *file, px_text_format_t format, const char *key, px_doc_fn fn, void *arg,
                        size_t *bytes, char *err, size_t errlen);

/* Whether the name says JSON Lines (.jsonl, .ndjson, either followed by .gz). */
int px_text_name_is_jsonl(const char *name);

#endif
