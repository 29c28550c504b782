#!/bin/sh
# The layering rule of src/README.md, checked on the include graph of
# include/ and src/: a file includes only files of its own floor or a lower
# one; floor 2's two rooms (kernel drivers, metadata) do not include each
# other; an ISA's micro-kernels do not include another ISA's; and there is no
# cycle. Prints every violation and exits 1 if there is one.
#
#   floor 3  src/dispatch/                        entry points, selection
#   floor 2  src/kernels/common/, src/metadata/   drivers, builders
#   floor 1  src/kernels/<isa>/, src/kernels/*.h  micro-kernels, the list
#   floor 0  src/core/, include/                  ground floor, public types
set -u
cd "$(dirname "$0")/.." || exit 2

# room FILE: the folder that decides a file's floor
room() {
    case "$1" in
    include/*) echo include ;;
    src/core/*) echo core ;;
    src/dispatch/*) echo dispatch ;;
    src/metadata/*) echo metadata ;;
    src/kernels/common/*) echo common ;;
    src/kernels/*/*) echo "isa:$(echo "$1" | cut -d/ -f3)" ;;
    src/kernels/*) echo list ;;
    *) echo unknown ;;
    esac
}

floor() {
    case "$1" in
    include | core) echo 0 ;;
    list | isa:*) echo 1 ;;
    common | metadata) echo 2 ;;
    dispatch) echo 3 ;;
    *) echo 9 ;;
    esac
}

# resolve FROM INCLUDE: the repository path an #include "..." names, as the
# compiler finds it (the including file's folder, then -Isrc, then -Iinclude)
resolve() {
    for dir in "$(dirname "$1")" src include; do
        if [ -f "$dir/$2" ]; then
            echo "$dir/$2" | sed 's|/\./|/|g'
            return
        fi
    done
}

bad=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for file in $(find include src -name '*.[ch]' | sort); do
    from=$(room "$file")
    if [ "$from" = unknown ]; then
        echo "check-layers: $file is in no floor (add its folder to tools/check_layers.sh and src/README.md)"
        bad=1
        continue
    fi
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file"); do
        target=$(resolve "$file" "$inc")
        if [ -z "$target" ]; then
            echo "check-layers: $file includes \"$inc\", which is not in the tree"
            bad=1
            continue
        fi
        echo "$file $target" >>"$edges"
        to=$(room "$target")
        why=""
        if [ "$(floor "$to")" -gt "$(floor "$from")" ]; then
            why="floor $(floor "$from") ($from) includes floor $(floor "$to") ($to)"
        elif [ "$from" != "$to" ] && [ "$(floor "$to")" -eq "$(floor "$from")" ] && [ "$to" != list ] && [ "$to" != include ]; then
            why="$from and $to share a floor and must not include each other"
        fi
        if [ -n "$why" ]; then
            echo "check-layers: $file includes $target: $why"
            bad=1
        fi
    done
done
if ! tsort "$edges" >/dev/null 2>&1; then
    echo "check-layers: the include graph has a cycle:"
    tsort "$edges" 2>&1 >/dev/null | sed 's/^/  /'
    bad=1
fi
if [ "$bad" -eq 0 ]; then
    echo "check-layers: $(wc -l <"$edges") includes, all downward, no cycle"
fi
exit "$bad"
