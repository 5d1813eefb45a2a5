/* rdma-cni-front: the exec'd CNI plugin binary, in front of `rdma-cni serve`.
 *
 * It reads stdin, passes it with the CNI environment and the pod netns (as a file
 * descriptor, SCM_RIGHTS) to the resident server over its unix socket and relays the
 * server's answer byte for byte (stdout, stderr, exit status). Whenever that cannot
 * happen (argv subcommand, no socket, connect refused, the server refuses, a malformed
 * or missing answer, no answer in time) it execs the complete plugin, the PyInstaller
 * bundle `rdma-cni` beside this binary, with the same argv, environment and stdin: in
 * the host tree through the loader and C library shipped in `_internal/`, so nothing of
 * the host's userland is loaded (exec_bundle). All plugin logic stays in the bundle and
 * the server: this only moves bytes.
 * It also falls back when CNI_NETNS is not a network namespace file (opened O_PATH
 * first: a FIFO never blocks it, a device is never opened; the bundle answers code 4)
 * and when an answer is not a complete CNI answer (an ADD success without its result,
 * a failure without its error document).
 * Its own error documents (no bundle to run, stdin unreadable, a tree being replaced)
 * are in the config's cniVersion when it names a supported one, else the latest, as the
 * bundle's are (front_version_of).
 *
 * Protocol (rdma_cni/resident/protocol.py, version 3):
 *   request: u32 hlen, header JSON {"v":3,"env":{...}}, u32 slen, stdin;
 *            SCM_RIGHTS [this process's netns, its root dir (O_PATH), pod netns when
 *            CNI_NETNS is set]: the server resolves the config's paths from that root
 *            to prove it sees the same store and kubelet files, else it refuses
 *   reply:   u32 blen, body: 'A' i32 exit u32 olen stdout u32 elen stderr | 'R' reason
 * Integers are in host byte order (both ends run on one host).
 *
 * Built static against musl (scripts/build.sh: musl-gcc), not glibc: every CNI call
 * execs this binary, and glibc's static start-up probes the CPU with dozens of CPUID
 * instructions, each a trap to the hypervisor on a virtual machine (here about 6 us
 * each: an exec of a static glibc `true` took 0.65 ms against 0.15 ms for musl's;
 * bench/README.md, "The front's exec").
 *
 * Built with -DFRONT_FUZZ it exposes the parsers to a bounded random-input driver
 * instead of main (tests/hardening/test_front_fuzz.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define MAX_STDIN (1 << 20)       /* the plugin's own limit; one more byte shows excess */
#define MAX_FRAME (2 << 20)
#define MAX_HEADER (64 << 10)
#define DEFAULT_SOCKET "/run/rdma-cni/rdma-cni.sock"
#define BUNDLE_NAME "rdma-cni"
#define LIBDIR "_internal"
#define LOADER LIBDIR "/ld-linux-x86-64.so.2"
#define IN_USE ".in-use"
#define VERSIONS_DIR "rdma-cni.versions"  /* tools/bundle.py BUNDLE_DIR */
#define CONNECT_MS 200
#define DEFAULT_TIMEOUT_S 25.0
#define MAX_DEPTH 64
#define MAX_FDS 3
#define NSFS_MAGIC_ 0x6e736673
#define NS_GET_NSTYPE_ 0xb703   /* _IO(0xb7, 0x3), linux/nsfs.h */
#define CLONE_NEWNET_ 0x40000000

extern char **environ;
static const char *FORWARDED[] = {"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS",
                                  "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"};
/* rdma_cni/cni/versions.py SUPPORTED and LATEST (tests/unit/test_versions.py checks) */
static const char *const VERSIONS[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};
#define LATEST_VERSION "1.1.0"

struct buf { char *p; size_t n, cap; };

