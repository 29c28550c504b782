#!/bin/sh
# make check-install: install libmla as a server author would use it, and
# link it every documented way (README.md, Linking).
#
#   CC=clang BUILD=build/clang tools/install_check.sh   (make check-install CC=clang ...)
#
# 1. `make install DESTDIR=<temp> PREFIX=<unused path>` puts every file under
#    DESTDIR and nothing at PREFIX; the installed files name PREFIX; the
#    shared library has the soname libmla.so.MAJOR and the symlinks
#    libmla.so -> libmla.so.MAJOR -> libmla.so.MAJOR.MINOR.PATCH.
# 2. Both pkg-config modules and the CMake package carry include/mla.h's
#    version and the OpenMP runtime of CC (gcc: libgomp, clang: libomp).
# 3. A small server (it runs OpenMP regions of its own around a libmla call)
#    is built with CC -fopenmp four ways: `pkg-config --libs mla` (libmla.so),
#    `pkg-config --libs mla-static` (libmla.a), and CMake's find_package(mla)
#    with mla::mla_shared and mla::mla_static; and once more through
#    mla-static without -fopenmp (a server with no OpenMP of its own, which
#    does not make clang name its libomp folder). Each must run with a team of 2
#    in its own regions (a second OpenMP runtime in the process leaves it 1),
#    find mla_version() equal to the header's, load CC's runtime and not the
#    other (ldd), and load libmla.so exactly when it linked it.
# 4. Building with another CC in the same build folder rewrites mla.pc (with
#    both gcc and clang installed).
set -eu
cd "$(dirname "$0")/.."

CC=${CC:-cc}
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}

fail() {
    echo "check-install: $*" >&2
    exit 1
}

version_part() { sed -n "s/^#define MLA_VERSION_$1 \([0-9][0-9]*\)$/\1/p" include/mla.h; }
major=$(version_part MAJOR)
minor=$(version_part MINOR)
version=$major.$minor.$(version_part PATCH)

if $CC --version 2>/dev/null | grep -q clang; then
    runtime=libomp other=libgomp
else
    runtime=libgomp other=libomp
fi
command -v cmake >/dev/null || fail "cmake not found: apt-get install -y cmake"
command -v pkg-config >/dev/null || fail "pkg-config not found: apt-get install -y pkg-config"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=/opt/mla-check-install-$$
root=$tmp/dest$prefix
lib=$root/lib

echo "check-install: $CC ($runtime), libmla $version, make install DESTDIR=$tmp/dest PREFIX=$prefix"
$MAKE -s CC="$CC" BUILD="$BUILD" DESTDIR="$tmp/dest" PREFIX="$prefix" install >/dev/null

# ---- 1. the installed files ---------------------------------------------
[ ! -e "$prefix" ] || fail "make install wrote $prefix itself, not only under DESTDIR"
for f in include/mla.h include/mla_backend.h lib/libmla.a lib/libmla.so.$version \
         lib/pkgconfig/mla.pc lib/pkgconfig/mla-static.pc \
         lib/cmake/mla/mla-config.cmake lib/cmake/mla/mla-config-version.cmake; do
    [ -f "$root/$f" ] || fail "$f was not installed"
done
[ "$(readlink "$lib/libmla.so")" = "libmla.so.$major" ] || fail "libmla.so does not link to libmla.so.$major"
[ "$(readlink "$lib/libmla.so.$major")" = "libmla.so.$version" ] ||
    fail "libmla.so.$major does not link to libmla.so.$version"
soname=$(readelf -d "$lib/libmla.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libmla.so.$major" ] || fail "libmla.so's soname is '$soname', not libmla.so.$major"
grep -qx "prefix=$prefix" "$lib/pkgconfig/mla.pc" || fail "mla.pc does not name prefix=$prefix"

