/* doctor.c - `mlsys-lab doctor`: what works on this machine, with real self-tests. It prints
 * the machine report of chapters/common/selftest.c, the same one ch01/verify-setup prints
 * (the doctor is that lab grown up into a command). */
#include "cli.h"
#include "../../chapters/common/common.h"
#include <stdio.h>
#include <string.h>

int doctor_main(int argc, char **argv)
{
    if (argc >= 2) {
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
            printf("usage: mlsys-lab doctor\n");
            return 0;
        }
        fprintf(stderr, "mlsys-lab: doctor: unexpected argument '%s' (usage: mlsys-lab "
                "doctor)\n", argv[1]);
        return 2;
    }
    return probe_report(30.0);
}
