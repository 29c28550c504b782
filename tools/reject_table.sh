#!/bin/sh
# README.md's table of rejected input, made from the reject tests: every one
# notes (entry point, bad input, status) in the file TEST_REJECT_TABLE names
# (tests/support.h, support_note_reject), and this renders the notes of a run
# of every suite as one table per entry point, in the order include/mla.h and
# include/mla_backend.h declare them, between README.md's marker lines.
#
#   tools/reject_table.sh render RECORDS          the table, on stdout
#   tools/reject_table.sh update RECORDS README   README's table rewritten
#   tools/reject_table.sh check RECORDS README    exit 1, with a diff, unless
#                                                 README's table is the one
#                                                 the records make
#
# An entry point that is not a function of the public headers is an error
# (a misspelt name would make a table of its own). Exits 2 on bad usage.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck disable=SC2016 # the backquotes are Markdown
begin='<!-- reject-table: begin (made by `make reject-table` from the reject tests; edit those, not this) -->'
end='<!-- reject-table: end -->'

usage() {
    echo "usage: $0 render RECORDS | update RECORDS README | check RECORDS README" >&2
    exit 2
}

render() {
    if [ ! -s "$1" ]; then
        echo "reject_table: no records in $1 (run the suites with TEST_REJECT_TABLE=$1)" >&2
        exit 2
    fi
    LC_ALL=C sort -u "$1" | awk -F '\t' -v begin="$begin" -v end="$end" \
        -v headers="$root/include/mla.h $root/include/mla_backend.h" '
    # the public functions in declaration order, and which return a status
    BEGIN {
        split(headers, files, " ")
        for (f = 1; f in files; f++)
            while ((getline line < files[f]) > 0)
                if (line ~ /^MLA_API / && match(line, /[a-z_0-9]+\(/)) {
                    name = substr(line, RSTART, RLENGTH - 1)
                    order[++n] = name
                    known[name] = 1
                    returns_status[name] = line ~ /^MLA_API mla_status /
                }
    }
    NF != 3 { printf "reject_table: a record without 3 fields: %s\n", $0 > "/dev/stderr"; bad = 1; next }
    !($1 in known) {
        printf "reject_table: %s is not a function of include/mla.h or include/mla_backend.h\n", $1 > "/dev/stderr"
        bad = 1
        next
    }
    {
        cell = $2
        gsub(/\|/, "\\|", cell)
        gsub(/</, "\\&lt;", cell)
        rows[$1] = rows[$1] "| " cell " | `" $3 "` |\n"
        count[$1]++
        total++
    }
    END {
        if (bad)
            exit 3
        for (i = 1; i <= n; i++)
            if (order[i] in count)
                entries++
            else if (returns_status[order[i]])
                untried = untried (untried == "" ? "" : ", ") "`" order[i] "`"
        print begin
        printf "%d bad inputs to %d entry points.", total, entries
        if (untried != "")
            printf " Entry points with a status that no test gives bad input: %s.", untried
        print ""
        for (i = 1; i <= n; i++) {
            name = order[i]
            if (!(name in count))
                continue
            print ""
            printf "<details><summary><code>%s</code>: %d bad input%s</summary>\n\n", name,
                   count[name], count[name] == 1 ? "" : "s"
            print "| bad input | status |"
            print "|---|---|"
            printf "%s", rows[name]
            print ""
            print "</details>"
        }
        print end
    }'
}

# The marker lines of README and what lies between them.
readme_table() {
    awk -v begin="$begin" -v end="$end" '
        $0 == begin { inside = 1 }
        inside { print }
        $0 == end { inside = 0 }' "$1"
}

has_markers() {
    grep -qxF "$begin" "$1" && grep -qxF "$end" "$1"
}

[ $# -ge 2 ] || usage
case "$1" in
render)
    [ $# -eq 2 ] || usage
    render "$2"
    ;;
update | check)
    [ $# -eq 3 ] || usage
    records=$2 readme=$3
    if ! has_markers "$readme"; then
        echo "reject_table: $readme lacks the marker lines:" >&2
        printf '  %s\n  %s\n' "$begin" "$end" >&2
        exit 2
    fi
    table=$(mktemp)
    trap 'rm -f "$table" "$table.old" "$table.new"' EXIT
    render "$records" >"$table"
    if [ "$1" = check ]; then
        readme_table "$readme" >"$table.old"
        if ! diff -u --label "$readme" --label "the suites' table" "$table.old" "$table"; then
            echo "check-reject-table: $readme's table of rejected input is not what the suites" \
                 "reject: run \`make reject-table\` and commit $readme"
            exit 1
        fi
        echo "check-reject-table: $readme's table is the suites' $(grep -c '| `MLA_' "$table") rows"
    else
        awk -v begin="$begin" -v end="$end" -v table="$table" '
            $0 == begin { while ((getline line < table) > 0) print line; skip = 1; next }
            $0 == end { skip = 0; next }
            !skip { print }' "$readme" >"$table.new"
        cat "$table.new" >"$readme"
        echo "reject-table: $readme's table rewritten from $records"
    fi
    ;;
*) usage ;;
esac
