/* measure-exec OUT argv...: run argv (stdin, stdout, stderr inherited), reap it with
 * wait4 and write "<exit> <wall ns> <peak RSS KiB>" to OUT. Spawned from this small
 * static process, the child's peak RSS is its own: spawned straight from the Python
 * driver, ru_maxrss would count the driver's ~20 MiB copied into the child before exec. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct timespec a, b;
    struct rusage ru;
    int status = 0;
    if (argc < 3) return 127;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[2], argv + 2);
        _exit(127);
    }
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid) return 127;
    clock_gettime(CLOCK_MONOTONIC, &b);
    FILE *f = fopen(argv[1], "w");
    if (!f) return 127;
    fprintf(f, "%d %lld %ld\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128,
            (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
            ru.ru_maxrss);
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
