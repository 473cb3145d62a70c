/* Hostile kernels for tests/sandbox.rs: each tries to leave its session. */
#define _GNU_SOURCE
#include "offload/host_kernel.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct { long long *out; long long sibling; long long tag; } probe_args;

static long long err_of(long r) { return r < 0 ? errno : 0; }

/* out[0]  numeric entries in /proc (processes it can see)
 * out[1]  errno of open(/proc/<sibling>/mem)
 * out[2]  errno of kill(sibling, 0)
 * out[3]  getppid()
 * out[4]  errno of pidfd_open(1)
 * out[5]  errno of ptrace(PTRACE_ATTACH, 1)
 * out[6]  errno of process_vm_readv(1)
 * out[7]  getuid()
 * out[8]  errno of writing /tmp/offload-sandbox-<tag>
 * out[9]  errno of writing /dev/shm/offload-sandbox-<tag>
 * out[10] 1 if OFFLOAD_REMOTE_TOKEN is set
 * out[11] environment entries
 * out[12] errno of unshare(CLONE_NEWUSER)
 * out[13] errno of mount
 * out[14] 1 if /tmp/offload-sandbox-<sibling tag> (another session's) exists
 * out[15] errno of pidfd_getfd(own pidfd? 0 -> EPERM by seccomp)
 * out[16] highest open descriptor below 1024 */
OFFLOAD_HOST_KERNEL(probe) {
  const probe_args *a = args;
  long long *out = a->out;
  if (offload_global_id_x(item) != 0) return;
  memset(out, 0, 17 * sizeof(long long));
  DIR *d = opendir("/proc");
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out[0]++;
    closedir(d);
  }
  char path[128];
  snprintf(path, sizeof path, "/proc/%lld/mem", a->sibling);
  int fd = open(path, O_RDWR);
  out[1] = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
  out[2] = err_of(kill((pid_t)a->sibling, 0));
  out[3] = getppid();
  out[4] = err_of(syscall(SYS_pidfd_open, 1, 0));
  out[5] = err_of(ptrace(PTRACE_ATTACH, 1, 0, 0));
  char buf[8];
  struct iovec local = {buf, 8}, remote = {(void *)0x400000, 8};
  out[6] = err_of(process_vm_readv(1, &local, 1, &remote, 1, 0));
  out[7] = getuid();
  snprintf(path, sizeof path, "/tmp/offload-sandbox-%lld", a->tag);
  fd = open(path, O_CREAT | O_WRONLY, 0644);
  out[8] = fd < 0 ? errno : (write(fd, "x", 1) == 1 ? 0 : errno);
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "/dev/shm/offload-sandbox-%lld", a->tag);
  fd = open(path, O_CREAT | O_WRONLY, 0644);
  out[9] = fd < 0 ? errno : (write(fd, "x", 1) == 1 ? 0 : errno);
  if (fd >= 0) close(fd);
  out[10] = getenv("OFFLOAD_REMOTE_TOKEN") != NULL;
  for (char **e = environ; e && *e; e++) out[11]++;
  out[12] = err_of(unshare(CLONE_NEWUSER));
  out[13] = err_of(syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0));
  snprintf(path, sizeof path, "/tmp/offload-sandbox-%lld", a->tag ^ 1);
  out[14] = access(path, F_OK) == 0;
  out[15] = err_of(syscall(SYS_pidfd_getfd, 0, 0, 0));
  for (int i = 0; i < 1024; i++)
    if (fcntl(i, F_GETFD) >= 0) out[16] = i;
}

typedef struct { long long pid; } kill_args;
/* kill(getppid(), 9), kill(pid, 9) and kill(-1, 9)'s neighbour kill(0, 9)
 * are tried; the kernel reports nothing. */
OFFLOAD_HOST_KERNEL(killer) {
  const kill_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  kill(getppid(), SIGKILL);
  kill((pid_t)a->pid, SIGKILL);
}

typedef struct { long long tag; } survivor_args;
/* A setsid child named offload-surv-<tag> that would sleep for 5 minutes. */
OFFLOAD_HOST_KERNEL(survivor) {
  const survivor_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  pid_t p = fork();
  if (p == 0) {
    setsid();
    if (fork() == 0) {
      char name[16];
      snprintf(name, sizeof name, "ofsurv%lld", a->tag % 100000000);
      prctl(PR_SET_NAME, name);
      sleep(300);
    }
    _exit(0);
  }
  if (p > 0) waitpid(p, 0, 0);
}

typedef struct { long long *out; long long bytes; } hog_args;
/* malloc and touch `bytes`; out[0] = 1 when malloc failed. */
OFFLOAD_HOST_KERNEL(hog) {
  const hog_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  /* volatile: the stores (and the malloc) must not be optimised away. */
  volatile char *p = malloc((size_t)a->bytes);
  if (!p) { a->out[0] = 1; return; }
  for (long long i = 0; i < a->bytes; i += 4096) p[i] = 1;
  a->out[0] = 2;
  free((void *)p);
}

