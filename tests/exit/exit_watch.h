/* exit_watch: see exit_watch.c. */
#ifndef EXIT_WATCH_H
#define EXIT_WATCH_H

#include <stdarg.h>

/* Names the phase the program is in (reported with registrations and crashes). */
void exit_watch_phase(const char *name);
/* Prints every thread of the process with its name, to stderr. */
void exit_watch_threads(const char *label);
/* Threads whose name starts with prefix, or -1. */
int exit_watch_count_threads_named(const char *prefix);
/* Prints the exit-time registrations whose function lies in a library matching dso_substring. */
void exit_watch_summary(const char *dso_substring);

#endif
