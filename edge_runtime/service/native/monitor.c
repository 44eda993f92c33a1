/*
 * edge-runtime-monitor: the small process that stands between the device service and one
 * Attempt's task, and outlives the service (docs/monitor.md).
 *
 * The service is no task's parent, so a restarted service could never learn a task's exit status.
 * This monitor is: it forks the task (its own session and process group), keeps its output in the
 * Attempt's log file under the cap, and writes the task's exit status to the Attempt's status file
 * when it ends, whether or not a service runs at that moment. A flock held on the status file for
 * the monitor's whole life tells a service whether the monitor still lives (and so whether a
 * status not written yet will still come).
 *
 * It is the task's subreaper (PR_SET_CHILD_SUBREAPER): a process the task leaves behind, also one
 * that double-forked into a session of its own, becomes the monitor's child when its parent ends,
 * so when the task ends the monitor ends every such leftover (SIGTERM, SIGKILL after the grace),
 * reaps it, and says how many there were in the status line. Where the kernel refuses that option
 * (before 3.4; Debian 12's qemu-user 7.2, some sandboxes) it ends what is left in the task's process
 * group instead.
 *
 * Usage (the service is the only caller; edge_runtime/service/monitor.py):
 *   edge-runtime-monitor [--cwd DIR] [--grace MS] [--user UID GID GROUPS] CAP_BYTES TAIL_BYTES LINGER_MS -- ARGV...
 *   GROUPS: the supplementary group ids, comma-separated, or "-" for none. With --user the task
 *   runs as that user (setgroups, setgid, setuid, in that order, before the exec); the monitor
 *   stays what it was started as (root), so the task can neither signal, trace nor rewrite it.
 * Descriptors handed in:
 *   3  the log file, opened for appending
 *   4  the status file (empty; "exit N MS[ left L K PIDS]\n" or "signal N MS[ left L K PIDS]\n"
 *      once the task and every process it left ended: L leftovers, K of them needed SIGKILL, PIDS
 *      the first of them, comma-separated)
 *   5  the report pipe: "started PID START_TICKS\n" once the task runs, "error ERRNO STAGE\n" if it
 *      could not be started (STAGE: user, cwd, exec or monitor)
 * The task's stdout and stderr are a pipe the monitor makes, handed to the task opened read-write
 * (through /proc/self/fd), so that a write never raises SIGPIPE, whoever still reads.
 * The first process forks the monitor proper and exits at once, so the monitor is never the
 * service's child (nothing to reap there) and behaves the same under every service.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { FD_LOG = 3, FD_STATUS = 4, FD_REPORT = 5 };

/* The task's output: the monitor's reading end, and the task's read-write end. */
static int out_fd = -1, child_out_fd = -1;

/* One read; also the Linux default pipe capacity. */
#define CHUNK 65536
/* Past the cap everything read only feeds the tail: read at most one chunk this often, so a task
 * flooding its output costs the monitor little CPU (about 2 MiB/s). */
#define PACE_MS 30
/* The tail kept in memory is at most this long (the RSS budget is 1 MiB per Attempt). */
#define TAIL_MAX 65536

static char chunk[CHUNK];
static char ring[TAIL_MAX];
static size_t tail_size, ring_start, ring_len;
static unsigned long long head_limit, head_written, head_kept, received;
static volatile sig_atomic_t child_changed;

static void on_sigchld(int sig) { (void)sig; child_changed = 1; }

static long long now_ms(int clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(int fd, const char *data, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return; /* a full disk: the output is lost, the exit status is not */
        }
        data += n;
        len -= (size_t)n;
    }
}

static void keep(const char *data, size_t len) {
    received += len;
    if (head_written < head_limit) {
        unsigned long long room = head_limit - head_written;
        size_t now = len < room ? len : (size_t)room;
        write_all(FD_LOG, data, now);
        head_written += now;
        head_kept += now;
        data += now;
        len -= now;
    }
    if (len == 0 || tail_size == 0) return;
    if (len >= tail_size) { /* only the last tail_size bytes can survive */
        memcpy(ring, data + len - tail_size, tail_size);
        ring_start = 0;
        ring_len = tail_size;
        return;
    }
    for (size_t i = 0; i < len; i++) {
        size_t at = (ring_start + ring_len) % tail_size;
        ring[at] = data[i];
        if (ring_len < tail_size) ring_len++;
        else ring_start = (ring_start + 1) % tail_size;
    }
}

