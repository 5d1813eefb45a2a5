/* measure-exec [-g FD] [-d FD] OUT argv...: run argv (stdin, stdout, stderr inherited),
 * reap it with wait4 and write "<exit> <wall ns> <peak RSS KiB> <end ns>" to OUT (<end
 * ns>: the CLOCK_MONOTONIC time it was reaped). Spawned from this small static process, the
 * child's peak RSS is its own: spawned straight from the Python driver, ru_maxrss would
 * count the driver's ~20 MiB copied into the child before exec.
 *
 * -g FD: first wait until FD reads end-of-file (the driver closes its end of a pipe
 * shared by a whole batch once every process of the batch is started, so they all begin
 * together: the batch's wall is then the plugins', not the driver's spawning).
 *
 * -d FD: hold FD (the write end of a pipe shared by a whole batch) until this process
 * exits, and keep it from the plugin: the driver reads that pipe's end-of-file once every
 * measurer of the batch is done, one wake-up for the batch instead of collecting each
 * exec while the others still run on the same CPUs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int wait_gate(int fd) {
    char buf[64];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0) return close(fd);
        if (n < 0 && errno != EINTR) return -1;
    }
}

static long fd_arg(const char *s) {
    char *end;
    long fd = strtol(s, &end, 10);
    return *s && !*end && fd >= 0 && fd <= 1 << 20 ? fd : -1;
}

int main(int argc, char **argv) {
    struct timespec a, b;
    struct rusage ru;
    int status = 0, first = 1;
    while (argc > first + 1 && argv[first][0] == '-' && argv[first][1] && !argv[first][2]) {
        long fd = fd_arg(argv[first + 1]);
        if (fd < 0) return 127;
        if (argv[first][1] == 'g') {
            if (wait_gate((int)fd) != 0) return 127;
        } else if (argv[first][1] == 'd') {
            if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0) return 127;
        } else {
            return 127;
        }
        first += 2;
    }
    if (argc < first + 2) return 127;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[first + 1], argv + first + 1);
        _exit(127);
    }
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid) return 127;
    clock_gettime(CLOCK_MONOTONIC, &b);
    FILE *f = fopen(argv[first], "w");
    if (!f) return 127;
    fprintf(f, "%d %lld %ld %lld\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128,
            (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
            ru.ru_maxrss, (long long)b.tv_sec * 1000000000LL + b.tv_nsec);
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
