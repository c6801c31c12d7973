#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "cshims.h"

int cshims_syncfs(int fd) { return syncfs(fd); }

int cshims_mkstemp_cloexec(char *template_path) { return mkostemp(template_path, O_CLOEXEC); }

int cshims_gettid(void) { return (int)gettid(); }