# ---- 2. versions and the OpenMP runtime ---------------------------------
export PKG_CONFIG_LIBDIR="$lib/pkgconfig" PKG_CONFIG_PATH=
pc() { pkg-config --define-variable=prefix="$root" "$@"; }
flag=-l${runtime#lib}
for m in mla mla-static; do
    [ "$(pc --modversion $m)" = "$version" ] || fail "$m.pc says version $(pc --modversion $m), mla.h $version"
    [ "$(pc --variable=openmp $m)" = "$runtime" ] || fail "$m.pc says openmp=$(pc --variable=openmp $m), not $runtime"
    pc --static --libs $m | tr ' ' '\n' | grep -qx -- "$flag" || fail "pkg-config --static --libs $m lacks $flag"
    pc --static --libs $m | tr ' ' '\n' | grep -qx -- "-l${other#lib}" && fail "$m.pc names $other"
done
pc --libs mla-static | tr ' ' '\n' | grep -qx -- "$lib/libmla.a" || fail "pkg-config --libs mla-static does not name libmla.a"

# ---- 3. a server, linked four ways ----------------------------------------
cat >"$tmp/server.c" <<'EOF'
/* A server's parallel regions around a libmla call: each must get the team
 * it asks for, which it does not when two OpenMP runtimes are loaded. Built
 * without -fopenmp, it is a server that runs no OpenMP of its own. */
#include <mla.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>

static int server_team(void)
{
    int team = 0;
#pragma omp parallel num_threads(2)
#pragma omp single
    team = omp_get_num_threads();
    return team;
}
#else
static int server_team(void) { return 2; }
#endif

int main(void)
{
    static float x[1 << 14];
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", MLA_VERSION_MAJOR, MLA_VERSION_MINOR, MLA_VERSION_PATCH);
    int before = server_team();
    mla_status status = mla_exp_f32(x, x, 1 << 14, 2);
    int after = server_team();
    printf("libmla %s: status %s, server teams %d and %d\n", mla_version(), mla_status_str(status),
           before, after);
    return status != MLA_OK || strcmp(mla_version(), want) != 0 || before != 2 || after != 2;
}
EOF

# check BINARY shared|static: runs it and reads what it loads
check() {
    ldd "$1" >"$1.ldd"
    "$1" || fail "$(basename "$1") failed (its output is above; it loads: $(grep -o 'lib[a-z]*omp[^ ]*' "$1.ldd" | tr '\n' ' '))"
    grep -q "$runtime" "$1.ldd" || fail "$(basename "$1") does not load $runtime"
    ! grep -q "$other" "$1.ldd" || fail "$(basename "$1") loads $other beside $runtime"
    if [ "$2" = shared ]; then
        grep -q "libmla.so.$major => $lib/libmla.so.$major" "$1.ldd" ||
            fail "$(basename "$1") does not load $lib/libmla.so.$major"
    elif grep -q libmla "$1.ldd"; then
        fail "$(basename "$1") links libmla dynamically: $(grep libmla "$1.ldd")"
    fi
    echo "check-install: $(basename "$1"): ok"
}

# shellcheck disable=SC2046 # pkg-config's output is a list of flags
$CC -fopenmp "$tmp/server.c" -o "$tmp/pkg-config-shared" $(pc --cflags --libs mla)
LD_LIBRARY_PATH=$lib check "$tmp/pkg-config-shared" shared
# shellcheck disable=SC2046
$CC -fopenmp "$tmp/server.c" -o "$tmp/pkg-config-static" $(pc --cflags --libs mla-static)
check "$tmp/pkg-config-static" static
# shellcheck disable=SC2046
$CC "$tmp/server.c" -o "$tmp/pkg-config-static-no-openmp" $(pc --cflags --libs mla-static)
check "$tmp/pkg-config-static-no-openmp" static

# The first two find_package calls must fail: a later major, a later minor.
cat >"$tmp/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.13)
project(mla_install_check C)
find_package(OpenMP REQUIRED)
foreach(too_new $((major + 1)).0 $major.$((minor + 1)))
    find_package(mla \${too_new} QUIET CONFIG)
    if(mla_FOUND)
        message(FATAL_ERROR "find_package(mla \${too_new}) accepted libmla $version")
    endif()
endforeach()
find_package(mla $major.$minor REQUIRED CONFIG)
if(NOT mla_VERSION STREQUAL "$version" OR NOT MLA_OPENMP_RUNTIME STREQUAL "$runtime")
    message(FATAL_ERROR "the CMake package says \${mla_VERSION} and \${MLA_OPENMP_RUNTIME}, not $version and $runtime")
endif()
add_executable(cmake-shared server.c)
target_link_libraries(cmake-shared PRIVATE mla::mla_shared OpenMP::OpenMP_C)
add_executable(cmake-static server.c)
target_link_libraries(cmake-static PRIVATE mla::mla_static OpenMP::OpenMP_C)
EOF
cmake -S "$tmp" -B "$tmp/cmake" -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$root" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; fail "cmake could not configure against the installed package"; }
cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "cmake --build failed"; }
check "$tmp/cmake/cmake-shared" shared
check "$tmp/cmake/cmake-static" static

# ---- 4. another CC in the same build folder -------------------------------
if command -v gcc >/dev/null && command -v clang >/dev/null; then
    $MAKE -s CC=gcc BUILD="$tmp/switch" "$tmp/switch/mla.pc"
    $MAKE -s CC=clang BUILD="$tmp/switch" "$tmp/switch/mla.pc"
    grep -qx 'openmp=libomp' "$tmp/switch/mla.pc" || fail "make CC=clang after gcc in one folder kept gcc's mla.pc"
    echo "check-install: mla.pc follows CC in one build folder: ok"
else
    echo "check-install: skipped the CC switch (it needs gcc and clang)"
fi
echo "check-install: ok ($CC, $runtime)"