typedef struct { long long *out; long long tries; } bomb_args;
/* fork up to `tries` sleeping children; out[0] = how many forks succeeded. */
OFFLOAD_HOST_KERNEL(bomb) {
  const bomb_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  long long ok = 0;
  for (long long i = 0; i < a->tries; i++) {
    pid_t p = fork();
    if (p == 0) { sleep(60); _exit(0); }
    if (p < 0) break;
    ok++;
  }
  a->out[0] = ok;
}

typedef struct { long long mode; } last_words_args;
/* Writes to stdout and stderr, then ends its worker: mode 0 exit(7),
 * mode 1 a null write (SIGSEGV), mode 2 a trap (SIGILL). Over 64 KiB in
 * all (more than a pipe holds), so most of it has left the pipes before
 * the end. */
OFFLOAD_HOST_KERNEL(last_words) {
  const last_words_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  printf("last words on stdout\n");
  fprintf(stderr, "last words on stderr\n");
  for (int i = 0; i < 2000; i++) printf("bulk line %d of the last words\n", i);
  printf("a line without its end");
  if (a->mode == 0) exit(7);
  if (a->mode == 2) __builtin_trap();
  *(volatile int *)(long)(a->mode - 1 + 8) = 1;
}

typedef struct { long long *out; long long n; } orphans_args;
/* n children that each fork a grandchild and exit at once: the
 * grandchildren, orphans, exit 50 ms later. After 500 ms, out[0] = the
 * zombies (state Z) this session's /proc shows, out[1] = the processes. */
OFFLOAD_HOST_KERNEL(orphans) {
  const orphans_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  for (long long i = 0; i < a->n; i++) {
    pid_t p = fork();
    if (p == 0) {
      if (fork() == 0) { usleep(50000); _exit(0); }
      _exit(0);
    }
    if (p > 0) waitpid(p, 0, 0);
  }
  usleep(500000);
  long long zombies = 0, procs = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    long n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    char *end = strrchr(buf, ')');
    procs++;
    if (end && end[1] == ' ' && end[2] == 'Z') zombies++;
  }
  if (d) closedir(d);
  a->out[0] = zombies;
  a->out[1] = procs;
}

typedef struct { long long *out; } whoami_args;
/* Who the kernel runs as:
 * out[0] getuid()  out[1] geteuid()
 * out[2] CapEff (the effective capability set, from /proc/self/status)
 * out[3] the uid outside that uid 0 maps to (/proc/self/uid_map; -1 if
 *        the file shows no mapping of 0, -2 if it cannot be read)
 * out[4] 1 if /proc/self/uid_map maps uid 0 to uid 0 (the initial namespace) */
OFFLOAD_HOST_KERNEL(whoami) {
  const whoami_args *a = args;
  long long *out = a->out;
  if (offload_global_id_x(item) != 0) return;
  out[0] = getuid();
  out[1] = geteuid();
  out[2] = -1;
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY);
  if (fd >= 0) {
    long n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      buf[n] = 0;
      char *cap = strstr(buf, "CapEff:");
      if (cap) out[2] = strtoll(cap + 7, NULL, 16);
    }
  }
  out[3] = -2;
  out[4] = 0;
  fd = open("/proc/self/uid_map", O_RDONLY);
  if (fd >= 0) {
    long n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      buf[n] = 0;
      long long inside = -1, outside = -1, count = 0;
      out[3] = -1;
      if (sscanf(buf, "%lld %lld %lld", &inside, &outside, &count) == 3 && inside == 0) {
        out[3] = outside;
        out[4] = outside == 0 && count > 1;
      }
    }
  }
}

typedef struct { long long *out; const char *paths; long long n; } opener_args;
/* For each of the n NUL-separated paths (in device memory) at `paths`:
 * out[2i]   errno of open(path, O_RDONLY) (0: opened, and read from)
 * out[2i+1] errno of open(path, O_WRONLY | O_APPEND | O_CREAT, 0600)
 *           (0: opened, and "pwned" appended: the file was changed) */
OFFLOAD_HOST_KERNEL(opener) {
  const opener_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  const char *p = a->paths;
  for (long long i = 0; i < a->n && i < 64; i++) {
    char buf[64];
    int fd = open(p, O_RDONLY);
    a->out[2 * i] = fd < 0 ? errno : (read(fd, buf, sizeof buf) >= 0 ? 0 : errno);
    if (fd >= 0) close(fd);
    fd = open(p, O_WRONLY | O_APPEND | O_CREAT, 0600);
    a->out[2 * i + 1] = fd < 0 ? errno : (write(fd, "pwned", 5) == 5 ? 0 : errno);
    if (fd >= 0) close(fd);
    p += strlen(p) + 1;
  }
}