/* The log's end: the tail held in memory, after a marker saying what was left out between. */
static void finish_log(void) {
    unsigned long long left_out = received - head_kept - ring_len;
    if (left_out > 0 && ring_len > 0) {
        char marker[200];
        int n = snprintf(marker, sizeof marker,
                         "\n[edge-runtime: output truncated: %llu bytes left out between the first %llu bytes "
                         "and the last %zu bytes]\n", left_out, head_kept, ring_len);
        write_all(FD_LOG, marker, (size_t)n);
    }
    size_t first = ring_len < tail_size - ring_start ? ring_len : tail_size - ring_start;
    if (ring_len) {
        write_all(FD_LOG, ring + ring_start, first);
        write_all(FD_LOG, ring, ring_len - first);
    }
    ring_len = 0;
}

/* Read what the output holds now; 0 once every writer closed it. */
static int drain(int once) {
    for (;;) {
        ssize_t n = read(out_fd, chunk, sizeof chunk);
        if (n > 0) {
            keep(chunk, (size_t)n);
            if (once) return 1;
            continue;
        }
        if (n == 0) return 0;
        if (errno == EINTR) continue;
        return 1; /* EAGAIN: nothing more now */
    }
}

/* Field 22 of /proc/PID/stat: the start time in clock ticks since boot (fields after the last ')'). */
static unsigned long long start_ticks(pid_t pid) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    for (int field = 3; field < 22; field++) { /* skip fields 3..21 */
        while (*p == ' ') p++;
        while (*p && *p != ' ') p++;
    }
    return strtoull(p, NULL, 10);
}

static void report(const char *line) { write_all(FD_REPORT, line, strlen(line)); }

static void report_error(int err, const char *stage) {
    char line[48];
    snprintf(line, sizeof line, "error %d %s\n", err, stage);
    report(line);
}

/* The user the task runs as (--user); uid 0 with no --user: the monitor's own. */
#define GROUPS_MAX 256
static int drop_user;
static uid_t task_uid;
static gid_t task_gid;
static gid_t task_groups[GROUPS_MAX];
static size_t task_group_count;

/* A whole decimal id, nothing else: an id the service did not mean is never used. At most 10
 * digits, summed in 64 bits: on a 32-bit router "4294967296" must not wrap around to 0 (root). */
static int parse_id(const char *text, const char *end, unsigned long *out) {
    if (text == end || end - text > 10) return -1;
    unsigned long long value = 0;
    for (const char *p = text; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        value = value * 10 + (unsigned long long)(*p - '0');
    }
    if (value > 0xfffffffeULL) return -1; /* (uid_t)-1 means "unchanged" to setuid */
    *out = (unsigned long)value;
    return 0;
}

static int parse_user(const char *uid, const char *gid, const char *groups) {
    unsigned long value;
    if (parse_id(uid, uid + strlen(uid), &value) != 0) return -1;
    task_uid = (uid_t)value;
    if (parse_id(gid, gid + strlen(gid), &value) != 0) return -1;
    task_gid = (gid_t)value;
    task_group_count = 0;
    if (strcmp(groups, "-") != 0) {
        const char *p = groups;
        for (;;) {
            const char *comma = strchr(p, ',');
            const char *end = comma ? comma : p + strlen(p);
            if (task_group_count == GROUPS_MAX || parse_id(p, end, &value) != 0) return -1;
            task_groups[task_group_count++] = (gid_t)value;
            if (!comma) break;
            p = comma + 1;
        }
    }
    drop_user = 1;
    return 0;
}

/* Groups first (they need root), then the group, then the user; then make sure root is gone. */
static int become_task_user(void) {
    if (setgroups(task_group_count, task_groups) != 0) return -1;
    if (setgid(task_gid) != 0 || setuid(task_uid) != 0) return -1;
    if (getuid() != task_uid || geteuid() != task_uid || getgid() != task_gid || getegid() != task_gid) {
        errno = EPERM;
        return -1;
    }
    if (task_uid != 0 && setuid(0) == 0) { /* a way back to root would make the drop a show */
        errno = EPERM;
        return -1;
    }
    return 0;
}

