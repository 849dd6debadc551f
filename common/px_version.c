/* The build's version (px_version.h), from the header cmake/version.cmake
 * writes at build time. */
#include "px_version.h"

#include "px_version_text.h"

const char *px_version(void) { return PX_VERSION; }
