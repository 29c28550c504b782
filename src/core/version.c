/* mla_version(): the header's version macros, spelled out at build time, so
 * the number lives in one place (include/mla.h; the Makefile reads it from
 * there for the soname, mla.pc and the CMake package). */
#include "mla.h"

#define VERSION_TEXT_(major, minor, patch) #major "." #minor "." #patch
#define VERSION_TEXT(major, minor, patch) VERSION_TEXT_(major, minor, patch)

const char *mla_version(void)
{
    return VERSION_TEXT(MLA_VERSION_MAJOR, MLA_VERSION_MINOR, MLA_VERSION_PATCH);
}