static void run_task(char **argv, const char *cwd, int errpipe) {
    sigset_t none;
    int failure[2];
    setsid();
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* The directory is entered as the task's user, so it is one that user may enter. */
    if (drop_user && become_task_user() != 0) {
        failure[0] = errno; failure[1] = 'u';
    } else if ((cwd && chdir(cwd) != 0)) {
        failure[0] = errno; failure[1] = 'c';
    } else if (dup2(child_out_fd, 1) < 0 || dup2(child_out_fd, 2) < 0) {
        failure[0] = errno; failure[1] = 'm';
    } else {
        execvp(argv[0], argv);
        failure[0] = errno; failure[1] = 'e';
    }
    if (write(errpipe, failure, sizeof failure) < 0) _exit(126);
    _exit(127);
}

/* The state and parent fields of /proc/PID/stat (fields 3 and 4, after the last ')'). */
static int stat_parent(const char *pid, char *state, pid_t *parent) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2] || p[3] != ' ') return -1;
    *state = p[2];
    *parent = (pid_t)strtol(p + 4, NULL, 10);
    return 0;
}

/* Whether the kernel made the monitor the task's subreaper; without it, the task's process group
 * (its pid) is what stands for what it left. */
static int subreaper = 1;
static pid_t task_group;

/* Send sig to every live child of the monitor (after the task ended: what it left, re-parented
 * here). A child's pid cannot be reused before the monitor reaps it, and only the monitor reaps,
 * so the pid read from /proc is the child's until the kill. How many were signalled. */
static int signal_leftovers(int sig) {
    if (!subreaper) { /* nothing comes back to us: only the task's own group can be found */
        if (kill(-task_group, sig) != 0) return 0;
        if (sig == SIGTERM) kill(-task_group, SIGCONT);
        return 1;
    }
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    pid_t self = getpid();
    int signalled = 0;
    struct dirent *entry;
    while ((entry = readdir(proc)) != NULL) {
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
        char state;
        pid_t parent;
        if (stat_parent(entry->d_name, &state, &parent) != 0 || parent != self || state == 'Z') continue;
        pid_t pid = (pid_t)strtol(entry->d_name, NULL, 10);
        if (kill(pid, sig) == 0) {
            signalled++;
            if (sig == SIGTERM) kill(pid, SIGCONT); /* a stopped one could not act on it */
        }
    }
    closedir(proc);
    return signalled;
}

/* After the grace, SIGKILL rounds this often; a leftover that survives them all (stuck in the
 * kernel) no longer holds the status back after KILL_WAIT_MS. */
#define KILL_ROUND_MS 100
#define KILL_WAIT_MS 5000
#define PIDS_KEPT 8

