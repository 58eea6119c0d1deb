/* chimectl import / export (docs/tools.md, docs/datasets.md): offline
 * datasets in and out of a table. HDF5 goes through Debian's python3-h5py
 * (a project decision: no HDF5 code of our own), so these two commands run
 * the chime Python package's dataset module with chimectl's arguments:
 *
 *   chimectl [CONN] import FILE TABLE TARGET [--map LEAF=NAME]...
 *                   [--priorities NAME] [--partial] [--format hdf5|npz]
 *   chimectl [CONN] export TABLE FILE TARGET [--format hdf5|npz]
 *
 * $CHIME_PYTHON names the interpreter (default python3). A missing chime
 * package or h5py is said plainly, with the package that brings it. */
#include "chimectl_dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Run by the interpreter: the dataset module's CLI, or a sentence saying
 * what is missing. */
static const char bootstrap[] =
    "import os, sys\n"
    "def load():\n"
    "    import numpy\n"
    "    from chime import dataset\n"
    "    return dataset\n"
    "try:\n"
    "    try:\n"
    "        dataset = load()\n"
    "    except ImportError:\n"
    "        sys.path.append(os.environ.get('CHIME_TREE_PYTHON', ''))\n"
    "        dataset = load()\n"
    "except ImportError as e:\n"
    "    sys.exit('chimectl ' + sys.argv[1] + ': needs the chime Python "
    "package and numpy (Debian: python3-chime, python3-numpy; from a build "
    "tree: PYTHONPATH=build/python): ' + str(e))\n"
    "sys.exit(dataset.main(sys.argv[1:]))\n";

int chime__ctl_is_dataset(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "import") || !strcmp(argv[i], "export"))
      return 1;
    /* Connection options take a value; anything else ends the search. */
    if (argv[i][0] != '-')
      return 0;
    if (strcmp(argv[i], "--json") != 0)
      i++;
  }
  return 0;
}

/* A chimectl in a build tree (build/examples/chimectl) finds the package
 * beside it (build/python), where none is installed. */
static void tree_python(void) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 16);
  if (n <= 0)
    return;
  exe[n] = '\0';
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(exe, '/');
    if (slash == NULL)
      return;
    *slash = '\0';
  }
  strcat(exe, "/python");
  setenv("CHIME_TREE_PYTHON", exe, 0);
}

int chime__ctl_dataset(int argc, char **argv) {
  tree_python();
  const char *py = getenv("CHIME_PYTHON");
  if (py == NULL || py[0] == '\0')
    py = "python3";
  char **args = calloc((size_t)argc + 4, sizeof(char *));
  if (args == NULL) {
    fprintf(stderr, "chimectl: out of memory\n");
    return 1;
  }
  int n = 0;
  args[n++] = (char *)py;
  args[n++] = (char *)"-c";
  args[n++] = (char *)bootstrap;
  /* The command first, then everything else as given (--json means
   * nothing here and is dropped). */
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "import") || !strcmp(argv[i], "export")) {
      args[n++] = argv[i];
      break;
    }
  for (int i = 1, seen = 0; i < argc; i++) {
    if (!seen && (!strcmp(argv[i], "import") || !strcmp(argv[i], "export"))) {
      seen = 1;
      continue;
    }
    if (strcmp(argv[i], "--json") != 0)
      args[n++] = argv[i];
  }
  args[n] = NULL;
  execvp(py, args);
  fprintf(stderr,
          "chimectl: cannot run %s for import/export (%s): they need "
          "Python 3 with the chime package, numpy and h5py (Debian: "
          "python3-chime python3-h5py)\n",
          py, strerror(errno));
  free(args);
  return 1;
}
