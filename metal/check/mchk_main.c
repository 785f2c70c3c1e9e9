/* mchk_main.c - build/metal-check: the static Metal checks of mchk.h from
 * the command line (make test runs it; the test suite calls the checks
 * directly, on modified copies too).
 *
 *   metal-check api FACTS EXTRA BACKEND.m METALDECLS.h
 *   metal-check msl PLAN.c BACKEND.m DEFS.h[,DEFS.h...] SHADER...
 * Exit status: 0 when everything agrees, 1 when problems were found, 2 on
 * a usage or read error.
 */
#include <stdio.h>
#include <string.h>

#include "mchk.h"

int main(int argc, char **argv)
{
    if (argc >= 6 && !strcmp(argv[1], "api")) {
        struct md_mchk_api_stats st;
        int n = md_mchk_api(argv[2], argv[3], argv[4], argv[5], stderr, &st);
        if (n < 0) return 2;
        printf("metal-check api: %s: %d message sends, %d property accesses, %d API names checked "
               "(%d rest on metal/api/foundation_extra.tsv); %s: %d declarations checked, %d outside "
               "Metal/Foundation not checked: %s\n",
               argv[4], st.sends, st.properties, st.names, st.extra_used, argv[5], st.decls, st.unchecked_decls,
               n ? "PROBLEMS (above)" : "all agree with Apple's API");
        return n ? 1 : 0;
    }
    if (argc >= 6 && !strcmp(argv[1], "msl")) {
        struct md_mchk_msl_stats st;
        const char *defs[16];
        int ndefs = 0;
        for (char *p = strtok(argv[4], ","); p && ndefs < 16; p = strtok(NULL, ",")) defs[ndefs++] = p;
        int n = md_mchk_msl((const char *const *)argv + 5, argc - 5, defs, ndefs, argv[2], argv[3], stderr, &st);
        if (n < 0) return 2;
        printf("metal-check msl: %d kernels, %d functions, %d host bindings, %d threadgroup sizes checked: %s\n",
               st.kernels, st.functions, st.bindings, st.tg_sizes, n ? "PROBLEMS (above)" : "no problems");
        return n ? 1 : 0;
    }
    fprintf(stderr, "usage: metal-check api FACTS EXTRA BACKEND.m METALDECLS.h\n"
                    "       metal-check msl PLAN.c BACKEND.m DEFS.h[,DEFS.h...] SHADER...\n");
    return 2;
}
