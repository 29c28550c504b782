/*
 * mla_bench's run metadata: what produced the numbers that follow (library
 * version and commit, CPU, compiler, the OpenMP and libmla environment, how
 * the ceilings were timed), printed once per run before any row.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `git describe --always --dirty` of the tree mla_bench was built from,
 * passed by the Makefile; "unknown" outside a git checkout. */
#ifndef MLA_BENCH_COMMIT
#define MLA_BENCH_COMMIT "unknown"
#endif

#if defined(__clang__)
#define COMPILER __VERSION__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#else
#define COMPILER "unknown"
#endif

extern char **environ;

/* Environment variables that change how the run goes: OpenMP's (and its
 * runtimes' own) and libmla's. */
static bool recorded_env(const char *entry)
{
    static const char *const prefixes[] = {"OMP_", "GOMP_", "KMP_", "MLA_"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

/* The CPU's name from /proc/cpuinfo: x86's "model name", else AArch64's
 * "CPU implementer" and "CPU part" (Linux gives arm64 no model name). */
static void cpu_model(char *out, size_t size)
{
    char line[256], implementer[32] = "", part[32] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(out, size, "unknown");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *value = colon + 1 + strspn(colon + 1, " \t");
        value[strcspn(value, "\n")] = '\0';
        if (strncmp(line, "model name", 10) == 0) {
            snprintf(out, size, "%s", value);
            break;
        }
        if (strncmp(line, "CPU implementer", 15) == 0 && !implementer[0])
            snprintf(implementer, sizeof implementer, "%s", value);
        if (strncmp(line, "CPU part", 8) == 0 && !part[0])
            snprintf(part, sizeof part, "%s", value);
    }
    if (f)
        fclose(f);
    if (strcmp(out, "unknown") == 0 && implementer[0])
        snprintf(out, size, "implementer %s part %s", implementer, part);
}

/* s as a JSON string: quotes, backslashes and control characters escaped. */
static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_json_field(const char *key, const char *value)
{
    printf(",\"%s\":", key);
    print_json_string(value);
}

void print_run_meta(const options *o, int argc, char **argv)
{
    char cpu[256], caps[256], args[1024] = "";
    cpu_model(cpu, sizeof cpu);
    mla_caps_format(mla_cpu_caps(), caps, sizeof caps);
    for (int i = 1, len = 0; i < argc && len < (int)sizeof args; i++)
        len += snprintf(args + len, sizeof args - (size_t)len, "%s%s", i > 1 ? " " : "", argv[i]);
    if (!o->json) {
        printf("# libmla %s (%s), %s; cpu: %s (%s); %d threads by default\n", mla_version(),
               MLA_BENCH_COMMIT, COMPILER, cpu, caps, mla_default_threads());
        printf("# mla_bench %s; ceilings %s%s%s", args, probe_mode(o),
               o->seconds > 0 ? ", kernel loops timed for seconds" : "",
               o->cold ? ", cold (inputs rotated past the LLC)" : "");
        for (char **e = environ; *e; e++)
            if (recorded_env(*e))
                printf("; %s", *e);
        printf("\n");
        return;
    }
    printf("{\"op\":\"meta\"");
    print_json_field("libmla", mla_version());
    print_json_field("commit", MLA_BENCH_COMMIT);
    print_json_field("cpu", cpu);
    print_json_field("cpu_caps", caps);
    print_json_field("compiler", COMPILER);
    print_json_field("command", o->command);
    print_json_field("args", args);
    print_json_field("probe", probe_mode(o));
    printf(",\"seconds\":%g,\"reps\":%d,\"cold\":%s,\"llc_bytes\":%lld,\"default_threads\":%d",
           o->seconds, o->reps, o->cold ? "true" : "false", (long long)llc_bytes(o),
           mla_default_threads());
    printf(",\"env\":{");
    bool first = true;
    for (char **e = environ; *e; e++) {
        if (!recorded_env(*e))
            continue;
        char name[128];
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), *e);
        printf("%s", first ? "" : ",");
        print_json_string(name);
        putchar(':');
        print_json_string(eq ? eq + 1 : "");
        first = false;
    }
    printf("}}\n");
}
