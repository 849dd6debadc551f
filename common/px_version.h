/* The build's version, as `--version` prints it: `git describe` of the
 * source tree when it was built (tag, commits since, commit, -dirty), or
 * the project's version without git history. */
#ifndef PX_VERSION_H
#define PX_VERSION_H

const char *px_version(void);

#endif
