#ifndef OFFLINE_AGENT_CSHIMS_H
#define OFFLINE_AGENT_CSHIMS_H

/* GNU extensions that `import Glibc` does not expose (it is built without _GNU_SOURCE). */

/* syncfs(2): flush the filesystem holding fd. */
int cshims_syncfs(int fd);

/* mkostemp(3) with O_CLOEXEC. */
int cshims_mkstemp_cloexec(char *template_path);

/* gettid(2): the calling thread's kernel id. */
int cshims_gettid(void);

#endif