static int buf_put(struct buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p; b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

static int buf_u32(struct buf *b, uint32_t v) { return buf_put(b, &v, 4); }

/* ---- the config's top-level "residentSocket" (a JSON scanner, no allocation) ---- */
static const char *skip_ws(const char *s, const char *end) {
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
    return s;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_hex(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Past a JSON string starting at s (which is '"'); NULL when malformed (an escape JSON
 * has not got, a control character). */
static const char *skip_string(const char *s, const char *end) {
    for (s++; s < end; s++) {
        if (*s == '\\') {
            if (++s >= end || !strchr("\"\\/bfnrtu", *s) || !*s) return NULL;
            if (*s == 'u') {
                if (end - s < 5 || !is_hex(s[1]) || !is_hex(s[2]) || !is_hex(s[3]) ||
                    !is_hex(s[4])) return NULL;
                s += 4;
            }
        }
        else if (*s == '"') return s + 1;
        else if ((unsigned char)*s < 0x20) return NULL;
    }
    return NULL;
}

/* Past a run of digits, at least one; NULL when there is none. */
static const char *skip_digits(const char *s, const char *end) {
    const char *start = s;
    while (s < end && is_digit(*s)) s++;
    return s > start ? s : NULL;
}

/* Past a JSON number (RFC 8259: no leading zero, no "+", no bare "." or "e"). */
static const char *skip_number(const char *s, const char *end) {
    if (s < end && *s == '-') s++;
    if (s < end && *s == '0') s++;
    else if (!(s = skip_digits(s, end))) return NULL;
    if (s < end && *s == '.' && !(s = skip_digits(s + 1, end))) return NULL;
    if (s < end && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < end && (*s == '+' || *s == '-')) s++;
        if (!(s = skip_digits(s, end))) return NULL;
    }
    return s;
}

/* Past true, false or null. */
static const char *skip_literal(const char *s, const char *end) {
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - s) >= n && memcmp(s, words[i], n) == 0) return s + n;
    }
    return NULL;
}

/* Past one JSON value (strings, numbers, literals, nested arrays and objects). */
static const char *skip_value(const char *s, const char *end, int depth) {
    s = skip_ws(s, end);
    if (s >= end || depth > MAX_DEPTH) return NULL;
    if (*s == '"') return skip_string(s, end);
    if (*s == '{' || *s == '[') {
        char close = *s == '{' ? '}' : ']';
        s = skip_ws(s + 1, end);
        if (s < end && *s == close) return s + 1;
        for (;;) {
            if (close == '}') {
                if (s >= end || *s != '"' || !(s = skip_string(s, end))) return NULL;
                s = skip_ws(s, end);
                if (s >= end || *s++ != ':') return NULL;
            }
            if (!(s = skip_value(s, end, depth + 1))) return NULL;
            s = skip_ws(s, end);
            if (s >= end) return NULL;
            if (*s == close) return s + 1;
            if (*s++ != ',') return NULL;
            s = skip_ws(s, end);
        }
    }
    return *s == '-' || is_digit(*s) ? skip_number(s, end) : skip_literal(s, end);
}

/* The config's top-level ``key`` (ASCII, no escapes). 1: found (out = the plain string
 * value), 0: absent, -1: malformed, not a plain string (escapes), or too long for out. */
static int string_of(const char *s, size_t n, const char *name, char *out, size_t outsz) {
    const char *end = s + n, *key, *val;
    size_t nlen = strlen(name);
    int found = 0;
    s = skip_ws(s, end);
    if (s >= end || *s++ != '{') return -1;
    s = skip_ws(s, end);
    if (s < end && *s == '}') return 0;
    for (;;) {
        if (s >= end || *s != '"') return -1;
        key = s;
        if (!(s = skip_string(s, end))) return -1;
        if (memchr(key, '\\', (size_t)(s - key))) return -1;  /* escaped keys: Python decides */
        int ours = (size_t)(s - key) == nlen + 2 && memcmp(key + 1, name, nlen) == 0;
        s = skip_ws(s, end);
        if (s >= end || *s++ != ':') return -1;
        s = skip_ws(s, end);
        val = s;
        if (!(s = skip_value(s, end, 0))) return -1;
        if (ours) {
            size_t len = (size_t)(s - val);
            if (*val != '"' || memchr(val, '\\', len) || len - 2 >= outsz) return -1;
            memcpy(out, val + 1, len - 2);
            out[len - 2] = 0;
            found = 1;  /* a later duplicate key wins, as in Python's json */
        }
        s = skip_ws(s, end);
        if (s >= end) return -1;
        if (*s == '}') return skip_ws(s + 1, end) == end ? found : -1;
        if (*s++ != ',') return -1;
        s = skip_ws(s, end);
    }
}

/* The config's "residentSocket": as string_of, -1 also for a path too long for a socket. */
int front_socket_of(const char *s, size_t n, char *out, size_t outsz) {
    return string_of(s, n, "residentSocket", out, outsz);
}

