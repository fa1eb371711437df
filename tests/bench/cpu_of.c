/* cpu_of.c - run a command and print what it cost: "WALL_S USER_S SYS_S" with microsecond
 * resolution (GNU time rounds to 10 ms, as much as the start-up of a small program), its
 * output thrown away (its stdout kept in the file $CPU_OF_OUT when that is set). The children
 * it waited for are counted (ranks, mpirun's daemons). Exit status: the command's.
 * Usage: cpu_of COMMAND [ARGS...] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cpu_of COMMAND [ARGS...]\n");
        return 2;
    }
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        const char *keep = getenv("CPU_OF_OUT");
        int null = open("/dev/null", O_WRONLY);
        int out = keep ? open(keep, O_WRONLY | O_CREAT | O_TRUNC, 0644) : null;
        dup2(out >= 0 ? out : null, 1);
        dup2(null, 2);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid) {
        perror("cpu_of");
        return 2;
    }
    double wall = now_s() - t0;
    /* wait4 gives the child alone; its own children's time is in RUSAGE_CHILDREN */
    struct rusage all;
    getrusage(RUSAGE_CHILDREN, &all);
    printf("%.6f %.6f %.6f\n", wall, (double)all.ru_utime.tv_sec + all.ru_utime.tv_usec * 1e-6,
           (double)all.ru_stime.tv_sec + all.ru_stime.tv_usec * 1e-6);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
