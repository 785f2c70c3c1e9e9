/* signals.c - cooperative interruption. */
#define _POSIX_C_SOURCE 200809L
#include "core/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"

static volatile sig_atomic_t hits;

static void on_signal(int sig)
{
    (void)sig;
    hits++;
    if (hits >= 2) {
        static const char msg[] = "\nmpsdiag: interrupted twice; exiting now\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(MD_EXIT_INTERRUPTED);
    }
}

void md_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int md_interrupted(void) { return (int)hits; }
void md_interrupt_set(int n) { hits = n; }