/* The cniVersion of the front's own error document: the config's when it names one the
 * plugin supports (the spec: the same value as the configuration's; a 0.3.x or 0.4.0
 * runtime may refuse a 1.x document), else the latest, as the bundle answers then
 * (rdma_cni/cni/dispatch.py, _serve and unreadable). */
const char *front_version_of(const char *s, size_t n) {
    char v[16];
    if (string_of(s, n, "cniVersion", v, sizeof v) == 1)
        for (size_t i = 0; i < sizeof VERSIONS / sizeof *VERSIONS; i++)
            if (strcmp(v, VERSIONS[i]) == 0) return VERSIONS[i];
    return LATEST_VERSION;
}

/* ---- request and reply frames ---- */
/* ASCII only: a value with other bytes goes to the bundle, which keeps them exact. */
static int put_json_string(struct buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    if (buf_put(b, "\"", 1)) return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        int rc;
        if (c > 0x7f) return -1;
        if (c == '"' || c == '\\') { esc[1] = (char)c; rc = buf_put(b, esc, 2); }
        else if (c < 0x20 || c == 0x7f) rc = buf_put(b, esc, 6);
        else rc = buf_put(b, s, 1);
        if (rc) return -1;
    }
    return buf_put(b, "\"", 1);
}

int front_encode_request(struct buf *b, char *const *env, const char *in, size_t n) {
    struct buf h = {0};
    int first = 1, rc = -1;
    if (buf_put(&h, "{\"v\":3,\"env\":{", 14)) goto out;
    for (size_t i = 0; i < sizeof FORWARDED / sizeof *FORWARDED; i++) {
        size_t klen = strlen(FORWARDED[i]);
        for (char *const *e = env; *e; e++) {
            if (strncmp(*e, FORWARDED[i], klen) || (*e)[klen] != '=') continue;
            if ((!first && buf_put(&h, ",", 1)) || put_json_string(&h, FORWARDED[i]) ||
                buf_put(&h, ":", 1) || put_json_string(&h, *e + klen + 1)) goto out;
            first = 0;
            break;
        }
    }
    if (buf_put(&h, "}}", 2) || h.n > MAX_HEADER) goto out;
    rc = buf_u32(b, (uint32_t)h.n) || buf_put(b, h.p, h.n) || buf_u32(b, (uint32_t)n) ||
         buf_put(b, in, n) ? -1 : 0;
out:
    free(h.p);
    return rc;
}

struct reply { int32_t exit; const char *out, *err; uint32_t olen, elen; };

/* 1: an answer, 0: a refusal, -1: malformed. ``body`` excludes the length prefix. */
int front_parse_reply(const char *body, size_t n, struct reply *r) {
    uint32_t olen, elen;
    if (n >= 1 && body[0] == 'R') return 0;
    if (n < 13 || body[0] != 'A') return -1;
    memcpy(&r->exit, body + 1, 4);
    memcpy(&olen, body + 5, 4);
    if (olen > n - 13) return -1;
    memcpy(&elen, body + 9 + olen, 4);
    if ((size_t)elen != n - 13 - olen || r->exit < 0 || r->exit > 255) return -1;
    r->out = body + 9; r->olen = olen;
    r->err = body + 13 + olen; r->elen = elen;
    return 1;
}

/* Whether an answer may be relayed as the plugin's: an ADD success carries its result,
 * a failure its error document (each exactly one JSON object on stdout); other
 * successes are relayed as they are. Anything else: the bundle runs the request. */
int front_one_object(const char *s, size_t n) {
    const char *end = s + n;
    s = skip_ws(s, end);
    if (s >= end || *s != '{' || !(s = skip_value(s, end, 0))) return 0;
    return skip_ws(s, end) == end;
}

int front_relayable(const char *cmd, const struct reply *r) {
    if (r->exit == 0 && strcmp(cmd, "ADD") != 0) return 1;
    return front_one_object(r->out, r->olen);
}

#ifndef FRONT_FUZZ
/* ---- talking to the server ---- */
static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int connect_to(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct timeval tv = {0, CONNECT_MS * 1000};
    if (strlen(path) >= sizeof sa.sun_path) return -1;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { close(fd); return -1; }
    return fd;
}

