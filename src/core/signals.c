/* signals.c - cooperative interruption. */
#define _POSIX_C_SOURCE 200809L
#include "core/signals.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"

static volatile sig_atomic_t hits;
/* set while a checkpoint is written: a signal that would exit waits */
static volatile sig_atomic_t holding;
/* a rank of several: one stop request may come as more than one signal */
static volatile sig_atomic_t patient;
static int installed;

static void say(const char *msg, size_t len)
{
    ssize_t w = write(STDERR_FILENO, msg, len);
    (void)w;
}

static void on_signal(int sig)
{
    (void)sig;
    hits++;
    /* a rank of a job may be told twice (mpirun's SIGTERM after a Ctrl-C
     * that reached its process group too): only a third signal is urgent */
    int urgent = hits >= (patient ? 3 : 2);
    if (!urgent) return;
    if (holding && hits < (patient ? 4 : 3)) {
        static const char msg[] = "\nmpsdiag: interrupted again; exiting once the checkpoint is written\n";
        say(msg, sizeof msg - 1);
        return;
    }
    static const char msg[] = "\nmpsdiag: interrupted twice; exiting now\n";
    say(msg, sizeof msg - 1);
    _exit(MD_EXIT_INTERRUPTED);
}

/* on_signal for sig; system calls resume after the handler: the loops poll
 * md_interrupted, and a read cut short by EINTR would look like a damaged file */
static void catch_signal(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, NULL);
}

void md_signals_install(void)
{
    catch_signal(SIGINT);
    catch_signal(SIGTERM);
    installed = 1;
}

void md_signals_install_rank(void)
{
    patient = 1;
    md_signals_install();
    /* mpirun forwards SIGUSR2 to every rank at once (its Ctrl-C path waits
     * and then kills) */
    catch_signal(SIGUSR2);
}

void md_signals_hold(int on) { holding = on ? 1 : 0; }

int md_interrupted(void) { return (int)hits; }
void md_interrupt_set(int n) { hits = n; }

md_status md_interrupt_check(const char *where_fmt, ...)
{
    if (!hits) return MD_OK;
    char where[768];
    va_list ap;
    va_start(ap, where_fmt);
    vsnprintf(where, sizeof where, where_fmt, ap);
    va_end(ap);
    return md_errf(MD_ERR_INTERRUPTED, "interrupted %s", where);
}

void md_interrupt_hook(const char *phase)
{
    static int fired;
    const char *want = getenv("MPSDIAG_TEST_INTERRUPT");
    if (fired || !want || !*want) return;
    size_t n = strlen(phase);
    if (strncmp(want, phase, n) != 0 || (want[n] != '\0' && want[n] != ':')) return;
    fired = 1;
    int sig = strcmp(want + n, ":TERM") == 0 ? SIGTERM : SIGINT;
    if (installed) raise(sig);
    else hits++; /* in-process tests without the handler */
}
