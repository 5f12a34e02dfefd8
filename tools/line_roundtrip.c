// How far apart the first two CPUs are: the round trip of one cache line between them.
//
//     gcc -O2 -pthread -o /tmp/line_roundtrip tools/line_roundtrip.c && /tmp/line_roundtrip
//
// Two threads pinned to CPU 0 and CPU 1 bounce a counter through two cache lines, 2,000 round
// trips a burst, 200 bursts; prints the min, p10 and median of a burst's mean round trip in ns.
// On a virtual machine the host may place the guest's CPUs near or far apart for minutes at a
// time, and a far placement slows every copy between them (docs/method.md rule 24; figures:
// docs/measurements/2026-11-harness.md). Python is too slow to see it.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BURSTS 200
#define TRIPS 2000

static _Atomic long ping __attribute__((aligned(64)));
static _Atomic long pong __attribute__((aligned(128)));  /* its own line */

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *echo(void *unused) {
    (void)unused;
    pin(1);
    long last = 0;
    for (;;) {
        long v;
        while ((v = atomic_load_explicit(&ping, memory_order_acquire)) == last) {}
        if (v < 0) return NULL;
        atomic_store_explicit(&pong, v, memory_order_release);
        last = v;
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    pin(0);
    pthread_t thread;
    pthread_create(&thread, NULL, echo, NULL);
    double burst[BURSTS];
    long i = 0;
    for (int b = 0; b < BURSTS; b++) {
        double t0 = now_ns();
        for (int k = 0; k < TRIPS; k++) {
            atomic_store_explicit(&ping, ++i, memory_order_release);
            while (atomic_load_explicit(&pong, memory_order_acquire) != i) {}
        }
        burst[b] = (now_ns() - t0) / TRIPS;
    }
    atomic_store(&ping, -1);
    pthread_join(thread, NULL);
    qsort(burst, BURSTS, sizeof burst[0], by_value);
    printf("line round trip ns: min %.0f p10 %.0f median %.0f\n", burst[0], burst[BURSTS / 10], burst[BURSTS / 2]);
    return 0;
}