static int send_frame(int fd, const struct buf *f, const int *fds, int nfds) {
    char ctl[CMSG_SPACE(MAX_FDS * sizeof(int))] = {0};
    struct iovec iov = {f->p, f->n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    ssize_t k;
    do k = sendmsg(fd, &m, MSG_NOSIGNAL); while (k < 0 && errno == EINTR);
    for (size_t off = k < 0 ? 0 : (size_t)k; k >= 0 && off < f->n; off += (size_t)k)
        do k = send(fd, f->p + off, f->n - off, MSG_NOSIGNAL); while (k < 0 && errno == EINTR);
    return k < 0 ? -1 : 0;
}

/* Read exactly n bytes before the deadline; -1 on EOF, error or timeout. */
static int read_until(int fd, char *p, size_t n, long deadline) {
    while (n) {
        struct pollfd pf = {fd, POLLIN, 0};
        long left = deadline - now_ms();
        if (left <= 0) return -1;
        int rc = poll(&pf, 1, (int)(left > INT_MAX ? INT_MAX : left));
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return -1;
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

static long timeout_ms(void) {
    const char *v = getenv("RDMA_CNI_RESIDENT_TIMEOUT");
    char *end;
    double s = v && *v ? strtod(v, &end) : DEFAULT_TIMEOUT_S;
    if (!v || !*v || *end || !(s > 0) || s > 3600) s = DEFAULT_TIMEOUT_S;
    return (long)(s * 1000);
}

/* CNI_NETNS opened for the server: O_PATH first (a FIFO cannot block, a device is not
 * opened), then only an nsfs file of a network namespace is opened for real. -1: not
 * one (or gone): the bundle answers it. */
static int open_pod_netns(const char *path) {
    char self[64];
    struct statfs sf;
    int probe = open(path, O_PATH | O_CLOEXEC), fd = -1;
    if (probe < 0) return -1;
    if (fstatfs(probe, &sf) == 0 && sf.f_type == NSFS_MAGIC_) {
        snprintf(self, sizeof self, "/proc/self/fd/%d", probe);
        fd = open(self, O_RDONLY | O_CLOEXEC);
    }
    close(probe);
    if (fd >= 0) {
        int type = ioctl(fd, NS_GET_NSTYPE_);
        if (type >= 0 && type != CLONE_NEWNET_) { close(fd); fd = -1; }
    }
    return fd;
}

/* The descriptors a request carries (protocol.py FD_*); their count, -1 to fall back. */
static int request_fds(int fds[MAX_FDS]) {
    const char *netns = getenv("CNI_NETNS");
    int n = 0;
    if ((fds[n] = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) >= 0) n++;
    if (n == 1 && (fds[n] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0) n++;
    if (n == 2 && netns && *netns && (fds[n] = open_pod_netns(netns)) >= 0) n++;
    if (n == 2 + (netns && *netns)) return n;
    while (n--) close(fds[n]);
    return -1;
}

/* One line on stderr when the answer cannot reach the runtime (cli.py entry). */
static void lost(const char *why) {
    char msg[256];
    int n = snprintf(msg, sizeof msg, "rdma-cni: the answer could not be written to stdout: "
                     "%s\n", why);
    write_all(2, msg, n > 0 && (size_t)n < sizeof msg ? (size_t)n : 0);
}

/* The server's answer relayed: returns the exit status, or -1 to fall back. */
static int forward(const char *path, const struct buf *in) {
    int fds[MAX_FDS], nfds, sock = -1, rc = -1;
    struct buf frame = {0};
    char *body = NULL;
    const char *cmd = getenv("CNI_COMMAND");
    if ((nfds = request_fds(fds)) < 0) return -1;
    if (front_encode_request(&frame, environ, in->p, in->n) ||
        (sock = connect_to(path)) < 0 || send_frame(sock, &frame, fds, nfds)) goto out;
    long deadline = now_ms() + timeout_ms();
    uint32_t blen;
    struct reply r;
    if (read_until(sock, (char *)&blen, 4, deadline) || blen > MAX_FRAME ||
        !(body = malloc(blen ? blen : 1)) || read_until(sock, body, blen, deadline) ||
        front_parse_reply(body, blen, &r) != 1 || !front_relayable(cmd ? cmd : "", &r))
        goto out;
    if (write_all(1, r.out, r.olen)) {
        lost(strerror(errno));
        rc = 1;
        goto out;
    }
    write_all(2, r.err, r.elen);
    rc = r.exit;
out:
    if (sock >= 0) close(sock);  /* the server sees the hang-up: it will not act */
    while (nfds--) close(fds[nfds]);
    free(frame.p);
    free(body);
    return rc;
}

/* ---- the fallback: the complete plugin, same argv, environment and stdin ---- */
/* The config read from stdin, once read: the version of the front's own errors. */
static const struct buf *config;

static void fail_code(int code, const char *what) {
    char msg[512];
    const char *why = errno ? strerror(errno) : NULL;  /* 0: ``what`` says it all */
    const char *version = config && config->n <= MAX_STDIN ?
        front_version_of(config->p ? config->p : "", config->n) : LATEST_VERSION;
    int n = snprintf(msg, sizeof msg, "{\"cniVersion\":\"%s\",\"code\":%d,\"msg\":"
                     "\"rdma-cni: %s%s%s\"}\n", version, code, what, why ? ": " : "",
                     why ? why : "");
    write_all(1, msg, n > 0 && (size_t)n < sizeof msg ? (size_t)n : 0);
    _exit(1);
}

static void fail(const char *what) { fail_code(5, what); }

/* Whether ``dir`` is a tree `install` laid out (<bin>/rdma-cni.versions/<name>): such a
 * tree has .in-use from before its link is switched to it until its removal begins. */
static int installed_tree(const char *dir) {
    const char *slash = strrchr(dir, '/'), *parent;
    size_t n = sizeof VERSIONS_DIR - 1;
    if (!slash || slash == dir) return 0;
    for (parent = slash - 1; parent > dir && parent[-1] != '/'; parent--) {}
    return (size_t)(slash - parent) == n && memcmp(parent, VERSIONS_DIR, n) == 0;
}

/* The tree this front runs from stays whole while the fallback runs: a shared flock on
 * <tree>/.in-use, taken here and held across the exec (the descriptor is not
 * close-on-exec) until the plugin exits. `install` removes an old tree only once it holds
 * that lock exclusively, and unlinks .in-use before anything else (tools/hosttree.py).
 * Returns 1 when this tree is being removed: the runtime exec'd it just before an upgrade
 * switched the link. An installed tree without .in-use is being removed (its files may
 * be half gone: the bundle failed to load its libpython and answered nothing a runtime
 * reads); a tree without .in-use elsewhere (a build's dist/) is never stale. */
static int hold_tree(const char *dir) {
    char path[PATH_MAX + sizeof IN_USE + 1];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, IN_USE);
    int fd = open(path, O_RDONLY | O_NOCTTY);
    if (fd < 0) return errno == ENOENT && (access(dir, F_OK) != 0 || installed_tree(dir));
    while (flock(fd, LOCK_SH) < 0 && errno == EINTR) {}
    return fstat(fd, &st) == 0 && st.st_nlink == 0;
}

/* This tree is gone: run the front the runtime's path names now (argv[0], as libcni
 * execs plugins by absolute path), once; else ask the runtime to try again. */
static void run_current(char **argv) {
    if (argv[0] && argv[0][0] == '/' && !getenv("RDMA_CNI_FRONT_RERUN")) {
        setenv("RDMA_CNI_FRONT_RERUN", "1", 1);
        execve(argv[0], argv, environ);
    }
    errno = ESTALE;
    fail_code(11, "the plugin was upgraded as it started, try again");
}

/* Whether ``path`` is this very binary: a front copied alone under the bundle's name
 * would exec itself for ever. */
static int is_self(const char *path) {
    struct stat me, it;
    return stat("/proc/self/exe", &me) == 0 && stat(path, &it) == 0 &&
           me.st_dev == it.st_dev && me.st_ino == it.st_ino;
}

static void exec_bundle(char **argv, const struct buf *in, int have_stdin) {
    char dir[PATH_MAX], bundle[PATH_MAX + 64], loader[PATH_MAX + 64], lib[PATH_MAX + 64];
    ssize_t k = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (k <= 0) fail("failed to find the plugin bundle");
    dir[k] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    snprintf(bundle, sizeof bundle, "%s/%s", dir, BUNDLE_NAME);
    snprintf(loader, sizeof loader, "%s/%s", dir, LOADER);
    snprintf(lib, sizeof lib, "%s/%s", dir, LIBDIR);
    if (have_stdin) {
        int mfd = memfd_create("rdma-cni-stdin", 0);
        if (mfd < 0 || write_all(mfd, in->p, in->n) || lseek(mfd, 0, SEEK_SET) != 0 ||
            dup2(mfd, 0) < 0) fail("failed to hand stdin to the plugin bundle");
        if (mfd != 0) close(mfd);
    }
    if (hold_tree(dir)) run_current(argv);
    if (is_self(bundle)) {
        errno = 0;
        fail("failed to find the plugin bundle: this front is the only rdma-cni here");
    }
    int argc = 0;
    while (argv[argc]) argc++;
    if (access(loader, X_OK) == 0) {
        /* The host tree: the plugin runs on the C library and loader it was built with
         * (scripts/host_tree.py), never the host's: --library-path instead of the host's
         * search path, --inhibit-cache instead of its ld.so.cache, and no LD_ variable
         * of the runtime's environment naming a host library. */
        char **args = calloc((size_t)argc + 6, sizeof *args);
        if (!args) fail("failed to run the plugin bundle");
        args[0] = loader; args[1] = "--inhibit-cache"; args[2] = "--library-path";
        args[3] = lib; args[4] = bundle;
        for (int i = 1; i < argc; i++) args[4 + i] = argv[i];
        unsetenv("LD_PRELOAD"); unsetenv("LD_LIBRARY_PATH"); unsetenv("LD_AUDIT");
        execve(loader, args, environ);
    } else {
        char *fallback[] = {bundle, NULL};
        execve(bundle, argc ? argv : fallback, environ);
    }
    fail("failed to run the plugin bundle");  /* held: the tree cannot have been pruned */
}

static int read_stdin(struct buf *in) {
    char chunk[65536];
    while (in->n <= MAX_STDIN) {
        ssize_t k = read(0, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        if (buf_put(in, chunk, (size_t)k)) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    struct buf in = {0};
    char path[108] = DEFAULT_SOCKET;
    const char *cmd = getenv("CNI_COMMAND");
    if (argc > 1 || !cmd || !*cmd) exec_bundle(argv, &in, 0);
    if (fcntl(1, F_GETFD) < 0) {  /* fd 1 closed: no answer can reach the runtime */
        lost("stdout is closed");
        return 1;
    }
    config = &in;
    if (read_stdin(&in)) {
        /* nothing read (fd 0 closed, a directory): code 5, as the bundle answers
         * (cli.py); VERSION answers as for an empty config */
        if (in.n == 0 && strcmp(cmd, "VERSION"))
            fail("failed to read network config from stdin");
        exec_bundle(argv, &in, 1);
    }
    if (in.n <= MAX_STDIN && front_socket_of(in.p ? in.p : "", in.n, path, sizeof path) >= 0 &&
        path[0]) {
        int rc = forward(path, &in);
        if (rc >= 0) return rc;
        setenv("RDMA_CNI_NO_RESIDENT", "1", 1);  /* tried: the bundle runs it in-process */
    }
    exec_bundle(argv, &in, 1);
    return 1;
}
#endif

#ifdef FRONT_FUZZ
/* Driver of the bounded random-input test: records on stdin, one answer line each.
 * Record: kind ('S' config scan, 'C' the error's cniVersion, 'R' reply parse, 'V' one
 * JSON object), u32 length, bytes. 'S' answers "rc hex(value)", 'C' the version, 'R'
 * answers "rc exit olen elen", 'V' "1" or "0". */
int main(void) {
    uint32_t n;
    char kind, out[108];
    while (fread(&kind, 1, 1, stdin) == 1 && fread(&n, 4, 1, stdin) == 1) {
        char *p = malloc(n ? n : 1);
        if (!p || fread(p, 1, n, stdin) != n) return 2;
        if (kind == 'V') {
            printf("%d\n", front_one_object(p, n));
        } else if (kind == 'C') {
            printf("%s\n", front_version_of(p, n));
        } else if (kind == 'S') {
            int rc = front_socket_of(p, n, out, sizeof out);
            printf("%d ", rc);
            for (char *c = out; rc == 1 && *c; c++) printf("%02x", (unsigned char)*c);
            printf("\n");
        } else {
            struct reply r = {0};
            int rc = front_parse_reply(p, n, &r);
            printf("%d %d %u %u\n", rc, rc == 1 ? r.exit : 0, r.olen, r.elen);
        }
        fflush(stdout);
        free(p);
    }
    return 0;
}
#endif
