// Diagnostic preload (scripts/blocking-calls.sh): every fsync-family call first sleeps
// SLOW_FSYNC_US (default 300 ms), as on a disk busy with writeback.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
static void pause_(void) { const char *s = getenv("SLOW_FSYNC_US"); usleep(s ? atoi(s) : 300000); }
int fsync(int fd) { pause_(); int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync"); return real(fd); }
int fdatasync(int fd) { pause_(); int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync"); return real(fd); }
int syncfs(int fd) { pause_(); int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "syncfs"); return real(fd); }
void sync(void) { pause_(); void (*real)(void) = (void (*)(void))dlsym(RTLD_NEXT, "sync"); real(); }
