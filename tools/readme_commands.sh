#!/bin/sh
# make check-readme: nothing README.md shows can go stale.
#
#   tools/readme_commands.sh [README.md [.ci/run [tools/readme_commands.allow [examples/server_step.c]]]]
#
# 1. Every command in README.md's ```sh and ```bash blocks is run by CI as
#    written: .ci/run has the same line, or the allowlist names it with the
#    reason CI cannot run it. Lines are compared after joining backslash
#    continuations, dropping comments and a leading `sudo ` or `$SUDO `
#    (README.md's commands are for root), and collapsing blanks.
# 2. The allowlist holds nothing else: each entry is a command README.md
#    shows and .ci/run does not run, with its reason (indented lines below
#    it and the commands it covers).
# 3. Every ```c block of README.md is a verbatim run of lines of the
#    example program, so a quoted piece of it cannot drift from the file.
set -eu
cd "$(dirname "$0")/.."

readme=${1:-README.md}
ci=${2:-.ci/run}
allow=${3:-tools/readme_commands.allow}
example=${4:-examples/server_step.c}

awk -v readme="$readme" -v ci="$ci" -v allow="$allow" -v example="$example" '
# A command as compared: no comment, no leading sudo, single blanks.
function norm(s) {
    sub(/^#.*/, "", s)
    sub(/[ \t]#.*/, "", s)
    gsub(/[ \t]+/, " ", s)
    sub(/^ /, "", s)
    sub(/ $/, "", s)
    sub(/^(sudo|\$SUDO) /, "", s)
    return s
}
# Joins continuation lines: returns 1 when `logical` holds a whole line,
# which began at line `start` of the file.
function join(line) {
    if (pending == "")
        start = FNR
    else
        line = pending " " line
    if (line ~ /\\[ \t]*$/) {
        sub(/\\[ \t]*$/, "", line)
        pending = line
        return 0
    }
    pending = ""
    logical = line
    return 1
}
function fail(msg) {
    print "check-readme: " msg > "/dev/stderr"
    failed = 1
}
FNR == 1 { pending = ""; block = "" }

FILENAME == ci {
    if (join($0) && (c = norm(logical)) != "")
        run[c] = 1
    next
}

# Commands, one a line, then their reason on indented lines: the reason
# covers every command since the last reason.
FILENAME == allow {
    if ($0 ~ /^#/ || $0 ~ /^[ \t]*$/)
        next
    if ($0 ~ /^[ \t]/) {
        if (group == 0)
            fail(allow ":" FNR ": a reason with no command above it")
        for (i = 1; i <= group; i++)
            why[member[i]] = why[member[i]] $0
        reasoned = 1
        next
    }
    if (reasoned)
        group = reasoned = 0
    member[++group] = norm($0)
    listed[member[group]] = FNR
    next
}

FILENAME == example {
    source = source $0 "\n"
    next
}

FILENAME == readme {
    if (block == "") {
        if ($0 ~ /^```(sh|bash)[ \t]*$/)
            block = "sh"
        else if ($0 ~ /^```c[ \t]*$/) {
            block = "c"
            quote = ""
            quote_start = FNR + 1
        }
        next
    }
    if ($0 ~ /^```/) {
        if (block == "c") {
            quotes[++nquotes] = quote
            quote_at[nquotes] = quote_start
        }
        block = ""
        pending = ""
        next
    }
    if (block == "c") {
        quote = quote $0 "\n"
        next
    }
    if (join($0) && (c = norm(logical)) != "") {
        commands[++ncommands] = c
        command_at[ncommands] = start
    }
}

END {
    by_ci = by_list = 0
    for (i = 1; i <= ncommands; i++) {
        c = commands[i]
        shown[c] = 1
        if (c in run)
            by_ci++
        else if (c in listed)
            by_list++
        else
            fail(readme ":" command_at[i] ": `" c "` is neither run by " ci \
                 " (as written) nor listed in " allow " with the reason CI cannot run it")
    }
    for (c in listed) {
        if (!(c in shown))
            fail(allow ":" listed[c] ": `" c "` is not a command of " readme " any more: remove it")
        else if (c in run)
            fail(allow ":" listed[c] ": `" c "` is run by " ci ": remove it from the list")
        if (why[c] ~ /^[ \t]*$/)
            fail(allow ":" listed[c] ": `" c "` has no reason (indented lines below it)")
    }
    for (i = 1; i <= nquotes; i++)
        if (index(source, quotes[i]) == 0)
            fail(readme ":" quote_at[i] ": the C block there is not a verbatim part of " example)
    if (failed)
        exit 1
    printf "check-readme: %d commands of %s: %d run by %s, %d listed in %s; %d C blocks found in %s\n",
           ncommands, readme, by_ci, ci, by_list, allow, nquotes, example
}
' "$ci" "$allow" "$example" "$readme"
