/* sched_sim.h - ch10/scheduling-overhead-benchmark's --simulate part (sched_sim.c): the
 * original script's sequential and "overlapped" batches on a virtual clock, its drawing and
 * its analysis, labelled as a simulation. */
#ifndef CH10_SCHED_SIM_H
#define CH10_SCHED_SIM_H

/* Prints the whole simulation for n batches of s ms scheduling, c ms compute, p ms
 * post-processing. */
void sched_sim_print(long n, double s, double c, double p);

#endif
