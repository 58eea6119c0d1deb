/* chimectl import / export: run through the chime Python package's dataset
 * module (chimectl_dataset.c). */
#ifndef CHIME_EXAMPLES_CHIMECTL_DATASET_H
#define CHIME_EXAMPLES_CHIMECTL_DATASET_H

/* 1 when argv's command (the first word that is not an option or its
 * value) is import or export. */
int chime__ctl_is_dataset(int argc, char **argv);
/* Execs the interpreter with the command; returns only on failure (the
 * exit status, the reason said on stderr). */
int chime__ctl_dataset(int argc, char **argv);

#endif