int main(int argc, char **argv) {
    const char *cwd = NULL;
    long long grace_ms = 0;
    int arg = 1;
    for (;;) {
        if (arg + 1 < argc && strcmp(argv[arg], "--cwd") == 0) {
            cwd = argv[arg + 1];
            arg += 2;
        } else if (arg + 1 < argc && strcmp(argv[arg], "--grace") == 0) {
            grace_ms = strtoll(argv[arg + 1], NULL, 10);
            if (grace_ms < 0) grace_ms = 0;
            arg += 2;
        } else if (arg + 3 < argc && strcmp(argv[arg], "--user") == 0) {
            if (parse_user(argv[arg + 1], argv[arg + 2], argv[arg + 3]) != 0) {
                fprintf(stderr, "edge-runtime-monitor: --user takes UID GID GROUPS (decimal ids)\n");
                return 2;
            }
            arg += 4;
        } else {
            break;
        }
    }
    if (argc - arg < 5 || strcmp(argv[arg + 3], "--") != 0) {
        fprintf(stderr, "usage: edge-runtime-monitor [--cwd DIR] [--grace MS] [--user UID GID GROUPS] "
                        "CAP_BYTES TAIL_BYTES LINGER_MS -- ARGV...\n");
        return 2;
    }
    unsigned long long cap = strtoull(argv[arg], NULL, 10);
    unsigned long long tail = strtoull(argv[arg + 1], NULL, 10);
    long long linger_ms = strtoll(argv[arg + 2], NULL, 10);
    char **task_argv = argv + arg + 4;
    for (int fd = FD_LOG; fd <= FD_REPORT; fd++) {
        if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
            fprintf(stderr, "edge-runtime-monitor: descriptor %d missing\n", fd);
            return 2;
        }
    }
    if (tail > TAIL_MAX) tail = TAIL_MAX;
    if (tail > cap / 2) tail = cap / 2;
    tail_size = (size_t)tail;
    head_limit = cap - tail;
    struct stat log_stat;
    if (fstat(FD_LOG, &log_stat) == 0) head_written = (unsigned long long)log_stat.st_size;

    pid_t monitor = fork(); /* the monitor proper is never the service's child */
    if (monitor < 0) {
        report_error(errno, "monitor");
        return 1;
    }
    if (monitor > 0) _exit(0);

    /* What is sent to the service's session or group (a stop, a terminal's hang-up) is not for us. */
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigchld;
    action.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &action, NULL);
    sigset_t chld, waitmask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &waitmask);
    sigdelset(&waitmask, SIGCHLD);

    /* Every process of the task whose parent ends comes to us, not to init: none outlives the
     * Attempt unseen. A kernel before 3.4, and Debian 12's qemu-user 7.2 (how router builds are
     * tested), refuse the option with EINVAL: then what the task leaves in its own process group is ended
     * with it, uncounted, and what left the group is not found; said on the service's log. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        if (errno != EINVAL) {
            report_error(errno, "monitor");
            return 1;
        }
        subreaper = 0;
        fprintf(stderr, "edge-runtime-monitor: this kernel refuses PR_SET_CHILD_SUBREAPER; only the processes "
                        "a task leaves in its own process group are ended with it (docs/monitor.md)\n");
    }
    if (flock(FD_STATUS, LOCK_EX) != 0) {
        report_error(errno, "monitor");
        return 1;
    }
    int output[2], errpipe[2];
    char self_path[64];
    if (pipe2(output, O_CLOEXEC) != 0) {
        report_error(errno, "monitor");
        return 1;
    }
    out_fd = output[0];
    snprintf(self_path, sizeof self_path, "/proc/self/fd/%d", output[1]);
    child_out_fd = open(self_path, O_RDWR | O_CLOEXEC); /* a pipe re-opened read-write, as a FIFO */
    close(output[1]);
    if (child_out_fd < 0 || fcntl(out_fd, F_SETFL, O_NONBLOCK) != 0) {
        report_error(errno, "monitor");
        return 1;
    }
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        report_error(errno, "monitor");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        report_error(errno, "monitor");
        return 1;
    }
    if (child == 0) run_task(task_argv, cwd, errpipe[1]);
    task_group = child; /* run_task makes it its own group's leader */
    close(errpipe[1]);
    close(child_out_fd); /* only the task (and what it starts) holds the writing side now */
    int failure[2] = {0, 0};
    ssize_t got;
    do got = read(errpipe[0], failure, sizeof failure); while (got < 0 && errno == EINTR);
    close(errpipe[0]);
    if (got == (ssize_t)sizeof failure) {
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {}
        report_error(failure[0], failure[1] == 'u' ? "user" : failure[1] == 'c' ? "cwd"
                                 : failure[1] == 'e' ? "exec" : "monitor");
        return 1;
    }
    { /* the task runs (exec succeeded, so setsid was done); unreaped, its pid is still its own */
        char line[96];
        snprintf(line, sizeof line, "started %d %llu\n", (int)child, start_ticks(child));
        report(line);
        close(FD_REPORT);
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull >= 0) { /* nothing of ours keeps the service's stdio open */
            dup2(devnull, 0); dup2(devnull, 1); dup2(devnull, 2);
            if (devnull > 2) close(devnull);
        }
    }

    /* exited: the task was reaped; settled: so was every process it left (or KILL_WAIT_MS passed
     * since they were sent SIGKILL) and the status line is written. */
    int output_open = 1, exited = 0, settled = 0, status = 0;
    unsigned leftovers = 0, killed = 0, pids_kept = 0;
    pid_t kept_pids[PIDS_KEPT];
    long long end_ms = 0, linger_until = 0, next_read = 0, grace_until = 0, kill_round = 0, give_up = 0;
    while (output_open || !settled) {
        for (;;) { /* reap: the task, and after it what it left */
            int reaped_status;
            pid_t got_pid = waitpid(-1, &reaped_status, WNOHANG);
            if (got_pid > 0 && got_pid == child && !exited) {
                exited = 1;
                status = reaped_status;
                end_ms = now_ms(CLOCK_REALTIME);
                long long now = now_ms(CLOCK_MONOTONIC);
                linger_until = now + linger_ms;
                grace_until = now + grace_ms;
                signal_leftovers(SIGTERM);
                continue;
            }
            if (got_pid > 0) {
                if (exited) { /* a leftover; one that ended while the task ran ended on its own */
                    leftovers++;
                    if (WIFSIGNALED(reaped_status) && WTERMSIG(reaped_status) == SIGKILL) killed++;
                    if (pids_kept < PIDS_KEPT) kept_pids[pids_kept++] = got_pid;
                }
                continue;
            }
            if (got_pid < 0 && errno == EINTR) continue;
            /* ECHILD: none left (without the subreaper: none left in the task's group either) */
            if (got_pid < 0 && exited && !settled && (subreaper || kill(-task_group, 0) != 0)) settled = -1;
            break;
        }
        long long now = now_ms(CLOCK_MONOTONIC);
        if (exited && !settled && now >= grace_until && now >= kill_round) {
            if (!give_up) give_up = now + KILL_WAIT_MS;
            if (now >= give_up) settled = -1;
            else {
                signal_leftovers(SIGKILL);
                kill_round = now + KILL_ROUND_MS;
            }
        }
        if (settled < 0) {
            settled = 1;
            if (output_open) output_open = drain(0); /* what they wrote before they ended */
            if (!output_open) finish_log();
            char line[256];
            int n = WIFSIGNALED(status)
                ? snprintf(line, sizeof line, "signal %d %lld", WTERMSIG(status), end_ms)
                : snprintf(line, sizeof line, "exit %d %lld", WEXITSTATUS(status), end_ms);
            if (leftovers > 0) {
                n += snprintf(line + n, sizeof line - (size_t)n, " left %u %u ", leftovers, killed);
                for (unsigned i = 0; i < pids_kept; i++)
                    n += snprintf(line + n, sizeof line - (size_t)n, i ? ",%d" : "%d", (int)kept_pids[i]);
            }
            n += snprintf(line + n, sizeof line - (size_t)n, "\n");
            if (pwrite(FD_STATUS, line, (size_t)n, 0) != n) {
                /* a full disk: the service finds no line and the monitor gone, and says so */
            }
            continue;
        }
        if (exited && output_open && now >= linger_until) {
            drain(0);
            char note[200];
            int n = snprintf(note, sizeof note,
                             "\n[edge-runtime: output capture stopped %lld s after the attempt ended; processes "
                             "it left running still hold its output, which is no longer read]\n", linger_ms / 1000);
            finish_log();
            write_all(FD_LOG, note, (size_t)n);
            close(out_fd);
            output_open = 0;
            continue;
        }
        int paced = head_written >= head_limit && now < next_read;
        struct pollfd pfd = { .fd = output_open && !paced ? out_fd : -1, .events = POLLIN };
        long long wait = -1;
        if (paced) wait = next_read - now;
        if (exited && output_open) {
            long long left = linger_until - now;
            if (wait < 0 || left < wait) wait = left;
        }
        if (exited && !settled) {
            long long left = (now < grace_until ? grace_until : kill_round) - now;
            if (left < 0) left = 0;
            /* without the subreaper no SIGCHLD says the group ended: look again each round */
            if (!subreaper && left > KILL_ROUND_MS) left = KILL_ROUND_MS;
            if (wait < 0 || left < wait) wait = left;
        }
        struct timespec ts = { .tv_sec = wait / 1000, .tv_nsec = (wait % 1000) * 1000000 };
        int ready = ppoll(&pfd, 1, wait < 0 ? NULL : &ts, &waitmask);
        if (ready > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
            output_open = drain(head_written >= head_limit);
            if (head_written >= head_limit) next_read = now_ms(CLOCK_MONOTONIC) + PACE_MS;
            if (!output_open && settled) finish_log();
        }
    }
    return 0; /* the lock on the status file goes with the monitor: its log is complete */
}
