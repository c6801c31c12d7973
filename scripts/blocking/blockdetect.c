// Diagnostic preload (scripts/blocking-calls.sh): logs each blocking call (fsync family,
// sleeps, waits for children, accept/recv/connect, reads of pipes and sockets, semaphores)
// made while a Swift job runs, i.e. on a thread of Swift's cooperative pool. One line per call:
// "<call> | module+offset module+offset ..." to $BLOCKDETECT_LOG (default /tmp/blockdetect.log).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static __thread int busy;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void check(const char *call) {
    if (busy) return;
    busy = 1;
    void *frames[64];
    int n = backtrace(frames, 64);
    int onJob = 0;
    for (int i = 0; i < n; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_sname && strcmp(info.dli_sname, "swift_job_run") == 0) { onJob = 1; break; }
    }
    if (onJob) {
        char line[8192];
        int len = snprintf(line, sizeof line, "%s |", call);
        for (int i = 2; i < n && len < (int)sizeof line - 200; i++) {
            Dl_info info;
            if (dladdr(frames[i], &info) && info.dli_fname) {
                len += snprintf(line + len, sizeof line - len, " %s+0x%lx", info.dli_fname, (unsigned long)((char *)frames[i] - (char *)info.dli_fbase));
            }
        }
        line[len++] = '\n';
        const char *path = getenv("BLOCKDETECT_LOG");
        pthread_mutex_lock(&log_lock);
        int fd = open(path ? path : "/tmp/blockdetect.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) { ssize_t w = write(fd, line, len); (void)w; close(fd); }
        pthread_mutex_unlock(&log_lock);
    }
    busy = 0;
}

static int is_stream(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    if (!(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return 0;
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && !(flags & O_NONBLOCK);
}

#define REAL(name, type) static __typeof__(&name) real_##name; if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)
int fsync(int fd) { REAL(fsync, int (*)(int)); check("fsync"); return real_fsync(fd); }
int fdatasync(int fd) { REAL(fdatasync, int (*)(int)); check("fdatasync"); return real_fdatasync(fd); }
int usleep(useconds_t us) { REAL(usleep, int (*)(useconds_t)); check("usleep"); return real_usleep(us); }
int nanosleep(const struct timespec *a, struct timespec *b) { REAL(nanosleep, int (*)(const struct timespec *, struct timespec *)); check("nanosleep"); return real_nanosleep(a, b); }
pid_t waitpid(pid_t p, int *s, int o) { REAL(waitpid, pid_t (*)(pid_t, int *, int)); if (!(o & WNOHANG)) check("waitpid"); return real_waitpid(p, s, o); }
pid_t wait4(pid_t p, int *s, int o, struct rusage *r) { REAL(wait4, pid_t (*)(pid_t, int *, int, struct rusage *)); if (!(o & WNOHANG)) check("wait4"); return real_wait4(p, s, o, r); }
int accept(int fd, struct sockaddr *a, socklen_t *l) { REAL(accept, int (*)(int, struct sockaddr *, socklen_t *)); if (is_stream(fd)) check("accept"); return real_accept(fd, a, l); }
ssize_t recv(int fd, void *b, size_t n, int f) { REAL(recv, ssize_t (*)(int, void *, size_t, int)); if (!(f & MSG_DONTWAIT) && is_stream(fd)) check("recv"); return real_recv(fd, b, n, f); }
int connect(int fd, const struct sockaddr *a, socklen_t l) { REAL(connect, int (*)(int, const struct sockaddr *, socklen_t)); if (is_stream(fd)) check("connect"); return real_connect(fd, a, l); }
ssize_t read(int fd, void *b, size_t n) { REAL(read, ssize_t (*)(int, void *, size_t)); if (is_stream(fd)) check("read"); return real_read(fd, b, n); }
int sem_wait(sem_t *s) { REAL(sem_wait, int (*)(sem_t *)); check("sem_wait"); return real_sem_wait(s); }
